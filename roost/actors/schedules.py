"""Wake-ups stored in the actor's own file: the records, and the SQL that reads and advances them.

Every method runs inside the current turn's transaction (the host's ``file.conn``), so a schedule created
by a turn is committed with it, and a fire's completion is committed with the callback's own writes.
See ``docs/design.md`` (*Wake-ups*) for the flow and :mod:`roost.actors.host` for the fire turn.
"""

from __future__ import annotations

import math
import random
import sqlite3
import uuid
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

import orjson

from roost.actors.errors import IdempotencyConflict
from roost.scheduler.triggers import Trigger, next_fire, occurrences

__all__ = [
    "KEEP_FINISHED",
    "KEY_WINDOW",
    "PRUNE_EVERY",
    "DeadLetter",
    "Misfire",
    "RetryPolicy",
    "Schedule",
    "ScheduleStatus",
    "ScheduleStore",
]

#: A run_all catch-up fires at most this many missed times per wake; the rest follow at once.
MAX_CATCH_UP = 1000


class Misfire(StrEnum):
    """What to do with fires missed (later than ``misfire_grace``), e.g. while the server was down."""

    RUN_ONCE = "run_once"  # coalesce: one run, for the latest missed time
    RUN_ALL = "run_all"  # every missed time, in order
    SKIP = "skip"  # none: a ``wakeup_skipped`` event records how many


class ScheduleStatus(StrEnum):
    """``Schedule.status`` (the ``status`` column of ``roost_schedules``)."""

    ACTIVE = "active"  # it has a next fire (or a retry) to run
    DONE = "done"  # its trigger has no next fire
    CANCELLED = "cancelled"  # ``cancel_schedule``; its key is released
    DEAD = "dead"  # a one-off (``date``) fire that used up its attempts: a dead letter


#: The SQL condition of an active schedule (the enum's value, so there is one spelling).
_IS_ACTIVE = f"status = '{ScheduleStatus.ACTIVE.value}'"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A failing callback is retried after ``uniform(0, min(cap, base * 2**(attempt-1)))`` seconds (full
    jitter), up to ``max_attempts`` attempts in all; then the fire becomes a dead letter."""

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap, self.base * 2 ** (attempt - 1)))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A wake-up as stored: a visible control record (``list_schedules`` returns these)."""

    id: str
    key: str | None
    callback: str
    payload: Any
    trigger: Trigger
    next_fire: float | None
    retry_at: float | None
    misfire: Misfire
    misfire_grace: float
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    timeout: float
    attempts: int
    status: ScheduleStatus
    runs: int
    last_fire: float | None
    last_lateness: float | None
    last_error: str | None
    trace_id: str
    created_at: float
    #: The actor that owns it, ``{"kind": …, "name": …}``.
    actor: dict[str, str] = field(default_factory=dict)
    #: Runs of one schedule never overlap: a run due while another runs waits for it (one mailbox),
    #: and one that is then later than its grace is handled by the misfire policy.
    overlap: str = "never"

    @property
    def due(self) -> float | None:
        return self.retry_at if self.retry_at is not None else self.next_fire

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff_base, self.backoff_cap)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    id: int
    schedule_id: str
    callback: str
    payload: Any
    nominal: float
    attempts: int
    error: str
    at: float


_COLUMNS = (
    "id, key, callback, payload, trigger, next_fire, retry_at, misfire, misfire_grace, max_attempts, "
    "backoff_base, backoff_cap, timeout, attempts, status, runs, last_fire, last_lateness, last_error, "
    "trace_id, created_at"
)


#: How long a finished schedule keeps its key (seconds after its last fire, or its creation): within
#: it, the same request is answered with the finished schedule instead of a second one.
KEY_WINDOW = 24 * 3600.0
#: Finished schedules with no key kept (the newest), and dead letters kept (the newest): a busy actor's
#: one-off wake-ups (a job's lease, a workflow's sleep) would otherwise fill its file.
KEEP_FINISHED = 1000
#: Finished schedules are pruned every this many new schedules of an actor (the first after activation too).
PRUNE_EVERY = 100


def _in_use(schedule: Schedule, now: float) -> bool:
    if schedule.status is ScheduleStatus.ACTIVE:
        return True
    ended = schedule.last_fire if schedule.last_fire is not None else schedule.created_at
    return schedule.status is not ScheduleStatus.CANCELLED and now - ended < KEY_WINDOW


def same_trigger(existing: Schedule, trigger: Trigger, now: float) -> bool:
    """Whether ``trigger``, asked for at ``now``, names what ``existing``'s trigger names: the same
    kind and interval or cron expression, and the same time, either as an instant or as the same
    delay from when each was asked for (a delay asked for twice is the same schedule)."""
    held = existing.trigger
    if held.get("type") != trigger.get("type"):
        return False
    kind = trigger.get("type")

    def same_time(field: str) -> bool:
        old, new = float(held[field]), float(trigger[field])
        return math.isclose(old, new) or math.isclose(old - existing.created_at, new - now, abs_tol=1e-6)

    if kind == "date":
        return same_time("at")
    if kind == "interval":
        return math.isclose(float(held["seconds"]), float(trigger["seconds"])) and same_time("start")
    return held == trigger  # cron: the expression and its time zone


def _row(row: tuple[Any, ...], actor: dict[str, str]) -> Schedule:
    values = list(row)
    values[3] = orjson.loads(values[3])
    values[4] = orjson.loads(values[4])
    values[7] = Misfire(values[7])
    values[14] = ScheduleStatus(values[14])
    return replace(Schedule(*values), actor=actor)


class ScheduleStore:
    """The schedules of one actor, read and written through its connection (inside turns)."""

    def __init__(self, conn: sqlite3.Connection, kind: str = "", name: str = "") -> None:
        self.conn = conn
        self.actor = {"kind": kind, "name": name}
        self._added = 0  # schedules added since the last prune (the first add prunes)

    def add(
        self,
        *,
        callback: str,
        payload: Any,
        trigger: Trigger,
        key: str | None,
        misfire: Misfire,
        misfire_grace: float,
        retry: RetryPolicy,
        timeout: float,
        trace_id: str,
        now: float,
    ) -> tuple[Schedule, bool]:
        """Insert a schedule. ``(schedule, new)``.

        With a ``key``, a request repeated with the same spec is the same schedule, and a different
        spec under a key still in use is refused:

        - while the key's schedule is pending (``active``), or finished (``done``, ``dead``) less than
          :data:`KEY_WINDOW` ago (a client that lost the answer to a crash re-sends with the same key
          after the fire: nothing is done twice), the same spec returns that schedule and adds nothing;
          another spec raises :class:`IdempotencyConflict`;
        - after the window, or once cancelled (a cancel releases the key at once), the key schedules
          anew; the finished record keeps its id and loses the key.

        The spec is the callback, the payload, the trigger, the misfire and retry policies and the
        timeout; a delay (``schedule(5, …)``) asked for again is the same time (:func:`same_trigger`)."""
        if key is not None:
            existing = self.get_by_key(key)
            if existing is not None and _in_use(existing, now):
                asked = (
                    callback,
                    orjson.loads(orjson.dumps(payload)),
                    misfire,
                    misfire_grace,
                    retry,
                    timeout,
                )
                held = (
                    existing.callback,
                    existing.payload,
                    existing.misfire,
                    existing.misfire_grace,
                    existing.retry,
                    existing.timeout,
                )
                if asked != held or not same_trigger(existing, trigger, now):
                    raise IdempotencyConflict(
                        message=f"schedule key {key!r} is in use by a schedule with another callback, "
                        "payload, time or policy; cancel it first, or use another key"
                    )
                return existing, False
            if existing is not None:  # finished long enough ago: the key is free for a new schedule
                self.conn.execute("UPDATE roost_schedules SET key = NULL WHERE id = ?", (existing.id,))
        first = next_fire(trigger, previous=None, now=now)
        sid = f"s-{uuid.uuid4().hex[:16]}"
        self.conn.execute(
            f"INSERT INTO roost_schedules ({_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, 0, ?, 0, NULL, NULL, NULL, ?, ?)",
            (
                sid,
                key,
                callback,
                orjson.dumps(payload).decode(),
                orjson.dumps(trigger).decode(),
                first,
                misfire.value,
                misfire_grace,
                retry.max_attempts,
                retry.base,
                retry.cap,
                timeout,
                ScheduleStatus.ACTIVE if first is not None else ScheduleStatus.DONE,
                trace_id,
                now,
            ),
        )
        schedule = self.get(sid)
        assert schedule is not None
        if self._added % PRUNE_EVERY == 0:
            self.prune_finished(now)
        self._added += 1
        return schedule, True

    def prune_finished(self, now: float) -> int:
        """**Finished schedules are bounded.** A finished schedule (``done``, ``dead``, ``cancelled``)
        is deleted, with its completion rows, once it ended more than :data:`KEY_WINDOW` ago (its key,
        if any, no longer answers a repeated request); of the keyless ones only the newest
        :data:`KEEP_FINISHED` are kept within the window; dead letters keep the newest
        :data:`KEEP_FINISHED`. A schedule whose key may still be asked for again is never deleted.
        Runs in the current turn (every :data:`PRUNE_EVERY` new schedules); returns how many it
        deleted."""
        cur = self.conn.execute(
            f"DELETE FROM roost_schedules WHERE NOT ({_IS_ACTIVE}) AND ("
            "coalesce(last_fire, created_at) < ? OR (key IS NULL AND id NOT IN ("
            f"SELECT id FROM roost_schedules WHERE NOT ({_IS_ACTIVE}) AND key IS NULL "
            "ORDER BY coalesce(last_fire, created_at) DESC, id LIMIT ?)))",
            (now - KEY_WINDOW, KEEP_FINISHED),
        )
        deleted = cur.rowcount
        if deleted:
            self.conn.execute(
                "DELETE FROM roost_fires WHERE schedule_id NOT IN (SELECT id FROM roost_schedules)"
            )
        self.conn.execute(
            "DELETE FROM roost_dead_letters WHERE id <= "
            "(SELECT id FROM roost_dead_letters ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (KEEP_FINISHED,),
        )
        return deleted

    def get(self, sid: str) -> Schedule | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM roost_schedules WHERE id = ?", (sid,)).fetchone()
        return None if row is None else _row(row, self.actor)

    def get_by_key(self, key: str) -> Schedule | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM roost_schedules WHERE key = ?", (key,)).fetchone()
        return None if row is None else _row(row, self.actor)

    def all(self, *, include_finished: bool = False) -> list[Schedule]:
        where = "" if include_finished else f"WHERE {_IS_ACTIVE}"
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM roost_schedules {where} ORDER BY coalesce(retry_at, next_fire), id"
        ).fetchall()
        return [_row(r, self.actor) for r in rows]

    def cancel(self, id_or_key: str) -> bool:
        cur = self.conn.execute(
            # the key is released: the same key may schedule anew after a cancel
            "UPDATE roost_schedules SET status = ?, next_fire = NULL, retry_at = NULL, key = NULL "
            f"WHERE (id = ? OR key = ?) AND {_IS_ACTIVE}",
            (ScheduleStatus.CANCELLED, id_or_key, id_or_key),
        )
        return cur.rowcount > 0

    def due(self, now: float, limit: int = 100) -> list[str]:
        rows = self.conn.execute(
            f"SELECT id FROM roost_schedules WHERE {_IS_ACTIVE} AND coalesce(retry_at, next_fire) <= ? "
            "ORDER BY coalesce(retry_at, next_fire), id LIMIT ?",
            (now, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def next_alarm(self) -> float | None:
        row = self.conn.execute(
            f"SELECT min(coalesce(retry_at, next_fire)) FROM roost_schedules WHERE {_IS_ACTIVE}"
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def completed(self, sid: str, nominal: float) -> bool:
        return (
            self.conn.execute(
                "SELECT 1 FROM roost_fires WHERE schedule_id = ? AND nominal = ?", (sid, nominal)
            ).fetchone()
            is not None
        )

    def missed(self, s: Schedule, now: float) -> list[float]:
        """Nominal times from ``s.next_fire`` up to ``now`` (at most MAX_CATCH_UP + 1)."""
        assert s.next_fire is not None
        return occurrences(s.trigger, start=s.next_fire, until=now, limit=MAX_CATCH_UP + 1)

    def set_nominal(self, s: Schedule, nominal: float) -> None:
        self.conn.execute("UPDATE roost_schedules SET next_fire = ? WHERE id = ?", (nominal, s.id))

    def peek_next(self, s: Schedule, after: float, now: float) -> float | None:
        return next_fire(s.trigger, previous=after, now=now)

    def advance(self, s: Schedule, after: float, now: float) -> None:
        """Move to the first nominal time after ``after``; done when there is none. A schedule that is
        no longer active (its callback cancelled it) stays as it is."""
        self._set_next(s, next_fire(s.trigger, previous=after, now=now))

    def advance_past(self, s: Schedule, now: float) -> None:
        """Move to the first nominal time after ``now`` (skipping every missed one)."""
        nxt = next_fire(s.trigger, previous=None, now=now + 1e-6) if s.trigger["type"] != "date" else None
        self._set_next(s, nxt)

    def _set_next(self, s: Schedule, nxt: float | None) -> None:
        self.conn.execute(
            "UPDATE roost_schedules SET next_fire = ?, retry_at = NULL, attempts = 0, status = ? "
            f"WHERE id = ? AND {_IS_ACTIVE}",
            (nxt, ScheduleStatus.ACTIVE if nxt is not None else ScheduleStatus.DONE, s.id),
        )

    def record_fire(self, s: Schedule, nominal: float, started: float, lateness: float) -> None:
        """The fire's effect happened (same transaction as the callback's writes)."""
        self.conn.execute(
            "INSERT INTO roost_fires (schedule_id, nominal, started_at, lateness) VALUES (?, ?, ?, ?)",
            (s.id, nominal, started, lateness),
        )
        self.conn.execute(
            "UPDATE roost_schedules SET runs = runs + 1, last_fire = ?, last_lateness = ?, last_error = NULL "
            "WHERE id = ?",
            (nominal, lateness, s.id),
        )

    def record_failure(self, s: Schedule, error: str, retry_at: float | None) -> None:
        self.conn.execute(
            "UPDATE roost_schedules SET attempts = attempts + 1, retry_at = ?, last_error = ? WHERE id = ?",
            (retry_at, error[:500], s.id),
        )

    def dead_letter(self, s: Schedule, nominal: float, error: str, now: float) -> int:
        cur = self.conn.execute(
            "INSERT INTO roost_dead_letters (schedule_id, callback, payload, nominal, attempts, error, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (s.id, s.callback, orjson.dumps(s.payload).decode(), nominal, s.attempts + 1, error[:500], now),
        )
        return int(cur.lastrowid or 0)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self.conn.execute(
            "SELECT id, schedule_id, callback, payload, nominal, attempts, error, at "
            "FROM roost_dead_letters ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [DeadLetter(r[0], r[1], r[2], orjson.loads(r[3]), r[4], r[5], r[6], r[7]) for r in rows]

    def prune_fires(self, sid: str, keep: int = 100) -> None:
        """Completion rows older than the last ``keep`` of a schedule are no longer needed for dedup:
        the schedule has moved past them."""
        self.conn.execute(
            "DELETE FROM roost_fires WHERE schedule_id = ? AND nominal < ("
            "SELECT min(nominal) FROM (SELECT nominal FROM roost_fires WHERE schedule_id = ? "
            "ORDER BY nominal DESC LIMIT ?))",
            (sid, sid, keep),
        )
