"""The actor's state and its log: every state change and durable event gets the next ``seq``.

These functions are :class:`~roost.actors.host.ActorHost` methods (bound in its class body), kept here
because they are one concern: the write order of a state update and the log's bound.

Guarantees (``tests/test_turns.py``, ``tests/test_resume.py``):

- **Gap-free log (guarantee 4).** Each state change and durable event gets the next ``seq``; the frame
  is written to the log in the turn's transaction, so a rolled-back turn leaves no gap.
- **A fixed order for a state update:** validate → persist (the log row) → broadcast (through the
  output gate) → ``on_state_changed``; a hook error never undoes the write.
- **Bounded log.** At most ``retention`` frames (plus a tenth) are kept; before older frames are
  pruned, the snapshot row takes the state, so a pruned state frame is never the only copy.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors.connection import Connection
from roost.actors.errors import MigrationError, StateError
from roost.actors.outputs import Frame
from roost.actors.turn import report
from roost.protocol import frames

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = [
    "broadcast",
    "emit",
    "fanout",
    "migrate_state",
    "next_seq",
    "save_state",
    "set_state",
    "to_json",
    "unsaved_state",
]

log = logging.getLogger("roost.actor")


def to_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def set_state(host: HostCore, state: Any, source: Connection | None) -> None:
    host.require_turn()
    host.require_writable()
    if host.validates:
        host.actor.validate_state(state)
    try:
        text = to_json(state)
    except TypeError as exc:
        raise StateError(f"state is not JSON: {exc}") from exc
    seq = next_seq(host)
    frame = frames.state(seq, text)
    host.file.append_log(seq, "state", frame, host.turn.now)  # the frame is the state's only write
    host.state_seq = seq
    host.state_json = text
    host.state = orjson.loads(text)
    fanout(host, "state", frame, host.joining, None)
    if not host.watches:
        return
    try:
        host.actor.on_state_changed(host.state, source)
    except Exception as exc:  # a hook error never undoes a write
        log.exception("on_state_changed raised for %s/%r", host.kind, host.name)
        report(host, exc, source)


def emit(host: HostCore, event: Any) -> int:
    host.require_turn()
    host.require_writable()
    try:
        text = to_json(event)
    except TypeError as exc:
        raise StateError(f"event is not JSON: {exc}") from exc
    seq = next_seq(host)
    frame = frames.event(seq, text)
    host.file.append_log(seq, "event", frame, host.turn.now)
    fanout(host, "event", frame, host.joining, None)
    return seq


def broadcast(host: HostCore, data: Any, exclude: tuple[str, ...], tags: frozenset[str] | None) -> int:
    return fanout(host, "message", frames.message(data), exclude, tags)


def fanout(
    host: HostCore, kind: str, frame: str, exclude: tuple[str, ...], tags: frozenset[str] | None
) -> int:
    n = 0
    put = host.gate.put
    logged = kind != "message"
    for conn in host.connections.values():
        if not conn.subscriptions.wants(kind) or conn.id in exclude:
            continue
        replay = conn.replay
        if logged and replay is not None and replay.reading:
            continue  # its replay's reader finds the frame in the log (roost.actors.replay)
        if tags is not None and not (tags & conn.tags):
            continue
        put(Frame(conn, frame))
        n += 1
    return n


def unsaved_state(host: HostCore) -> tuple[str, int, float] | None:
    """``(state JSON, seq, now)`` for the snapshot row if it is behind the current state."""
    if host.saved_state_seq == host.state_seq:
        return None
    return host.state_json, host.state_seq, host.clock.now()


def save_state(host: HostCore) -> None:
    """Bring the snapshot row up to the current state (in the open transaction, if any)."""
    unsaved = unsaved_state(host)
    if unsaved is not None:
        host.file.save_state(*unsaved)
        host.saved_state_seq = host.state_seq


def next_seq(host: HostCore) -> int:
    host.seq += 1
    retention = host.retention
    if host.seq - host.oldest + 1 > retention + max(1, retention // 10):
        keep_from = host.seq - retention + 1
        save_state(host)  # the state frame may be pruned: keep the state in the snapshot row
        host.file.prune_log(keep_from)
        host.oldest = keep_from
    elif host.oldest > host.seq:  # the log was empty
        host.oldest = host.seq
    return host.seq


def migrate_state(host: HostCore) -> None:
    """Bring a state written by an older version of the kind forward (``Actor.state_version``,
    ``Actor.migrate_state``), one version at a time, in the first turn: the new state is logged
    and broadcast like any other, and the file records its version in the same commit. A state
    newer than the code is refused (old code would misread it)."""
    target = type(host.actor).state_version
    conn = host.file.conn
    row = conn.execute("SELECT value FROM roost_meta WHERE key = 'state_version'").fetchone()
    stored = int(row[0]) if row is not None else 1  # files from before versions existed: 1
    if stored > target:
        raise MigrationError(
            f"state:{host.kind}",
            stored,
            ValueError(f"state version {stored} is newer than this code's {target}"),
        )
    if stored == target:
        return
    state = host.state
    for version in range(stored, target):
        state = host.actor.migrate_state(state, version)
    set_state(host, state, None)
    conn.execute(
        "INSERT INTO roost_meta (key, value) VALUES ('state_version', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(target),),
    )
