"""The Cloudflare Agents dialect: an unchanged Cloudflare frontend (npm ``agents``' ``AgentClient`` and
``useAgent``, on ``PartySocket``) against ``roost serve``.

The translation sits at the transport edge (``docs/design.md``, *The Cloudflare Agents dialect*, has
the frame table): :class:`CloudflareSink` rewrites each server frame on its way out,
:func:`inbound` each client frame on its way in; the actor, the connection's protocol and the output
gate are those of every connection. Which connections speak it: :func:`dialect_of`.

Guarantees (``tests/test_cloudflare_dialect.py``, and in Node with the real packages
``tests/test_cloudflare_clients.py``):

- **Identity first.** The welcome becomes ``cf_agent_identity`` (``name``, ``agent``: the kind),
  then ``cf_agent_state`` with the current state, then an empty ``cf_agent_mcp_servers``: what
  ``AgentClient.ready`` waits for, in Cloudflare's order.
- **Never an older state after a newer one.** A state frame replayed from before the welcome's
  cursor is dropped: the client already has the state at the cursor.
- **Calls as Cloudflare answers them.** A result is ``rpc`` with ``success: true``, ``done: true``; a
  streamed chunk the same with ``done: false``; a failure ``success: false`` with the error as one
  string, ``code: message``.
- **Client state only where the kind takes it.** ``cf_agent_state`` from the client is a call of the
  kind's ``@callable set_state_from_client(state)``, with every check of a call; without one, or
  when it fails, the client gets ``cf_agent_state_error`` and nothing changes.
- **Resume by PartySocket's id, repeats rather than gaps.** :class:`CloudflareCursors` remembers
  per actor and ``_pk`` where the id's next connection resumes: after the last logged frame the
  socket took at least ``grace`` (2 s) before the connection ended. A frame queued but never written
  (the connection closing, or closed as a slow reader) is never counted, and one written in the last
  moments (a client that closes drops what arrives after) is sent again; ``roost_event`` frames carry
  their ``seq`` for a client that drops repeats. Bounded; in memory: a restart forgets it. A
  welcome that is no resume after what the id had (its cursor too old, say) is told
  as ``roost_resume`` with Roost's ``resume`` and ``reason``.
- **Final means final, for Cloudflare's client too.** It stops only after 1008 and 4000–4999, so
  Roost's final closes outside that range go out 3000 higher: 1000 (the actor was deleted, or it
  closed the connection: do not come back) as 4000, 1009 (a frame too big) as 4009; 4400–4499 go as
  they are. Closes after which Roost's clients reconnect (1001, 1011, 1012, 1013) it reconnects
  after too (:func:`close_for_cloudflare`).
- **A token that expires does not end the frontend**: on an open connection its expiry closes with
  1000, not 4401 (final for Cloudflare's client), so the client reconnects with a fresh token.
- **A refused connection is told in the dialect**: its ``error`` frame goes out as ``roost_error``
  and its close code as above (:func:`refusal_for_cloudflare`), so ``onConnectionError`` gets the
  reason and a final refusal stops the client.
- **Every call is answered.** A call refused as a bad frame (arguments not a list, say) is answered
  as a failed ``rpc`` for its id, so the client's ``call`` rejects at once with the reason; the
  answer of a ``cf_agent_state`` is known by the ids this connection gave such calls (random, never
  a client's), so a client's own id of any shape is answered.
- **Bad input is a message, not a failure.** A client frame that is no JSON, or JSON of no type
  Roost or Cloudflare's client sends, goes to ``on_message`` as its data; a frame too big is closed
  as for any connection (with 4009).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import parse_qs

import orjson

from roost.protocol.codes import CloseCode
from roost.transport.sink import SocketSink

__all__ = [
    "CLIENT_STATE_METHOD",
    "MAX_REMEMBERED",
    "CloudflareCursors",
    "CloudflareSink",
    "Dialect",
    "close_for_cloudflare",
    "dialect_of",
    "inbound",
    "refusal_for_cloudflare",
    "requested_dialect",
]

Dialect = Literal["roost", "cf"]

#: The method a client's ``cf_agent_state`` calls, if the kind defines it as a ``@callable``.
CLIENT_STATE_METHOD = "set_state_from_client"
#: PartySocket ids whose resume point :class:`CloudflareCursors` keeps (the most recently ended).
MAX_REMEMBERED = 10_000
#: A frame written this close to the end of its connection may not have been read (a client that
#: closes, as PartySocket's reconnect does, drops what arrives after): it is sent again.
GRACE_S = 2.0
#: The id prefix of the calls a ``cf_agent_state`` becomes; a random suffix follows, and the sink
#: knows its own by their ids (a client's id with this prefix is answered as any other).
_STATE_CALL = "cf-state-"
#: Roost's final close codes that Cloudflare's client would reconnect after → the code they go out
#: with (3000 higher: in 4000–4999, which that client takes as final).
_FINAL_FOR_CLOUDFLARE: dict[int, int] = {CloseCode.NORMAL: 4000, CloseCode.MESSAGE_TOO_BIG: 4009}
#: The client frames Roost's own protocol has; any other type is a message for ``on_message``.
_ROOST_TYPES = frozenset({"rpc", "message", "ping", "auth", "subscribe"})
_NO_MCP = orjson.dumps(
    {"type": "cf_agent_mcp_servers", "mcp": {"servers": {}, "tools": [], "prompts": [], "resources": []}}
).decode()


def dialect_of(asked: str | None, pk: str | None, cursor: int | None) -> Dialect:
    """``?dialect=`` if given; else Cloudflare's for a PartySocket (``_pk``) that sends no ``cursor``."""
    if asked is not None:
        return "cf" if asked == "cf" else "roost"
    return "cf" if pk is not None and cursor is None else "roost"


def requested_dialect(query: bytes | str) -> Dialect:
    """The dialect a handshake's query asks for, read leniently (for the refusal of a query that
    does not parse: a PartySocket with a bad ``_pk`` still gets Cloudflare's frames)."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    q = parse_qs(text, keep_blank_values=True)
    asked = q["dialect"][-1] if "dialect" in q else None
    pk = q["_pk"][-1] if "_pk" in q else None
    return dialect_of(asked if asked in ("roost", "cf") else None, pk, 0 if "cursor" in q else None)


def close_for_cloudflare(code: int, reason: str, welcomed: bool = True) -> tuple[int, str]:
    """The close Cloudflare's client takes as Roost's ``code`` means: a final one (1000, 1009) 3000
    higher, into the range it does not reconnect after; 4401 on an open (``welcomed``) connection,
    a token that expired, as 1000, so that it reconnects with a fresh token; any other as it is."""
    if code == CloseCode.UNAUTHENTICATED and welcomed:
        return CloseCode.NORMAL, f"{reason}; reconnect with a fresh token"
    return _FINAL_FOR_CLOUDFLARE.get(code, code), reason


def refusal_for_cloudflare(frame: str, code: int, reason: str) -> tuple[str, int, str]:
    """A refused handshake's ``error`` frame and close, as a Cloudflare client is sent them."""
    return (_error(orjson.loads(frame)), *close_for_cloudflare(code, reason, welcomed=False))


def _error(frame: dict[str, Any]) -> str:
    """An ``error`` frame as ``roost_error``; one carrying a call's id as that call's failure."""
    if frame.get("id") is not None:
        failed = {
            "type": "rpc",
            "id": frame["id"],
            "success": False,
            "error": f"{frame['code']}: {frame['message']}",
        }
        return orjson.dumps(failed).decode()
    return orjson.dumps({"type": "roost_error", "code": frame["code"], "message": frame["message"]}).decode()


class CloudflareCursors:
    """Per ``(kind, name, PartySocket id)``: where its next connection resumes; the
    :data:`MAX_REMEMBERED` most recently ended are kept. ``grace``: a frame the socket took less
    than this many seconds before the connection ended is sent again (:class:`CloudflareSink`)."""

    __slots__ = ("_seqs", "clock", "grace", "limit")

    def __init__(
        self, limit: int = MAX_REMEMBERED, grace: float = GRACE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.grace = grace
        self.clock = clock
        self._seqs: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def get(self, key: tuple[str, str, str]) -> int | None:
        return self._seqs.get(key)

    def sent(self, key: tuple[str, str, str], seq: int) -> None:
        seqs = self._seqs
        if seqs.get(key, -1) < seq:
            seqs[key] = seq
        seqs.move_to_end(key)
        if len(seqs) > self.limit:
            seqs.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seqs)


def inbound(
    text: str | None, max_bytes: int | None = None, state_calls: set[str] | None = None
) -> str | None:
    """A Cloudflare client's frame as the Roost frame it stands for (the table in the module doc);
    ``None`` (a binary frame) is passed on as is. A message that ``max_bytes`` would refuse only once
    wrapped goes on as it came, so that it is answered as in Roost's dialect (``bad_frame``), not
    closed as too big. The id of a call a ``cf_agent_state`` becomes is added to ``state_calls``."""
    if text is None:
        return text
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        wrapped = _message(text)
        return text if max_bytes is not None and len(wrapped) > max_bytes else wrapped
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind in _ROOST_TYPES:
        return text
    if kind == "cf_agent_state":
        call_id = f"{_STATE_CALL}{secrets.token_hex(8)}"
        if state_calls is not None:
            state_calls.add(call_id)
        call = {"type": "rpc", "id": call_id, "method": CLIENT_STATE_METHOD, "args": [obj.get("state")]}
        return orjson.dumps(call).decode()
    wrapped = _message(obj)
    return text if max_bytes is not None and len(wrapped) > max_bytes else wrapped


def _message(data: Any) -> str:
    return orjson.dumps({"type": "message", "data": data}).decode()


class CloudflareSink(SocketSink):
    """A :class:`SocketSink` that sends each frame as the Cloudflare frames it stands for."""

    __slots__ = ("_base", "_logged", "_published", "_state_calls", "_taken", "cursors", "head", "key")

    def __init__(
        self,
        send: Any,
        max_queue: int,
        max_bytes: int,
        *,
        cursors: CloudflareCursors | None = None,
        key: tuple[str, str, str] | None = None,
    ) -> None:
        super().__init__(send, max_queue, max_bytes)
        self.cursors = cursors
        self.key = key
        #: The welcome's cursor: a state replayed at or below it is older than the one sent.
        self.head = 0
        #: Sent frames that stand for a seq of the log, in order, until the socket takes them.
        self._logged: deque[tuple[str, int]] = deque()
        #: (when the socket took it, seq) of the frames taken within the grace; ``_base``: the seq up
        #: to which everything was taken before that (the welcome's cursor at first).
        self._taken: deque[tuple[float, int]] = deque()
        self._base: int | None = None
        self._published = False
        self.tracks = cursors is not None and key is not None
        #: The ids of this connection's calls that a client's ``cf_agent_state`` became, unanswered.
        self._state_calls: set[str] = set()

    def inbound(self, text: str | None, max_bytes: int | None = None) -> str | None:
        """:func:`inbound`, for this connection: its state calls' answers are known by their ids."""
        return inbound(text, max_bytes, self._state_calls)

    def send_text(self, text: str) -> None:
        for out in self.translate(text):
            super().send_text(out)

    def written(self, text: str) -> None:
        """The socket took ``text``: if it stands for a seq, noted with the time (a frame queued but
        never written, the connection closing, is never noted)."""
        logged = self._logged
        if logged and logged[0][0] is text and self.cursors is not None:
            _, seq = logged.popleft()
            now = self.cursors.clock()
            taken = self._taken
            taken.append((now, seq))
            while taken and taken[0][0] < now - self.cursors.grace:
                self._base = taken.popleft()[1]

    def _gone(self) -> None:
        super()._gone()
        self.publish()

    def publish(self) -> None:
        """The connection ended: its id resumes after the last frame the socket took at least
        ``grace`` seconds before now (what came later may not have been read, and is sent again:
        a repeat, never a gap; events carry their seq)."""
        if self._published or self.cursors is None or self.key is None:
            return
        self._published = True
        end = self.cursors.clock() - self.cursors.grace
        base = self._base
        for when, seq in self._taken:
            if when <= end:
                base = seq
        if base is not None:
            self.cursors.sent(self.key, base)

    def close(self, code: int, reason: str) -> None:
        """As :meth:`SocketSink.close`, with the code Cloudflare's client reads as Roost's means
        (:func:`close_for_cloudflare`): 1000 and 1009 as 4000 and 4009, so that it stops (it would
        reconnect after them, and a reconnect would make a deleted actor again); a token that
        expired on an open connection as 1000 (Cloudflare's client takes 4401 as final, so a
        frontend with short-lived tokens would stop for good; with 1000 it reconnects, asking its
        ``query`` for a fresh token)."""
        super().close(*close_for_cloudflare(code, reason, self.welcomed))

    def translate(self, text: str) -> list[str]:
        """The Cloudflare frames of one Roost frame (the table in ``docs/design.md``)."""
        frame = orjson.loads(text)
        kind = frame.get("type")
        if kind == "welcome":
            self.head = frame["cursor"]
            if self._base is None:  # the state at the cursor is sent again at the next connect anyway
                self._base = self.head
            actor = frame["actor"]
            identity = {"type": "cf_agent_identity", "name": actor["name"], "agent": actor["kind"]}
            state = orjson.dumps({"type": "cf_agent_state", "state": frame["state"]}).decode()
            out = [orjson.dumps(identity).decode(), state, _NO_MCP]
            if frame.get("reason") is not None:  # no resume after what it had: it is told so
                told = {"type": "roost_resume", "resume": frame["resume"], "reason": frame["reason"]}
                out.append(orjson.dumps(told).decode())
            return out
        if kind == "state":
            if frame["seq"] <= self.head:
                return []
            state = orjson.dumps({"type": "cf_agent_state", "state": frame["state"]}).decode()
            return [self._track(state, frame["seq"])]
        if kind == "event":
            event = {"type": "roost_event", "seq": frame["seq"], "event": frame["event"]}
            return [self._track(orjson.dumps(event).decode(), frame["seq"])]
        if kind == "message":
            data = frame["data"]
            return [data if isinstance(data, str) else orjson.dumps(data).decode()]
        if kind == "rpc_result":
            return self._result(frame)
        if kind == "rpc_chunk":
            if frame["id"] in self._state_calls:
                return []
            chunk = {
                "type": "rpc",
                "id": frame["id"],
                "success": True,
                "result": frame["chunk"],
                "done": False,
            }
            return [orjson.dumps(chunk).decode()]
        if kind == "error":
            if frame.get("id") in self._state_calls:  # never: the server's own calls are well formed
                return self._result({"id": frame["id"], "ok": False, "error": frame})
            return [_error(frame)]
        return [text]

    def _result(self, frame: dict[str, Any]) -> list[str]:
        call_id: str = frame["id"]
        error = None if frame["ok"] else f"{frame['error']['code']}: {frame['error']['message']}"
        if call_id in self._state_calls:  # a client's cf_agent_state
            self._state_calls.discard(call_id)
            if error is None:
                return []
            if error.startswith("method_not_found"):
                error = "state_refused: this actor takes no state from clients"
            return [orjson.dumps({"type": "cf_agent_state_error", "error": error}).decode()]
        if error is not None:
            answer: dict[str, Any] = {"type": "rpc", "id": call_id, "success": False, "error": error}
        else:
            answer = {"type": "rpc", "id": call_id, "success": True, "result": frame["result"], "done": True}
        return [orjson.dumps(answer).decode()]

    def _track(self, text: str, seq: int) -> str:
        """``text``, remembered as standing for ``seq`` until the socket takes it."""
        if self.tracks:
            self._logged.append((text, seq))
        return text
