"""Team kinds for the SIGKILL tests of ``tests/test_team_crash.py`` (``roost serve tests.team_app:…``).

``app``: a worker whose final report, on its first run, reaches the team and then hangs: a test kills
the server after the report's effect and before its record, so the rerun repeats the report under
the same key.

``kill_app`` (both kinds in one process), ``team_app`` and ``workers_app`` (the team in one process,
its workers in another): :class:`KillTeam` and :class:`KillWorker` hang once at the point
``ROOST_TEAM_HANG`` names, so that a test can kill a server there:

- ``part``: w2's write of its part 1, inside the turn (the row written, not committed): mid-stage;
- ``dispatch``: the team's start of w2, before it is sent: mid-dispatch;
- ``cancel``: the team's cancel of w2, before it is sent (after the cancel was acknowledged).

"Once": the first time, a marker file ``hang-{point}`` is made in ``ROOST_TEAM_MARKS`` (outside the
data, so a SIGKILL keeps it) and the call hangs; a restarted server finds the marker and goes on.

Split in two processes, each kind calls the other over HTTP (``POST /agents/{kind}/{name}/rpc/…``),
at the address the JSON file ``ROOST_TEAM_PEERS`` gives for that kind (read at every call: a test
rewrites it when it restarts a server on a new port); a refusal comes back as the same ``RpcError``.
The example's own calls between actors are in process: this link is the test's."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from roost.actors import RetryPolicy, RpcError
from roost.actors.registry import RuntimeConfig
from roost.examples.team import Team, TeamWorker
from roost.transport import create_app
from roost.workflows import StepAttempt

__all__ = ["HangingWorker", "KillTeam", "KillWorker", "app", "kill_app", "team_app", "workers_app"]

#: Reports and dispatches go on while the other server is down and restarting.
_PATIENT = RetryPolicy(max_attempts=60, base=0.2, cap=1.0)


class HangingWorker(TeamWorker):
    workflow_lease = 0.5

    def _report(
        self, job: dict[str, Any], status: str, progress: int, result: Any = None
    ) -> Callable[[StepAttempt], Awaitable[bool]]:
        report = super()._report(job, status, progress, result)

        async def go(attempt: StepAttempt) -> bool:
            news = await report(attempt)
            if status == "completed" and job["worker"] == "w3" and attempt.run == 1:
                await asyncio.Event().wait()
            return news

        return go


def hang_once(point: str) -> bool:
    """Whether to hang at ``point`` now: ``ROOST_TEAM_HANG`` names it and its marker is not there yet
    (it is made now)."""
    if os.environ.get("ROOST_TEAM_HANG") != point:
        return False
    mark = Path(os.environ["ROOST_TEAM_MARKS"]) / f"hang-{point}"
    if mark.exists():
        return False
    mark.write_text(point)
    return True


def _peer(kind: str) -> str | None:
    """The address of the server of ``kind`` (None: in process)."""
    peers = os.environ.get("ROOST_TEAM_PEERS")
    if peers is None:
        return None
    url: str = json.loads(Path(peers).read_text())[kind]
    return url


class _Link:
    """A call to ``kind/name``: over HTTP when ``ROOST_TEAM_PEERS`` is set, else in process (``ref``);
    held for ever at the hang point of its method."""

    HANGS = {"start_workflow": "dispatch", "cancel_workflow": "cancel"}

    def __init__(self, ref: Any, kind: str, name: str) -> None:
        self.ref, self.kind, self.name = ref, kind, name

    async def call(self, method: str, *args: Any) -> Any:
        if self.name == "t1.w2" and method in self.HANGS and hang_once(self.HANGS[method]):
            await asyncio.Event().wait()
        url = _peer(self.kind)
        if url is None:
            return await self.ref.call(method, *args)
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(f"{url}/agents/{self.kind}/{self.name}/rpc/{method}", json=list(args))
        body = r.json()
        if not body["ok"]:
            raise RpcError(body["error"]["code"], body["error"]["message"])
        return body["result"]


class KillTeam(Team):
    workflow_lease = 1.0
    dispatch_retry = _PATIENT

    def actor(self, kind: str, name: str) -> Any:
        return _Link(super().actor(kind, name), kind, name)


class KillWorker(TeamWorker):
    workflow_lease = 1.0
    report_retry = _PATIENT

    def actor(self, kind: str, name: str) -> Any:
        return _Link(super().actor(kind, name), kind, name)

    def _write(self, wid: str, part: int, text: str) -> Any:
        written = super()._write(wid, part, text)
        if self.name == "t1.w2" and part == 1 and hang_once("part"):

            async def hang() -> str:
                await asyncio.Event().wait()
                return written

            return hang()
        return written


_CONFIG = RuntimeConfig(poll_interval=0.2, wakeup_lease=1.0, turn_timeout=60.0)
app = create_app([Team, HangingWorker], config=_CONFIG)
kill_app = create_app([KillTeam, KillWorker], config=_CONFIG)
team_app = create_app([KillTeam], config=_CONFIG)
workers_app = create_app([KillWorker], config=_CONFIG)
