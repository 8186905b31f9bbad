"""Actor URLs: building ``ws://HOST:PORT/agents/{kind}/{name}`` and its query parameters."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

#: The broadcast kinds of the ``subscribe`` query parameter, in canonical order.
SUBSCRIPTION_KINDS: tuple[str, ...] = ("state", "events", "messages")

# Query parameters the client owns: they are replaced, never duplicated, on each connect.
_OWNED_PARAMS = frozenset({"cursor", "subscribe"})


def actor_url(base: str, kind: str, name: str) -> str:
    """The WebSocket URL of actor ``(kind, name)`` under ``base`` (e.g. ``ws://127.0.0.1:8000``).

    ``kind`` and ``name`` are each percent-encoded as exactly one path segment
    (``quote(x, safe="")``): ``/`` becomes ``%2F``, so ``../../etc/passwd`` is one opaque name. The
    names ``.`` and ``..`` are kept literally, as protocol.md says they are ordinary names. The
    server validates them (1 to 256 code points, otherwise close code 4400); this helper does not,
    so tests can send invalid names on purpose. A name that is not encodable as UTF-8 (a lone
    surrogate) raises ``UnicodeEncodeError``.
    """
    parts = urlsplit(base)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"base must be a ws:// or wss:// URL, got {base!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"base must not have a query or fragment, got {base!r}")
    prefix = parts.path.rstrip("/")
    path = f"{prefix}/agents/{quote(kind, safe='')}/{quote(name, safe='')}"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def parse_subscribe(value: str) -> frozenset[str]:
    """Parse a ``subscribe`` value (``"state,events"``, ``"none"``...) into a set of kinds.

    Raises ``ValueError`` for an unknown kind, an empty item, or ``none`` mixed with kinds.
    """
    items = [item.strip() for item in value.split(",")]
    if items == ["none"]:
        return frozenset()
    unknown = [item for item in items if item not in SUBSCRIPTION_KINDS]
    if unknown:
        raise ValueError(
            f"subscribe must be 'none' or a comma-separated subset of "
            f"{','.join(SUBSCRIPTION_KINDS)}, got {value!r}"
        )
    return frozenset(items)


def format_subscribe(kinds: frozenset[str]) -> str:
    """The canonical ``subscribe`` value for a set of kinds (``none`` for the empty set)."""
    if not kinds:
        return "none"
    return ",".join(kind for kind in SUBSCRIPTION_KINDS if kind in kinds)


def with_token(url: str, token: str, *, add: bool = False) -> str:
    """``url`` with the value of its ``token`` query parameter replaced by ``token`` (after a renewal,
    so that a reconnect presents the new token); ``url`` itself when it has no ``token``, unless
    ``add``: then the parameter is added (``python -m roost.client --token``)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(k == "token" for k, _ in query):
        if not add:
            return url
        query.append(("token", token))
    query = [(k, token if k == "token" else v) for k, v in query]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, safe=","), parts.fragment))


def connect_url(url: str, *, cursor: int | None, subscribe: frozenset[str] | None) -> str:
    """``url`` with the client's ``cursor`` and ``subscribe`` query parameters set.

    Any ``cursor``/``subscribe`` already in ``url`` is replaced; other parameters (``v``...) are
    kept in order; a fragment is dropped. ``None`` omits the parameter.
    """
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in _OWNED_PARAMS]
    if cursor is not None:
        if cursor < 0:
            raise ValueError(f"cursor must be >= 0, got {cursor}")
        query.append(("cursor", str(cursor)))
    if subscribe is not None:
        query.append(("subscribe", format_subscribe(subscribe)))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, safe=","), ""))
