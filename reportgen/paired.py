"""Paired comparisons of two ways of running the same thing (pure Python: both sides).

Interleaving: every comparison alternates its variants within one process, in ABBA order
(A,B then B,A), so slow drift of the host (thermal state, a noisy neighbour) falls on both
sides alike; the rounds stay paired for the bootstrap in ``bootstrap_ratio``. The bench's
comparisons (``reportgen.bench``) and the instrumentation study
(``reportgen.profile.instrumentation``) share these.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

from reportgen.stats import median

__all__ = ["bootstrap_ratio", "interleave", "percentiles"]


def interleave(variants: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each variant once per round, alternating the order; returns values per variant."""
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            out[name].append(float(variants[name]()))
    return out


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], *, paired: bool = True,
                    reps: int = 2000, confidence: float = 0.95, seed: int = 0
                    ) -> tuple[float, float, float]:
    """median(a) / median(b) with a percentile-bootstrap interval.

    ``paired``: a[i] and b[i] come from the same interleaved round, so rounds are resampled
    together (drift between rounds cancels); otherwise each side is resampled alone.
    """
    if not a or not b:
        return (float("nan"),) * 3  # type: ignore[return-value]
    point = median(a) / median(b)
    rng = random.Random(seed)
    stats: list[float] = []
    for _ in range(reps):
        if paired and len(a) == len(b):
            idx = [rng.randrange(len(a)) for _ in a]
            ra = [a[i] for i in idx]
            rb = [b[i] for i in idx]
        else:
            ra = [a[rng.randrange(len(a))] for _ in a]
            rb = [b[rng.randrange(len(b))] for _ in b]
        den = median(rb)
        if den:
            stats.append(median(ra) / den)
    return point, *percentiles(stats, confidence)


def percentiles(stats: list[float], confidence: float) -> tuple[float, float]:
    """The central ``confidence`` interval of bootstrap statistics (sorts ``stats``)."""
    if not stats:
        return float("nan"), float("nan")
    stats.sort()
    lo = stats[math.floor((1 - confidence) / 2 * (len(stats) - 1))]
    hi = stats[math.ceil((1 + confidence) / 2 * (len(stats) - 1))]
    return lo, hi
