"""``roost ls``, ``roost schedules``, ``roost workers``: what the directory database says, without
opening any actor's file."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from roost.cli.errors import CommandFailed
from roost.cli.options import add_data_option, positive_int
from roost.storage import Directory, WorkerStatus

__all__ = ["add_parsers", "timestamp"]


@contextlib.contextmanager
def _directory(data_dir: str) -> Iterator[Directory]:
    """The data directory's directory database; :class:`CommandFailed` when there is none."""
    data = Path(data_dir)
    if not (data / "directory.sqlite").exists():
        raise CommandFailed(f"no data directory at {data}")
    directory = Directory(data)
    try:
        yield directory
    finally:
        directory.close()


def _shown(name: str) -> str:
    """A name as its client sent it, quoted only when it holds something a terminal would not show
    plainly (spaces, control characters); a tenant's actor says its tenant after it."""
    tenant, sep, local = name.rpartition("\x00")
    shown = local if local.isprintable() and " " not in local and local else repr(local)
    return f"{shown} (tenant {tenant})" if sep else shown


def timestamp(t: float) -> str:
    """A UTC time as the listings print it."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ls(args: argparse.Namespace) -> int:
    with _directory(args.data) as directory:
        entries = directory.list(args.kind, limit=args.limit)
        print(f"{'KIND':<12} {'NAME':<32} {'CREATED':<20} {'LAST ACTIVE':<20} NEXT ALARM")
        for e in entries:
            alarm = timestamp(e.next_alarm_at) if e.next_alarm_at is not None else "-"
            print(
                f"{e.kind:<12} {_shown(e.name):<32} {timestamp(e.created_at):<20} "
                f"{timestamp(e.last_active_at):<20} {alarm}"
            )
        print(f"{len(entries)} of {directory.count()} actor(s)")
    return 0


def _schedules(args: argparse.Namespace) -> int:
    """Pending wake-ups across all actors, from the directory database (one alarm per actor)."""
    with _directory(args.data) as directory:
        entries = directory.alarms(limit=args.limit)
        print(f"{'NEXT ALARM (UTC)':<24} {'KIND':<12} NAME")
        for e in entries:
            assert e.next_alarm_at is not None
            when = datetime.fromtimestamp(e.next_alarm_at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            print(f"{when:<24} {e.kind:<12} {_shown(e.name)}")
        print(f"{len(entries)} of {directory.count_alarms()} actor(s) with pending wake-ups")
    return 0


def _workers(args: argparse.Namespace) -> int:
    """Worker processes of the agent runtime: alive (heartbeat within its lease), stale (past it:
    killed or hung) or stopped (it said so), with the age of its last heartbeat."""
    now = time.time()
    with _directory(args.data) as directory:
        rows = directory.workers()
        print(f"{'WORKER':<24} {'STATUS':<8} {'SEEN':>9} {'PID':>8} {'HOST':<20} {'STARTED':<20} JOBS")
        for w in rows:
            print(
                f"{w.worker_id:<24} {w.status(now):<8} {_age(now - w.heartbeat_at):>9} {w.pid:>8} "
                f"{w.hostname[:20]:<20} {timestamp(w.started_at):<20} {w.running_jobs}"
            )
        counts = Counter(w.status(now) for w in rows)
        summary = ", ".join(f"{counts[s]} {s}" for s in WorkerStatus if counts[s])
        print(f"{len(rows)} worker(s)" + (f": {summary}" if summary else ""))
    return 0


def _age(seconds: float) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, ``2d ago``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ls = sub.add_parser(
        "ls",
        help="list actors from the directory database",
        description="list actors from the directory database. LAST ACTIVE is the time of an actor's last "
        "turn as a running server records it: its idle sweep writes it every min(idle-timeout / 2, 5 s), "
        "so it may be that much behind while the server runs (and the last interval's is lost if the "
        "server is killed); a dormant or stopped actor shows its last turn's time.",
    )
    add_data_option(ls)
    ls.add_argument("--kind", help="only this kind (default: all)")
    ls.add_argument("--limit", type=positive_int, default=100, help="at most this many")
    ls.set_defaults(func=_ls)
    sch = sub.add_parser("schedules", help="list pending wake-ups from the directory database")
    add_data_option(sch)
    sch.add_argument("--limit", type=positive_int, default=100, help="at most this many")
    sch.set_defaults(func=_schedules)
    wk = sub.add_parser("workers", help="list agent worker processes and their last heartbeat")
    add_data_option(wk)
    wk.set_defaults(func=_workers)
