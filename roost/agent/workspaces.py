"""Workspaces: the sandbox session of a run — its row beside the run, and the state machine over it.

An agent kind that declares ``sandbox = SandboxSpec(...)`` gives each run a workspace directory
(:mod:`roost.agent.sandbox`), made on the run's first step from the manifest; a tool reaches it as
``ctx.workspace``. docs/design.md (*Sandbox workspaces*) draws the machine and the checkpoint rules.
Every method runs inside a turn of the agent (it is a :class:`~roost.agent.context.Part`).

Guarantees (tests in ``tests/test_sandbox_runs.py`` and ``tests/test_sandbox_process.py``):

- **A completed step's workspace effect commits with its completion**: the directory's entries (path,
  digest, size; contents in the blob store) are recorded in the turn that marks the item completed.
- **No step's write survives twice**: before a step runs on a workspace this process did not leave
  as last committed (after a restart, a rolled-back turn, a failed or interrupted step), the
  disposition is applied — ``resumable`` puts back what differs from the entries and removes what is
  not in them, ``snapshot`` rebuilds the directory from the last snapshot, ``recreate`` from the
  manifest — so the step that runs again writes on the committed state.
- **The history says what was kept and what was replayed**: one ``workspace`` event per change of the
  row (``materialised``, ``reopened`` with the paths ``kept``, ``reverted``, ``restored``, ``removed``
  or ``discarded``, ``committed`` with the paths written and removed, ``closed``).
- **A run that ends leaves a snapshot, not a directory**: the final snapshot is kept and the
  directory removed; ``continue_run`` restores it.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

from roost.actors.extension import Process
from roost.agent.context import Part
from roost.agent.sandbox import (
    Entries,
    Manifest,
    PermissionsProfile,
    SandboxSpec,
    Workspace,
    changed,
    load_snapshot,
    snapshot,
)
from roost.agent.sandbox_rows import TABLE, WorkspaceStatus, card, decode, encode
from roost.agent.store import Row, new_id
from roost.storage import sandbox_path

__all__ = ["SERVICE", "Workspaces", "workspace_root"]

SERVICE = "agent.sandbox"
#: Paths an event lists at most per list (the counts say how many there were).
EVENT_PATHS = 100


class _Held:
    """This process's knowledge of its workspaces: the row version at which each directory is exactly
    as last committed (a step that opens one takes it out until its commit)."""

    def __init__(self, process: Process) -> None:
        self.clean: dict[str, int] = {}
        #: What the last commit's scan found (:attr:`Workspace.known`), so unchanged files are not
        #: read again at the next commit.
        self.known: dict[str, dict[str, tuple[int, int, int, str]]] = {}

    def forget(self, sandbox_session_id: str) -> None:
        self.clean.pop(sandbox_session_id, None)
        self.known.pop(sandbox_session_id, None)

    async def stop(self) -> None:
        self.clean.clear()
        self.known.clear()


def workspace_root(data_dir: Path, kind: str, name: str) -> Path:
    """Where the workspaces of actor ``kind``/``name`` live: ``DATA/sandboxes/<kind>/<digest>/``
    (``roost delete`` removes it with the actor)."""
    return sandbox_path(data_dir, kind, name)


def _listed(paths: list[str]) -> dict[str, Any]:
    return {"paths": paths[:EVENT_PATHS], "count": len(paths)}


class Workspaces(Part):
    # -- rows -----------------------------------------------------------------------------------------
    def row(self, run_id: str) -> Row | None:
        found = self.store.select("sandboxes", "run_id = ?", (run_id,))
        return decode(found[0]) if found else None

    def cards(self, run_id: str) -> list[dict[str, Any]]:
        row = self.row(run_id)
        return [] if row is None else [card(row)]

    def _set(self, row: Row, **values: Any) -> None:
        values["updated_at"] = self.now
        cols = list(values)
        self.store.execute(
            f"UPDATE {TABLE} SET {', '.join(f'{c} = ?' for c in cols)} WHERE sandbox_session_id = ?",
            [*(encode(c, values[c]) for c in cols), row["sandbox_session_id"]],
        )
        row.update(values)

    def _event(self, run: Row, row: Row, action: str, **payload: Any) -> None:
        self.event(
            "workspace",
            run,
            payload={
                "sandbox_session_id": row["sandbox_session_id"],
                "action": action,
                "disposition": row["disposition"],
                "version": row["version"],
                "snapshot_id": row["snapshot_id"],
                **payload,
            },
        )

    # -- the backend ------------------------------------------------------------------------------------
    def _spec(self) -> SandboxSpec | None:
        spec: SandboxSpec | None = getattr(self.agent, "sandbox", None)
        return spec

    def _held(self) -> _Held:
        return self.agent.extension.process.service(SERVICE, _Held)

    def _workspace(self, spec: SandboxSpec, row: Row) -> Workspace:
        process = self.agent.extension.process
        profile = row["permissions_profile"]
        permissions = PermissionsProfile(
            profile["name"], tuple(profile["read_only"]), tuple(profile["read_write"])
        )
        return Workspace(process.data_dir / row["directory"], permissions, spec.limits, self.agent.blobs)

    # -- hooks of the runtime -----------------------------------------------------------------------------
    def open(self, run: Row) -> Workspace | None:
        """The run's workspace for the step about to run (None: the agent has no sandbox). Made on the
        run's first step; put back by its disposition when this process did not leave it as last
        committed; a closed one restored from its final snapshot."""
        spec = self._spec()
        if spec is None:
            return None
        held = self._held()
        row = self.row(run["run_id"])
        if row is None:
            row = self._materialise(run, spec)
        else:
            ws = self._workspace(spec, row)
            if row["status"] == WorkspaceStatus.CLOSED:
                restored = ws.restore(load_snapshot(self.agent.blobs, row["snapshot_id"]))
                self._set(row, status=WorkspaceStatus.ACTIVE, reopened=row["reopened"] + 1)
                self._event(run, row, "reopened", reason="the run continued", restored=_listed(restored))
            elif held.clean.get(row["sandbox_session_id"]) != row["version"]:
                self._reopen(run, row, ws)
        held.clean.pop(row["sandbox_session_id"], None)  # a step has it now: dirty until its commit
        return self._workspace(spec, row)

    def _materialise(self, run: Row, spec: SandboxSpec) -> Row:
        blobs = self.agent.blobs
        sid = new_id("sbx")
        data_dir = self.agent.extension.process.data_dir
        root = workspace_root(data_dir, self.agent.kind, self.agent.name)
        self._sweep(root)
        directory = root / sid
        rel = directory.relative_to(data_dir)
        manifest_ref = spec.manifest.ref(blobs)
        ws = Workspace(directory, spec.permissions, spec.limits, blobs)
        started_from = self._previous_snapshot(run) if spec.start == "session" else None
        if started_from is None:
            entries = ws.materialise(spec.manifest)
        else:
            ws.check_manifest(spec.manifest)
            entries = load_snapshot(blobs, started_from)
            ws.restore(entries)
        now = self.now
        row: Row = {
            "sandbox_session_id": sid,
            "run_id": run["run_id"],
            "trace_id": run["trace_id"],
            "manifest_version": spec.manifest.version,
            "manifest_ref": manifest_ref,
            "permissions_profile": spec.permissions.to_json(),
            "disposition": spec.disposition,
            "status": WorkspaceStatus.ACTIVE,
            "snapshot_id": snapshot(blobs, manifest_ref, entries),
            "started_from": started_from,
            "entries": entries,
            "version": 1,
            "reopened": 0,
            "directory": str(rel),
            "created_at": now,
            "updated_at": now,
        }
        cols = list(row)
        self.store.execute(
            f"INSERT INTO {TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [encode(c, row[c]) for c in cols],
        )
        self._event(
            run,
            row,
            "materialised",
            manifest_version=spec.manifest.version,
            files=len(entries),
            started_from=started_from,
        )
        return row

    def _sweep(self, root: Path) -> None:
        """Remove the directories under ``root`` that no active row names: left by a turn that made one
        and rolled back, or by a run whose end could not remove its own."""
        if not root.is_dir():
            return
        active = {
            r["sandbox_session_id"]
            for r in self.store.select("sandboxes", "status = ?", (WorkspaceStatus.ACTIVE,))
        }
        for child in root.iterdir():
            if child.name not in active:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)

    def _previous_snapshot(self, run: Row) -> str | None:
        """The final snapshot of the newest ended run of ``run``'s session that had a workspace."""
        found = self.store.scalar(
            f"SELECT s.snapshot_id FROM {TABLE} AS s JOIN roost_agent_runs AS r ON r.run_id = s.run_id "
            "WHERE r.session_id = ? AND s.status = ? AND s.run_id != ? ORDER BY r.ordinal DESC LIMIT 1",
            (run["session_id"], WorkspaceStatus.CLOSED, run["run_id"]),
        )
        return str(found) if found is not None else None

    def _reopen(self, run: Row, row: Row, ws: Workspace) -> None:
        """Apply the row's disposition: the directory is not known to be as last committed."""
        disposition = row["disposition"]
        reason = "the directory was not left as last committed (a restart, or a step that did not complete)"
        blobs = self.agent.blobs
        if disposition == "resumable":
            done = ws.reconcile(row["entries"])
            self._set(row, reopened=row["reopened"] + 1)
            self._event(
                run,
                row,
                "reopened",
                reason=reason,
                **{k: _listed(v) for k, v in done.to_json().items()},
            )
        elif disposition == "snapshot":
            restored = ws.restore(load_snapshot(blobs, row["snapshot_id"]))
            self._set(row, reopened=row["reopened"] + 1)
            self._event(run, row, "reopened", reason=reason, restored=_listed(restored))
        else:  # recreate
            manifest = Manifest.load(blobs, row["manifest_ref"])
            entries = ws.materialise(manifest)
            written, removed = changed(entries, row["entries"])  # what completed steps had done
            self._set(
                row,
                entries=entries,
                version=row["version"] + 1,
                reopened=row["reopened"] + 1,
                snapshot_id=snapshot(blobs, row["manifest_ref"], entries),
            )
            self._event(
                run,
                row,
                "reopened",
                reason=reason,
                restored=_listed(sorted(entries)),
                discarded=_listed(sorted({*written, *removed})),
            )

    def commit(self, run: Row, item: Row) -> None:
        """The step ``item`` completed: record what it did to the workspace (in this turn), a snapshot
        under the ``snapshot`` disposition. Raises a ``SandboxError`` if the directory is past its
        limits (the step then fails)."""
        spec = self._spec()
        if spec is None:
            return
        row = self.row(run["run_id"])
        if row is None or row["status"] != WorkspaceStatus.ACTIVE:
            return
        held = self._held()
        if held.clean.get(row["sandbox_session_id"]) == row["version"]:
            return  # nobody opened it since the last commit
        ws = self._workspace(spec, row)
        ws.known = held.known.get(row["sandbox_session_id"], {})
        entries, odd = ws.scan()
        held.known[row["sandbox_session_id"]] = ws.known
        written, removed = changed(row["entries"], entries)
        if written or removed or odd:
            values: dict[str, Any] = {"entries": entries, "version": row["version"] + 1}
            if row["disposition"] == "snapshot":
                values["snapshot_id"] = snapshot(self.agent.blobs, row["manifest_ref"], entries)
            self._set(row, **values)
            self._event(
                run,
                row,
                "committed",
                item_id=item["item_id"],
                written=_listed(written),
                removed=_listed(removed),
                ignored=_listed(odd),  # symlinks and other things: never recorded, removed on reopen
            )
        held.clean[row["sandbox_session_id"]] = row["version"]
        if odd:
            held.clean.pop(row["sandbox_session_id"], None)  # put back (without them) at the next step

    def close_run(self, run: Row) -> None:
        """The run ended: the final snapshot (of the committed entries) kept, the directory removed."""
        if self._spec() is None:
            return
        row = self.row(run["run_id"])
        if row is None or row["status"] != WorkspaceStatus.ACTIVE:
            return
        entries: Entries = row["entries"]
        final = snapshot(self.agent.blobs, row["manifest_ref"], entries)
        self._set(row, status=WorkspaceStatus.CLOSED, snapshot_id=final)
        self._held().forget(row["sandbox_session_id"])
        directory = self.agent.extension.process.data_dir / row["directory"]
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(OSError):  # the actor's folder too, when no other run has one there
            directory.parent.rmdir()
        self._event(run, row, "closed", reason=f"the run ended ({run['status']})", files=len(entries))
