"""Forward migrations of an actor kind's state between versions (``state_version``, ``migrate_state``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.actors import Actor, callable
from roost.actors.errors import RpcError
from roost.testing import ActorKit


class NoteV1(Actor):
    kind = "note"
    initial_state = {"text": ""}

    @callable
    async def write(self, text: str) -> None:
        self.set_state({"text": text})


class NoteV2(Actor):
    """v2 splits the text into a title and a body; v3 counts words."""

    kind = "note"
    initial_state = {"title": "", "body": "", "words": 0}
    state_version = 3

    def migrate_state(self, state: Any, version: int) -> Any:
        if version == 1:
            title, _, body = state["text"].partition("\n")
            return {"title": title, "body": body}
        if version == 2:
            return {**state, "words": len((state["title"] + " " + state["body"]).split())}
        return super().migrate_state(state, version)

    @callable
    async def read(self) -> Any:
        return self.state


async def test_state_is_migrated_forward_once_logged_and_kept(data_dir: Path) -> None:
    async with ActorKit([NoteV1], data_dir) as kit:
        c = kit.connect("note", "n")
        await c.call("write", "Hello\nworld out there")
    async with ActorKit([NoteV2], data_dir) as kit:  # new code, old file
        c = kit.connect("note", "n")
        assert await c.call("read") == {"title": "Hello", "body": "world out there", "words": 4}
        assert c.frames[0]["state"] == {"title": "Hello", "body": "world out there", "words": 4}
        replay = kit.connect("note", "n", cursor=0)  # the migrated state is a logged frame
        await replay.wait_for(lambda f: f.get("type") == "state" and f["seq"] == 2)
        states = [f["state"] for f in replay.frames if f.get("type") == "state"]
        assert states == [
            {"text": "Hello\nworld out there"},
            {"title": "Hello", "body": "world out there", "words": 4},
        ]
    async with ActorKit([NoteV2], data_dir) as kit:  # already at v3: migrated once only
        c = kit.connect("note", "n")
        assert await c.call("read") == {"title": "Hello", "body": "world out there", "words": 4}


async def test_a_state_newer_than_the_code_is_refused(data_dir: Path) -> None:
    async with ActorKit([NoteV2], data_dir) as kit:
        c = kit.connect("note", "n")
        await c.call("read")
    async with ActorKit([NoteV1], data_dir) as kit:  # old code, newer file
        c = kit.connect("note", "n")
        closed = await c.sink.wait_closed()
        assert closed[0] == 1013 or closed[0] == 1011
        with pytest.raises(RpcError) as refused:
            await kit.call("note", "n", "write", "x")
        assert refused.value.code == "actor_unavailable"
        assert "newer" in refused.value.message
