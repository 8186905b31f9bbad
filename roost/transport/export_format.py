"""The values of the one export format (:mod:`roost.transport.admin`'s docstring): in Roost's own
tables, JSON text as objects and epoch seconds as ISO 8601 UTC text, also inside Roost's own records
(a schedule's trigger, ``roost_meta``'s ``created_at``, an agent event's ``*_at``, a missed wake-up
event's ``first`` / ``run_for``); durations stay seconds; BLOBs as hex. An event a user's actor
emitted is its own data: as logged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["iso_time", "jsonable", "logged_frame", "meta_value", "queue_times", "roost_value"]


#: Time columns (epoch seconds) of Roost's own tables besides ``*_at``, exported as ISO 8601 UTC.
_TIME_COLUMNS = frozenset({"at", "next_fire", "retry_at", "last_fire", "nominal", "heavy_since"})
#: Times (epoch seconds) in a schedule's trigger record (:mod:`roost.scheduler.triggers`).
_TRIGGER_TIMES = frozenset({"at", "start"})
#: Roost's own events about missed wake-ups (:mod:`roost.actors.wakeups`), and their times.
_WAKEUP_EVENTS = frozenset({"wakeup_skipped", "wakeup_coalesced"})
_WAKEUP_TIMES = frozenset({"first", "run_for"})


def iso_time(epoch: float) -> str:
    """Epoch seconds as ISO 8601 in UTC (``2026-12-01T11:25:17.123456+00:00``)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _is_time(key: str) -> bool:
    return key in _TIME_COLUMNS or key.endswith("_at")


def meta_value(key: str, value: Any) -> Any:
    """A ``roost_meta`` value (text): a time (``created_at``, epoch seconds as text) as ISO 8601 UTC."""
    if _is_time(key) and isinstance(value, str):
        try:
            return iso_time(float(value))
        except ValueError:
            return value  # not a number after all: as stored
    return value


def queue_times(value: Any) -> Any:
    """A queue report with every ``*_at`` number in it as ISO 8601 UTC."""
    if isinstance(value, dict):
        return {
            k: iso_time(v) if _is_time(k) and isinstance(v, int | float) else queue_times(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [queue_times(v) for v in value]
    return value


def _trigger(trigger: Any) -> Any:
    """A schedule's trigger record with its times (a date's ``at``, an interval's ``start``) as ISO 8601
    UTC; an interval's ``seconds`` stays a duration."""
    if not isinstance(trigger, dict):
        return trigger
    return {
        k: iso_time(v) if k in _TRIGGER_TIMES and isinstance(v, int | float) else v
        for k, v in trigger.items()
    }


def _agent_times(value: Any) -> Any:
    """An agent event record (``roost.agent.telemetry``) with every ``*_at`` number in it, its payload's
    included, as ISO 8601 UTC."""
    if isinstance(value, dict):
        return {
            k: iso_time(v) if k.endswith("_at") and isinstance(v, int | float) else _agent_times(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_agent_times(v) for v in value]
    return value


def logged_frame(frame: Any) -> Any:
    """A logged frame, with the times of Roost's own events in it as ISO 8601 UTC: an agent event
    record's, and a missed wake-up's (``wakeup_skipped`` / ``wakeup_coalesced``: ``first``,
    ``run_for``). An event a user's actor emitted is its own data: as logged."""
    if not isinstance(frame, dict) or frame.get("type") != "event":
        return frame
    event = frame.get("event")
    if not isinstance(event, dict):
        return frame
    if "event_id" in event and "event_type" in event and "created_at" in event:
        return {**frame, "event": _agent_times(event)}
    if event.get("type") in _WAKEUP_EVENTS:
        times = {
            k: iso_time(v) for k, v in event.items() if k in _WAKEUP_TIMES and isinstance(v, int | float)
        }
        return {**frame, "event": {**event, **times}}
    return frame


def roost_value(column: str, value: Any, json_cols: frozenset[str]) -> Any:
    """A value of a column of one of Roost's own tables as exported: ``json_cols`` (that table's JSON
    columns) as objects, a trigger's and a logged frame's times too, a time column as ISO 8601 UTC."""
    if value is None:
        return None
    if column in json_cols and isinstance(value, str):
        try:
            loaded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value  # not JSON after all: as stored
        if column == "trigger":
            return _trigger(loaded)
        if column == "frame":
            return logged_frame(loaded)
        return loaded
    if _is_time(column) and isinstance(value, int | float):
        return iso_time(value)
    return jsonable(value)


def jsonable(value: Any) -> Any:
    """A stored value as JSON can carry it: a BLOB as hex, anything else as stored."""
    return value.hex() if isinstance(value, bytes) else value
