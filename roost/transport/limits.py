"""Limits that keep one client from taking the server away from the others.

- :class:`TokenBucket`: ``rate`` frames per second with bursts up to ``burst``; one per connection and
  one per principal (shared by all of its connections in this process).
- :class:`Counter`: how many connections an actor and a principal hold, against a maximum.

Time comes from an injectable monotonic clock: a bucket starts full at its first reading, and each
:meth:`TokenBucket.take` is given the time (so the rules are tested without a clock, or a loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Counter", "Limits", "TokenBucket"]


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
    #: Anonymous clients by address (IPv6 by /64): frames per second over all their connections and
    #: requests, and open connections. Off by default: many users can share one address (NAT, a
    #: proxy); turn them on for an anonymous service facing the internet.
    anonymous_rate: float | None = None
    anonymous_burst: float = 2000.0
    conns_per_address: int | None = None


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
