"""The one failure table (``roost.protocol.failures``) against ``docs/protocol.md`` and the errors.

The documentation's *Errors* table (code, HTTP status, close code) and *Close codes* table are read
from the file, so a change to one side without the other fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from roost.actors import errors
from roost.protocol.codes import CloseCode, is_terminal
from roost.protocol.failures import FAILURES, OTHER, close_code, failure, http_status

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def doc_section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def table_rows(section: str) -> list[list[str]]:
    """The cells of every body row of the first Markdown table in ``section``."""
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def documented_failures() -> dict[str, tuple[int, int | None]]:
    out: dict[str, tuple[int, int | None]] = {}
    for code, _meaning, http, close in table_rows(doc_section("Errors")):
        key = code.strip("`")
        out[key] = (int(http), None if close == "–" else int(close))
    return out


def documented_close_codes() -> dict[int, tuple[str, str]]:
    return {
        int(code): (name.strip("`"), should)
        for code, name, _meaning, should in table_rows(doc_section("Close codes"))
    }


def test_the_failure_table_is_the_documented_errors_table() -> None:
    documented = documented_failures()
    assert documented.pop("any other") == (OTHER.http, OTHER.close)
    assert documented == {code: (f.http, f.close) for code, f in FAILURES.items()}


def test_every_close_code_of_a_failure_is_in_the_documented_close_codes() -> None:
    documented = documented_close_codes()
    for f in FAILURES.values():
        if f.close is not None:
            assert int(f.close) in documented, f.code


def test_the_documented_close_codes_are_close_code_names_and_their_advice_is_is_terminal() -> None:
    for code, (name, should) in documented_close_codes().items():
        assert CloseCode(code).name == name
        assert is_terminal(code) == should.startswith("stop"), code


def rpc_error_classes() -> list[type[errors.RpcError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.RpcError) and cls is not errors.RpcError
    ]


@pytest.mark.parametrize("cls", rpc_error_classes(), ids=lambda cls: cls.__name__)
def test_every_rpc_error_of_the_runtime_has_a_row(cls: type[errors.RpcError]) -> None:
    assert cls.code in FAILURES


def test_the_errors_module_draws_the_same_close_codes_and_statuses() -> None:
    # roost/actors/errors.py draws "close NNNN / HTTP NNN" beside some errors; they must agree.
    drawn = {
        "InvalidActorAddress": "bad_address",
        "UnknownKind": "unknown_kind",
        "Overloaded": "overloaded",
        "ActorUnavailable": "actor_unavailable",
        "ActorNotFound": "not_found",
    }
    doc = errors.__doc__ or ""
    for name, code in drawn.items():
        line = next(line for line in doc.splitlines() if f" {name} " in line)
        found = failure(code)
        close = re.search(r"close (\d+)", line)
        http = re.search(r"HTTP (\d+)", line)
        assert http is not None, name
        assert int(http.group(1)) == found.http, name
        if close is not None:
            assert found.close is not None, name
            assert int(close.group(1)) == found.close, name


def test_an_unknown_code_is_a_client_error_that_never_closes() -> None:
    assert failure("my_own_code") == ("my_own_code", 400, None)
    assert http_status("my_own_code") == 400
    with pytest.raises(LookupError):
        close_code("my_own_code")


def test_a_failure_that_never_closes_has_no_close_code() -> None:
    with pytest.raises(LookupError):
        close_code("rate_limited")
    assert close_code("too_many_connections") is CloseCode.TRY_AGAIN_LATER


#: Calls that put a wire error code on the wire or in an HTTP answer, by their first argument.
_SENDS = re.compile(
    r"\b(?:ProtocolError|Refused|Refuse|_refuse|_error|error_frame|frames\.error|refusal|rpc_error|_call_error)\(\s*\"([a-z_]+)\""
)


def test_every_error_code_the_code_can_send_is_documented() -> None:
    """Scans the package for error codes written at the places that send them (and every RpcError's
    ``code``), and finds each in ``docs/protocol.md``'s *Errors* table: a new code cannot ship
    undocumented (``unknown_kind`` and ``bad_address`` once did)."""
    root = Path(__file__).resolve().parent.parent / "roost"
    sent: dict[str, str] = {}
    for path in root.rglob("*.py"):
        for code in _SENDS.findall(path.read_text(encoding="utf-8")):
            sent.setdefault(code, str(path.relative_to(root)))
    for cls in vars(errors).values():
        if not (inspect.isclass(cls) and issubclass(cls, errors.RpcError)) or cls is errors.RpcError:
            continue  # the base class's code is a placeholder: an actor's own RpcError names its own
        if isinstance(cls.__dict__.get("code"), str):
            sent.setdefault(cls.__dict__["code"], f"roost.actors.errors.{cls.__name__}")
    assert {"bad_address", "unknown_kind", "bad_frame", "forbidden"} <= sent.keys()  # the scan finds them
    documented = documented_failures()
    missing = {code: where for code, where in sent.items() if code not in documented}
    assert missing == {}
