"""``ChatAgent``: an agent whose turns are chat messages, each answer streamed into the log.

::

    from roost.agent import ChatAgent

    class Support(ChatAgent):
        kind = "support"
        message_concurrency = "latest"     # a new message cancels the answer being written

        async def on_chat_message(self, message: ChatMessage) -> str:
            return f"Answer as our support desk: {message.content}"

Callables, besides the agent's (``cancel``, ``get_run``, ``approve`` …): ``send(text, session_id=None)``
stores the message and starts (or queues) its answer, replying with the answer's ``message_id``, its
``status`` (``streaming``, ``queued``, ``dropped``) and, once started, its ``turn_id`` and ``run_id``;
``messages(session_id=None, before=None, limit=50)`` reads the history in pages. The answer's text
arrives as ``model_delta`` events (docs/protocol.md); tool calls go through the catalog, approvals
and the payload policy like any run's.

Guarantees (tests in ``tests/test_chat_agent.py``):

- **One answer streams per session at a time**; a message that arrives meanwhile is handled by
  ``message_concurrency``: ``queue`` (answered in order, each on its own), ``latest`` (the running
  answer is cancelled, its text so far kept), ``merge`` (every message that arrived meanwhile is
  answered by one run), ``drop`` (stored as ``dropped``, not answered).
- **The history is durable and bounded**: messages are rows of the agent's file (exported and deleted
  with it); past ``max_persisted_messages`` the oldest are deleted in the turn that adds one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from roost.actors import InvalidArguments, callable
from roost.agent.agent import Agent
from roost.agent.catalog import InvalidToolCall
from roost.agent.errors import AgentNotFound, InvalidTransition
from roost.agent.models import DeterministicPlanner, ModelRequest, ModelStep
from roost.agent.payloads import error_line
from roost.agent.status import FINISHED, RunStatus
from roost.agent.store import Row, new_id
from roost.storage import Migration

__all__ = ["CHAT_MIGRATIONS", "ChatAgent", "ChatMessage", "DeterministicChat", "answer_text"]

log = logging.getLogger("roost.agent")

CHAT_MIGRATIONS: Sequence[Migration] = (
    """
    CREATE TABLE roost_agent_chat_messages (
        message_id TEXT PRIMARY KEY,
        ordinal    INTEGER NOT NULL UNIQUE,
        session_id TEXT NOT NULL,
        role       TEXT NOT NULL,
        content    TEXT NOT NULL,
        status     TEXT NOT NULL,
        reply_to   TEXT,
        run_id     TEXT,
        turn_id    TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX roost_agent_chat_session ON roost_agent_chat_messages (session_id, ordinal);
    CREATE INDEX roost_agent_chat_run ON roost_agent_chat_messages (run_id) WHERE run_id IS NOT NULL;
    """,
)

Concurrency = Literal["queue", "latest", "merge", "drop"]
#: Statuses of an answer (an assistant message) that has not ended yet.
OPEN = ("queued", "streaming")
MAX_PAGE = 200


def answer_text(messages: list[Row]) -> str:
    """An answer's text as readers assemble it: the text of each model step, blank-line separated."""
    return "\n\n".join(m["text"] for m in messages if m["text"])


class ChatMessage(BaseModel):
    """A user's message as ``on_chat_message`` sees it (``content`` joins merged messages)."""

    message_id: str
    session_id: str
    content: str
    merged: list[str] = []


class DeterministicChat(DeterministicPlanner):
    """The deterministic planner, answering in words when no tool fits (it never asks), or when a
    tool fits but the message does not give its arguments (it says how to write them)."""

    async def step(self, request: ModelRequest) -> ModelStep:
        step = await super().step(request)
        problems = []
        for call in step.tool_calls:
            try:
                self.catalog.check(call.name, call.args)
            except InvalidToolCall as exc:
                problems.append(str(exc))
        if problems:
            first = step.tool_calls[0].name
            return ModelStep(
                text=f"I would call {first}, but {'; '.join(problems)}. Roost's deterministic model reads "
                f"a tool's arguments as a JSON object after its name or keyword ({first} "
                '{"name": "value"}); a real model (model = "openai" in [agent]) reads them from words.'
            )
        if step.ask is None:
            return step
        words = request.text.split()
        return ModelStep(
            text=f"You wrote {len(words)} word{'s' if len(words) != 1 else ''}: “{request.text}”. "
            'I am Roost\'s deterministic model: no network, no keys. Set model = "openai" in [agent] of '
            "roost.toml to talk to a real one."
        )


class ChatAgent(Agent):
    """Base class of chat kinds. See the module doc."""

    components = (*Agent.components, ("chat", CHAT_MIGRATIONS))
    streams = True
    planner = DeterministicChat
    #: What a message that arrives while an answer streams does (see the module doc).
    message_concurrency: ClassVar[Concurrency] = "queue"
    #: Messages kept per agent; the oldest go first.
    max_persisted_messages: ClassVar[int] = 10_000

    async def on_chat_message(self, message: ChatMessage) -> str:
        """What the run that answers ``message`` is asked. Default: the message itself."""
        return message.content

    # -- callables ------------------------------------------------------------------------------------
    @callable
    async def send(self, text: str, session_id: str | None = None) -> dict[str, Any]:
        """Store a message and start its answer (or queue it, by ``message_concurrency``)."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArguments(message="text must be a non-empty string")
        runs = self.orchestrator.runs
        session = runs.session_for(session_id)
        text = runs.precheck(text)
        user = self._add(session, "user", self.orchestrator.records.clean_text(text), "received")
        answer = self._add(session, "assistant", "", "queued", reply_to=user["message_id"])
        active = self._open(session, exclude=answer["message_id"], status="streaming")
        if active is None:
            await self._start(session)
        elif self.message_concurrency == "drop":
            self._set(answer, status="dropped")
            self._set(user, status="dropped")
        elif self.message_concurrency == "latest":
            await runs.cancel(active["turn_id"])  # its end starts the oldest queued answer: ours
        return self._reply(answer["message_id"])

    @callable
    async def stop(self, message_id: str) -> dict[str, Any]:
        """Stop an answer: a queued one is ``cancelled`` before it starts; a streaming one is cancelled
        as ``cancel(turn_id)`` would (its text so far kept)."""
        store = self.orchestrator.records.store()
        row = store.get("chat_messages", message_id) if isinstance(message_id, str) else None
        if row is None or row["role"] != "assistant":
            raise AgentNotFound(message=f"no answer {message_id!r}")
        self.orchestrator.runs.session_for(row["session_id"])  # only the session's principal
        if row["status"] == "queued":
            self._set(row, status="cancelled")
            self._answered(row)
        elif row["status"] == "streaming":
            await self.orchestrator.runs.cancel(row["turn_id"])
        else:
            raise InvalidTransition(message=f"answer {message_id} already ended ({row['status']})")
        return self._reply(message_id)

    @callable
    async def continue_run(self, run_id: str) -> dict[str, Any]:
        """As the agent's, for an answer's run: refused while another answer of its session streams
        (one answer at a time); the answer is ``streaming`` again."""
        store = self.orchestrator.records.store()
        answers = (
            store.select(
                "chat_messages", "run_id = ? AND role = 'assistant' AND status != 'merged'", (run_id,)
            )
            if isinstance(run_id, str)
            else []
        )
        if answers:
            other = self._open(answers[0]["session_id"], status="streaming")
            if other is not None:
                raise InvalidTransition(
                    message=f"answer {other['message_id']} streams in this session; stop it or wait for it"
                )
        reply = await self.orchestrator.runs.continue_run(run_id)
        for answer in answers:
            if reply["status"] not in FINISHED:
                self._set(answer, status="streaming")
        return reply

    @callable(readonly=True)
    async def messages(
        self, session_id: str | None = None, before: int | None = None, limit: int = 50
    ) -> dict[str, Any]:
        """A page of the session's messages, oldest first: those with an ``ordinal`` below ``before``
        (all when None), at most ``limit`` (≤ 200); ``next_before`` pages further back (None: no more)."""
        if not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
            raise InvalidArguments(message=f"limit must be 1 to {MAX_PAGE}")
        if before is not None and (not isinstance(before, int) or not 0 <= before <= 2**62):
            raise InvalidArguments(message="before must be an ordinal (an integer from 0 to 2**62)")
        session = self.orchestrator.runs.session_for(session_id, write=False)
        store = self.orchestrator.records.store()
        rows = store.select(
            "chat_messages",
            "session_id = ? AND ordinal < ?",
            (session, before if before is not None else 2**62),
            order=f"ordinal DESC LIMIT {limit + 1}",
        )
        more = len(rows) > limit
        page = list(reversed(rows[:limit]))
        return {
            "session_id": session,
            "messages": [self._shown(r) for r in page],
            "next_before": page[0]["ordinal"] if more and page else None,
        }

    # -- the runtime's hook -----------------------------------------------------------------------------
    async def on_run_end(self, run: Row) -> None:
        """The answer of ``run`` ended: its message takes the run's outcome; the next queued answer of
        its session starts."""
        store = self.orchestrator.records.store()
        answers = store.select("chat_messages", "run_id = ? AND role = 'assistant'", (run["run_id"],))
        if not answers:
            return
        content = answer_text(self.orchestrator.streams.of_run(run["run_id"]))
        if not content and run["status"] == RunStatus.COMPLETED:
            content = run["output"] or ""  # a model that did not stream
        elif (
            not content and run["status"] == RunStatus.FAILED
        ):  # nothing shown: say why, as "not started" does
            content = f"failed: {run['error'] or 'no reason recorded'}"[:500]
        status = {RunStatus.COMPLETED: "completed", RunStatus.CANCELLED: "cancelled"}.get(
            run["status"], "failed"
        )
        for answer in answers:
            self._answered(answer)
            if answer["status"] != "merged":
                self._set(answer, status=status, content=content)
        if self._open(answers[0]["session_id"], status="streaming") is None:
            await self._start(answers[0]["session_id"])

    # -- rows -----------------------------------------------------------------------------------------
    @property
    def _now(self) -> float:
        return self.extension.now

    def _add(self, session: str, role: str, content: str, status: str, reply_to: str | None = None) -> Row:
        store = self.orchestrator.records.store()
        ordinal = store.scalar("SELECT coalesce(max(ordinal), 0) + 1 FROM roost_agent_chat_messages")
        row: Row = {
            "message_id": new_id("msg"),
            "ordinal": ordinal,
            "session_id": session,
            "role": role,
            "content": content,
            "status": status,
            "reply_to": reply_to,
            "created_at": self._now,
            "updated_at": self._now,
        }
        store.insert("chat_messages", row)
        store.execute(  # never an open answer or the message it answers
            "DELETE FROM roost_agent_chat_messages WHERE ordinal <= ? "
            "AND status NOT IN ('queued', 'streaming', 'received')",
            (ordinal - self.max_persisted_messages,),
        )
        return row

    def _set(self, row: Row, **values: Any) -> None:
        self.orchestrator.records.store().update(
            "chat_messages", row["message_id"], updated_at=self._now, **values
        )
        row.update(values)

    def _answered(self, answer: Row) -> None:
        """The user message ``answer`` replies to is ``answered`` (whatever became of the answer)."""
        if answer["reply_to"]:
            self.orchestrator.records.store().update(
                "chat_messages", answer["reply_to"], status="answered", updated_at=self._now
            )

    def _open(self, session: str, *, status: str, exclude: str | None = None) -> Row | None:
        rows = self.orchestrator.records.store().select(
            "chat_messages",
            "session_id = ? AND role = 'assistant' AND status = ? AND message_id != ?",
            (session, status, exclude or ""),
            order="ordinal LIMIT 1",
        )
        return rows[0] if rows else None

    async def _start(self, session: str) -> None:
        """Start the answer of the oldest queued message of ``session`` (with ``merge``: of all of
        them, in one run)."""
        store = self.orchestrator.records.store()
        queued = store.select(
            "chat_messages",
            "session_id = ? AND role = 'assistant' AND status = 'queued'",
            (session,),
            order="ordinal",
        )
        if not queued:
            return
        batch = queued if self.message_concurrency == "merge" else queued[:1]
        answer = batch[-1]
        users = [store.get("chat_messages", a["reply_to"]) for a in batch]
        contents = [u["content"] for u in users if u is not None]
        message = ChatMessage(
            message_id=answer["reply_to"],
            session_id=session,
            content="\n".join(contents),
            merged=[u["message_id"] for u in users[:-1] if u is not None],
        )
        try:
            request = self.orchestrator.runs.precheck(await self.on_chat_message(message))
        except Exception as exc:  # this answer fails; the turn (another answer's end, say) goes on
            log.warning(
                "chat %s/%s: the answer to %s was not started", self.kind, self.name, message.message_id
            )
            for row in batch:
                self._set(row, status="failed", content=f"not started: {error_line(exc)}"[:500])
                self._answered(row)
            await self._start(session)
            return
        for earlier in batch[:-1]:
            self._set(earlier, status="merged", content="")
        self._set(answer, status="streaming")
        reply = await self.orchestrator.runs.start(request, session, False)
        self._set(answer, run_id=reply["run_id"], turn_id=reply["turn_id"])
        for earlier in batch[:-1]:
            self._set(earlier, run_id=reply["run_id"], turn_id=reply["turn_id"])
        if reply["status"] in FINISHED:  # ended inside start: its end found no message yet
            run = store.get("runs", reply["run_id"])
            assert run is not None
            await self.on_run_end(run)

    def _reply(self, message_id: str) -> dict[str, Any]:
        row = self.orchestrator.records.store().get("chat_messages", message_id)
        assert row is not None
        return {
            "message_id": message_id,
            "reply_to": row["reply_to"],
            "session_id": row["session_id"],
            "status": row["status"],
            "turn_id": row["turn_id"],
            "run_id": row["run_id"],
        }

    @staticmethod
    def _shown(row: Row) -> dict[str, Any]:
        return {
            k: row[k] for k in ("message_id", "ordinal", "role", "content", "status", "reply_to", "run_id")
        }
