"""The orchestration shapes on the workflow core, with a deterministic "model" (no network):
``roost serve roost.examples.shapes:app`` serves the ``shapes`` kind, the ``team`` /
``team_worker`` kinds (:mod:`roost.examples.team`, the orchestrator-workers shape on the workflow
core) and the ``lead`` / ``helper`` agents (:mod:`roost.examples.lead`, the same shape with agents on
both sides).

Workflows of ``shapes`` (``start_workflow(name, input, id)``):

- ``chaining`` — fixed stages with a gate between each two: ``draft`` → gate ``check`` (a check step:
  too short a draft ends the run, ``rejected``) → ``polish`` → gate ``publish`` (an approval:
  ``approve_step(id, "publish", approved)``; a denial ends it, ``denied``) → ``release``.
- ``routing`` — ``classify`` records its decision (a route) before the hand-off; the hand-off waits in
  the route's queue (``queue``, a durable sleep) and then ``handle`` writes the route's row. On every
  replay the recorded route is used: the classifier is never asked again.
- ``parallel`` — three reviewers at once (``step.parallel``), each an outside branch with its own key;
  their verdicts merged in turn.

Every effect is a row of the table ``effects`` (``effects()`` counts them by step), so a test counts
that none happened twice.

Guarantees (tests in ``tests/test_shapes.py`` and ``tests/test_shapes_crash.py``):

- **A gate stops the chain**: nothing after a failed check or a denied approval runs.
- **A recorded route is never re-decided**: a replay (after a sleep, a restart, a SIGKILL) hands off
  to the route recorded by ``classify``, whatever the classifier would say now.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from roost.actors import callable
from roost.examples.lead import Helper, Lead
from roost.examples.team import Team, TeamWorker
from roost.transport import create_app
from roost.workflows import Step, StepAttempt, Workflows, workflow

__all__ = ["ROUTES", "Shapes", "app", "classify"]

#: The routes of ``routing`` and the words that send a request there (the first match wins).
ROUTES: dict[str, tuple[str, ...]] = {
    "billing": ("invoice", "refund", "charge", "price"),
    "support": ("error", "broken", "crash", "help"),
    "sales": (),
}


def classify(text: str) -> str:
    """The deterministic classifier: the first route with a word of ``text``; else ``sales``."""
    words = set(text.lower().split())
    return next((route for route, keys in ROUTES.items() if words & set(keys)), "sales")


def draft(topic: str) -> str:
    """The deterministic model's draft of ``topic``."""
    return f"A note on {topic}: " + " ".join(f"{topic} point {i + 1}." for i in range(3))


class Shapes(Workflows):
    """Chaining, routing and parallel, each a workflow of this kind."""

    kind = "shapes"
    workflow_lease = 5.0
    migrations = ("CREATE TABLE effects (id INTEGER PRIMARY KEY, step TEXT NOT NULL, note TEXT)",)
    #: Words a draft needs to pass the ``check`` gate.
    min_words = 5

    def effect(self, step: str, note: str | None = None) -> str | None:
        self.sql.execute("INSERT INTO effects (step, note) VALUES (?, ?)", (step, note))
        return note

    @callable(readonly=True)
    async def effects(self) -> dict[str, int]:
        rows = self.sql.execute("SELECT step, count(*) FROM effects GROUP BY step")
        return {str(r[0]): int(r[1]) for r in rows}

    def classify(self, text: str) -> str:
        """Where ``routing`` hands ``text`` off to (a subclass may ask another classifier)."""
        return classify(text)

    # -- chaining -----------------------------------------------------------------------------------
    @workflow
    async def chaining(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        topic = str(spec.get("topic", ""))
        text = await step.do("draft", lambda: self.effect("draft", draft(topic) if topic else ""))
        verdict = await step.do("check", partial(self._check, text))
        if not verdict["ok"]:
            return {"status": "rejected", "at": "check", "why": verdict["why"]}
        polished = await step.do("polish", lambda: self.effect("polish", text.replace(": ", " — ", 1)))
        decision = await step.approval("publish", timeout=spec.get("timeout"))
        if not decision.approved:
            return {"status": "denied", "at": "publish", "by": decision.by, "note": decision.note}
        await step.do("release", lambda: self.effect("release", polished))
        return {"status": "published", "text": polished, "approved_by": decision.by}

    def _check(self, text: str) -> dict[str, Any]:
        words = len(text.split())
        if words < self.min_words:
            return {"ok": False, "why": f"{words} words, at least {self.min_words} wanted"}
        return {"ok": True, "why": None}

    # -- routing ------------------------------------------------------------------------------------
    @workflow
    async def routing(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        text = str(spec.get("text", ""))
        route: str = await step.do("classify", lambda: self.effect("classify", self.classify(text)))
        await step.sleep(f"queue:{route}", float(spec.get("queue", 0.0)))
        await step.do("handle", lambda: self.effect(f"handle:{route}", text))
        return {"route": route}

    # -- parallel -----------------------------------------------------------------------------------
    async def review(self, angle: str, text: str, attempt: StepAttempt) -> dict[str, Any]:
        """One reviewer's verdict (outside turns; a subclass may ask a model, or count its calls)."""
        return {"angle": angle, "words": len(text.split()), "key": attempt.idempotency_key}

    @workflow
    async def parallel(self, step: Step, spec: dict[str, Any]) -> dict[str, Any]:
        text = str(spec.get("text", ""))

        def reviewer(angle: str) -> Any:
            async def review(attempt: StepAttempt) -> dict[str, Any]:
                return await self.review(angle, text, attempt)

            return review

        reviews = await step.parallel("review", {a: reviewer(a) for a in ("style", "facts", "tone")})
        await step.do("merge", lambda: self.effect("merge", ",".join(sorted(reviews))))
        return {"reviews": reviews}


#: ``roost serve roost.examples.shapes:app``
app = create_app([Shapes, Team, TeamWorker, Lead, Helper])
