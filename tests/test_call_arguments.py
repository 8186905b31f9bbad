"""A ``@callable``'s arguments are bound and validated against its signature before it runs
(``roost.actors.arguments``): ``invalid_arguments`` in the caller's terms, nothing written.

The rules under test (docs/protocol.md, *Arguments*): binding without ``self``; strict JSON types
(no ``"5"`` for an ``int``, no ``"no"`` for a ``bool``), with the types JSON has no form for read from
their JSON form; unannotated and ``Any`` parameters accept anything; ``*args`` and ``**kwargs`` item
by item; annotations that cannot be checked fail the kind's registration; results are validated only
with ``validate_result=True``.

Real sockets on 127.0.0.1 (``serve_in_process``) and real SQLite files; each test has its own actor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from roost.actors import Actor, RpcError, callable, callables_of
from roost.examples.kinds import KINDS
from roost.testing import ActorKit, connect
from roost.transport import create_app
from tests.conftest import NO_RATE_LIMITS
from tests.support import serve_in_process


class Point(BaseModel):
    x: int
    y: int = 0


class Typed(Actor):
    kind = "typed"

    @callable
    async def scalars(self, n: int, ratio: float, flag: bool, text: str | None = None) -> list[Any]:
        return [n, type(ratio).__name__, flag, text]

    @callable
    async def shapes(self, when: datetime, span: tuple[int, int], point: Point) -> list[Any]:
        """What the method got: a datetime, a tuple and a model, not their JSON forms."""
        assert isinstance(when, datetime)
        assert isinstance(span, tuple)
        assert isinstance(point, Point)
        return [when.isoformat(), list(span), point.x + point.y]

    @callable
    async def loose(self, anything, more: Any = None) -> list[str]:  # type: ignore[no-untyped-def]
        return [type(anything).__name__, type(more).__name__]

    @callable
    async def mine(self, n: Any) -> None:
        raise TypeError("a TypeError of the method's own")

    @callable
    async def many(self, first: int, *rest: int, **named: str) -> list[Any]:
        return [first, list(rest), named]

    @callable(validate_result=True)
    async def shaped(self, ok: bool) -> Point:
        return Point(x=1) if ok else {"x": "one"}  # type: ignore[return-value]

    @callable(validate_result=True)
    async def count_up(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i
        yield "done"  # type: ignore[misc]

    @callable
    async def unchecked(self) -> int:
        return "not an int"  # type: ignore[return-value]


async def call_error(kit: ActorKit, name: str, method: str, *args: Any, **kwargs: Any) -> RpcError:
    with pytest.raises(RpcError) as info:
        await kit.call("typed", name, method, *args, **kwargs)
    return info.value


async def test_an_argument_of_the_wrong_type_is_refused_before_the_method_runs_and_writes_nothing(
    data_dir: Path,
) -> None:
    """The issue's case: ``room.say({"a": 1})`` used to reach SQLite (``handler_error:
    ProgrammingError: Error binding parameter 2``)."""
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr, connect(f"ws://{addr}/agents/room/typed") as ws:
        welcome = await ws.recv()
        frame = await ws.rpc("say", {"a": 1})
        assert frame["error"] == {
            "code": "invalid_arguments",
            "message": "say: argument 'text': input should be a valid string, got an object",
        }
        assert (await ws.rpc("history"))["result"] == []  # nothing inserted
        assert not [f for f in ws.frames if f["type"] in ("event", "state")]  # nothing logged or sent
        assert (await ws.rpc("say", "hello"))["result"] == welcome["cursor"] + 1  # no seq was taken

        async with httpx.AsyncClient(base_url=f"http://{addr}") as http:
            r = await http.post("/agents/counter/typed/rpc/increment", json=["5"])
            assert r.status_code == 400
            assert r.json()["error"] == {
                "code": "invalid_arguments",
                "message": "increment: argument 'by': input should be a valid integer, got a string",
            }


async def test_a_wrong_argument_count_is_told_in_the_callers_terms_without_self(data_dir: Path) -> None:
    app = create_app(KINDS, data_dir=data_dir, limits=NO_RATE_LIMITS)
    async with serve_in_process(app) as addr, connect(f"ws://{addr}/agents/room/count") as ws:
        await ws.recv()
        told = [
            (
                "say: takes at most 2 positional arguments (text, author), got 4",
                await ws.rpc("say", 1, 2, 3, 4),
            ),
            ("say: missing a required argument: 'text'", await ws.rpc("say")),
            ("say: missing a required argument: 'text'", await ws.rpc("say", author="ann")),
            ("say: got an unexpected keyword argument 'txt'", await ws.rpc("say", "hi", txt="hi")),
            ("say: multiple values for argument 'text'", await ws.rpc("say", "hi", text="hi")),
            ("history: takes at most 1 positional argument (limit), got 2", await ws.rpc("history", 1, 2)),
        ]
        for message, frame in told:
            assert frame["error"] == {"code": "invalid_arguments", "message": message}
            assert "self" not in message


async def test_arguments_are_validated_strictly_as_json_types(data_dir: Path) -> None:
    async with ActorKit([Typed], data_dir) as kit:
        assert await kit.call("typed", "s", "scalars", 5, 1, True) == [5, "float", True, None]  # int → float
        assert await kit.call("typed", "s", "scalars", 5, 0.5, False, "t") == [5, "float", False, "t"]
        refused = [
            (("5", 1.0, True), "n", "integer, got a string"),
            ((True, 1.0, True), "n", "integer, got a boolean"),
            ((1.5, 1.0, True), "n", "integer, got a number"),
            ((1, "1.0", True), "ratio", "number, got a string"),
            ((1, 1.0, "no"), "flag", "boolean, got a string"),
            ((1, 1.0, 0), "flag", "boolean, got an integer"),
            ((1, 1.0, True, 7), "text", "string, got an integer"),
        ]
        for args, name, expected in refused:
            err = await call_error(kit, "s", "scalars", *args)
            assert err.code == "invalid_arguments", args
            assert err.message.startswith(f"scalars: argument {name!r}: input should be a valid "), (
                err.message
            )
            assert err.message.endswith(expected), err.message
        # by name, the same rules
        assert await kit.call("typed", "s", "scalars", n=5, ratio=1, flag=True) == [5, "float", True, None]
        err = await call_error(kit, "s", "scalars", 1, 1.0, flag="no")
        assert err.message == "scalars: argument 'flag': input should be a valid boolean, got a string"


async def test_types_json_has_no_form_for_are_read_from_their_json_form(data_dir: Path) -> None:
    async with ActorKit([Typed], data_dir) as kit:
        got = await kit.call("typed", "j", "shapes", "2026-12-01T14:00:00Z", [1, 2], {"x": 3, "y": 4})
        assert got == ["2026-12-01T14:00:00+00:00", [1, 2], 7]
        # an in-process caller may pass the Python objects themselves
        when = datetime(2026, 12, 1, 14, tzinfo=UTC)
        assert await kit.call("typed", "j", "shapes", when, (1, 2), Point(x=3)) == [
            when.isoformat(),
            [1, 2],
            3,
        ]
        err = await call_error(kit, "j", "shapes", "yesterday", [1, 2, 3], {"x": "3"})
        assert err.message.startswith("shapes: argument 'when': input should be a valid datetime")
        assert err.message.endswith(", got a string")
        err = await call_error(kit, "j", "shapes", "2026-12-01T14:00:00Z", [1, 2], {"x": "3", "z": 1})
        assert err.message == "shapes: argument 'point.x': input should be a valid integer, got a string"
        err = await call_error(kit, "j", "shapes", "2026-12-01T14:00:00Z", [1, 2], {"y": 1})
        assert err.message == "shapes: argument 'point.x': field required"


async def test_unannotated_and_any_parameters_accept_anything(data_dir: Path) -> None:
    async with ActorKit([Typed], data_dir) as kit:
        assert await kit.call("typed", "a", "loose", {"a": 1}, [1]) == ["dict", "list"]
        assert await kit.call("typed", "a", "loose", object()) == ["object", "NoneType"]
        # with arguments that fit, a TypeError the method raises is its own failure
        assert (await call_error(kit, "a", "mine", 1)).code == "handler_error"


async def test_star_args_and_star_kwargs_are_validated_item_by_item(data_dir: Path) -> None:
    async with ActorKit([Typed], data_dir) as kit:
        assert await kit.call("typed", "v", "many", 1, 2, 3, a="x") == [1, [2, 3], {"a": "x"}]
        err = await call_error(kit, "v", "many", 1, 2, "3")
        assert err.message == "many: argument 'rest[1]': input should be a valid integer, got a string"
        err = await call_error(kit, "v", "many", 1, a="x", b=2)
        assert err.message == "many: argument 'b': input should be a valid string, got an integer"


def test_an_annotation_that_cannot_be_checked_fails_the_kind_at_registration() -> None:
    class Unresolved(Actor):
        @callable
        async def go(self, thing: NotImported) -> None:  # type: ignore[name-defined]  # noqa: F821
            return None

    class Unknowable(Actor):
        @callable
        async def go(self, conn: ActorKit) -> None:
            return None

    with pytest.raises(
        TypeError, match=r"Unresolved\.go: the annotation of 'thing' \(NotImported\) does not resolve"
    ):
        callables_of(Unresolved)
    with pytest.raises(
        TypeError, match=r"Unknowable\.go: pydantic cannot validate 'conn'.*Annotate it with Any"
    ):
        callables_of(Unknowable)


async def test_results_are_validated_only_when_asked(data_dir: Path) -> None:
    async with ActorKit([Typed], data_dir) as kit:
        assert await kit.call("typed", "r", "shaped", True) == {"x": 1, "y": 0}  # the model's JSON form
        err = await call_error(kit, "r", "shaped", False)
        assert (err.code, err.message.split(" (ref ")[0]) == ("handler_error", "internal error in shaped")
        with pytest.raises(RpcError) as info:
            await kit.registry.call("typed", "r", "count_up", [2], {})
        assert info.value.code == "handler_error"
        assert await kit.call("typed", "r", "unchecked") == "not an int"  # not asked: not checked
