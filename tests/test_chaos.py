"""The chaos soak's 60-second smoke (``make soak`` runs it for 10 minutes), and its checkers' own
tests: a checker that cannot see a violation proves nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from roost.client.frames import Welcome
from roost.storage import actor_path
from tests.chaos import Stats, Watcher, check_acks, check_agent_log, check_wakes, report, soak


def welcome(cursor: int, resume: str, reason: str | None = None, oldest: int = 1) -> Welcome:
    frame: dict[str, Any] = {
        "type": "welcome",
        "protocol": 1,
        "connection_id": "c",
        "actor": {"kind": "k", "name": "n"},
        "state": None,
        "cursor": cursor,
        "resume": resume,
        "oldest": oldest,
    }
    if reason:
        frame["reason"] = reason
    return Welcome.parse(frame)


def test_the_watcher_sees_gaps_and_forgotten_seqs() -> None:
    stats = Stats()
    w = Watcher("w", stats, start=0)
    w.on_welcome(welcome(0, "replay"))
    for seq in (1, 2, 3):
        w.on_frame(None, seq)
    assert stats.violations == []
    w.on_welcome(welcome(3, "replay"))
    w.on_frame(None, 5)  # 4 went missing
    assert stats.violations == ["w: seq 5 after 3"]
    w.on_welcome(welcome(2, "snapshot", "cursor_ahead"))  # the server lost what we saw
    assert "cursor_ahead" in stats.violations[-1]
    # the watcher is at 2 and the log starts at 1: the server could have replayed, nothing expired
    w.on_welcome(welcome(100, "snapshot", "cursor_expired"))
    assert "called expired" in stats.violations[-1]
    assert len(stats.violations) == 3
    w.on_frame(None, 101)
    w.on_welcome(welcome(200, "snapshot", "cursor_expired", oldest=150))  # 101 is gone: allowed
    w.on_frame(None, 201)
    assert len(stats.violations) == 3


def test_the_watcher_replays_from_its_own_cursor_not_the_actors_newest_seq() -> None:
    """A watcher whose first connection comes after the actor's fourth write (its first attempt fell
    on a kill) is replayed 1..4 after a welcome whose cursor is 4: no violation, and a gap after is
    still one."""
    stats = Stats()
    w = Watcher("w", stats, start=0)
    w.on_welcome(welcome(4, "replay"))
    for seq in (1, 2, 3, 4, 5):
        w.on_frame(None, seq)
    assert stats.violations == []
    w.on_frame(None, 7)
    assert stats.violations == ["w: seq 7 after 5"]


def write_log(data: Path, name: str, events: list[dict[str, Any]]) -> None:
    path = actor_path(data, "docs", name)
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE roost_log (seq INTEGER PRIMARY KEY, kind TEXT, frame TEXT, created_at REAL)")
    for seq, event in enumerate(events, 1):
        frame = orjson.dumps({"type": "event", "seq": seq, "event": event}).decode()
        conn.execute("INSERT INTO roost_log VALUES (?, 'event', ?, 0)", (seq, frame))
    conn.commit()
    conn.close()


def ev(kind: str, run: str, **payload: Any) -> dict[str, Any]:
    return {"event_type": kind, "run_id": run, "payload": {"tool": "analyze_documents", **payload}}


def test_the_log_checker_sees_a_stale_attempt_and_two_heavy_runs(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        "bad",
        [
            ev("tool_started", "r1", job_id="j1", attempt=1),
            ev("tool_started", "r1", job_id="j1", attempt=2),
            ev("tool_progress", "r1", job_id="j1", attempt=1),  # the old attempt writes: two leases
            ev("tool_started", "r2", job_id="j2", attempt=1),  # r1's heavy step still open
        ],
    )
    write_log(
        tmp_path,
        "good",
        [
            ev("tool_started", "r1", job_id="j1", attempt=1),
            ev("tool_failed", "r1", job_id="j1", attempt=1, will_retry=True),
            ev("tool_started", "r1", job_id="j1", attempt=2),
            ev("tool_completed", "r1", job_id="j1", attempt=2),
            ev("tool_started", "r2", job_id="j2", attempt=1),
        ],
    )
    stats = Stats()
    check_agent_log(tmp_path, "bad", stats)
    assert len(stats.violations) == 2
    good = Stats()
    check_agent_log(tmp_path, "good", good)
    assert good.violations == []


def test_the_ack_and_wake_checks_see_lost_and_doubled_effects() -> None:
    assert check_acks("c", [1, 2, 3], 3, 3) == []
    assert check_acks("c", [1, 2, 4], 4, 5) == []  # an unknown outcome that applied
    lost = check_acks("c", [1, 2, 3, 3, 4], 4, 5)  # the third acknowledged increment was lost
    assert lost == [
        "counter c: acknowledged 3 after 3",
        "counter c: 4 after 5 acknowledged increments (last 4)",
    ]
    assert check_acks("c", [1, 2], 1, 2) != []  # the final count went back
    assert check_acks("c", [1], 3, 2) != []  # more than was sent
    assert check_wakes("w", 5, 5) == []
    assert check_wakes("w", 6, 5) != []  # a wake-up applied twice
    assert check_wakes("w", 4, 5) != []  # one lost


@pytest.mark.slow
def test_chaos_soak_smoke(tmp_path: Path) -> None:
    """60 seconds of clients, random drops, SIGKILLs, wake-ups and background jobs: 0 violations."""
    started = time.monotonic()
    stats = asyncio.run(soak(60, seed=int(started), root=tmp_path / "soak", quiet=True))
    print("\n" + report(stats, 60))
    assert stats.violations == []
    assert stats.kills >= 3
    assert stats.frames_seen > 0
    assert stats.slow_readers > 0
    assert sum(len(k) for k in stats.keys.values()) > 0
    assert sum(len(r) for r in stats.runs.values()) > 0
    assert stats.acks
