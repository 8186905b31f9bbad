"""Closing deactivated actors' files off the event loop, and the worker threads the runtime owns.

SQLite's close of an actor file checkpoints its WAL and fsyncs (~0.5 ms); a sweep of many idle actors
must not stall every live one, so :class:`FileReleases` closes them in threads of their own.

Guarantees (``tests/test_activation.py``):

- **An actor is never opened again before its release has finished.** :meth:`FileReleases.claim`
  (called by activation) waits for a release under way (one close at most, and only for an actor
  reactivated within it) or runs one still queued itself; :meth:`FileReleases.wait_all` waits for
  every one, leaving the entries where ``claim`` finds them meanwhile.
- **A bounded backlog.** Each pending release still holds a connection and its witness (three
  descriptors, ~190 KB), so past ``max_pending`` of them a file is closed on the loop, as before.
- **Threads of their own**: four for releases, four for actor WAL checkpoints (so that other
  ``to_thread`` work never keeps an actor waiting for its checkpoint); both pools are shut down by
  :meth:`FileReleases.shutdown` once every actor has stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from roost.actors.refs import Key
from roost.storage import ActorFile

__all__ = ["FileReleases"]

log = logging.getLogger("roost.registry")

Release = Callable[[], None]


class FileReleases:
    """Files being closed in release threads, by actor, and the runtime's worker thread pools."""

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        #: Releases handed to a thread and not yet seen finished on the loop.
        self.pending: dict[Key, tuple[concurrent.futures.Future[None], Release]] = {}
        self._pools: dict[str, ThreadPoolExecutor] = {}  # "checkpoint", "release": four threads each

    def release(self, key: Key, file: ActorFile, last_state: tuple[str, int, float] | None) -> None:
        """Close ``file`` in a release thread, after writing its state snapshot row (``last_state``,
        see :meth:`ActorFile.begin_close`)."""
        release = file.begin_close(last_state)
        if release is None:
            return
        if len(self.pending) >= self.max_pending:
            _release_here(release)
            return
        try:
            loop = asyncio.get_running_loop()
            done = self.pool("release").submit(release)
        except RuntimeError:  # no loop, or no thread to run it (shutting down): here, then
            _release_here(release)
            return
        self.pending[key] = (done, release)

        def finished(_: concurrent.futures.Future[None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(self._finished, key, done)

        done.add_done_callback(finished)

    def claim(self, key: Key) -> None:
        """Before ``key``'s file is opened again: its release, if any, has finished on return."""
        releasing = self.pending.pop(key, None)
        if releasing is None:
            return
        done, release = releasing
        if done.cancel():  # not started (the threads are busy): release it here instead
            _release_here(release)
        else:  # under way in its thread: wait for it (one close at most)
            _wait(done)

    async def wait_all(self) -> None:
        """Wait until every file handed over so far is closed (its lock released)."""
        pending = [asyncio.wrap_future(done) for done, _ in self.pending.values()]
        if pending:
            await asyncio.wait(pending)

    def _finished(self, key: Key, done: concurrent.futures.Future[None]) -> None:
        releasing = self.pending.get(key)
        if releasing is not None and releasing[0] is done:
            del self.pending[key]
            _wait(done)

    def pool(self, name: str) -> ThreadPoolExecutor:
        """The four threads named ``name`` ("release", "checkpoint"), made on first use."""
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"roost-{name}")
        return pool

    def shutdown(self) -> None:
        """Every actor has stopped and every release finished: log failures, end the threads."""
        for key, (done, _) in list(self.pending.items()):
            self._finished(key, done)
        pools, self._pools = self._pools, {}
        for pool in pools.values():  # nothing of the actors' is running
            pool.shutdown(wait=True)


def _release_here(release: Release) -> None:
    try:
        release()
    except Exception:
        log.exception("closing an actor file failed")


def _wait(done: concurrent.futures.Future[None]) -> None:
    """Wait for a file's release (blocking only if it is still running); log its failure."""
    try:
        done.result()
    except Exception:
        log.exception("closing an actor file failed")
