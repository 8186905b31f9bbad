"""Percentiles and min/median/max summaries over repetitions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Summary", "pct", "pluck", "ratios", "summarize"]


def pct(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of unsorted ``values``; NaN if empty."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100.0 * (len(s) - 1))))
    return float(s[k])


@dataclass(frozen=True, slots=True)
class Summary:
    """min / median / max of one figure over repetitions (NaNs are dropped)."""

    lo: float
    med: float
    hi: float
    n: int

    @property
    def ok(self) -> bool:
        return self.n > 0


def summarize(values: Iterable[float | None]) -> Summary:
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return Summary(math.nan, math.nan, math.nan, 0)
    return Summary(min(vals), float(statistics.median(vals)), max(vals), len(vals))


def ratios(num: Sequence[float | None], den: Sequence[float | None]) -> list[float]:
    """Paired per-repetition ratios ``num[i] / den[i]`` (pairs with a missing side are skipped)."""
    out: list[float] = []
    for a, b in zip(num, den, strict=True):
        if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
            continue
        out.append(a / b)
    return out


def pluck(reps: Sequence[Any], *path: str | int, scale: float = 1.0) -> list[float | None]:
    """``reps[i][path[0]][path[1]]…`` for every repetition (``None`` where it is missing), times ``scale``."""
    out: list[float | None] = []
    for r in reps:
        v: Any = r
        try:
            for k in path:
                v = v[k]
        except (KeyError, IndexError, TypeError):
            out.append(None)
            continue
        out.append(None if v is None else float(v) * scale)
    return out
