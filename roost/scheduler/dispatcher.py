"""The dispatcher: one task per process that wakes actors when their alarm in the directory is due.

It knows nothing of actors or sockets: it reads and claims alarms in the directory database and calls
the ``wake(kind, name)`` it is given (the registry's, which activates a dormant actor and runs its due
wake-ups as turns).

Guarantees:

- **Start-up cost does not grow with the number of schedules**: each round reads the earliest alarm
  from the directory's partial index, and claims due actors in alarm order.
- **Several processes on one data directory never fire a wake-up twice**: a claim moves the actor's
  alarm to the end of a short lease, renewed while the wake-up runs (so no other dispatcher takes it
  meanwhile, and a crashed claimer's work comes due again within one lease); the fire itself runs in
  the one process holding the actor's file lock, and its completion is recorded with its effects.
- **Its tasks are its own**: each delivery runs in a task it keeps (at most ``concurrency``), and
  :meth:`run` cancels and awaits them all when it ends; so are the waiters of one sleep.
- **No busy loop, no missed alarm**: it sleeps until the earliest alarm, at most ``poll_interval``
  (alarms written by other processes), and is woken early by :meth:`notify` when a live actor in this
  process sets an earlier one. Time comes from an injectable clock.
- **A wake-up that cannot succeed is parked, not retried every second**: when ``parks(exc)`` says a
  failure will not pass by itself (the registry's: the actor is damaged), the alarm is given back due
  in ``park_delay`` seconds (an hour) instead of ``retry_delay``, and logged once per process and
  actor. ``roost delete`` clears it with the actor's row.
- **Only the kinds it serves**: given ``kinds``, it claims (and sleeps for) the alarms of those kinds
  alone. An actor of a kind this app does not serve, left on the data directory by another app (or
  served by another process on it), keeps its alarm due for whoever serves it: it is never claimed,
  failed and retried here (that was a deferral logged every second for as long as the process ran).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from roost.scheduler.clock import Clock
from roost.storage import Directory, DirectoryBusy

__all__ = ["Dispatcher"]

log = logging.getLogger("roost.dispatcher")

Wake = Callable[[str, str], Awaitable[object]]


class Dispatcher:
    def __init__(
        self,
        directory: Directory,
        wake: Wake,
        clock: Clock,
        *,
        owner: str | None = None,
        lease: float = 10.0,
        poll_interval: float = 1.0,
        concurrency: int = 64,
        retry_delay: float = 1.0,
        parks: Callable[[Exception], bool] | None = None,
        park_delay: float = 3600.0,
        kinds: Collection[str] | None = None,
    ) -> None:
        self.directory = directory
        #: The kinds whose wake-ups this dispatcher claims (None: all); another process on the same
        #: data directory may serve the others, and their alarms are left to it.
        self.kinds = None if kinds is None else tuple(kinds)
        self.wake = wake
        self.clock = clock
        self.owner = owner or f"d-{uuid.uuid4().hex[:12]}"
        self.lease = lease
        self.poll_interval = poll_interval
        self.concurrency = concurrency
        self.retry_delay = retry_delay
        self.parks = parks
        self.park_delay = park_delay
        self._parked: set[tuple[str, str]] = set()  # parks already logged
        self.wakes = 0
        self.failures = 0
        self._kick = asyncio.Event()
        self._sleep_until = float("inf")
        self._inflight: set[asyncio.Task[None]] = set()
        self._claims: dict[tuple[str, str], float] = {}  # claimed and being woken: lease end
        self._renewed = 0.0

    @property
    def sleeping_until(self) -> float:
        """When its current sleep ends at the latest (``inf`` while it is not sleeping)."""
        return self._sleep_until

    @property
    def leases_held(self) -> int:
        """Due wake-ups this dispatcher has claimed and is running (each holds a lease)."""
        return len(self._claims)

    @property
    def busy(self) -> bool:
        """Some claimed actor is being woken right now."""
        return bool(self._inflight)

    def notify(self, at: float) -> None:
        """An alarm at ``at`` was just written in this process: wake up early if it is sooner."""
        if at < self._sleep_until:
            self._kick.set()

    async def run(self) -> None:
        """Forever: claim due actors, wake them (at most ``concurrency`` at once), sleep."""
        try:
            while True:
                room = self.concurrency - len(self._inflight)
                now, mono = self.clock.now(), self.clock.monotonic()
                try:
                    claimed = (
                        self.directory.claim_due(now, self.owner, now + self.lease, room, self.kinds)
                        if room > 0
                        else []
                    )
                except DirectoryBusy:  # another process holds the lock: not waited for, asked again
                    self.failures += 1
                    log.warning(
                        "wake-ups not claimed: the directory is busy; again in %s s", self.poll_interval
                    )
                    await self.clock.sleep(self.poll_interval)
                    continue
                except Exception:
                    self.failures += 1
                    log.exception("could not claim due wake-ups; trying again in %s s", self.poll_interval)
                    await self.clock.sleep(self.poll_interval)
                    continue
                for kind, name, alarm in claimed:
                    self._claims[(kind, name)] = now + self.lease
                    task = asyncio.get_running_loop().create_task(
                        self._deliver(kind, name, alarm), name=f"roost:wake:{kind}/{name}"
                    )
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
                self._renew(now)
                if claimed:
                    await asyncio.sleep(0)  # let them start; then claim more if there is room
                    continue
                await self._sleep(now, mono)
        finally:
            for task in list(self._inflight):
                task.cancel()
            await asyncio.gather(*self._inflight, return_exceptions=True)

    def _renew(self, now: float) -> None:
        """Extend the leases of wake-ups still running, a third of a lease before they would end."""
        if not self._claims or now - self._renewed < self.lease / 3:
            return
        self._renewed = now
        keys = list(self._claims)
        try:
            self.directory.renew_claims(self.owner, keys, now + self.lease)
        except Exception:
            log.exception("could not renew wake-up claims")
            return
        for key in keys:
            self._claims[key] = now + self.lease

    async def _sleep(self, now: float, mono: float) -> None:
        """Until ``mono`` (read with ``now``) + the delay, an instant: time that moves while it goes
        to sleep counts (a span started when the sleep first ran would not see it)."""
        try:
            nxt = self.directory.next_alarm(self.kinds)
        except Exception:
            log.exception("could not read the next alarm")
            nxt = None
        delay = self.poll_interval if nxt is None else max(0.0, min(self.poll_interval, nxt - now))
        if self._claims:
            delay = min(delay, self.lease / 3)
        if self._inflight and len(self._inflight) >= self.concurrency:
            delay = min(delay, self.poll_interval)
        self._sleep_until = now + delay
        self._kick.clear()
        loop = asyncio.get_running_loop()
        # both owned here: ended in the finally
        sleeper = loop.create_task(self._wake_at(mono + delay), name="roost:dispatcher-sleep")
        kicked = loop.create_task(self._kick.wait(), name="roost:dispatcher-kick")
        waiters: set[asyncio.Future[Any]] = {sleeper, kicked}
        if self._inflight and len(self._inflight) >= self.concurrency:
            waiters |= set(self._inflight)  # a slot frees up
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._sleep_until = float("inf")
            sleeper.cancel()
            kicked.cancel()
            await asyncio.gather(sleeper, kicked, return_exceptions=True)

    async def _wake_at(self, deadline: float) -> None:
        # what is left is read when the task first runs: time that moved since ``deadline`` was set
        # (an advance of a test's clock, a slow loop) is not slept again
        await self.clock.sleep(deadline - self.clock.monotonic())

    async def _deliver(self, kind: str, name: str, alarm: float) -> None:
        try:
            await self.wake(kind, name)
            self.wakes += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # e.g. live in another process, overloaded: give it back, a little later,
            # to whichever dispatcher can serve it
            self.failures += 1
            delay = self.retry_delay
            if self.parks is not None and self.parks(exc):
                delay = self.park_delay
                if (kind, name) not in self._parked:
                    self._parked.add((kind, name))
                    log.warning(
                        "wake-up of %s/%r parked (tried again every %s s): %s", kind, name, delay, exc
                    )
            else:
                log.info("wake-up of %s/%r deferred: %s", kind, name, exc)
            try:
                self.directory.defer_claim(kind, name, self.owner, self.clock.now() + delay)
            except Exception:
                log.exception("could not defer the alarm of %s/%r", kind, name)
        finally:
            self._claims.pop((kind, name), None)
