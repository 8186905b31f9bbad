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
- **Resume by PartySocket's id.** :class:`CloudflareCursors` remembers per actor and ``_pk`` the last
  logged frame sent, for the reconnect of the same id (bounded; in memory: a restart forgets it).
- **Bad input is a message, not a failure.** A client frame that is no JSON, or JSON of no type
  Roost or Cloudflare's client sends, goes to ``on_message`` as its data; a frame too big, a call
  with bad arguments, are answered as for any connection.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Literal

import orjson

from roost.transport.sink import SocketSink

__all__ = [
    "CLIENT_STATE_METHOD",
    "MAX_REMEMBERED",
    "CloudflareCursors",
    "CloudflareSink",
    "Dialect",
    "dialect_of",
    "inbound",
]

Dialect = Literal["roost", "cf"]

#: The method a client's ``cf_agent_state`` calls, if the kind defines it as a ``@callable``.
CLIENT_STATE_METHOD = "set_state_from_client"
#: PartySocket ids whose last sent seq :class:`CloudflareCursors` keeps (the most recently sent to).
MAX_REMEMBERED = 10_000
#: The id prefix of the calls a ``cf_agent_state`` becomes (a Cloudflare client's ids are UUIDs).
_STATE_CALL = "cf-state-"
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


class CloudflareCursors:
    """Per ``(kind, name, PartySocket id)``: the seq of the last logged frame sent to it; the
    :data:`MAX_REMEMBERED` most recently sent to are kept."""

    __slots__ = ("_seqs", "limit")

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
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


_state_calls = itertools.count(1)


def inbound(text: str | None) -> str | None:
    """A Cloudflare client's frame as the Roost frame it stands for (the table in the module doc);
    ``None`` (a binary frame) is passed on as is."""
    if text is None:
        return text
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _message(text)
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind in _ROOST_TYPES:
        return text
    if kind == "cf_agent_state":
        call = {
            "type": "rpc",
            "id": f"{_STATE_CALL}{next(_state_calls)}",
            "method": CLIENT_STATE_METHOD,
            "args": [obj.get("state")],
        }
        return orjson.dumps(call).decode()
    return _message(obj)


def _message(data: Any) -> str:
    return orjson.dumps({"type": "message", "data": data}).decode()


class CloudflareSink(SocketSink):
    """A :class:`SocketSink` that sends each frame as the Cloudflare frames it stands for."""

    __slots__ = ("cursors", "head", "key")

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

    def send_text(self, text: str) -> None:
        for out in self.translate(text):
            super().send_text(out)

    def translate(self, text: str) -> list[str]:
        """The Cloudflare frames of one Roost frame (the table in ``docs/design.md``)."""
        frame = orjson.loads(text)
        kind = frame.get("type")
        if kind == "welcome":
            self.head = frame["cursor"]
            actor = frame["actor"]
            identity = {"type": "cf_agent_identity", "name": actor["name"], "agent": actor["kind"]}
            state = {"type": "cf_agent_state", "state": frame["state"]}
            return [orjson.dumps(identity).decode(), orjson.dumps(state).decode(), _NO_MCP]
        if kind == "state":
            self._sent(frame["seq"])
            if frame["seq"] <= self.head:
                return []
            return [orjson.dumps({"type": "cf_agent_state", "state": frame["state"]}).decode()]
        if kind == "event":
            self._sent(frame["seq"])
            return [
                orjson.dumps({"type": "roost_event", "seq": frame["seq"], "event": frame["event"]}).decode()
            ]
        if kind == "message":
            data = frame["data"]
            return [data if isinstance(data, str) else orjson.dumps(data).decode()]
        if kind == "rpc_result":
            return self._result(frame)
        if kind == "rpc_chunk":
            chunk = {
                "type": "rpc",
                "id": frame["id"],
                "success": True,
                "result": frame["chunk"],
                "done": False,
            }
            return [orjson.dumps(chunk).decode()]
        if kind == "error":
            error = {"type": "roost_error", "code": frame["code"], "message": frame["message"]}
            return [orjson.dumps(error).decode()]
        return [text]

    def _result(self, frame: dict[str, Any]) -> list[str]:
        call_id: str = frame["id"]
        error = None if frame["ok"] else f"{frame['error']['code']}: {frame['error']['message']}"
        if call_id.startswith(_STATE_CALL):  # a client's cf_agent_state
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

    def _sent(self, seq: int) -> None:
        if self.cursors is not None and self.key is not None:
            self.cursors.sent(self.key, seq)
