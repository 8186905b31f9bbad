"""Capability sessions: one durable row per (run, MCP server), and its state machine.

The row is what survives a SIGKILL of an MCP session (docs/design.md, *MCP client and capability
sessions*): ``capability_session_id, run_id, trace_id, server, status, expires_at, resume_token,
approval_state``, and the elicitation a run waits on, with its answer until the call took it. Every
method runs inside a turn of the agent (it is a :class:`~roost.agent.context.Part`); the worker of an
MCP call reaches it through ``ctx.turn`` (:mod:`roost.agent.mcp_tools`). Every change of status is one
``capability_session`` event carrying the new status.

Guarantees (tests in ``tests/test_mcp_client.py``):

- **A lost worker leaves a resumable row**: when the lease of an MCP call's job expires (its process
  died), or the connection broke under a call, the row becomes ``resumable``.
- **A call that may have had its effect is not made again without leave**: from its open until its
  answer, the row holds the call's item (``in_flight``). A later open for the same item (its
  connection broke under it, its process died) makes it
  again at once only for a tool the server marks read-only or idempotent; for any other the run
  waits for input (``resend`` ``asked``): ``provide_input`` ``{"resend": true}`` (or ``true``)
  gives the leave for one more call (``allowed``, spent by the open that makes it), any other
  answer declines (``declined``: the step fails, the call is not made again). This is decided
  before anything else of the open (an expired or lost session, a new session), and a 404 clears
  the call only when it answered the call's own ``tools/call``.
- **A session is never replaced without leave**: a row that had a session this process does not hold
  (its connection ended, or its process was lost) **rejoins that session** when it can (streamable
  HTTP, its id kept in ``resume_token`` and the handshake's result in ``handshake``: the row is
  ``in_progress`` again, ``initialized`` unchanged); otherwise (stdio, whose session ends with the
  server's process; a session id not tracked) it is ``reinitialize_required``, as when the server
  forgets a rejoined session (404).
- **An expired session is re-initialised only when allowed**: a row whose server said the session is
  gone, or whose ``expires_at`` passed, is ``reinitialize_required``; the next open makes a new
  session when ``support_reinit_on_expiry`` is set, otherwise the run waits for input with the reason
  in ``question`` and ``provide_input`` allows the new session.
- **An answered elicitation is not asked twice**: the answer is kept in the row until the call took
  it; a retried call whose server asks the same question (message and schema) gets it back.
- **Bounded**: an elicitation's message and schema are bounded (:data:`MAX_MESSAGE`,
  :data:`MAX_SCHEMA`); an answer must fit the requested schema and :data:`MAX_ANSWER`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs; a dependency of mcp
import orjson

from roost.actors import InvalidArguments
from roost.agent.capability_rows import (
    CAPABILITY_MIGRATIONS,
    LIVE,
    RESEND_ALLOWED,
    RESEND_ASKED,
    RESEND_DECLINED,
    TABLE,
    CapabilityStatus,
    Opened,
    card,
    decode,
    encode,
    gives_leave,
)
from roost.agent.context import Part
from roost.agent.mcp_config import server_of
from roost.agent.payloads import PayloadError
from roost.agent.records import Records
from roost.agent.status import EventStatus, JobStatus, TurnStatus, Waiting
from roost.agent.store import Row, new_id

__all__ = [
    "CAPABILITY_MIGRATIONS",
    "MAX_MESSAGE",
    "MAX_SCHEMA",
    "Capabilities",
    "CapabilityStatus",
    "Opened",
]

shown = Records.shown

#: The reason of a row whose call's worker was lost (the lease of its job expired).
WORKER_LOST = "the worker of the call was lost"
#: An elicitation's message longer than this (characters) is refused.
MAX_MESSAGE = 4000
#: An elicitation's requested schema larger than this once encoded (bytes) is refused.
MAX_SCHEMA = 16_384
#: An answer to an elicitation larger than this once encoded (bytes) is refused.
MAX_ANSWER = 65_536
#: The answers that refuse a server's question instead of answering it (the MCP ``ElicitResult``
#: actions besides ``accept``).
DECLINES = ({"action": "decline"}, {"action": "cancel"})


def _fits(schema: Any, answer: Any) -> str | None:
    """Why ``answer`` does not fit ``schema`` (None when it does)."""
    try:
        jsonschema.validate(answer, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "answer"
        return f"{where}: {exc.message[:200]}"
    except jsonschema.SchemaError as exc:
        return f"the requested schema is not valid: {exc.message[:200]}"
    return None


class Capabilities(Part):
    # -- rows ---------------------------------------------------------------------------------------
    def rows(self, run_id: str) -> list[Row]:
        return [decode(r) for r in self.store.select("capability_sessions", "run_id = ?", (run_id,))]

    def row(self, capability_session_id: str) -> Row | None:
        found = self.store.select(
            "capability_sessions", "capability_session_id = ?", (capability_session_id,)
        )
        return decode(found[0]) if found else None

    def _row_of(self, run_id: str, server: str) -> Row | None:
        found = self.store.select("capability_sessions", "run_id = ? AND server = ?", (run_id, server))
        return decode(found[0]) if found else None

    def _set(self, row: Row, **values: Any) -> None:
        values["updated_at"] = self.now
        cols = list(values)
        encoded = [encode(c, values[c]) for c in cols]
        self.store.execute(
            f"UPDATE {TABLE} SET {', '.join(f'{c} = ?' for c in cols)} WHERE capability_session_id = ?",
            [*encoded, row["capability_session_id"]],
        )
        row.update(values)

    def _status(
        self, run: Row, row: Row, status: CapabilityStatus, reason: str | None = None, **values: Any
    ) -> None:
        """Change the row's status (with ``values``), and say so in one ``capability_session`` event."""
        reason = self.err(reason, 300)
        self._set(row, status=status, reason=reason, **values)
        self.event(
            "capability_session",
            run,
            payload={
                "capability_session_id": row["capability_session_id"],
                "server": row["server"],
                "status": status,
                "reason": reason,
                "job_id": row["job_id"],
                "attempt": row["attempt"],
            },
        )

    def ensure(
        self,
        run: Row,
        server: str,
        transport: str,
        status: CapabilityStatus = CapabilityStatus.IN_PROGRESS,
        approval_state: dict[str, Any] | None = None,
    ) -> Row:
        """The row of (run, server); made (with ``status``, one event) if there is none."""
        row = self._row_of(run["run_id"], server)
        if row is not None:
            if transport and not row["transport"]:
                self._set(row, transport=transport)
            return row
        now = self.now
        made: Row = {
            "capability_session_id": new_id("caps"),
            "run_id": run["run_id"],
            "trace_id": run["trace_id"],
            "server": server,
            "transport": transport,
            "status": status,
            "approval_state": approval_state or {"status": "not_required"},
            "created_at": now,
            "updated_at": now,
        }
        cols = list(made)
        self.store.execute(
            f"INSERT INTO {TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [encode(c, made[c]) for c in cols],
        )
        row = self._row_of(run["run_id"], server)
        assert row is not None
        self._status(run, row, status)
        return row

    # -- hooks of the runtime ---------------------------------------------------------------------------
    def awaiting_approval(self, run: Row, item: Row, approval_id: str, tool_name: str) -> None:
        """A step of an MCP server waits for an approval: the row of (run, server) says so."""
        server = server_of(tool_name)
        if server is None:
            return
        state = {"status": "pending", "approval_id": approval_id, "item_id": item["item_id"]}
        waiting = CapabilityStatus.WAITING_FOR_APPROVAL
        row = self._row_of(run["run_id"], server)
        if row is None:
            self.ensure(run, server, "", waiting, state)
        else:
            self._status(run, row, waiting, approval_state=state)

    def lease_lost(self, job: Row) -> None:
        """The lease of ``job`` expired (its worker is gone): its live rows become ``resumable``."""
        run = self.run(job["run_id"])
        for row in self.rows(job["run_id"]):
            if row["job_id"] == job["job_id"] and row["status"] in LIVE:
                self._status(run, row, CapabilityStatus.RESUMABLE, WORKER_LOST)

    def close_run(self, run: Row) -> None:
        """The run ended: its rows are ``closed``; this process keeps their healthy connections a moment
        for the next run (:meth:`roost.agent.mcp_client.McpPool.release`)."""
        rows = self.rows(run["run_id"])
        if not rows:
            return  # (an agent without MCP sessions never loads the SDK)
        from roost.agent.mcp_client import mcp_pool

        pool = mcp_pool(self.agent.extension.process)
        for row in rows:
            pool.release(row["capability_session_id"])  # kept briefly for the next run
            if row["status"] != CapabilityStatus.CLOSED:
                self._status(run, row, CapabilityStatus.CLOSED, f"the run ended ({run['status']})")

    # -- the worker's turns -------------------------------------------------------------------------
    def open(
        self,
        run_id: str,
        server: str,
        transport: str,
        item_id: str | None,
        attempt: int,
        live: Callable[[str], bool],
        repeatable: bool = False,
    ) -> Opened:
        """Before an MCP call of ``item_id``'s job (``attempt``): the row of (run, server). ``live``:
        whether this process holds a connection of a row; ``repeatable``: the server marks the tool
        read-only or idempotent. See the module doc for the decisions."""
        run = self.run(run_id)
        row = self.ensure(run, server, transport)
        cfg = self.agent.settings().capability_sessions
        now = self.now
        cid = row["capability_session_id"]
        job_id = self.store.scalar(
            "SELECT job_id FROM roost_agent_jobs WHERE item_id = ? AND status = ? ORDER BY created_at DESC",
            (item_id, JobStatus.RUNNING),
        )
        lost = item_id is not None and row["in_flight"] == item_id  # opened before, never answered
        if lost and not repeatable and row["resend"] == RESEND_DECLINED:
            self._set(row, in_flight=None, resend=None, job_id=job_id, attempt=attempt)
            return Opened(cid, job_id, "declined")
        if lost and not repeatable and row["resend"] != RESEND_ALLOWED:
            question = (
                f"A call to MCP server {server!r} for this step was under way when it was stopped (its "
                "connection broke, its process died, it timed out or was cancelled): it may have had "
                'its effect. Answer with provide_input {"resend": true} to make it again; any other '
                "answer leaves it be and fails the step."
            )
            self._status(
                run,
                row,
                CapabilityStatus.RESUMABLE,
                "the call may have had its effect: waiting for leave to make it again",
                resend=RESEND_ASKED,
                job_id=job_id,
                attempt=attempt,
            )
            return Opened(cid, job_id, "wait", question)
        expired = row["expires_at"] is not None and row["expires_at"] <= now
        if expired and row["status"] != CapabilityStatus.REINITIALIZE_REQUIRED:
            self._status(
                run, row, CapabilityStatus.REINITIALIZE_REQUIRED, "the session expired (expires_at passed)"
            )
        approval = row["approval_state"]
        item = self.store.get("items", item_id) if item_id else None
        if item is not None and item["grant_id"] is not None:
            approval = {"status": "granted", "grant_id": item["grant_id"], "item_id": item_id}
        waits: dict[str, Any] = {"job_id": job_id, "attempt": attempt, "approval_state": approval}
        values = {**waits, "in_flight": item_id, "resend": None}  # under way from here; a leave is spent
        gone = (
            row["status"] != CapabilityStatus.REINITIALIZE_REQUIRED and row["initialized"] and not live(cid)
        )
        if gone:  # the row had a session that this process does not hold
            token, handshake = row["resume_token"], row["handshake"]
            if token is not None and handshake is not None and transport == "streamable_http":
                self._status(run, row, CapabilityStatus.IN_PROGRESS, "rejoining the session", **values)
                return Opened(cid, job_id, "rejoin", resume_token=token, handshake=handshake)
            why = (
                "the session ended with its connection: a stdio server's session does not outlive its process"
                if transport == "stdio"
                else "the session ended with its connection, and its id was not kept (track_session_ids)"
            )
            self._status(run, row, CapabilityStatus.REINITIALIZE_REQUIRED, why)
        if row["status"] == CapabilityStatus.REINITIALIZE_REQUIRED:
            if not (cfg.support_reinit_on_expiry or row["reinit_allowed"]):
                question = (
                    f"The session of MCP server {server!r} expired or ended ({row['reason'] or 'expired'}); "
                    "a new session may not see what the old one held. Answer with provide_input to "
                    "start a new session and go on."
                )
                self._set(row, **waits)
                return Opened(cid, job_id, "wait", question)
            self._status(
                run,
                row,
                CapabilityStatus.IN_PROGRESS,
                "re-initialised after expiry",
                reinit_allowed=0,
                **values,
            )
            return Opened(cid, job_id, "connect")
        if row["status"] != CapabilityStatus.IN_PROGRESS:
            reason = "resumed on its connection" if row["status"] == CapabilityStatus.RESUMABLE else None
            self._status(run, row, CapabilityStatus.IN_PROGRESS, reason, **values)
        else:
            self._set(row, **values)
        return Opened(cid, job_id, "reuse" if live(cid) else "connect")

    def connected(
        self,
        capability_session_id: str,
        session_id: str | None,
        ttl: float | None,
        handshake: dict[str, Any] | None = None,
    ) -> None:
        """A new MCP session of the row is up (``session_id``: the server's, over HTTP; ``handshake``:
        the result of its ``initialize``, kept with the id to rejoin it)."""
        row = self.row(capability_session_id)
        if row is None:
            return
        track = self.agent.settings().capability_sessions.track_session_ids and session_id is not None
        self._set(
            row,
            initialized=row["initialized"] + 1,
            resume_token=session_id if track else None,
            handshake=handshake if track else None,
            expires_at=self.now + ttl if ttl is not None else None,
        )

    def called(self, capability_session_id: str, ttl: float | None) -> None:
        """A call of the row's session ended: it was used now (``expires_at`` moves on)."""
        row = self.row(capability_session_id)
        if row is None:
            return
        self._set(
            row,
            calls=row["calls"] + 1,
            expires_at=self.now + ttl if ttl is not None else None,
            answer=None,
            elicitation=None,
            in_flight=None,
            resend=None,
        )

    def answered(self, capability_session_id: str) -> None:
        """The server answered the row's call (with an error): it is no longer under way."""
        row = self.row(capability_session_id)
        if row is not None:
            self._set(row, in_flight=None, resend=None)

    def session_gone(
        self, capability_session_id: str, reason: str, *, expired: bool, sent: bool = True
    ) -> None:
        """The row's connection ended under a call: the server forgot the session (``expired``:
        ``reinitialize_required``) or the connection broke (``resumable``). ``sent`` False: the call
        never reached the server (it is no longer under way)."""
        row = self.row(capability_session_id)
        if row is None or row["status"] == CapabilityStatus.CLOSED:
            return
        run = self.run(row["run_id"])
        status = CapabilityStatus.REINITIALIZE_REQUIRED if expired else CapabilityStatus.RESUMABLE
        if sent:
            self._status(run, row, status, reason)
        else:
            self._status(run, row, status, reason, in_flight=None)

    # -- elicitation ------------------------------------------------------------------------------------
    def elicit(
        self, capability_session_id: str, job_id: str | None, attempt: int, message: str, schema: Any
    ) -> tuple[str, Any]:
        """The server asks the user (during ``(job_id, attempt)``'s call). ``("answered", answer)``
        when the row holds the answer to this very question; ``("refused", why)`` for a call no
        longer current or an elicitation over the bounds (event ``elicitation_refused``); otherwise
        the run pauses ``waiting_for_input`` and ``("wait", None)``: the worker waits for
        :meth:`answer`."""
        row = self.row(capability_session_id)
        if row is None or row["job_id"] != job_id or row["attempt"] != attempt:
            return "refused", "the call is no longer current"
        run = self.run(row["run_id"])
        encoded = len(orjson.dumps(schema))
        if len(message) > MAX_MESSAGE or encoded > MAX_SCHEMA:
            reason = (
                f"elicitation refused: message of {len(message)} characters (at most {MAX_MESSAGE}), "
                f"schema of {encoded} bytes (at most {MAX_SCHEMA})"
            )
            self.event(
                "elicitation_refused",
                run,
                payload={
                    "capability_session_id": capability_session_id,
                    "server": row["server"],
                    "message_chars": len(message),
                    "schema_bytes": encoded,
                    "error": reason,
                },
            )
            return "refused", reason
        asked = {"message": message, "requested_schema": schema}
        kept = row["answer"]
        if kept is not None and kept.get("question") == asked:
            self._set(row, answer=None, elicitation=None)
            return "answered", self.records.original(kept["content"])
        self.orchestrator.project.release_heavy(run["run_id"])
        self._status(
            run, row, CapabilityStatus.WAITING_FOR_INPUT, "the server asked for input", elicitation=asked
        )
        self.set_run(run, waiting=Waiting.INPUT, question=self.err(message, 1000))
        self.set_turn(run, status=TurnStatus.AWAITING_INPUT)
        self.event(
            "input_requested",
            run,
            item_id=self._item_of(job_id),
            status=EventStatus.WAITING_FOR_INPUT,
            payload={
                "question": self.err(message, 1000),
                "capability_session_id": capability_session_id,
                "server": row["server"],
                "requested_schema": schema,
            },
        )
        return "wait", None

    def _item_of(self, job_id: str | None) -> str | None:
        job = self.store.get("jobs", job_id) if job_id else None
        return job["item_id"] if job else None

    def answer(self, run: Row, payload: Any) -> bool:
        """``provide_input`` for a run whose MCP session waits: the answer of an elicitation (checked
        against its schema, kept, handed to the worker here; ``{"action": "decline"}`` or
        ``{"action": "cancel"}`` answers the server so, unchecked), or the consent to a new session of
        an expired one. False when no session of the run waits (the run's own input)."""
        for row in self.rows(run["run_id"]):
            if row["status"] == CapabilityStatus.WAITING_FOR_INPUT and row["elicitation"] is not None:
                try:
                    size = len(orjson.dumps(payload))
                except TypeError:
                    raise InvalidArguments(message="payload: not JSON") from None
                if size > MAX_ANSWER:
                    raise InvalidArguments(
                        message=f"payload: an answer is at most {MAX_ANSWER} bytes of JSON"
                    )
                declined = payload in DECLINES  # the user says no: nothing to check against the schema
                why = None if declined else _fits(row["elicitation"]["requested_schema"], payload)
                if why is not None:
                    raise InvalidArguments(message=f"payload does not fit the requested schema: {why}")
                try:
                    kept = self.records.keep(payload)
                except (PayloadError, TypeError) as exc:
                    raise InvalidArguments(message=f"payload: {exc}") from None
                self._set(row, answer={"question": row["elicitation"], "content": kept})
                self._status(run, row, CapabilityStatus.IN_PROGRESS, "answered")
                self._resume(run, kept)
                from roost.agent.mcp_client import mcp_pool

                mcp_pool(self.agent.extension.process).deliver(row["capability_session_id"], payload)
                return True
            if row["resend"] == RESEND_ASKED and run["waiting"] == Waiting.INPUT:
                self._set(row, resend=RESEND_ALLOWED if gives_leave(payload) else RESEND_DECLINED)
                self._resume(run, self.records.keep(payload))
                return True
            if row["status"] == CapabilityStatus.REINITIALIZE_REQUIRED and run["waiting"] == Waiting.INPUT:
                self._set(row, reinit_allowed=1)
                self._resume(run, self.records.keep(payload))
                return True
        return False

    def _resume(self, run: Row, kept: Any) -> None:
        self.set_run(run, waiting=None, question=None)
        self.set_turn(run, status=TurnStatus.RUNNING)
        self.event("input_received", run, status=EventStatus.IN_PROGRESS, payload={"input": shown(kept)})

    # -- reads --------------------------------------------------------------------------------------
    def cards(self, run_id: str) -> list[dict[str, Any]]:
        """The run's capability sessions as ``get_run`` shows them (answers in their shown form)."""
        return [card(r) for r in self.rows(run_id)]
