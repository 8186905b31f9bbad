"""Reconnect delays: exponential backoff with full jitter.

``delay(attempt) = rng.uniform(0, min(cap, base * 2**attempt))`` ("full jitter", as described in
AWS's *Exponential Backoff and Jitter*). ``attempt`` is 0 for the first retry after a connection
that had been welcomed; the client resets it to 0 after every successful welcome.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# 2**64 * base is far above any sensible cap; clamping the exponent keeps the float finite for any
# attempt count (an unbounded 2**attempt would overflow float conversion after ~1024 attempts).
_MAX_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class Backoff:
    """Full-jitter exponential backoff. Pure: all randomness comes from the ``rng`` argument."""

    base: float = 0.05
    cap: float = 5.0

    def __post_init__(self) -> None:
        if not self.base >= 0:  # also rejects NaN
            raise ValueError(f"base must be >= 0, got {self.base!r}")
        if not self.cap >= 0:
            raise ValueError(f"cap must be >= 0, got {self.cap!r}")

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay for ``attempt``: ``min(cap, base * 2**attempt)``."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        return min(self.cap, self.base * 2.0 ** min(attempt, _MAX_EXPONENT))

    def delay(self, attempt: int, rng: random.Random) -> float:
        """A delay drawn uniformly from ``[0, ceiling(attempt)]``, using exactly one draw of rng."""
        return rng.uniform(0.0, self.ceiling(attempt))
