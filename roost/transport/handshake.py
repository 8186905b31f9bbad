"""What an actor sees of a WebSocket handshake: :func:`connect_request`, credentials left out.

The connection's :class:`~roost.actors.Request` (``conn.request``) is made here from the ASGI scope,
once, at admission (:class:`~roost.transport.admission.Admission`). Pure: no I/O, never raises but
:class:`RequestTooLarge`.

Credentials can travel in four places (:mod:`roost.transport.security`): ``Authorization: Bearer``,
a ``roost.token.<token>`` entry of ``Sec-WebSocket-Protocol``, the ``token`` query parameter (which
:func:`~roost.transport.security.hide_token` has already moved out of the scope's query string, and
which is dropped here again in whatever spelling ``parse_qsl`` reads as ``token``), and cookies.
None of them reaches the request, and neither does ``Proxy-Authorization`` nor any header or query
value that holds a Roost token under another name, in its raw text or percent-decoded (up to
:data:`DECODE_ROUNDS` times: a query value is decoded once more by the query parser first).

Guarantees (``tests/test_connect_request.py``):

- **No credential reaches the actor.** The four places above are left out of the request, and so is
  any value holding a Roost token, however the query spells the parameter's name and however the
  value percent-encodes the token (any of its characters, once or up to three times over).
- **Bounded.** A request whose query and headers take more than
  :data:`~roost.actors.MAX_REQUEST_BYTES` (16 KiB, credentials not counted) raises
  :class:`RequestTooLarge`; admission refuses the connection ``bad_address`` (4400).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote

from roost.actors import MAX_REQUEST_BYTES, Params, Request

__all__ = ["CREDENTIAL_HEADERS", "RequestTooLarge", "connect_request"]

#: Headers that carry credentials: never part of a connection's request.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_TOKEN_PROTOCOL = "roost.token."
#: A Roost token anywhere in a value, its prefix in any case (its percent-decoded forms are searched
#: too: :func:`_holds_token`).
_ROOST_TOKEN = re.compile(r"roost1\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+", re.IGNORECASE)
#: How many times a value is percent-decoded, at most, in the search for a token.
DECODE_ROUNDS = 3


class RequestTooLarge(ValueError):
    """The handshake's query and headers, credentials left out, are over the bound."""


def _holds_token(value: str) -> bool:
    """Whether ``value`` holds a Roost token in its raw text or in a percent-decoded form of it: it is
    decoded again until it no longer changes, at most :data:`DECODE_ROUNDS` times (``%72oost1.…``,
    ``%2572oost1.…`` and ``roost1%252E…`` are tokens; hex digits and the prefix in either case)."""
    for _ in range(DECODE_ROUNDS):
        if _ROOST_TOKEN.search(value) is not None:
            return True
        if "%" not in value:
            return False
        decoded = unquote(value)
        if decoded == value:
            return False
        value = decoded
    return _ROOST_TOKEN.search(value) is not None


def _headers(raw: Any) -> list[tuple[str, str]]:
    kept: list[tuple[str, str]] = []
    for name_b, value_b in raw or ():
        name = bytes(name_b).decode("latin-1").lower()
        value = bytes(value_b).decode("latin-1")
        if name in CREDENTIAL_HEADERS:
            continue
        if name == "sec-websocket-protocol":
            offered = [p.strip() for p in value.split(",") if p.strip()]
            rest = [p for p in offered if not p.startswith(_TOKEN_PROTOCOL)]
            if not rest:
                continue
            value = ", ".join(rest)
        if _holds_token(value):
            continue
        kept.append((name, value))
    return kept


def _query(raw: Any) -> list[tuple[str, str]]:
    text = bytes(raw or b"").decode("latin-1")
    pairs = parse_qsl(text, keep_blank_values=True, errors="replace")
    return [(k, v) for k, v in pairs if k != "token" and unquote(k) != "token" and not _holds_token(v)]


def connect_request(scope: Mapping[str, Any]) -> Request:
    """The :class:`~roost.actors.Request` of a WebSocket's scope (see the module doc). Raises
    :class:`RequestTooLarge` when it would take more than :data:`~roost.actors.MAX_REQUEST_BYTES`."""
    query = Params(_query(scope.get("query_string", b"")))
    headers = Params(_headers(scope.get("headers")))
    size = query.nbytes() + headers.nbytes()
    if size > MAX_REQUEST_BYTES:
        raise RequestTooLarge(
            f"the handshake's query and headers take {size} bytes (credentials left out); "
            f"at most {MAX_REQUEST_BYTES} are kept"
        )
    client = scope.get("client")
    peer = (str(client[0]), int(client[1])) if client else None
    return Request(path=str(scope.get("path", "/")), query=query, headers=headers, client=peer)
