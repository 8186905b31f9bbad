"""The project (one per agent): its settings, the files its verified runs produced, and its heavy
slot — at most one run holds it; runs that need it wait in ``queued`` with ``waiting = project``.

Guarantees (tests in ``tests/test_agent_runtime.py``):

- **One heavy operation at a time, in order**: a run whose next step is heavy queues behind the
  holder; when the holder ends, pauses for input, or is cancelled, the slot passes to the oldest
  queued run (by ``ordinal``), which is advanced within the same turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost.agent.context import Part
from roost.agent.status import FINISHED, EventStatus, RunStatus, Waiting
from roost.agent.store import Row

if TYPE_CHECKING:
    from roost.agent.interfaces import OrchestratorApi

__all__ = ["Project"]

#: The project keeps the latest this many files of verified runs.
MAX_FILES = 1000


class Project(Part):
    def __init__(self, orchestrator: OrchestratorApi) -> None:
        super().__init__(orchestrator)
        #: Runs the heavy slot was handed to during this turn; the steps part advances them.
        self.released: list[str] = []

    def _row(self) -> Row:
        row = self.store.get("project", self.project_id)
        if row is None:
            row = {
                "project_id": self.project_id,
                "settings": {},
                "files": [],
                "heavy_run_id": None,
                "heavy_since": None,
                "updated_at": self.now,
            }
            self.store.insert("project", row)
        return row

    def take_heavy(self, run: Row) -> bool:
        """Take the slot for ``run``; False (and the run queued) when another run holds it."""
        project = self._row()
        holder = project["heavy_run_id"]
        if holder not in (None, run["run_id"]):
            other = self.store.get("runs", holder)
            if other is not None and other["status"] not in FINISHED:
                self.set_run(run, status=RunStatus.QUEUED, waiting=Waiting.PROJECT)
                self.event("run_queued", run, status=EventStatus.QUEUED, payload={"behind_run_id": holder})
                return False
        if holder != run["run_id"]:
            self.store.update(
                "project",
                self.project_id,
                heavy_run_id=run["run_id"],
                heavy_since=self.now,
                updated_at=self.now,
            )
        return True

    def release_heavy(self, run_id: str) -> None:
        """Release the slot if ``run_id`` holds it; the oldest queued run takes it."""
        project = self._row()
        if project["heavy_run_id"] != run_id:
            return
        self.store.update(
            "project", self.project_id, heavy_run_id=None, heavy_since=None, updated_at=self.now
        )
        waiting = self.store.select("runs", "waiting = ?", (Waiting.PROJECT,), order="ordinal LIMIT 1")
        if waiting:
            nxt = self.set_run(waiting[0], status=RunStatus.IN_PROGRESS, waiting=None)
            self.event("run_started", nxt, status=EventStatus.IN_PROGRESS, payload={"after_run_id": run_id})
            self.released.append(nxt["run_id"])

    def add_files(self, files: list[str]) -> None:
        """Record files a verified run produced (the latest :data:`MAX_FILES` are kept)."""
        known = list(self._row()["files"])
        known += [f for f in files if f not in known]
        self.store.update("project", self.project_id, files=known[-MAX_FILES:], updated_at=self.now)

    def read(self) -> dict[str, Any]:
        """The project (this agent): its settings, the files its verified runs produced, the heavy
        operation running now and the runs queued behind it. Creates nothing."""
        project = self.store.get("project", self.project_id) or {
            "project_id": self.project_id,
            "settings": {},
            "files": [],
            "heavy_run_id": None,
            "heavy_since": None,
        }
        queued = self.store.select("runs", "waiting = ?", (Waiting.PROJECT,), order="ordinal")
        return {
            "project_id": project["project_id"],
            "settings": project["settings"],
            "files": project["files"],
            "heavy_run_id": project["heavy_run_id"],
            "heavy_since": project["heavy_since"],
            "queued_run_ids": [r["run_id"] for r in queued],
        }
