"""Prometheus metrics at ``GET /metrics`` (``create_app(metrics=True)``, ``roost serve --metrics``).

Off by default. When on, the app's registry gets a :class:`RuntimeMetrics` observer
(:class:`roost.actors.Observer`): it counts turns and fills four histograms in plain lists (a bisect
and two additions per turn; no lock, no ``prometheus_client`` object on the hot path). Everything else
is read at scrape time from counters the runtime keeps anyway: live actors (the registry's table),
dormant ones (the directory's row count less the live ones), activations, connections (the app's
sockets), the dispatcher's wake-ups and failures, the leases held (the dispatcher's, and the running
job attempts of process services that hold leases: :func:`leases_held`), the access gate's refusals and
``rate_limited`` frames. :class:`RoostCollector` turns them into metric families for the app's own
``CollectorRegistry`` (never the process-wide default one: two apps in one process do not collide).

Who may scrape (``docs/security.md``): as for the ``/admin`` routes — an admin token without a tenant,
allowed ``authorize(principal, "admin", "metrics", "admin:metrics")``; without authentication, clients
on the loopback interface that are neither browsers nor behind a proxy.

Guarantees (tests in ``tests/test_metrics.py``):

- **Scraped counts are the server's.** After N committed calls, ``roost_turns_total`` has grown by
  at least N and ``roost_turn_seconds_count`` with it; a refused connection and a ``rate_limited``
  frame are counted by code.
- **Only an admin scrapes.** Without authentication a request through a proxy or from a browser is
  refused 403; with it, a token without the ``admin`` claim is refused.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from roost.actors import Observer

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from roost.actors import Registry
    from roost.transport.interfaces import Runtime

__all__ = ["Histogram", "RoostCollector", "RuntimeMetrics", "metrics_registry"]

#: Seconds: turn latency and output hold (sub-millisecond turns are the common case).
TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: Inputs per commit (``max_batch`` is 64 by default).
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
#: Seconds a wake-up fired after it was due.
LATENESS_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    """A histogram filled on the event loop: ``observe`` is a bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        """The cumulative buckets, as the exposition format wants them."""
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=self.sum)


class RuntimeMetrics(Observer):
    """What the runtime reports as it runs (the :class:`~roost.actors.Observer` hooks)."""

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}
        self.turn_seconds = Histogram(TIME_BUCKETS)
        self.batch_turns = Histogram(BATCH_BUCKETS)
        self.hold_seconds = Histogram(TIME_BUCKETS)
        self.lateness = Histogram(LATENESS_BUCKETS)
        self.replay_bytes = 0

    def turn(self, kind: str, seconds: float, item: object) -> None:
        turns = self.turns
        turns[kind] = turns.get(kind, 0) + 1
        self.turn_seconds.observe(seconds)

    def commit(self, kind: str, turns: int, held: float) -> None:
        self.batch_turns.observe(turns)
        self.hold_seconds.observe(held)

    def wake(self, kind: str, lateness: float) -> None:
        self.lateness.observe(lateness)

    def replay(self, nbytes: int) -> None:
        self.replay_bytes += nbytes


class RoostCollector(Collector):
    """The app's metrics, read at scrape time (see the module doc for where each comes from)."""

    def __init__(self, app: Runtime, metrics: RuntimeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        app, m = self.app, self.metrics
        registry = app.registry
        live = len(registry.hosts)
        yield GaugeMetricFamily("roost_actors_live", "Actors live in this process", value=live)
        directory = registry.directory
        if directory is not None:
            try:
                known = directory.count()
            except Exception:  # the directory is closing: leave the gauge out of this scrape
                pass
            else:
                dormant = max(0, known - live)
                yield GaugeMetricFamily(
                    "roost_actors_dormant", "Actors in the directory not live here", value=dormant
                )
        yield CounterMetricFamily(
            "roost_activations", "Actors made live (files opened)", value=registry.activations
        )
        turns = CounterMetricFamily("roost_turns", "Committed turns, by actor kind", labels=["kind"])
        for kind, count in sorted(m.turns.items()):
            turns.add_metric([kind], count)
        yield turns
        yield m.turn_seconds.family("roost_turn_seconds", "Turn latency, start to commit into the batch")
        yield m.batch_turns.family("roost_commit_batch_turns", "Inputs committed together (group commit)")
        yield m.hold_seconds.family(
            "roost_output_hold_seconds", "How long the output gate held a batch's outputs for its COMMIT"
        )
        yield m.lateness.family("roost_wakeup_lateness_seconds", "How late wake-ups fired after their due")
        dispatcher = registry.dispatcher
        yield CounterMetricFamily(
            "roost_wakeups", "Wake-ups the dispatcher ran", value=dispatcher.wakes if dispatcher else 0
        )
        yield CounterMetricFamily(
            "roost_wakeup_failures",
            "Wake-ups the dispatcher could not run",
            value=dispatcher.failures if dispatcher else 0,
        )
        yield GaugeMetricFamily(
            "roost_leases_held",
            "Leases this process holds: claimed wake-ups running, and running jobs of its services",
            value=leases_held(registry),
        )
        yield GaugeMetricFamily("roost_connections", "Open WebSocket connections", value=len(app.sinks))
        yield CounterMetricFamily(
            "roost_frames_limited", "Frames and requests refused rate_limited", value=app.access.limited
        )
        refused = CounterMetricFamily(
            "roost_refused", "Connections and requests refused, by code", labels=["code"]
        )
        for code, count in sorted(app.access.refused.items()):
            refused.add_metric([code], count)
        yield refused
        yield CounterMetricFamily(
            "roost_replay_bytes", "Bytes of frames replayed to reconnecting clients", value=m.replay_bytes
        )


def leases_held(registry: Registry) -> int:
    """The dispatcher's claimed wake-ups running, and the ``leases_held`` of each process service
    that holds leases (the agent runtime's job runner: its running job attempts)."""
    dispatcher = registry.dispatcher
    held = dispatcher.leases_held if dispatcher is not None else 0
    for service in list(registry.services.values()):
        count = getattr(service, "leases_held", None)
        if isinstance(count, int):
            held += count
    return held


def metrics_registry(app: Runtime) -> tuple[CollectorRegistry, RuntimeMetrics]:
    """A collector registry of ``app``'s own, and the observer that feeds it."""
    observed = RuntimeMetrics()
    target = CollectorRegistry(auto_describe=False)
    target.register(RoostCollector(app, observed))
    return target, observed
