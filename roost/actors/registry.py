"""The registry: which actors are live in this process, activating and deactivating them.

Guarantees:

- **Single activation (guarantee 1).** In one process, activation is *single-flight*: looking up a live
  actor, opening its file and inserting it into the table happen with no ``await`` in between, so any
  number of concurrent first calls to one name get the same :class:`~roost.actors.host.ActorHost`. Across
  processes on one data directory, the actor file's exclusive lock refuses a second activation
  (``ActorLocked``, answered with ``actor_unavailable`` / close 1013).
- **Dormancy.** An actor with no connections and nothing to do for ``idle_timeout`` seconds is
  deactivated: its file is closed and nothing of it stays in memory. The next input reactivates it from
  its file with its state intact.
- **Damaged files are refused, never re-created or served older (issue 13, point 10).** An actor the
  directory lists whose file is missing or empty, whose file SQLite cannot read (not a database,
  malformed), or whose file holds a seq older than its high-water seq (the higher of its witness
  sidecar, written after every commit before the release, and the directory's ``acked_seq``) raises
  :class:`~roost.actors.errors.ActorDamaged` (logged with the path and the reason, once per
  process); nothing is created or opened for good. No acknowledged write is rolled back silently
  (:mod:`roost.storage.damage`, ``docs/design.md``, *Damaged files*).
- **Last activity reaches the directory within a sweep.** Each idle sweep (every ``sweep_interval``,
  by default ``min(idle_timeout / 2, 5 s)``) writes the time of every live actor's last turn to the
  directory (``roost ls`` LAST ACTIVE); a deactivated or stopped actor's row keeps the time of its last
  turn, not the time it went dormant or the server stopped.
- **No directory call on the event loop waits for a lock.** The registry's directory does not wait
  (``Directory(..., waits=False)``): a flush that meets another process's lock stays queued for the
  next sweep, an alarm stays to be written by the next batch, the dispatcher claims at its next poll;
  what must wait (a new actor's row, the last flush) runs in the :class:`DirectoryThread`.
- **Bounded files.** At most ``max_active`` actors are live. Activating one more first deactivates the
  least recently active idle actor; if every live actor is busy, activation fails with ``Overloaded``.
- **Bounded descriptors.** :meth:`Registry.start` raises the soft descriptor limit to the hard limit
  and lowers ``max_active`` to what fits beside a reserve for sockets, saying so in the log (or
  refuses to start: ``TooFewDescriptors``); :attr:`Registry.descriptors` keeps what it found. An actor
  that cannot be opened for want of a descriptor is ``ActorUnavailable`` saying so
  (:mod:`roost.actors.descriptors`).
- **Every task has an owner that awaits or cancels it on stop.** The rule, for ``roost.actors`` and
  ``roost.scheduler``: a task is made only by its owner, which keeps a reference and ends it.

  - The registry's background tasks (the idle sweeper, the directory checkpointer, the dispatcher)
    are made in :meth:`Registry.start` into :attr:`Registry.background`, and cancelled and awaited
    in :meth:`Registry.stop`, before the actors drain.
  - Each :class:`~roost.actors.host.ActorHost` owns its mailbox task: ``stop()`` awaits it,
    ``deactivate()`` and a failure cancel it. The registry owns its hosts: :meth:`Registry.stop`
    stops every one (waiting ``stop_timeout``, then cancelling), including hosts that draining turns
    activate.
  - The dispatcher owns its delivery tasks and its sleep and kick waiters, cancelled and awaited
    when it stops.

  ``stop_timeout`` is the one wait measured on real time rather than the runtime's clock: a shutdown
  must end even when a test's fake clock is never moved. Every other timer (turn, call and fire
  timeouts, idle sweeps, wake-ups, leases) runs on :attr:`Registry.clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from roost.actors import activation
from roost.actors.config import RuntimeConfig
from roost.actors.connection import Principal
from roost.actors.decorators import CallableInfo, callables_of, check_workflows
from roost.actors.descriptors import DescriptorBudget, fit_descriptors
from roost.actors.directory_thread import DirectoryThread
from roost.actors.errors import (
    ActorDamaged,
    ActorNotFound,
    ActorUnavailable,
    CallTimeout,
    MethodNotFound,
    Overloaded,
    ReentrantCall,
    UnknownKind,
    shown_name,
)
from roost.actors.extension import Process, Service
from roost.actors.host import ACTOR_TASK, ActorHost
from roost.actors.inputs import Call, Input, Task, Wake
from roost.actors.observe import Observer
from roost.actors.refs import ActorRef, Key
from roost.actors.releases import FileReleases
from roost.protocol import CloseCode
from roost.scheduler import Clock, Dispatcher, SystemClock
from roost.storage import (
    ActorFile,
    Directory,
    actor_path,
    validate_kind,
)
from roost.storage import validate_name as _validate_name

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

    from roost.actors.actor import Actor
    from roost.actors.parts import HostCore

__all__ = ["ActorRef", "Registry", "RuntimeConfig", "Service"]

log = logging.getLogger("roost.registry")


class Registry:
    """Live actors of one process over one data directory. Owns their tasks and files."""

    def __init__(
        self,
        kinds: Iterable[type[Actor]],
        config: RuntimeConfig | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or RuntimeConfig()
        self.clock: Clock = clock or SystemClock()
        self.kinds: dict[str, type[Actor]] = {}
        self._callables: dict[str, dict[str, CallableInfo]] = {}
        for cls in kinds:
            kind = validate_kind(cls.kind or cls.__name__.lower())
            if kind in self.kinds:
                raise ValueError(f"two actor classes for kind {kind!r}")
            cls.kind = kind
            self.kinds[kind] = cls
            self._callables[kind] = callables_of(cls)
            check_workflows(cls)
            cls.on_register()
        self.hosts: dict[Key, ActorHost] = {}
        self.directory: Directory | None = None
        #: What may wait for the directory's lock (a new actor's row, a delete, the last flush).
        self.directory_thread: DirectoryThread | None = None
        self._retiring: set[Key] = set()  # actors being deleted: refused until the delete is done
        self._damaged: set[tuple[Key, str]] = set()  # refusals already logged
        self._preparing: dict[Key, asyncio.Future[None]] = {}  # prepares under way (single-flight)
        #: Files :meth:`prepare` created and left open for :meth:`get` (with when): the sweep
        #: releases one no input took within the idle timeout, :meth:`stop` all of them.
        self._fresh: dict[Key, tuple[ActorFile, float]] = {}
        self.dispatcher: Dispatcher | None = None
        self.rng = random.Random()  # retry jitter; tests may seed or replace it
        #: The registry's own tasks (sweeper, checkpointer, dispatcher): ended by :meth:`stop`.
        self.background: list[asyncio.Task[None]] = []
        self.sweeps = 0
        self.activations = 0
        #: Metrics and traces (:class:`~roost.actors.observe.Observer`; None: off). Set before the
        #: first actor is made: each host reads it once.
        self.observer: Observer | None = None
        self._to_flush: list[ActorHost] = []  # actors that ran turns inline in this loop iteration
        #: Files of deactivated actors being closed in worker threads (see :meth:`release_file`).
        self.file_releases = FileReleases(max(16, self.config.max_active // 10))
        self._flush_handle: asyncio.Handle | None = None
        #: Per-process services layered on the registry (e.g. the agent runtime's job worker), by
        #: name; each is stopped (``await service.stop()``) before the actors drain.
        self.services: dict[str, Service] = {}
        #: The extension API's per-process side (:class:`~roost.actors.extension.Process`).
        self.process = Process(self)
        #: The descriptor limit and the ``max_active`` sized to it at :meth:`start` (None: no limit).
        self.descriptors: DescriptorBudget | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Size ``max_active`` to the descriptor limit (raised to the hard limit first; raises
        ``TooFewDescriptors`` when too few actors fit), open the directory database and start the idle
        sweeper."""
        self._fit_descriptors()
        for cls in self.kinds.values():  # the kinds' setup that may wait on I/O, off the loop
            await asyncio.to_thread(cls.on_registry_start)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        # opened (and migrated) off the loop: it may wait for another process's lock once, here
        self.directory = await asyncio.to_thread(Directory, self.config.data_dir, waits=False)
        self.directory_thread = DirectoryThread(self.config.data_dir)
        interval = self.config.sweep_interval or min(self.config.idle_timeout / 2, 5.0)
        loop = asyncio.get_running_loop()
        self.background.append(loop.create_task(self._sweep_forever(interval), name="roost:sweeper"))
        self.background.append(loop.create_task(self._checkpoint_forever(10.0), name="roost:checkpoint"))
        if self.config.scheduler:
            self.dispatcher = Dispatcher(
                self.directory,
                self.wake,
                self.clock,
                poll_interval=self.config.poll_interval,
                lease=self.config.wakeup_lease,
                parks=_damaged,
                kinds=tuple(self.kinds),
            )
            self.background.insert(0, loop.create_task(self.dispatcher.run(), name="roost:dispatcher"))

    def _fit_descriptors(self) -> None:
        found = fit_descriptors(self.config.max_active, self.config.fd_reserve)
        self.descriptors = found
        if found is None:
            return
        if found.lowered_from is None:
            log.info("%s", found.describe())
            return
        log.warning("%s", found.describe())
        self.config.max_active = found.max_active
        self.file_releases.max_pending = max(16, found.max_active // 10)

    async def stop(self) -> None:
        """Drain and close every live actor, then the directory. Close connections first."""
        background, self.background = self.background, []
        for task in background:  # the dispatcher first: it wakes actors
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for service in list(self.services.values()):
            try:
                await service.stop()
            except Exception:
                log.exception("service failed to stop")
        self.services.clear()
        stopped: set[ActorHost] = set()
        for _ in range(10):  # a draining turn may call a dormant actor: it is stopped in the next round
            hosts = [h for h in self.hosts.values() if h not in stopped]
            if not hosts:
                break
            stopped.update(hosts)
            await self._stop_hosts(hosts)
        left = [h for h in self.hosts.values() if h not in stopped]
        if left:  # still waking each other after ten rounds: left to the process's exit
            log.warning("%d actors kept activating during shutdown; not stopped", len(left))
        self.hosts.clear()
        self._release_fresh(lambda _: True)
        await self.released()  # every file is closed on return
        self.file_releases.shutdown()
        directory, self.directory = self.directory, None
        if self.directory_thread is not None:  # the last flush may wait for a lock: in its thread
            await self.directory_thread.close(directory)
            self.directory_thread = None
        elif directory is not None:
            directory.close()

    async def _stop_hosts(self, hosts: list[ActorHost]) -> None:
        loop = asyncio.get_running_loop()
        active = [self._active_at(h) for h in hosts]  # before the drain, which counts as activity
        stops = [loop.create_task(h.stop(), name=f"roost:stop:{h.kind}/{h.name}") for h in hosts]
        _, late = await asyncio.wait(stops, timeout=self.config.stop_timeout)
        for task in late:  # a turn that will not end: cancel it (rolled back), close the file
            log.warning("actor did not drain within %s s; cancelling", self.config.stop_timeout)
            task.cancel()
        await asyncio.gather(*stops, return_exceptions=True)
        for h, at in zip(hosts, active, strict=True):
            h.file.close()
            if self.directory is not None:
                self.directory.touch(h.kind, h.name, at, h.acked_seq, h.row_created)

    async def _sweep_forever(self, interval: float) -> None:
        while True:
            await self.clock.sleep(interval)
            try:
                self.sweep()
            except Exception:
                log.exception("idle sweep failed")

    async def _checkpoint_forever(self, interval: float) -> None:
        """The directory's WAL checkpoint (and its fsync) runs in a thread, off the event loop."""
        while True:
            await self.clock.sleep(interval)
            if self.directory is not None:
                try:
                    await asyncio.to_thread(self.directory.checkpoint)
                except Exception:
                    log.exception("directory checkpoint failed")

    def sweep(self) -> int:
        """Deactivate every actor idle for ``idle_timeout``; flush the directory. Returns how many."""
        self.sweeps += 1
        deadline = self.clock.monotonic() - self.config.idle_timeout
        n = 0
        self._release_fresh(lambda since: since <= deadline)  # prepared, never taken
        for host in list(self.hosts.values()):
            if host.last_active <= deadline and not self._held(host) and self._deactivate(host):
                n += 1
            elif self.directory is not None:
                self._touch(host)
        if self.directory is not None:
            self.directory.flush()
        return n

    def _release_fresh(self, which: Callable[[float], bool]) -> None:
        for key, (file, since) in list(self._fresh.items()):
            if which(since):
                del self._fresh[key]
                self.release_file(key, file)

    def evictable(self, host: ActorHost) -> bool:
        """Whether making room may deactivate ``host``: idle, not stopping, and no work of it runs
        outside its turns (:meth:`_held`)."""
        return host.idle and not host.stopping and not self._held(host)

    def _held(self, host: ActorHost) -> bool:
        """Whether a process service runs work of ``host``'s actor outside its turns (an outside step
        of the workflow core): then it stays live (:class:`~roost.actors.actor.Service`)."""
        for service in self.services.values():
            holds = getattr(service, "holds_actor", None)
            if holds is not None and holds(host.kind, host.name):
                return True
        return False

    def _deactivate(self, host: ActorHost) -> bool:
        if not host.deactivate():
            return False
        self.hosts.pop(host.key, None)
        if self.directory is not None:
            self._touch(host)
        return True

    def _touch(self, host: ActorHost) -> None:
        """Queue the host's last activity and committed seq for the directory's next flush."""
        assert self.directory is not None
        self.directory.touch(host.kind, host.name, self._active_at(host), host.acked_seq, host.row_created)

    def _active_at(self, host: ActorHost) -> float:
        """The wall-clock time of the host's last activity (its ``last_active`` is monotonic): what the
        directory's ``last_active_at`` records, whether the actor stays live, goes dormant or stops
        (not the time of the sweep or of the shutdown)."""
        return self.clock.now() - (self.clock.monotonic() - host.last_active)

    def forget(self, host: HostCore) -> None:
        """Called by a host that stopped after a failure."""
        if self.hosts.get(host.key) is host:
            del self.hosts[host.key]

    # -- activation -------------------------------------------------------------------------------------
    def kind_of(self, kind: str) -> type[Actor]:
        cls = self.kinds.get(kind)
        if cls is None:
            raise UnknownKind(kind)
        return cls

    def callable_info(self, kind: str, method: str) -> CallableInfo | None:
        return self._callables.get(kind, {}).get(method)

    def validate(self, kind: str, name: str) -> None:
        """Raise ``UnknownKind`` or ``InvalidActorAddress`` before anything is touched."""
        self.kind_of(kind)
        _validate_name(name)

    def exists(self, kind: str, name: str) -> bool:
        """Whether the actor was ever created (live, or dormant with a file)."""
        if (kind, name) in self.hosts:  # live: its address was checked when it was activated
            return True
        self.validate(kind, name)
        if actor_path(self.config.data_dir, kind, name).exists():
            return True
        # a damaged actor whose file is gone still exists: asking about it is refused as damaged
        return self.directory is not None and self.directory.get(kind, name) is not None

    # -- activation (roost/actors/activation.py) -------------------------------------------------------
    prepare = activation.prepare
    _took_fresh = activation.took_fresh
    _creator = activation.creator
    get = activation.get
    _register_inline = activation.register_inline
    _not_opened = activation.not_opened
    _no_descriptor = activation.no_descriptor
    _refuse_damaged = activation.refuse_damaged

    @property
    def deleting(self) -> frozenset[Key]:
        """The actors inside :meth:`retiring` right now (refused until their delete is done)."""
        return frozenset(self._retiring)

    @contextlib.asynccontextmanager
    async def retiring(self, kind: str, name: str) -> AsyncIterator[None]:
        """Keep an actor from activating while its files go (a delete through the server). **A delete
        never lets a racing input bring the old data back**: inside the block every input for it is
        refused ``actor_unavailable`` ("being deleted"); a live actor's connections are closed (1000,
        "actor deleted"), its mailbox drained (inputs queued before run first) and its file closed; a
        file still being released from a deactivation is released first. After the block, the name
        activates as a new actor, its queued directory touch dropped (it starts at seq 0)."""
        key = (kind, name)
        if key in self._retiring:
            raise ActorUnavailable(message=f"actor {kind}/{shown_name(name)!r} is being deleted")
        self._retiring.add(key)
        try:
            host = self.hosts.get(key)
            if host is not None:
                host.refusal = f"actor {kind}/{shown_name(name)!r} is being deleted"
                for conn in list(host.connections.values()):
                    conn.deliver_close(CloseCode.NORMAL, "actor deleted")
                await self._stop_hosts([host])
                if self.hosts.get(key) is host:
                    del self.hosts[key]
            fresh = self._fresh.pop(key, None)
            if fresh is not None:  # prepared, never taken
                self.release_file(key, fresh[0])
            await self.released()
            yield
        finally:
            self._retiring.discard(key)
            if self.directory is not None:
                self.directory.discard(kind, name)

    def release_file(
        self, key: Key, file: ActorFile, last_state: tuple[str, int, float] | None = None
    ) -> None:
        """Close a deactivated actor's file in a release thread, after writing its state snapshot
        row (``last_state``, see :meth:`ActorFile.begin_close`): SQLite's close checkpoints and
        fsyncs, and must not stall every other actor. **The actor is never opened again before its
        release has finished**: :meth:`get` waits for a release under way (one close at most, and
        only for an actor reactivated within it) or runs a release still queued itself; :meth:`stop`
        waits for all of them.

        Releases have threads of their own (a sweep of many actors must not delay live actors'
        checkpoints), and their backlog is bounded: each pending release still holds a connection
        and its witness (three descriptors, ~190 KB), so past ``max(16, max_active // 10)`` of them
        the file is closed here, on the loop, as before."""
        self.file_releases.release(key, file, last_state)

    async def released(self) -> None:
        """Wait until the file of every actor deactivated so far is closed (its lock released).
        Entries stay in place meanwhile, so that an activation of one of them still waits for it."""
        await self.file_releases.wait_all()

    def releases(self) -> ThreadPoolExecutor:
        """The four threads that close deactivated actors' files (:meth:`release_file`)."""
        return self.file_releases.pool("release")

    def checkpoints(self) -> ThreadPoolExecutor:
        """The four threads that run actor WAL checkpoints: their own, so that other ``to_thread`` work
        never keeps an actor waiting for its checkpoint to start."""
        return self.file_releases.pool("checkpoint")

    def flush_soon(self, host: ActorHost, loop: asyncio.AbstractEventLoop) -> None:
        """Commit ``host``'s batch at the end of this loop iteration. One callback serves every actor
        that ran a turn inline in the iteration (see ``ActorHost.run_now``)."""
        self._to_flush.append(host)
        if self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush_all)

    def _flush_all(self) -> None:
        self._flush_handle = None
        hosts, self._to_flush = self._to_flush, []
        for host in hosts:
            try:
                host.flush_soon()
            except Exception:  # one actor's failure is its own (it stops); the others commit
                log.exception("flush of %s/%r failed", host.kind, host.name)

    def _make_room(self) -> None:
        """Deactivate the least recently active idle actors: a tenth of the bound at once, so that the
        sort is paid once per many activations, not on every one."""
        idle = [h for h in self.hosts.values() if self.evictable(h)]
        if not idle:
            raise Overloaded(message=f"{len(self.hosts)} actors live, all busy")
        idle.sort(key=_last_active)
        for host in idle[: max(1, self.config.max_active // 10)]:
            self._deactivate(host)

    # -- calls -----------------------------------------------------------------------------------------
    def ref(
        self, kind: str, name: str, *, chain: tuple[Key, ...] = (), principal: Principal | None = None
    ) -> ActorRef:
        return ActorRef(self, kind, name, chain, principal)

    def submit(self, kind: str, name: str, item: Input) -> ActorHost:
        """Activate if needed and queue ``item``; the same host takes it (no await in between)."""
        host = self.get(kind, name)
        host.submit(item)
        return host

    async def call(
        self,
        kind: str,
        name: str,
        method: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        chain: tuple[Key, ...] = (),
        timeout: float | None = None,
        principal: Principal | None = None,
        idempotency_key: str | None = None,
        trace: object = None,
    ) -> tuple[Any, list[Any]]:
        """Call a method in process; returns ``(result, chunks)`` once the callee has committed.
        ``trace``: the caller's trace context (opaque here), the parent of the turn's span.

        A call creates the actor it calls, but a read-only one (``@callable(readonly=True)``) to an
        actor never created raises ``ActorNotFound`` (code ``not_found``) and creates nothing (no
        file, no directory row), as the same call over HTTP answers 404; so does a call to a method
        that does not exist (``MethodNotFound``).

        ``idempotency_key``: the outcome recorded under it for this caller (``principal``: its tenant
        and id; no principal is one caller too), if the actor has one, else the call runs and records
        it (:mod:`roost.actors.callkeys`)."""
        if (kind, name) in chain:
            raise ReentrantCall(
                message=f"{kind}/{shown_name(name)!r} is already in this call chain; it would wait on itself"
            )
        info = self.callable_info(self.kind_of(kind).kind, method)
        if info is None:
            # refused before activation: a call to a missing method creates nothing
            raise MethodNotFound(message=f"no callable method {method!r}")
        if info.readonly and (kind, name) not in self.hosts and not self.exists(kind, name):
            raise ActorNotFound(kind, name)  # a read creates nothing
        await self.prepare(kind, name)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        chunks: list[Any] = []
        self.submit(
            kind,
            name,
            Call(
                method,
                args,
                kwargs,
                reply=fut,
                chunks=chunks,
                chain=chain,
                principal=principal,
                key=idempotency_key,
                trace=trace,
            ),
        )
        return await self._wait(fut, timeout), chunks

    async def run(
        self,
        kind: str,
        name: str,
        fn: Callable[[Actor], Awaitable[Any]],
        *,
        timeout: float | None = None,
    ) -> Any:
        """Run ``fn(actor)`` as a turn of that actor; returns its result after the commit.

        From a task that is not an actor's (a job's worker, a stream's batches), the turn runs at once
        when the actor is parked (an inline turn, ``ActorHost.run_now``: no switch to its mailbox
        task), its writes joining the batch that commits at the end of this loop iteration. From an
        actor's own task (a turn awaiting another actor) it is queued, as any input."""
        await self.prepare(kind, name)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        host = self.get(kind, name)
        caller = asyncio.current_task()
        if caller is not None and not caller.get_name().startswith(ACTOR_TASK):
            host.run_now(Task(fn, fut))
        else:
            host.submit(Task(fn, fut))
        return await self._wait(fut, timeout)

    async def wake(self, kind: str, name: str) -> int:
        """Run the due wake-ups of an actor (activating it if dormant); how many fire turns ran."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.submit(kind, name, Wake(fut))
        fired: int = await self._wait(fut, self.config.turn_timeout * 4)
        return fired

    def alarm_set(self, at: float) -> None:
        """A live actor wrote its alarm: the dispatcher may need to wake earlier."""
        if self.dispatcher is not None:
            self.dispatcher.notify(at)

    async def snapshot(self, kind: str, name: str) -> tuple[Any, int]:
        """The committed ``(state, seq)`` of an existing actor. ``ActorNotFound`` creates nothing."""
        if not self.exists(kind, name):
            raise ActorNotFound(kind, name)

        async def read(actor: Actor) -> tuple[Any, int]:
            return actor.state, actor.seq

        result: tuple[Any, int] = await self.run(kind, name, read)
        return result

    async def _wait(self, fut: asyncio.Future[Any], timeout: float | None) -> Any:
        limit = self.config.call_timeout if timeout is None else timeout
        try:
            async with self.clock.timeout(limit):
                return await asyncio.shield(fut)
        except CallTimeout:
            raise  # the actor's own answer ("turn exceeded …"), not our wait running out
        except TimeoutError:
            raise CallTimeout(message=f"no answer within {limit} s") from None
        finally:
            if not fut.done():
                # the answer may still come after we gave up (timeout, or the waiting turn was
                # cancelled): retrieve it then, so that it is not reported as lost
                fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    # -- introspection ------------------------------------------------------------------------------
    @property
    def connection_count(self) -> int:
        return sum(len(h.connections) for h in self.hosts.values())


def _damaged(exc: Exception) -> bool:
    """A wake-up failure that will not pass by itself: the dispatcher parks its alarm."""
    return isinstance(exc, ActorDamaged)


def _last_active(host: ActorHost) -> float:
    return host.last_active
