"""One handler per kind of input: what its turn runs, and how its caller is answered.

:func:`dispatch` takes an input from the mailbox and runs it. Each handler runs
its body inside ``host.turn.run(...)`` (:class:`~roost.actors.turn.Turn`), which begins, commits or
rolls back the turn; the handler only says what the turn does and, in its ``failed`` function, what
the caller gets when it was rolled back:

============  =======================================  ==============================================
input         turn                                     on failure
============  =======================================  ==============================================
Call          the ``@callable`` (chunks at each yield)  an ``rpc_error`` frame, or the future fails
Message       ``on_message``                           an ``error`` frame
Connect       ``on_connect``, welcome, replay's 1st page  close (the ``Reject``'s code, or 1011)
ReplayPage    the next page of a connection's replay   close 1011
Disconnect    ``on_close``                             ``on_error`` only
Task          ``fn(actor)`` (jobs, extensions)         the future fails
Wake          one fire turn per due wake-up, then one  (see :mod:`roost.actors.wakeups` and
              turn per due queue item                  :mod:`roost.actors.queue_runs`)
Deliver       no turn: the frame joins the held ones
============  =======================================  ==============================================

Failures other than ``RpcError`` go to the actor's ``on_error`` (outside any turn).

What a caller is told of a failure (:func:`as_rpc_error`, the one place that decides it, for a client
over WebSocket or HTTP, a streaming call, another actor or a task alike): an ``RpcError`` the actor
(or the runtime) raised on purpose keeps its code and message; the turn's timeout is ``timeout``; a
``StateError`` (the state the call would leave is not JSON, or its kind's ``validate_state`` refuses
it) is ``invalid_state`` with its message, the writes rolled back; any other exception is
*unexpected*: it is logged with its traceback under a short reference id
(:func:`~roost.actors.turn.log_failure`) and the caller gets ``handler_error`` with a generic
message carrying that id, ``internal error in say (ref 3f9a12bc)``, never the exception's text. A
failed ``on_connect`` (but a ``Reject``) or ``on_close`` is logged the same way.

**The arriving connection is in ``self.connections`` during ``on_connect``** (tests in
``tests/test_connect_request.py``): a broadcast from ``on_connect`` reaches it too (after its
welcome and replay, like everything ``on_connect`` sends it), the turn's state and events only
through its welcome and replay; a failed or rejected ``on_connect`` removes it again, and the turn's
broadcasts are rolled back with the turn, so nobody saw them.

**A stream yields to the loop between chunks** (test in ``tests/test_streaming_turns.py``): after
each chunk's checkpoint the turn gives the event loop a turn, so other clients are served while a
long stream runs, its chunks are written as they come (and count against the connection's send
bound), and ``turn_timeout`` cuts it: the chunks before are committed, the caller gets ``timeout``.
**A stream whose connection is gone stops at its next chunk** (test in
``tests/test_slow_consumers.py``): once its socket is closing or closed (a slow consumer closed past
its send bound, a client that left; :attr:`Connection.gone <roost.actors.Connection.gone>`), the
generator is closed after the chunk it has yielded and the turn ends; what was committed stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import orjson

from roost.actors import queue_runs, replay, wakeups
from roost.actors.callkeys import NOT_RECORDED, Recorded, caller_of, fingerprint
from roost.actors.connection import Connection, Principal
from roost.actors.errors import (
    ActorUnavailable,
    CallTimeout,
    HandlerError,
    IdempotencyConflict,
    IdempotencyResultUnavailable,
    InvalidArguments,
    MethodNotFound,
    Reject,
    RpcError,
    StateError,
    shown_name,
)
from roost.actors.inputs import Call, Connect, Deliver, Disconnect, Input, Message, ReplayPage, Task, Wake
from roost.actors.outputs import Close, Failure, Frame, Result
from roost.actors.turn import log_failure, report
from roost.protocol import CloseCode, frames
from roost.protocol.resume import decide_resume

if TYPE_CHECKING:
    from roost.actors.parts import HostCore

__all__ = ["as_rpc_error", "dispatch", "maybe_await", "report"]

log = logging.getLogger("roost.actor")


async def dispatch(host: HostCore, item: Input) -> None:
    """Run one input: its turn (all but :class:`Deliver`), counting it off its connection. The host
    notes ``item`` as its current input first (a failure answers it)."""
    if isinstance(item, Call):
        try:
            await _call(host, item)
        finally:
            if item.conn is not None:
                item.conn.in_flight -= 1
    elif isinstance(item, Message):
        try:
            await _message(host, item)
        finally:
            item.conn.in_flight -= 1
    elif isinstance(item, Connect):
        await _connect(host, item)
    elif isinstance(item, Disconnect):
        await _disconnect(host, item)
    elif isinstance(item, Deliver):
        item.conn.in_flight -= 1  # counted by the transport when it queued the frame
        if item.conn.id in host.connections:
            host.gate.held.append(Frame(item.conn, item.text))
    elif isinstance(item, ReplayPage):
        await _replay_page(host, item)
    elif isinstance(item, Wake):
        fired = await wakeups.run_due(host)
        fired += await queue_runs.run_due(host)
        if item.reply is not None:
            host.gate.held.append(Result(item.reply, fired))
    else:
        await _task(host, item)


# -- Call ------------------------------------------------------------------------------------------
async def _call(host: HostCore, item: Call) -> None:
    conn = item.conn
    if conn is not None and conn.id not in host.connections:
        return  # rejected or already gone
    with host.turn.run(conn, _call_failed, item):
        if item.chain:
            host.chain = (*item.chain, host.key)
        if item.principal is not None:
            host.principal = item.principal
        who = conn.principal if conn is not None else item.principal
        host.read_only_turn = who is not None and bool(who.claims.get("read_only"))
        fp = _fingerprint(host, item) if item.key is not None else ""
        if fp:
            recorded = _recorded(host, item, fp, who)
            if recorded is not None:
                if not recorded.ok:
                    raise RpcError(recorded.code, recorded.message)
                _answer(host, item, orjson.loads(recorded.result_json))
                return
        result = await _invoke(host, item)
        if item.key is not None:
            host.call_keys.record_result(
                _caller(who), item.key, fp, orjson.dumps(result).decode(), host.turn.now
            )
        _answer(host, item, result)


def _answer(host: HostCore, item: Call, result: Any) -> None:
    if item.conn is not None:
        host.gate.turn.append(Frame(item.conn, frames.rpc_ok(item.id, result)))
    elif item.reply is not None:
        host.gate.turn.append(Result(item.reply, _as_sent(result)))


def _fingerprint(host: HostCore, item: Call) -> str:
    """The fingerprint of a call whose key counts (:mod:`roost.actors.callkeys`), or ``""`` (and no
    key on ``item``) for a call whose key is ignored: a read-only method or principal, or a method
    that does not exist (it fails with ``method_not_found``, as without a key)."""
    info = host.callables.get(item.method)
    if info is None or info.readonly or host.read_only_turn:
        item.key = None
        return ""
    if info.streaming:
        item.key = None
        raise InvalidArguments(message=f"{item.method} streams: a streaming call takes no idempotency key")
    return fingerprint(item.method, item.args, item.kwargs)


def _caller(who: Principal | None) -> str:
    """Whose keys the call's are (:func:`~roost.actors.callkeys.caller_of`)."""
    return caller_of(who.tenant, who.id) if who is not None else caller_of(None, None)


def _recorded(host: HostCore, item: Call, fp: str, who: Principal | None) -> Recorded | None:
    """The outcome recorded under the caller's key, if any; once there is one (or a conflict, or an
    outcome that was not kept), the call records nothing more."""
    assert item.key is not None
    try:
        recorded = host.call_keys.lookup(_caller(who), item.key, fp, host.turn.now)
    except (IdempotencyConflict, IdempotencyResultUnavailable):
        item.key = None
        raise
    if recorded is not None:
        item.key = None
    return recorded


def _record_error(host: HostCore, item: Call, err: RpcError) -> None:
    """Record a failed call's error under its key, in the batch transaction (its turn was rolled back,
    so the record is a write of its own); the error's reply is held until it commits."""
    assert item.key is not None
    conn = item.conn
    who = conn.principal if conn is not None else item.principal
    fp = fingerprint(item.method, item.args, item.kwargs)
    host.file.begin_turn()
    try:
        host.call_keys.record_error(_caller(who), item.key, fp, err.code, err.message, host.turn.now)
    except BaseException:
        host.file.abort_turn()
        raise
    host.file.end_turn()


def _call_failed(host: HostCore, item: Call, exc: BaseException) -> None:
    err = as_rpc_error(host, exc, item.method)
    if isinstance(err, HandlerError):
        report(host, exc, item.conn)
    if item.key is not None and err.code not in NOT_RECORDED and not host.file.closed:
        _record_error(host, item, err)
    if item.conn is not None:
        host.gate.held.append(Frame(item.conn, frames.rpc_error(item.id, err.code, err.message)))
    elif item.reply is not None:
        host.gate.held.append(Failure(item.reply, err))


async def _invoke(host: HostCore, item: Call) -> Any:
    info = host.callables.get(item.method)
    if info is None:
        raise MethodNotFound(message=f"no callable method {item.method!r}")
    args, kwargs = info.arguments(item.args, item.kwargs)  # InvalidArguments before any user code
    res = getattr(host.actor, item.method)(*args, **kwargs)
    check = info.result
    if not info.streaming:
        if type(res) is CoroutineType or isinstance(res, Awaitable):
            res = await res
        return res if check is None else check(res)
    conn = item.conn
    async for chunk in res:
        if check is not None:
            chunk = check(chunk)
        if conn is not None:
            host.gate.turn.append(Frame(conn, frames.rpc_chunk(item.id, chunk)))
        elif item.chunks is not None:
            item.chunks.append(_as_sent(chunk))
        host.turn.checkpoint()
        # between two chunks the loop runs: other actors and clients are served, the chunk is written
        # (or counts against the connection's send bound), and the turn's timeout can cut the stream
        # (a generator that never awaits anything would otherwise hold the loop to its end)
        await asyncio.sleep(0)
        if conn is not None and conn.gone:  # nobody reads it any more: the stream stops here
            await res.aclose()
            break
    return None


# -- Message ----------------------------------------------------------------------------------------
async def _message(host: HostCore, item: Message) -> None:
    conn = item.conn
    if conn.id not in host.connections:
        return
    with host.turn.run(conn, _message_failed, item):
        await maybe_await(host.actor.on_message(conn, item.data))


def _message_failed(host: HostCore, item: Message, exc: BaseException) -> None:
    report(host, exc, item.conn)
    err = as_rpc_error(host, exc, "on_message")
    host.gate.held.append(Frame(item.conn, frames.error(err.code, err.message)))


# -- Connect and Disconnect ------------------------------------------------------------------------
async def _connect(host: HostCore, item: Connect) -> None:
    conn = item.conn
    conn.attach(host)
    # The arriving connection is in self.connections while on_connect runs (as in Cloudflare's
    # onConnect). The state and events logged in this turn reach it through its welcome and replay
    # (built after on_connect), never as frames of their own: ``joining`` keeps them from it.
    try:
        with host.turn.run(conn, _connect_failed, item):
            host.connections[conn.id] = conn
            host.joining = (conn.id,)
            await maybe_await(host.actor.on_connect(conn))
            # The welcome is this connection's first frame, whatever on_connect sent it: it reflects
            # the state after on_connect, then the replay, then what on_connect sent and broadcast
            # (held behind the replay while its pages are read: see roost.actors.replay).
            welcome, after = _welcome(host, conn, item.cursor)
            gate = host.gate
            mine = [out for out in gate.turn if getattr(out, "conn", None) is conn]
            if mine:
                gate.turn = [out for out in gate.turn if getattr(out, "conn", None) is not conn]
            if after is None:
                gate.turn.append(Frame(conn, welcome))
            else:
                replay.first_page(host, conn, after, welcome)
            gate.turn.extend(mine)
    finally:
        host.joining = ()


def _connect_failed(host: HostCore, item: Connect, exc: BaseException) -> None:
    conn = item.conn
    if host.connections.get(conn.id) is conn:
        del host.connections[conn.id]  # refused: no later broadcast or close turn sees it
    conn.detach()  # its replay, if one had begun, with it
    if isinstance(exc, Reject):
        host.gate.held.append(Close(conn, exc.code, exc.reason))
    else:
        reason = "on_connect failed"
        if not isinstance(exc, asyncio.CancelledError):
            reason += f" (ref {log_failure(host, exc, 'on_connect')})"
        report(host, exc, conn)
        host.gate.held.append(Close(conn, CloseCode.INTERNAL_ERROR, reason))


def _welcome(host: HostCore, conn: Connection, cursor: int | None) -> tuple[str, int | None]:
    """The welcome frame and, per the resume rules, the ``seq`` after which frames are replayed
    (``None``: nothing to replay)."""
    resume = decide_resume(cursor, host.seq, host.oldest)
    after = resume.replay_after
    name = shown_name(host.name)  # as the client named it
    welcome = frames.welcome(
        conn.id, host.kind, name, host.state_json, host.seq, host.oldest, resume.mode, resume.reason
    )
    return welcome, after if after is not None and after < host.seq else None


async def _replay_page(host: HostCore, item: ReplayPage) -> None:
    with host.turn.run(item.conn, _replay_page_failed, item):
        replay.next_page(host, item.conn)


def _replay_page_failed(host: HostCore, item: ReplayPage, exc: BaseException) -> None:
    conn = item.conn
    reason = "replay failed"
    if not isinstance(exc, asyncio.CancelledError):
        reason += f" (ref {log_failure(host, exc, 'replay')})"
    host.gate.held.append(Close(conn, CloseCode.INTERNAL_ERROR, reason))


async def _disconnect(host: HostCore, item: Disconnect) -> None:
    conn = item.conn
    if host.connections.pop(conn.id, None) is None:
        conn.detach()
        return
    try:
        with host.turn.run(conn, _disconnect_failed, item):
            await maybe_await(host.actor.on_close(conn, item.code))
    finally:
        conn.detach()  # a closed connection keeps nothing of the actor alive


def _disconnect_failed(host: HostCore, item: Disconnect, exc: BaseException) -> None:
    if not isinstance(exc, asyncio.CancelledError | RpcError):
        log_failure(host, exc, "on_close")
    report(host, exc, item.conn)


# -- Task -------------------------------------------------------------------------------------------
async def _task(host: HostCore, item: Task) -> None:
    with host.turn.run(None, _task_failed, item):
        host.chain = (*item.chain, host.key)
        result = await item.fn(host.actor)
        host.gate.turn.append(Result(item.reply, result))


def _task_failed(host: HostCore, item: Task, exc: BaseException) -> None:
    host.gate.held.append(Failure(item.reply, as_rpc_error(host, exc, "task")))


# -- shared ---------------------------------------------------------------------------------------
def _as_sent(value: Any) -> Any:
    """A result or chunk for a caller in this process, as a caller over a socket would get it: encoded
    and decoded again (a copy, JSON only), inside its turn. Like an ``rpc_result`` frame, which is
    encoded in the turn, a value that cannot be encoded fails the turn (``TypeError``, rolled back);
    room is kept for the two levels of nesting a transport puts around it (HTTP's ``{"result": …}``
    and ``{"chunks": […]}``), so that a value which passes here is never one the answer cannot carry
    (orjson encodes only about 255 levels)."""
    return orjson.loads(orjson.dumps([[value]]))[0][0]


def as_rpc_error(host: HostCore, exc: BaseException, where: str) -> RpcError:
    """What a caller is told of a failed turn that ran ``where`` (a method's name, ``on_message``):
    an ``RpcError`` as it is; any exception other than the turn's timeout or a stop is logged (see
    :func:`~roost.actors.turn.log_failure`) and told only as ``handler_error`` with its reference id."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, StateError):  # the state the call would leave is refused: the caller's to know
        return RpcError("invalid_state", str(exc)[:500])
    if isinstance(exc, TimeoutError):
        return CallTimeout(message=f"turn exceeded {host.turn_timeout} s")
    if isinstance(exc, asyncio.CancelledError):
        return ActorUnavailable(message="actor is stopping")
    return HandlerError(message=f"internal error in {where} (ref {log_failure(host, exc, where)})")


async def maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
        return await value
    return value
