"""What the runtime reports to an observer (metrics, traces), where it already measures.

:class:`Observer` is the hook: the registry's ``observer`` (None by default) is read once by each host
when it is made (``host.observer``: what its :meth:`Observer.for_host` answers, the observer itself
unless it keeps state per actor), and each hook below is called only when one is set, so an
unobserved turn pays one attribute check and nothing else. The transport's Prometheus collector
(:mod:`roost.transport.metrics`) and tracer (:mod:`roost.transport.tracing`) implement it.

Guarantees (tests in ``tests/test_metrics.py``):

- **Unobserved turns pay a check.** Without an observer no hook runs and no clock is read for it.
- **Every committed turn is reported once**, with its latency (turn start to its end, on the runtime's
  monotonic clock); every batch commit once, with its size (inputs in the batch) and how long its
  outputs were held by the output gate for the commit (COMMIT to release).
"""

from __future__ import annotations

__all__ = ["Observer", "Observers"]


class Observer:
    """The runtime's measurement hooks; every one is a no-op here (override the ones you need).

    Hooks run on the event loop, inside the runtime's hot paths: they must be cheap and never raise."""

    #: An OpenTelemetry ``Tracer`` (opaque here) for the layers above, e.g. the agent runtime's run
    #: and tool spans (``Process.tracer``); None: no traces.
    tracer: object = None

    def for_host(self, kind: str, name: str) -> Observer:
        """The observer of the actor ``kind/name``'s host, asked once when the host is made: ``self``
        here; an observer that relates hooks to each other (a commit to the turns of its batch, a turn
        to its wake-up) answers one of its own per host, since the hooks of different actors
        interleave."""
        return self

    def trace_id(self, item: object) -> str | None:
        """The W3C trace id (32 hex digits) of the trace the input ``item`` came in, if it came in one:
        the turn's ``trace_id`` (records, an agent run's trace) takes it. None here."""
        return None

    def turn(self, kind: str, seconds: float, item: object) -> None:
        """A turn of an actor of ``kind`` committed, ``seconds`` after it began; ``item``: its input
        (a :class:`~roost.actors.Call` carries the caller's ``trace``, its connection its own)."""

    def commit(self, kind: str, turns: int, held: float) -> None:
        """A batch of ``turns`` inputs committed; its outputs were held ``held`` seconds for it."""

    def wake(self, kind: str, lateness: float) -> None:
        """A wake-up fired ``lateness`` seconds after it was due (runtime clock)."""

    def replay(self, nbytes: int) -> None:
        """A replay page of ``nbytes`` bytes (frames) was read for a reconnecting client."""


class Observers(Observer):
    """Several observers (metrics and traces), each hook called on each in order."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers
        self.tracer = next((o.tracer for o in observers if o.tracer is not None), None)

    def for_host(self, kind: str, name: str) -> Observer:
        hosts = tuple(observer.for_host(kind, name) for observer in self.observers)
        if all(mine is theirs for mine, theirs in zip(hosts, self.observers, strict=True)):
            return self
        return Observers(*hosts)

    def trace_id(self, item: object) -> str | None:
        return next((t for o in self.observers if (t := o.trace_id(item)) is not None), None)

    def turn(self, kind: str, seconds: float, item: object) -> None:
        for observer in self.observers:
            observer.turn(kind, seconds, item)

    def commit(self, kind: str, turns: int, held: float) -> None:
        for observer in self.observers:
            observer.commit(kind, turns, held)

    def wake(self, kind: str, lateness: float) -> None:
        for observer in self.observers:
            observer.wake(kind, lateness)

    def replay(self, nbytes: int) -> None:
        for observer in self.observers:
            observer.replay(nbytes)
