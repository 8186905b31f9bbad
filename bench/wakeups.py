"""Section ``wakeups``: the scheduler issue's scale point, measured over ``roost serve``.

Data sets (rebuilt every run, reps work on byte copies):

- one real ``counter`` file made by the runtime (an in-process :class:`~roost.actors.registry.Registry`
  calling ``increment_later`` ``per_actor`` times), closed; its bytes are copied to the path
  :func:`storage.actor_path` gives every other name, and each copy's schedule rows get their own ids,
  trace id, trigger, ``next_fire`` and ``created_at`` and its ``roost_meta`` its own name (one
  transaction per file, stdlib ``sqlite3``: the same columns ``ScheduleStore.add`` writes). Each actor
  is registered in the directory with its alarm (the SQL of ``Directory.register`` and
  ``Directory.lower_alarm``, all in one transaction on the directory's connection).
- *burst*: ``actors`` × ``per_actor`` wake-ups (100,000 in the full run) and a small copy
  (``small_actors`` × ``per_actor``, 1,000), all due at the build time, so all due at once when the
  server starts (the restart-after-downtime case; one fire per wake-up, no misfire coalescing since
  each is a one-off date trigger).
- *spread*: ``spread`` dormant actors with one wake-up each, due times evenly spread over
  ``spread_s`` seconds starting ``_LEAD`` s after the spawn; rebuilt per repetition.

Per repetition and size (1,000 then 100,000 pending): (1) *idle start*: the directory alarms are moved a
day ahead, ``roost serve`` is spawned and timed to its first ``/healthz`` answer, stopped, alarms moved
back (actor files untouched); (2) *burst*: spawned again, timed to ``/healthz`` and to the first fire
(the smallest ``roost_fires.started_at`` in the files, server wall clock, against the spawn time);
done when the directory holds no alarm; throughput = wake-ups ÷ (done − first fire). After each run the
server is stopped and every actor file is read: the state (newest of ``roost_state`` and the newest
``roost_log`` state frame) must equal the actor's number of wake-ups and each schedule must have exactly
one ``roost_fires`` row and status ``done``. A sample is also checked through a real server (``GET
/agents/counter/{name}`` and the ``schedules`` callable) before the first burst and after the last.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from bench.procs import Server, free_port, http_json, log, proc_cpu_s
from bench.settings import Settings
from bench.stats import pct
from roost.actors.registry import Registry, RuntimeConfig
from roost.examples.kinds import KINDS
from roost.storage import Directory, actor_digest, actor_path

__all__ = ["run"]

KIND = "counter"
_TEMPLATE = "bench-template"
_LEAD = 1.5  # spread: the first wake-up is due about this long after the spawn
_DAY = 86_400.0
_SAMPLE = 10


def name_of(i: int) -> str:
    return f"w{i:06d}"


# -- building ------------------------------------------------------------------------------------------
async def _make_template(root: Path, per_actor: int) -> None:
    reg = Registry(KINDS, RuntimeConfig(data_dir=root, scheduler=False))
    await reg.start()
    try:
        for _ in range(per_actor):
            await reg.call(KIND, _TEMPLATE, "increment_later", [_DAY], {})
    finally:
        await reg.stop()


def _template(work: Path, per_actor: int) -> tuple[bytes, list[str]]:
    """The bytes of one closed runtime-made counter file with ``per_actor`` schedules, and their ids."""
    root = work / "template"
    shutil.rmtree(root, ignore_errors=True)
    asyncio.run(_make_template(root, per_actor))
    path = actor_path(root, KIND, _TEMPLATE)
    if Path(f"{path}-wal").exists():
        raise RuntimeError("the closed template still has a WAL file")
    conn = sqlite3.connect(path)
    try:
        ids = [str(r[0]) for r in conn.execute("SELECT id FROM roost_schedules ORDER BY id")]
        rows = conn.execute("SELECT callback, payload, trigger, status FROM roost_schedules").fetchall()
    finally:
        conn.close()
    if len(ids) != per_actor or any(
        r[0] != "add" or orjson.loads(r[1]) != {"by": 1} or r[3] != "active" for r in rows
    ):
        raise RuntimeError(f"unexpected template schedules: {rows}")
    blob = path.read_bytes()
    shutil.rmtree(root)
    return blob, ids


def _build(root: Path, blob: bytes, ids: list[str], dues: list[list[float]], created: float) -> None:
    """Actor ``i`` gets ``len(dues[i])`` wake-ups due at ``dues[i]`` (the template's first rows)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    made: set[Path] = set()
    alarms: list[tuple[str, float]] = []
    for i, times in enumerate(dues):
        name = name_of(i)
        path = actor_path(root, KIND, name)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(blob)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute("BEGIN")
            trace = uuid.uuid4().hex
            for old, at in zip(ids, times, strict=False):
                conn.execute(
                    "UPDATE roost_schedules SET id = ?, trigger = ?, next_fire = ?, trace_id = ?, "
                    "created_at = ? WHERE id = ?",
                    (
                        f"s-{uuid.uuid4().hex[:16]}",
                        orjson.dumps({"type": "date", "at": at}).decode(),
                        at,
                        trace,
                        created,
                        old,
                    ),
                )
            for old in ids[len(times) :]:
                conn.execute("DELETE FROM roost_schedules WHERE id = ?", (old,))
            conn.execute("UPDATE roost_meta SET value = ? WHERE key = 'name'", (name,))
            conn.execute("UPDATE roost_meta SET value = ? WHERE key = 'created_at'", (repr(created),))
            conn.execute("COMMIT")
        finally:
            conn.close()
        alarms.append((name, min(times)))
    directory = Directory(root)
    conn = directory._conn  # one transaction for every row (the bench may; the runtime never does)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(  # Directory.register's row, here in the bench's one transaction
            "INSERT INTO actors (kind, name, digest, created_at, last_active_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (kind, name) DO NOTHING",
            [(KIND, name, actor_digest(KIND, name), created, created) for name, _ in alarms],
        )
        conn.executemany(
            "UPDATE actors SET next_alarm_at = ? WHERE kind = ? AND name = ? "
            "AND (next_alarm_at IS NULL OR next_alarm_at > ?)",
            [(at, KIND, name, at) for name, at in alarms],
        )
        conn.execute("COMMIT")
    finally:
        directory.close()


def _copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)


def _shift_alarms(root: Path, by: float) -> None:
    conn = sqlite3.connect(root / "directory.sqlite", isolation_level=None)
    try:
        conn.execute(
            "UPDATE actors SET next_alarm_at = next_alarm_at + ? WHERE next_alarm_at IS NOT NULL", (by,)
        )
    finally:
        conn.close()


def _pending_alarms(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM actors WHERE next_alarm_at IS NOT NULL").fetchone()[0])


# -- reading the files after a run ---------------------------------------------------------------------
def _read_actor(path: Path) -> tuple[int, list[tuple[float, float]], int]:
    """``(count, [(started_at, lateness)], schedules not done-with-one-run)`` of a closed actor file."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        state, seq = conn.execute("SELECT state, seq FROM roost_state WHERE id = 1").fetchone()
        row = conn.execute(
            "SELECT frame FROM roost_log WHERE kind = 'state' AND seq > ? ORDER BY seq DESC LIMIT 1", (seq,)
        ).fetchone()
        count = int((orjson.loads(row[0])["state"] if row else orjson.loads(state))["count"])
        fires = [
            (float(a), float(b)) for a, b in conn.execute("SELECT started_at, lateness FROM roost_fires")
        ]
        bad = int(
            conn.execute(
                "SELECT count(*) FROM roost_schedules s WHERE s.status != 'done' OR s.runs != 1 OR "
                "(SELECT count(*) FROM roost_fires f WHERE f.schedule_id = s.id) != 1"
            ).fetchone()[0]
        )
    finally:
        conn.close()
    return count, fires, bad


def _check_files(root: Path, expect: list[int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    wrong, bad, fires = 0, 0, 0
    started: list[float] = []
    late: list[float] = []
    for i, n in enumerate(expect):
        count, fs, b = _read_actor(actor_path(root, KIND, name_of(i)))
        wrong += count != n
        bad += b
        fires += len(fs)
        started.extend(f[0] for f in fs)
        late.extend(f[1] for f in fs)
    return {
        "actors": len(expect),
        "expected": sum(expect),
        "fires": fires,
        "wrong_counts": wrong,
        "bad_schedules": bad,
        "ok": wrong == 0 and bad == 0 and fires == sum(expect),
        "first_started": min(started) if started else None,
        "last_started": max(started) if started else None,
        "lateness": late,
        "read_s": time.perf_counter() - t0,
    }


# -- the server ----------------------------------------------------------------------------------------
def _spawn(s: Settings, root: Path, tag: str) -> tuple[Server, float, float]:
    """Spawn ``roost serve`` on ``root``; ``(server, spawn wall time, seconds to the first /healthz)``."""
    port = free_port()
    argv = [sys.executable, "-m", "roost.cli", "serve", "--data", str(root), "--port", str(port)]
    t_wall, t0 = time.time(), time.perf_counter()
    srv = Server(
        f"roost-{tag}", [*argv, "--log-level", "warning"], port, s.data_dir / "logs" / f"wk-{tag}.log"
    )
    deadline = t0 + 60.0
    while True:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"roost serve exited rc={srv.proc.returncode}; see {srv.log_path}")
        try:
            if http_json(port, "/healthz", timeout=5.0).get("ok"):
                return srv, t_wall, time.perf_counter() - t0
        except OSError:
            pass
        if time.perf_counter() > deadline:
            srv.stop()
            raise TimeoutError(f"roost serve on {root} did not answer /healthz within 60 s")
        time.sleep(0.002)


def _server_sample(port: int, names: list[str], count: int, pending: int, after: float | None) -> None:
    """Through the server: each sampled actor's state and its pending schedules are as built."""
    for name in names:
        got = http_json(port, f"/agents/{KIND}/{name}")
        if got["state"] != {"count": count}:
            raise RuntimeError(f"{name}: state {got['state']} through the server, expected count {count}")
        res = http_json(port, f"/agents/{KIND}/{name}/rpc/schedules", body=b"[]")
        sch = res["result"]
        ids = {x["id"] for x in sch}
        if len(sch) != pending or len(ids) != pending:
            raise RuntimeError(f"{name}: {len(sch)} schedules through the server, expected {pending}")
        for x in sch:
            if x["callback"] != "add" or x["payload"] != {"by": 1} or x["status"] != "active":
                raise RuntimeError(f"{name}: unexpected schedule {x}")
            if after is not None and not x["next_fire"] <= after:
                raise RuntimeError(f"{name}: next_fire {x['next_fire']} not due by {after}")


def _idle_start(s: Settings, root: Path, tag: str, verify: list[str] | None, per: int, due: float) -> float:
    """Seconds from spawn to /healthz with every alarm a day ahead (nothing due)."""
    _shift_alarms(root, _DAY)
    os.sync()
    srv, _, ready = _spawn(s, root, f"{tag}-idle")
    try:
        if verify:
            _server_sample(srv.port, verify, 0, per, due)
    finally:
        srv.stop()
    _shift_alarms(root, -_DAY)
    return ready


def _first_fire(root: Path, spawn: float) -> float | None:
    """After a run stopped early: seconds from spawn to the earliest fire among the actors it touched."""
    conn = sqlite3.connect(root / "directory.sqlite")
    try:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM actors WHERE next_alarm_at IS NULL OR alarm_owner IS NOT NULL"
            )
        ]
    finally:
        conn.close()
    started = [f[0] for name in names for f in _read_actor(actor_path(root, KIND, name))[1]]
    return min(started) - spawn if started else None


def _burst(
    s: Settings, root: Path, tag: str, n_actors: int, per: int, *, full: bool, timeout: float = 300.0
) -> dict[str, Any]:
    """Spawn over ``root`` (every wake-up due); stop after the first actor is done, or (``full``) once
    every alarm is gone, and check every file."""
    os.sync()
    srv, t_spawn, ready = _spawn(s, root, tag)
    cpu0 = proc_cpu_s(srv.pid)
    sql = (
        "SELECT count(*) FROM actors WHERE next_alarm_at IS NOT NULL"
        if full
        else "SELECT count(*) = 0 FROM actors WHERE next_alarm_at IS NULL"
    )
    try:
        conn = sqlite3.connect(root / "directory.sqlite", timeout=10.0)
        try:
            deadline = time.time() + timeout
            while int(conn.execute(sql).fetchone()[0]) > 0:
                if time.time() > deadline:
                    raise TimeoutError(f"{tag}: wake-ups still pending after {timeout} s")
                if srv.proc.poll() is not None:
                    raise RuntimeError(f"roost serve exited; see {srv.log_path}")
                time.sleep(0.005 if not full else 0.01)
            t_done = time.time()
        finally:
            conn.close()
        cpu = proc_cpu_s(srv.pid) - cpu0
    finally:
        srv.stop()
    out: dict[str, Any] = {"pending": n_actors * per, "healthz_s": ready}
    if not full:
        out["first_fire_s"] = _first_fire(root, t_spawn)
        return out
    chk = _check_files(root, [per] * n_actors)
    chk.pop("lateness")
    first = chk["first_started"]
    span = None if first is None else t_done - first
    out.update(
        first_fire_s=None if first is None else first - t_spawn,
        done_s=t_done - t_spawn,
        wakeups_s=None if not span else chk["fires"] / span,
        srv_util=None if not span else cpu / span,
        check=chk,
    )
    return out


def _spread(
    s: Settings, work: Path, blob: bytes, ids: list[str], rep: int, per_actor_s: float
) -> dict[str, Any]:
    n, span = s.wakeup_spread, s.wakeup_spread_s
    root = work / "spread"
    rng = random.Random(rep)
    offsets = [span * i / n for i in range(n)]
    rng.shuffle(offsets)
    for factor in (2.0, 5.0, 20.0, 60.0):
        t0 = time.time()
        base = t0 + 0.5 + factor * per_actor_s * n + _LEAD  # room for the build and a sync, then the lead
        _build(root, blob, ids, [[base + o] for o in offsets], t0)
        os.sync()  # no write-back of earlier runs competing with this one
        wait = base - _LEAD - time.time()
        if wait > -_LEAD / 3:
            break
        log(f"wakeups: spread build took {time.time() - t0:.1f} s; rebuilding with more room")
    else:
        raise RuntimeError("spread: the build never left the lead before the first due")
    time.sleep(max(0.0, wait))  # spawn about _LEAD s before the first due
    srv, t_spawn, ready = _spawn(s, root, f"spread{rep}")
    if t_spawn + ready > base:
        log(
            f"wakeups: WARNING the spread server answered /healthz {t_spawn + ready - base:.2f} s "
            "after the first due"
        )
    cpu0 = proc_cpu_s(srv.pid)
    try:
        conn = sqlite3.connect(root / "directory.sqlite", timeout=10.0)
        try:
            deadline = base + span + 30.0
            while _pending_alarms(conn) > 0:
                if time.time() > deadline:
                    raise TimeoutError("spread: wake-ups still pending 30 s after the last was due")
                time.sleep(0.02)
            t_done = time.time()
        finally:
            conn.close()
        cpu = proc_cpu_s(srv.pid) - cpu0
    finally:
        srv.stop()
    chk = _check_files(root, [1] * n)
    late = chk.pop("lateness")
    shutil.rmtree(root, ignore_errors=True)
    return {
        "n": n,
        "span_s": span,
        "offered_s": n / span,
        "healthz_before_first_due_s": base - (t_spawn + ready),
        "p50_ms": pct(late, 50) * 1e3,
        "p99_ms": pct(late, 99) * 1e3,
        "max_ms": max(late) * 1e3 if late else None,
        "srv_util": cpu / max(1e-9, t_done - t_spawn - ready),
        "check": chk,
    }


def run(s: Settings) -> dict[str, Any]:
    work = s.data_dir / "wakeups"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    per, big_n, small_n = s.wakeup_per_actor, s.wakeup_actors, s.wakeup_small_actors
    t0 = time.perf_counter()
    blob, ids = _template(work, per)
    created = time.time()
    pristine = {"small": work / "pristine-small", "big": work / "pristine-big"}
    _build(pristine["big"], blob, ids, [[created] * per for _ in range(big_n)], created)
    built_s = time.perf_counter() - t0
    _build(pristine["small"], blob, ids, [[created] * per for _ in range(small_n)], created)
    log(f"wakeups: built {big_n:,} × {per} and {small_n:,} × {per} in {time.perf_counter() - t0:.1f} s")
    rng = random.Random(7)
    reps: list[dict[str, Any]] = []
    for rep in range(s.wakeup_reps):
        last = rep == s.wakeup_reps - 1
        r: dict[str, Any] = {}
        sp = _spread(s, work, blob, ids, rep, built_s / big_n)
        r["spread"] = sp
        log(
            f"wakeups rep {rep + 1}/{s.wakeup_reps} spread {sp['n']:,} over {sp['span_s']} s: lateness p50 "
            f"{sp['p50_ms']:.1f} ms · p99 {sp['p99_ms']:.1f} ms · max {sp['max_ms'] or 0:.1f} ms · "
            f"all once: {sp['check']['ok']}"
        )
        for size, n_actors in (("small", small_n), ("big", big_n)):
            root = work / f"run-{size}"
            if last:  # the last repetition consumes the pristine set itself
                root = pristine[size]
            else:
                _copy(pristine[size], root)
            verify = None
            if rep == 0:
                verify = [name_of(i) for i in rng.sample(range(n_actors), min(_SAMPLE, n_actors))]
            idle = _idle_start(s, root, f"{size}{rep}", verify, per, created)
            b = _burst(s, root, f"{size}{rep}", n_actors, per, full=last)
            b["idle_healthz_s"] = idle
            if last and size == "big":
                sample = [name_of(i) for i in rng.sample(range(n_actors), min(_SAMPLE, n_actors))]
                srv, _, _ = _spawn(s, root, "after")
                try:
                    _server_sample(srv.port, sample, per, 0, None)
                finally:
                    srv.stop()
            shutil.rmtree(root, ignore_errors=True)
            r[size] = b
            msg = (
                f"wakeups rep {rep + 1}/{s.wakeup_reps} {b['pending']:,} pending: idle start "
                f"{idle * 1e3:.0f} ms · /healthz while due {b['healthz_s'] * 1e3:.0f} ms · first fire "
                f"{(b['first_fire_s'] or 0) * 1e3:.0f} ms"
            )
            if last:
                msg += f" · burst {b['wakeups_s'] or 0:,.0f} wake-ups/s · all once: {b['check']['ok']}"
            log(msg)
        reps.append(r)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "reps": reps,
        "per_actor": per,
        "actors": big_n,
        "small_actors": small_n,
        "spread": s.wakeup_spread,
        "spread_s": s.wakeup_spread_s,
        "built_s": built_s,
        "file_bytes": len(blob),
    }
