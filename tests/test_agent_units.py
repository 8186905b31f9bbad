"""Unit tests of the agent runtime's pure parts: payload policy, scopes, config, catalog."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import roost.examples.docs_agent  # noqa: F401  (its tools are defined: a table of one is known)
from roost.actors.connection import Principal
from roost.agent import Agent, AgentConfig, BlobStore, Catalog, ToolContext, load_config, sanitize, tool
from roost.agent.catalog import InvalidToolCall
from roost.agent.config import ConfigError
from roost.agent.errors import PolicyRefused
from roost.agent.payloads import (
    MAX_DEPTH,
    REDACTED,
    PayloadError,
    Vault,
    display,
    redact_text,
    resolve,
)
from roost.agent.policy import precheck, proposed_scope, scope_covers
from roost.agent.status import (
    FINISHED,
    ApprovalStatus,
    EventStatus,
    JobStatus,
    RunStatus,
    TurnStatus,
    VerificationResult,
)
from roost.storage.blobs import LOCK_FILE
from roost.transport import create_app


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "access_token",
        "password",
        "api_key",
        "apiKey",
        "API-KEY",
        "authorization",
        "client_secret",
        "x.cookie",
    ],
)
def test_secret_keys_are_redacted(key: str) -> None:
    assert sanitize({key: "value", "other": "kept"}, None) == {key: REDACTED, "other": "kept"}


@pytest.mark.parametrize(
    "text",
    [
        "Bearer abcdefghijklmnop.qrstu",
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_token_patterns_are_redacted_inside_text(text: str) -> None:
    out = sanitize({"note": f"before {text} after"}, None)
    assert out == {"note": f"before {REDACTED} after"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("login with password=hunter2 now", "login with password=[redacted] now"),
        ('api_key: "abc def" end', "api_key: [redacted] end"),
        ("postgres://app:s3cret@db:5432/x", "postgres://app:[redacted]@db:5432/x"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: [redacted]"),
    ],
)
def test_credentials_in_free_text_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_payload_too_large_as_a_whole_goes_to_a_blob(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    value = {"rows": ["lorem ipsum " * 600] * 20, "nums": list(range(20_000))}
    out = sanitize(value, blobs, 8192, limit=65_536)
    assert out["json"] is True
    assert resolve(out, lambda d: None, blobs) == value


def test_nesting_is_bounded() -> None:
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(PayloadError, match="deeper"):
        sanitize(deep, None)


def test_kept_values_come_back_intact_and_are_shown_redacted(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    kept_secrets: dict[str, str] = {}
    vault = Vault(lambda d, v: kept_secrets.__setitem__(d, v), "salt")
    args = {"token": "t0k3n", "header": "Bearer abcdefghijklmnop0123", "big": "y" * 10_000, "n": 1}
    kept = sanitize(args, blobs, 8192, vault=vault)
    assert kept["token"] == {"$secret": vault.digest("t0k3n")}
    assert "t0k3n" not in orjson.dumps(kept).decode()
    assert display(kept)["token"] == REDACTED
    assert display(kept)["header"] == REDACTED
    assert resolve(kept, lambda d: orjson.loads(kept_secrets[d]), blobs) == args
    with pytest.raises(PayloadError, match="reserved"):
        sanitize({"x": {"$secret": "abc"}}, blobs, vault=vault)  # a reference from outside


def test_ordinary_words_are_not_redacted() -> None:
    value = {"tokens_used": 12, "message": "the password field is required", "skill": "sk-8"}
    assert sanitize(value, None) == value


def test_heavy_strings_go_to_the_blob_store_once(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    big = base64.b64encode(b"\x00\x01" * 600_000).decode()
    first = sanitize({"image": big, "nested": [big]}, blobs, 8192)
    assert first["image"] == first["nested"][0]
    ref = first["image"]["$blob"]
    assert blobs.get(ref) == big.encode()
    stored = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file() and p.name != LOCK_FILE]
    assert len(stored) == 1  # beside the store's lock
    # a base64 run inside a short text, over 512 characters, goes to a blob; the text stays text
    short_b64 = base64.b64encode(bytes(range(256)) * 2).decode()
    marked = sanitize({"s": f"see {short_b64} here"}, blobs, 8192)["s"]
    assert marked.startswith("see [blob sha256:")
    assert marked.endswith(" 684 bytes] here")
    ref = marked.split()[2]
    assert blobs.get(ref) == short_b64.encode()
    with pytest.raises(ValueError, match="not a blob reference"):
        blobs.get("sha256:../../etc/passwd")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=30),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=20,
    )
)
def test_sanitize_keeps_shape_of_harmless_values(value: Any) -> None:
    out = sanitize(value, None, 8192)
    assert type(out) is type(value) or isinstance(value, tuple)


def test_scope_matching() -> None:
    args = {"format": "markdown", "title": "Document analysis"}
    assert scope_covers(proposed_scope(args), args)
    assert scope_covers({"format": "*", "title": "Doc*"}, args)
    assert scope_covers({"format": ["markdown", "html"], "title": "*"}, args)
    assert not scope_covers({"format": "markdown"}, args)  # title not named: not covered
    assert not scope_covers({"format": "html", "title": "*"}, args)
    assert not scope_covers({"format": "*", "title": "Summary*"}, args)
    assert not scope_covers("everything", args)
    assert scope_covers({}, {})
    assert not scope_covers({"n": 1}, {"n": True})
    assert scope_covers({"n": {"in": [1, 2]}}, {"n": 2})
    assert scope_covers({"t": {"glob": "a*"}}, {"t": "abc"})
    assert not scope_covers({"t": {"regex": ".*"}}, {"t": "abc"})  # unknown operators allow nothing
    assert proposed_scope({"t": "a*", "l": [1]}) == {"t": {"eq": "a*"}, "l": {"eq": [1]}}
    assert not scope_covers(proposed_scope({"t": "a*"}), {"t": "abc"})


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(min_size=1, max_size=8), JSON, max_size=5))
def test_the_proposed_scope_covers_exactly_its_arguments(args: dict[str, Any]) -> None:
    assert scope_covers(proposed_scope(args), args)
    for key in args:
        changed = {**args, key: [args[key]]}  # a different value
        assert not scope_covers(proposed_scope(args), changed)


def test_precheck() -> None:
    assert precheck("  go  ", None, 10) == "go"
    for bad in ("", "   ", "x" * 11, 5, None):
        with pytest.raises(PolicyRefused):
            precheck(bad, None, 10)
    with pytest.raises(PolicyRefused, match="read-only"):
        precheck("go", Principal("p", claims={"read_only": True}), 10)


def test_config_from_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "roost.toml"
    path.write_text(
        "[agent]\nmax_tool_hops = 3\nheartbeat_interval = 0.2\nlease_ttl = 1\n[agent.tools.x]\ndelay_s = 2\n"
    )
    cfg = load_config(path)
    assert cfg.max_tool_hops == 3
    assert cfg.tool_settings("x") == {"delay_s": 2}
    monkeypatch.setenv("ROOST_CONFIG", str(path))
    assert load_config().max_tool_hops == 3
    monkeypatch.delenv("ROOST_CONFIG")
    monkeypatch.chdir(tmp_path)
    assert load_config().lease_ttl == 1.0  # ./roost.toml
    path.write_text("[agent]\nmax_tool_hop = 3\n")
    with pytest.raises(ConfigError, match="max_tool_hop: Extra inputs are not permitted"):
        load_config(path)
    with pytest.raises(ValidationError, match="two heartbeat"):
        AgentConfig(heartbeat_interval=1.0, lease_ttl=1.5)


@tool(settings=("delay_s",), name="configured_tool")
async def configured_tool(ctx: ToolContext, args: BaseModel) -> dict[str, Any]:
    return {"delay": ctx.settings.get("delay_s")}


def test_a_tool_table_of_no_tool_or_a_key_its_tool_does_not_declare_is_refused_when_the_kind_registers(
    tmp_path: Path,
) -> None:
    """``[agent.tools.NAME]`` must name a defined tool, and hold only the settings it declares
    (``@tool(settings=...)``): anything else is a :class:`ConfigError` from ``create_app``, naming the
    table and the key, with the close match; a table of another agent's tool is not refused."""

    def app_with(tables: dict[str, dict[str, Any]]) -> None:
        class Configured(Agent):
            kind = "configured"
            tools = (configured_tool,)
            config = AgentConfig(tools=tables)

        create_app([Configured], data_dir=tmp_path)

    app_with({"configured_tool": {"delay_s": 1}})
    app_with({"analyze_documents": {"delay_s": 1}})  # a tool of the docs agent: defined, so known
    with pytest.raises(ConfigError, match=r"\[agent\.tools\.nope\]: no tool is named 'nope'"):
        app_with({"nope": {"x": 1}})
    with pytest.raises(
        ConfigError, match=r"\[agent\.tools\.configured_tol\]: .*did you mean 'configured_tool'"
    ):
        app_with({"configured_tol": {}})
    with pytest.raises(
        ConfigError,
        match=r"\[agent\.tools\.configured_tool\] dleay_s: not a setting .*did you mean 'delay_s'",
    ):
        app_with({"configured_tool": {"dleay_s": 1}})


def test_an_unknown_key_names_its_close_match(tmp_path: Path) -> None:
    path = tmp_path / "roost.toml"
    path.write_text("[agent]\nmax_tool_hop = 3\n")
    with pytest.raises(
        ConfigError, match=r"max_tool_hop: Extra inputs are not permitted \(did you mean 'max_tool_hops'\?\)"
    ):
        load_config(path)


def test_an_unknown_key_of_a_nested_table_names_its_table_and_its_close_match(tmp_path: Path) -> None:
    path = tmp_path / "roost.toml"
    path.write_text("[agent.context]\nkeep_recnt = 3\n\n[agent.context.compact]\nmesages = 4\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "[agent.context] keep_recnt: Extra inputs are not permitted (did you mean 'keep_recent'?)" in str(
        refused.value
    )
    assert (
        "[agent.context.compact] mesages: Extra inputs are not permitted (did you mean 'messages'?)"
        in str(refused.value)
    )


class Args(BaseModel):
    n: int = 1


def test_tools_are_typed() -> None:
    @tool(keywords=("count",))
    async def count(ctx: ToolContext, args: Args) -> int:
        """Count."""
        return args.n

    catalog = Catalog([count])
    assert catalog.check("count", {"n": "3"}) == {"n": 3}
    with pytest.raises(InvalidToolCall, match="count: n"):
        catalog.check("count", {"n": "three"})
    with pytest.raises(InvalidToolCall, match="no tool"):
        catalog.check("missing", {})
    assert catalog.specs()[0]["function"]["parameters"]["properties"]["n"]["type"] == "integer"
    with pytest.raises(TypeError, match="pydantic"):

        @tool()
        async def untyped(ctx: ToolContext, args: dict) -> None:  # type: ignore[type-arg]
            return None

    with pytest.raises(ValueError, match="approval_mode"):
        tool(approval_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tools"):
        Catalog([count, count])


@pytest.mark.parametrize("status", [RunStatus, TurnStatus, JobStatus, ApprovalStatus])
def test_one_spelling_cancelled_and_the_old_one_is_read_as_it(status: Any) -> None:
    """Every status field spells it ``cancelled``; parsing the old ``canceled`` answers the same member."""
    assert status.CANCELLED == "cancelled"
    assert status("canceled") is status.CANCELLED
    assert status("cancelled") is status.CANCELLED
    assert "canceled" not in {m.value for m in status}
    with pytest.raises(ValueError, match="is not a valid"):
        status("cancel")


def test_a_status_is_its_string_on_the_wire() -> None:
    """A member is its string: rows, replies and events carry the same text as before."""
    assert orjson.dumps({"s": RunStatus.IN_PROGRESS}) == b'{"s":"in_progress"}'
    assert f"{RunStatus.CANCELLED}" == "cancelled"
    assert RunStatus.CANCELLED in FINISHED
    assert "completed" in FINISHED
    assert "in_progress" not in FINISHED


def test_an_event_status_is_one_enum_documented_in_the_protocol() -> None:
    """Every event ``status`` is an ``EventStatus`` (the verification result included), sent as its
    plain string, and ``docs/protocol.md`` lists exactly its values."""
    assert {v.value for v in VerificationResult} <= {v.value for v in EventStatus}
    assert EventStatus(VerificationResult.PASS) is EventStatus.PASS
    assert orjson.dumps({"status": EventStatus.WAITING_FOR_INPUT}) == b'{"status":"waiting_for_input"}'
    doc = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| event `status`"))
    assert row.split("|")[2].replace("`", "").replace(" ", "").split(",") == [v.value for v in EventStatus]


def test_the_agent_runtime_stands_on_the_extension_api_only() -> None:
    """``roost.agent`` imports of the actor layer only its public API (``roost.actors``, its errors)
    and the extension API, touches no private attribute of another object (``actor._host``...), and
    never imports ``roost.examples``."""
    import ast

    import roost.agent

    allowed = {"roost.actors", "roost.actors.extension", "roost.actors.errors"}
    root = Path(roost.agent.__file__).parent
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                assert not name.startswith("roost.examples"), f"{path.name} imports {name}"
                if name.startswith("roost.actors"):
                    assert name in allowed, f"{path.name} imports {name}"
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                owner = node.value
                own = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
                assert own, f"{path.name}:{node.lineno} reaches into {ast.unparse(node)}"


def test_a_tool_annotated_with_basemodel_itself_takes_no_arguments_and_other_annotations_are_refused() -> (
    None
):
    from roost.agent.catalog import NoArgs

    @tool()
    async def ping(ctx: ToolContext, args: BaseModel) -> dict[str, int]:
        return {}

    assert ping.args_model is NoArgs
    assert ping.validate({}) == NoArgs()
    assert "properties" in ping.args_model.model_json_schema()
    with pytest.raises(InvalidToolCall, match="Extra inputs are not permitted"):
        ping.validate({"unexpected": 1})
    with pytest.raises(TypeError, match="annotate args with a pydantic model"):

        @tool()
        async def bad(ctx: ToolContext, args: dict) -> dict[str, int]:  # type: ignore[type-arg]
            return {}
