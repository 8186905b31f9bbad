"""Verification: a run ends only through its stop condition's check (``Agent.verify``).

Guarantees (tests in ``tests/test_agent_runtime.py``):

- **Done is a checked fact**: a run whose steps are all done is verified; verification records
  ``verification_result``, ``verifier`` and ``evidence_refs``, and the run is ``completed`` only if it
  passed (``pass`` or ``warning``). A verifier that raises fails the run.
"""

from __future__ import annotations

from roost.agent.context import Part
from roost.agent.interfaces import Verdict
from roost.agent.status import EventStatus, RunStatus, VerificationResult
from roost.agent.store import Row

__all__ = ["Verdict", "Verification"]


class Verification(Part):
    async def finish(self, run: Row) -> None:
        """Verify the run and end it: ``completed`` if it passed, else ``failed``."""
        orc = self.orchestrator
        self.event(
            "verification_started",
            run,
            status=EventStatus.VERIFYING,
            payload={"stop_condition": run["stop_condition"]},
        )
        items = self.store.select("items", "run_id = ?", (run["run_id"],), order="step_index")
        try:
            verdict = await self.agent.verify(run, items)
        except Exception as exc:
            verdict = Verdict("fail", "runtime", [], f"verifier raised {type(exc).__name__}: {exc}")
        clean_refs = self.records.clean(list(verdict.evidence_refs))
        self.set_run(
            run, verification_result=verdict.result, verifier=verdict.verifier, evidence_refs=clean_refs
        )
        self.event(
            "verification_completed",
            run,
            status=EventStatus(verdict.result),
            payload={
                "verification_result": verdict.result,
                "verifier": verdict.verifier,
                "evidence_refs": clean_refs,
                "detail": self.err(verdict.detail, 500),
            },
        )
        if verdict.result in (VerificationResult.PASS, VerificationResult.WARNING):
            files = [r[5:] for r in verdict.evidence_refs if isinstance(r, str) and r.startswith("file:")]
            if files:
                orc.project.add_files(files)
            orc.runs.end(run, RunStatus.COMPLETED, output=run["model_text"])
        else:
            orc.runs.fail(run, f"verification {verdict.result}: {verdict.detail}", retryable=False)
