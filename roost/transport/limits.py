"""Limits that keep one client from taking the server away from the others.

- :class:`TokenBucket`: ``rate`` frames per second with bursts up to ``burst``; one per connection and
  one per principal (shared by all of its connections in this process).
- :class:`Counter`: how many connections an actor and a principal hold, against a maximum.
- :class:`BucketTable`: token buckets by key (the creations of actors per principal or address),
  at most ``size`` of them: the least recently used is forgotten first.

Time comes from an injectable monotonic clock: a bucket starts full at its first reading, and each
:meth:`TokenBucket.take` is given the time (so the rules are tested without a clock, or a loop).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BucketTable", "Counter", "Limits", "TokenBucket"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-process limits of the transport; ``None`` turns one off."""

    #: Frames per second per connection (sustained) and its burst.
    conn_rate: float | None = 1000.0
    conn_burst: float = 2000.0
    #: Frames per second per principal, all its connections together, and its burst.
    principal_rate: float | None = 5000.0
    principal_burst: float = 10_000.0
    #: Open connections per actor, and per (authenticated) principal.
    conns_per_actor: int | None = 10_000
    conns_per_principal: int | None = 1000
    #: Anonymous clients by address (IPv6 by /64; an IPv4 address carried in IPv6, ``::ffff:a.b.c.d``
    #: or 6to4, as that IPv4 address): frames per second over all their connections and requests, and
    #: open connections. Off by default here: many users can share one address (NAT, a proxy); turn
    #: them on for an anonymous service facing the internet (``roost serve`` gives each address at
    #: most half of its connection cap unless told otherwise).
    anonymous_rate: float | None = None
    anonymous_burst: float = 2000.0
    conns_per_address: int | None = None
    #: Actors an anonymous address may create (a connection or an HTTP call to an actor that does not
    #: exist yet), per second sustained and in a burst; calls to existing actors never count. On by
    #: default: every new actor is a file on disk and descriptors while it is live.
    anonymous_creation_rate: float | None = 1.0
    anonymous_creation_burst: float = 200.0
    #: The same per IPv6 /48 (one site's usual share: up to 65,536 /64s), so that a network's many
    #: /64s cannot each create a burst; IPv4 addresses have none.
    anonymous_network_creation_rate: float | None = 5.0
    anonymous_network_creation_burst: float = 1000.0
    #: All anonymous creations together, whatever their addresses: the bound no number of addresses
    #: multiplies (past it, anonymous clients create no actor until it refills; existing actors and
    #: authenticated principals are not affected).
    anonymous_total_creation_rate: float | None = 50.0
    anonymous_total_creation_burst: float = 5000.0
    #: The same per authenticated principal (its token's subject within its tenant); off by default.
    creation_rate: float | None = None
    creation_burst: float = 1000.0
    #: How many creation buckets are remembered (the least recently used is forgotten first, and
    #: starts full again when its principal or address comes back).
    creation_buckets: int = 10_000


@dataclass(slots=True)
class TokenBucket:
    rate: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    stamp: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.burst
        self.stamp = self.clock()

    def take(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens at ``now`` (a reading of ``clock``) if there are that many; False (and
        nothing taken) otherwise. A reading older than the last one adds nothing."""
        if now < self.stamp:
            now = self.stamp
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def wait(self, now: float, n: float = 1.0) -> int:
        """Whole seconds from ``now`` until ``n`` tokens are there (an HTTP ``Retry-After``; at least 1
        when they are not there yet, 0 when they are)."""
        tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        if tokens >= n:
            return 0
        return max(1, math.ceil((n - tokens) / self.rate))


class BucketTable:
    """Token buckets by key, made full on first use; at most ``size`` are kept, the least recently
    used forgotten first (so memory is bounded whatever number of keys clients bring)."""

    def __init__(self, rate: float, burst: float, size: int, clock: Callable[[], float]) -> None:
        if size < 1:
            raise ValueError("a bucket table holds at least one bucket")
        self.rate, self.burst, self.size, self.clock = rate, burst, size, clock
        self.buckets: OrderedDict[object, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self.buckets)

    def get(self, key: object) -> TokenBucket:
        """The bucket of ``key``, now the most recently used."""
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= self.size:
                self.buckets.popitem(last=False)
            bucket = self.buckets[key] = TokenBucket(self.rate, self.burst, self.clock)
        else:
            self.buckets.move_to_end(key)
        return bucket


class Counter:
    """Counts holders per key, refusing past ``limit``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.counts: dict[object, int] = {}

    def acquire(self, key: object) -> bool:
        n = self.counts.get(key, 0)
        if self.limit is not None and n >= self.limit:
            return False
        self.counts[key] = n + 1
        return True

    def release(self, key: object) -> None:
        n = self.counts.get(key, 0) - 1
        if n <= 0:
            self.counts.pop(key, None)
        else:
            self.counts[key] = n
