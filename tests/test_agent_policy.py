"""Secrets, scopes, principals and sessions in the agent runtime: what must never leak or widen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import BaseModel

from roost.actors.connection import Principal
from roost.actors.errors import RpcError
from roost.agent import AgentConfig, ModelRequest, ModelStep, NeedInput, ToolCall, ToolContext, tool
from roost.agent.agent import Agent
from roost.agent.models import Model
from roost.storage import actor_path
from roost.testing import ActorKit
from roost.transport import create_app
from tests.agent_support import FAST, Payloads, drive, event_types, events, file_text
from tests.support import serve_in_process

TOKEN_A = "tok-AAAAAAAAAAAAAAAAAAAA"
TOKEN_B = "tok-BBBBBBBBBBBBBBBBBBBB"
RECEIVED: list[dict[str, Any]] = []


class ApiArgs(BaseModel):
    token: str
    endpoint: str = "/v1/things"


@tool(approval_mode="mutating")
async def call_api(ctx: ToolContext, args: ApiArgs) -> dict[str, Any]:
    """Calls an API with a token."""
    RECEIVED.append(args.model_dump())
    return {"status": 200, "echo": f"used {args.token}"}


class Scripted:
    """A model that asks for ``call_api`` with the token named in the request, then answers."""

    inline = True

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.steps:
            return ModelStep(text=f"done; the key was sk-{'x' * 24}")
        token = TOKEN_B if "key B" in request.text else TOKEN_A
        return ModelStep(tool_calls=[ToolCall(name="call_api", args={"token": token})])


class Keys(Agent):
    kind = "keys"
    config = FAST
    tools = (call_api,)

    def make_model(self) -> Model:
        return Scripted()


def approval(c: Any) -> dict[str, Any]:
    payload: dict[str, Any] = [e for e in events(c) if e["event_type"] == "approval_requested"][-1]["payload"]
    return payload


async def test_secret_arguments_reach_the_tool_and_nothing_else(data_dir: Path) -> None:
    RECEIVED.clear()
    async with ActorKit([Keys], data_dir) as kit:
        c = kit.connect("keys", "k")
        out = await c.call("turn", "call the api with key A")
        assert out["waiting"] == "approval"
        asked = approval(c)
        assert asked["args"] == {"token": "[redacted]", "endpoint": "/v1/things"}
        done = await c.call("approve", asked["approval_id"], "grant")
        assert done["status"] == "completed"
        assert RECEIVED == [{"token": TOKEN_A, "endpoint": "/v1/things"}]  # the real value
        turn = await c.call("get_turn", out["turn_id"])
        assert turn["items"][0]["args"]["token"] == "[redacted]"
        assert turn["items"][0]["result"]["echo"] == "used [redacted]"
        assert "sk-xxxx" not in orjson.dumps(done).decode()
    everything_but_the_vault = file_text(data_dir, "keys", "k", skip=("roost_agent_secrets",))
    assert TOKEN_A not in everything_but_the_vault
    assert "sk-" + "x" * 24 not in everything_but_the_vault  # the model's output, cleaned
    assert TOKEN_A in file_text(data_dir, "keys", "k")  # kept, for a retry after a crash


async def test_a_grant_for_one_secret_does_not_cover_another(data_dir: Path) -> None:
    RECEIVED.clear()
    async with ActorKit([Keys], data_dir) as kit:
        c = kit.connect("keys", "k")
        first = await c.call("turn", "call the api with key A")
        await c.call("approve", approval(c)["approval_id"], "grant")
        again = await c.call("turn", "call the api with key A")
        assert again["status"] == "completed"  # the same token: covered
        other = await c.call("turn", "call the api with key B")
        assert other["waiting"] == "approval"  # another token: asked again
        assert first["status"] == "in_progress"
        assert [r["token"] for r in RECEIVED] == [TOKEN_A, TOKEN_A]


async def test_a_scope_naming_a_secret_is_compared_by_its_value(data_dir: Path) -> None:
    async with ActorKit([Keys], data_dir) as kit:
        c = kit.connect("keys", "k")
        await c.call("turn", "call the api with key A")
        asked = approval(c)["approval_id"]
        with pytest.raises(RpcError) as wrong:
            await c.call("approve", asked, "grant", {"token": TOKEN_B, "endpoint": "*"})
        assert wrong.value.code == "scope_refused"
        ok = await c.call("approve", asked, "grant", {"token": TOKEN_A, "endpoint": "/v1/*"})
        assert ok["status"] == "completed"
        await c.call("turn", "call the api with key B")
        with pytest.raises(RpcError):
            await c.call(
                "approve", approval(c)["approval_id"], "grant", {"token": "[redacted]", "endpoint": "*"}
            )
        wide = await c.call("approve", approval(c)["approval_id"], "grant", {"token": "*", "endpoint": "*"})
        assert wide["status"] == "completed"


async def test_errors_outputs_and_summaries_hold_no_credentials_anywhere_in_the_file(data_dir: Path) -> None:
    async with ActorKit([Payloads], data_dir) as kit:
        c = kit.connect("payloads", "p")
        out = await c.call("turn", "boom", session_id="s")
        assert out["status"] == "failed"
        assert (
            out["error"]
            == "boom failed: RuntimeError: it broke with Authorization: [redacted] password=[redacted]"
        )
    text = file_text(data_dir, "payloads", "p")
    wal = actor_path(data_dir, "payloads", "p").with_name(actor_path(data_dir, "payloads", "p").name + "-wal")
    raw = actor_path(data_dir, "payloads", "p").read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    for secret in ("supersecretbearer0", "hunter2", "Traceback"):
        assert secret not in text
        assert secret.encode() not in raw


async def test_sessions_and_runs_belong_to_their_principal(data_dir: Path) -> None:
    alice = Principal("alice")
    mallory = Principal("mallory")
    alice_ro = Principal("alice", claims={"read_only": True})
    async with ActorKit([Keys], data_dir) as kit:
        a = kit.connect("keys", "k", principal=alice)
        m = kit.connect("keys", "k", principal=mallory)
        r = kit.connect("keys", "k", principal=alice_ro)
        out = await a.call("turn", "call the api with key A", session_id="alice-s")
        asked = approval(a)["approval_id"]
        for conn, method, args in [
            (m, "turn", ("call the api with key A", "alice-s")),  # riding on Alice's session
            (m, "session", ("alice-s",)),
            (m, "get_run", (out["run_id"],)),
            (m, "get_turn", (out["turn_id"],)),
            (m, "approve", (asked, "grant", {"token": "*", "endpoint": "*"}, 1e9)),
            (m, "cancel", (out["turn_id"],)),
            (r, "approve", (asked, "grant")),
            (r, "cancel", (out["turn_id"],)),
            (r, "turn", ("call the api", "alice-s")),
        ]:
            with pytest.raises(RpcError) as refused:
                await conn.call(method, *args)
            assert refused.value.code == "policy_refused", (method, conn.conn.principal)
        assert (await r.call("session", "alice-s"))["pending_approval"][
            "approval_id"
        ] == asked  # reading is fine
        assert (await a.call("approve", asked, "grant"))["status"] == "completed"


async def test_the_card_lists_every_open_turn_and_pending_approval(data_dir: Path) -> None:
    async with ActorKit([Keys], data_dir) as kit:
        c = kit.connect("keys", "k")
        a = await c.call("turn", "call the api with key A", session_id="s")
        b = await c.call("turn", "call the api with key B", session_id="s")
        card = await c.call("session", "s")
        assert [t["turn_id"] for t in card["open_turns"]] == [a["turn_id"], b["turn_id"]]
        assert len(card["pending_approvals"]) == 2
        assert card["pending_approvals"][0]["args"]["token"] == "[redacted]"
        await c.call("cancel", b["turn_id"])
        card = await c.call("session", "s")
        assert card["active_turn"]["turn_id"] == a["turn_id"]
        assert card["pending_approval"]["turn_id"] == a["turn_id"]


class Slow(BaseModel):
    pass


@tool(heavy=True, keywords=("heavy",))
async def heavy_ask(ctx: ToolContext, args: Slow) -> str:
    """Heavy, and needs an answer first."""
    if not ctx.inputs:
        raise NeedInput("which project?")
    return "ok"


class Asker(Agent):
    kind = "asker"
    config = FAST
    tools = (heavy_ask,)


async def test_the_heavy_slot_is_free_while_a_run_waits_for_input(data_dir: Path) -> None:
    async with ActorKit([Asker], data_dir) as kit:
        c = kit.connect("asker", "a")
        first = await c.call("turn", "heavy work")
        assert first["waiting"] == "input"
        second = await c.call("turn", "heavy work")
        assert second["waiting"] == "input"  # it ran its heavy step: not queued behind the first
        assert "run_queued" not in event_types(c)
        assert (await c.call("project"))["heavy_run_id"] is None
        assert (await c.call("provide_input", first["run_id"], "p1"))["status"] == "completed"


async def test_bad_arguments_get_clear_codes_and_change_nothing(data_dir: Path) -> None:
    async with ActorKit([Keys, Asker], data_dir) as kit:
        c = kit.connect("keys", "k")
        with pytest.raises(RpcError) as bad:
            await c.call("turn", "call the api", None, "no")
        assert bad.value.code == "invalid_arguments"
        await c.call("turn", "call the api with key A")
        asked = approval(c)["approval_id"]
        for scope, ttl in [(None, 10**400), (None, float("nan")), (None, 0), ({"token": "x" * 20_000}, None)]:
            with pytest.raises(RpcError) as bad:
                await c.call("approve", asked, "grant", scope, ttl)
            assert bad.value.code == "invalid_arguments"
        q = kit.connect("asker", "a")
        waiting = await q.call("turn", "heavy work")
        deep: Any = "x"
        for _ in range(900):
            deep = [deep]
        with pytest.raises(RpcError) as bad:
            await q.call("provide_input", waiting["run_id"], deep)
        assert bad.value.code == "invalid_arguments"
        with pytest.raises(RpcError) as bad:
            await q.call("provide_input", waiting["run_id"], {"$secret": "0" * 40})
        assert bad.value.code == "invalid_arguments"
        assert (await q.call("get_run", waiting["run_id"]))["waiting"] == "input"
        b64 = "QUJD" * 200
        text = await q.call("turn", f"heavy work on {b64} please")
        turn = await q.call("get_turn", text["turn_id"])
        assert turn["input_text"].startswith("heavy work on [blob sha256:")
        assert turn["input_text"].endswith(" 800 bytes] please")


@tool(approval_mode="confirm_once", keywords=("note",))
async def note(ctx: ToolContext, args: ApiArgs) -> str:
    """A change asked once per session."""
    return args.endpoint


class Notes(Agent):
    kind = "notes"
    config = AgentConfig(heartbeat_interval=0.5, lease_ttl=2.0)
    tools = (note,)

    def make_model(self) -> Model:
        class Each:
            inline = True

            async def step(self, request: ModelRequest) -> ModelStep:
                if request.steps:
                    return ModelStep(text="ok")
                endpoint = request.text.split()[-1]
                return ModelStep(
                    tool_calls=[ToolCall(name="note", args={"token": "t", "endpoint": endpoint})]
                )

        return Each()


async def test_confirm_once_asks_once_per_session_for_any_arguments(data_dir: Path) -> None:
    async with ActorKit([Notes], data_dir) as kit:
        c = kit.connect("notes", "n")
        await c.call("turn", "note /a", session_id="s")
        asked = approval(c)
        assert asked["proposed_scope"] == {"token": "*", "endpoint": "*"}
        await c.call("approve", asked["approval_id"], "grant")
        assert (await c.call("turn", "note /b", session_id="s"))["status"] == "completed"  # not asked
        assert (await c.call("turn", "note /c", session_id="other"))["waiting"] == "approval"


async def test_waiting_runs_do_not_block_reads(data_dir: Path) -> None:
    """A run waiting on a job leaves the agent free: polls answer while the job runs."""
    from tests.agent_support import Docs

    async with ActorKit([Docs], data_dir) as kit:
        c = kit.connect("docs", "d")
        out = await c.call("turn", "analyze the documents")
        await drive(kit, lambda: event_types(c).count("tool_progress") >= 2)
        run = await c.call("get_run", out["run_id"])
        assert run["jobs"][0]["status"] == "running"


class HeaderArgs(BaseModel):
    header: str


def _header_from(text: str) -> dict[str, Any]:
    import re

    found = re.search(r"Bearer \S+", text)
    return {"header": found.group(0)} if found else {"header": "none"}


ECHOED: list[str] = []


@tool(approval_mode="mutating", keywords=("fetch",), plan_args=_header_from)
async def fetch(ctx: ToolContext, args: HeaderArgs) -> dict[str, Any]:
    """Fetches with the header typed in the request; echoes the bare token back (badly)."""
    ECHOED.append(args.header)
    return {"token_was": args.header.split()[-1], "note": "ok"}


class Typed(Agent):
    kind = "typed"
    config = FAST
    tools = (fetch,)


async def test_a_credential_typed_in_the_request_reaches_the_tool_and_is_never_shown(data_dir: Path) -> None:
    ECHOED.clear()
    bearer = "Bearer abc123def456ghi789"
    async with ActorKit([Typed], data_dir) as kit:
        c = kit.connect("typed", "t")
        out = await c.call("turn", f"fetch it with {bearer}")
        assert approval(c)["args"] == {"header": "[redacted]"}
        await c.call("approve", approval(c)["approval_id"], "grant")
        assert ECHOED == [bearer]
        turn = await c.call("get_turn", out["turn_id"])
        assert turn["input_text"] == "fetch it with [redacted]"
        assert turn["items"][0]["result"]["token_was"] == "[redacted]"  # the echoed part, scrubbed
        other = await c.call("turn", "fetch it with Bearer zzz999yyy888xxx777")
        assert other["waiting"] == "approval"  # another credential: asked again
        frames = orjson.dumps(c.frames).decode()
        assert "abc123def456ghi789" not in frames
        assert "$secret" not in frames  # digests never leave the server either
    assert "abc123def456ghi789" not in file_text(data_dir, "typed", "t", skip=("roost_agent_secrets",))


async def test_scrubbing_uses_only_the_runs_own_secrets(data_dir: Path) -> None:
    """No oracle: a request that happens to contain another run's secret is not redacted because of it."""
    RECEIVED.clear()
    async with ActorKit([Keys], data_dir) as kit:
        c = kit.connect("keys", "k", principal=Principal("alice"))
        await c.call("turn", "call the api with key A")
        await c.call("approve", approval(c)["approval_id"], "grant")
        m = kit.connect("keys", "k", principal=Principal("mallory"))
        guess = await m.call("turn", f"is it {TOKEN_A} ?")
        assert TOKEN_A in (await m.call("get_turn", guess["turn_id"]))["input_text"]


async def test_default_sessions_cannot_be_squatted_and_tenants_are_distinct(data_dir: Path) -> None:
    async with ActorKit([Keys], data_dir) as kit:
        bob = kit.connect("keys", "k", principal=Principal("bob"))
        mallory = kit.connect("keys", "k", principal=Principal("mallory"))
        with pytest.raises(RpcError) as reserved:
            await mallory.call("turn", "call the api", "~bob")
        assert reserved.value.code == "invalid_arguments"
        await mallory.call("turn", "call the api", "bob")  # a session literally named "bob": hers now
        own = await bob.call("turn", "call the api with key A")  # bob's default session is his own
        assert own["waiting"] == "approval"
        sam1 = kit.connect("keys", "k", principal=Principal("sam", tenant="t1"))
        sam2 = kit.connect("keys", "k", principal=Principal("sam", tenant="t2"))
        await sam1.call("turn", "call the api with key A", "shared")
        with pytest.raises(RpcError) as other_tenant:
            await sam2.call("session", "shared")
        assert other_tenant.value.code == "policy_refused"


async def test_a_caller_that_names_no_session_is_told_its_own_over_http(data_dir: Path) -> None:
    """An HTTP-only client sees no events, so the turn's reply names the session it ran in: the
    caller's own (``~…``) when it named none, which its ``session`` card then shows."""
    app = create_app([Keys], data_dir=data_dir)
    async with serve_in_process(app) as addr, httpx.AsyncClient(base_url=f"http://{addr}") as http:
        reply = (await http.post("/agents/keys/k/rpc/turn", json=["call the api with key A"])).json()
        assert reply["ok"], reply
        session_id = reply["result"]["session_id"]
        assert session_id.startswith("~")
        card = (await http.post("/agents/keys/k/rpc/session", json=[session_id])).json()
        assert card["ok"], card
        assert card["result"]["active_turn"]["turn_id"] == reply["result"]["turn_id"]
        named = (await http.post("/agents/keys/k/rpc/turn", json=["call the api", "mine"])).json()
        assert named["result"]["session_id"] == "mine"


async def test_runs_started_by_the_server_are_not_for_remote_principals(data_dir: Path) -> None:
    async with ActorKit([Keys], data_dir) as kit:
        out = await kit.call("keys", "k", "turn", "call the api with key A")  # in process
        c = kit.connect("keys", "k")
        asked = next(e for e in events(c) if e["event_type"] == "approval_requested") if events(c) else None
        run = await kit.call("keys", "k", "get_run", out["run_id"])
        assert run["principal"] is None
        del asked
        with pytest.raises(RpcError) as refused:
            await c.call("cancel", out["turn_id"])
        assert refused.value.code == "policy_refused"


class Deep(BaseModel):
    pass


CALLS: list[int] = []


@tool(background=True, keywords=("deep",))
async def deep_result(ctx: ToolContext, args: Deep) -> Any:
    """Returns a result nested too deep to store."""
    CALLS.append(ctx.attempt)
    value: Any = "x"
    for _ in range(100):
        value = [value]
    return value


class DeepAgent(Agent):
    kind = "deep"
    config = FAST
    tools = (deep_result,)


async def test_a_background_result_that_cannot_be_stored_fails_once_without_retries(data_dir: Path) -> None:
    CALLS.clear()
    async with ActorKit([DeepAgent], data_dir) as kit:
        c = kit.connect("deep", "d")
        out = await c.call("turn", "deep please")
        await drive(kit, lambda: "turn_failed" in event_types(c))
        run = await c.call("get_run", out["run_id"])
        assert CALLS == [1]
        assert "result not storable" in run["error"]
        assert run["retryable"] == 0


async def test_errors_are_cleaned_before_they_are_shortened(data_dir: Path) -> None:
    @tool(keywords=("cut",))
    async def cut(ctx: ToolContext, args: Deep) -> None:
        """Fails with a key right at the cut."""
        raise RuntimeError("y" * 470 + " sk-ABCDEFGHIJKLMNOPQRSTUVWX")

    class Cutter(Agent):
        kind = "cutter"
        config = FAST
        tools = (cut,)

    async with ActorKit([Cutter], data_dir) as kit:
        c = kit.connect("cutter", "c")
        out = await c.call("turn", "cut")
        assert out["status"] == "failed"
    text = file_text(data_dir, "cutter", "c")
    assert "sk-ABCDEFG" not in text
