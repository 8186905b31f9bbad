"""When a wake-up fires: date, interval and cron triggers, as JSON records, with APScheduler's maths.

A trigger is stored as a small JSON object in the actor's own file (nothing is pickled, no APScheduler
job store): ``{"type": "date", "at": 1767225600.0}``, ``{"type": "interval", "seconds": 30.0,
"start": …}`` or ``{"type": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris"}``. APScheduler 3.11's
trigger classes compute the next fire time (no jitter is ever fed back).

Cron expressions have 5 fields (minute hour day month day-of-week) or 6 (second first). Day-of-week
numbers follow crontab: 0 and 7 are Sunday, 1 is Monday (APScheduler 3 counts from Monday; numbers are
translated to names before they reach it). Time zones are IANA names; in a DST gap a wall time fires at
the same instant as the gap's end plus its offset into it (02:30 in a skipped hour fires at 03:30), in a
DST fold (the repeated hour) an expression with fixed hours fires once per wall time, at its first
occurrence (a daily 02:30 fires once; ``15,45 2 * * *`` twice), while one whose hour field is a
wildcard follows real time (``0 * * * *`` and ``*/30 * * * *`` fire at every real hour or half hour),
as cron does.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

__all__ = ["Trigger", "TriggerError", "interval_trigger", "make_trigger", "next_fire", "occurrences"]

Trigger = dict[str, Any]
_DOW = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]


class TriggerError(ValueError):
    """A ``when`` that cannot be scheduled."""


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise TriggerError(f"unknown time zone {tz!r}") from None


_DOW_NUMBERS = {name: i for i, name in enumerate(_DOW[:7])}
_DOW_PART = re.compile(r"^(\*|[a-z]{3}|\d)(?:-([a-z]{3}|\d))?(?:/(\d+))?$")


def _dow_number(token: str, field: str) -> int:
    n = _DOW_NUMBERS.get(token) if token.isalpha() else int(token)
    if n is None or not 0 <= n <= 7:
        raise TriggerError(f"day of week out of range in {field!r}")
    return n


def _dow_field(field: str) -> str:
    """Crontab day-of-week (numbers with 0 and 7 = Sunday, names, ranges, steps, lists) as an explicit
    list of names for APScheduler 3, which counts from Monday: ``*/2`` is Sunday, Tuesday, Thursday,
    Saturday as in crontab, and ``sun-tue`` is Sunday to Tuesday."""
    if field == "*":
        return field
    days: list[str] = []
    for part in field.lower().split(","):
        m = _DOW_PART.match(part)
        if not m:
            raise TriggerError(f"invalid day of week {part!r} in {field!r}")
        first, last, step_text = m.group(1), m.group(2), m.group(3)
        step = int(step_text) if step_text else 1
        if step < 1:
            raise TriggerError(f"invalid step in {field!r}")
        if first == "*":
            if last is not None:
                raise TriggerError(f"invalid day of week {part!r} in {field!r}")
            lo, hi = 0, 6
        else:
            lo = _dow_number(first, field)
            hi = _dow_number(last, field) if last is not None else (lo if step_text is None else 6)
            if hi < lo and hi == 0:
                hi = 7  # fri-sun, 5-0: Sunday closes the week
            if hi < lo:
                raise TriggerError(f"day of week range goes backwards in {field!r}")
        days.extend(_DOW[d] for d in range(lo, hi + 1, step))
    return ",".join(dict.fromkeys(days))


def _cron(expr: str, tz: str) -> CronTrigger:
    fields = expr.split()
    if len(fields) == 5:
        second = "0"
    elif len(fields) == 6:
        second, fields = fields[0], fields[1:]
    else:
        raise TriggerError(f"a cron expression has 5 or 6 fields, got {len(fields)}: {expr!r}")
    minute, hour, day, month, dow = fields
    try:
        return CronTrigger(
            second=second,
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_dow_field(dow),
            timezone=_zone(tz),
        )
    except ValueError as exc:
        raise TriggerError(f"invalid cron expression {expr!r}: {exc}") from None


def make_trigger(when: float | int | datetime | str, *, now: float, tz: str = "UTC") -> Trigger:
    """The trigger record for ``schedule(when, …)``: seconds from now, an aware datetime, or cron."""
    if isinstance(when, bool):
        raise TriggerError("when must be seconds, an aware datetime or a cron string")
    if isinstance(when, int | float):
        if when < 0 or when != when:
            raise TriggerError("seconds must be >= 0")
        return {"type": "date", "at": now + float(when)}
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise TriggerError("a datetime must be timezone-aware")
        return {"type": "date", "at": when.timestamp()}
    if isinstance(when, str):
        _cron(when, tz)  # validate now, not at the first fire
        return {"type": "cron", "expr": when, "tz": tz}
    raise TriggerError("when must be seconds, an aware datetime or a cron string")


def interval_trigger(seconds: float, *, now: float, start: float | None = None) -> Trigger:
    if not seconds > 0:
        raise TriggerError("an interval must be > 0 seconds")
    return {"type": "interval", "seconds": float(seconds), "start": now + seconds if start is None else start}


def _fixed_hours(expr: str) -> bool:
    fields = expr.split()
    hour = fields[1] if len(fields) == 5 else fields[2]
    return not hour.startswith("*")


def _apscheduler(trigger: Trigger) -> CronTrigger | IntervalTrigger | DateTrigger:
    kind = trigger["type"]
    if kind == "date":
        return DateTrigger(run_date=_utc(float(trigger["at"])), timezone=UTC)
    if kind == "interval":
        return IntervalTrigger(
            seconds=float(trigger["seconds"]), start_date=_utc(float(trigger["start"])), timezone=UTC
        )
    if kind == "cron":
        return _cron(str(trigger["expr"]), str(trigger.get("tz", "UTC")))
    raise TriggerError(f"unknown trigger type {kind!r}")


def next_fire(trigger: Trigger, *, previous: float | None, now: float) -> float | None:
    """The first fire time after ``previous`` (the last nominal fire; None before the first) that is
    not before ``now``'s own schedule, as APScheduler computes it. None: the trigger is done."""
    t = _apscheduler(trigger)
    prev = _utc(previous) if previous is not None else None
    if trigger["type"] == "date":
        return float(trigger["at"]) if previous is None else None
    base = _utc(now) if prev is None else prev
    nxt = t.get_next_fire_time(prev, base if prev is None else prev + timedelta(microseconds=1))
    if nxt is not None and trigger["type"] == "cron" and _fixed_hours(str(trigger["expr"])):
        tz = _zone(str(trigger.get("tz", "UTC")))
        # A DST fold repeats an hour of wall time. As cron does, a job at fixed hours runs once in
        # it (at the first occurrence); a job whose hour is a wildcard follows real time. APScheduler
        # maps an instant inside the repeated hour back to its first occurrence, so probe a little
        # later each time until it answers a time that is not a repeat.
        for offset in (timedelta(seconds=1), timedelta(hours=1), timedelta(hours=2)):
            if nxt is None or not nxt.astimezone(tz).fold:
                break
            repeat = nxt
            nxt = t.get_next_fire_time(None, repeat + offset)
            if nxt is not None and nxt.timestamp() <= repeat.timestamp():  # (same-zone datetimes
                nxt = repeat  # compare as wall times, ignoring the fold) no progress: a larger offset
    return None if nxt is None else nxt.timestamp()


def occurrences(trigger: Trigger, *, start: float, until: float, limit: int) -> list[float]:
    """Nominal fire times from ``start`` (itself a fire time) up to ``until`` inclusive, at most
    ``limit`` of them, in order."""
    out: list[float] = []
    t: float | None = start
    while t is not None and t <= until and len(out) < limit:
        out.append(t)
        t = next_fire(trigger, previous=t, now=t)
    return out
