"""Hodges-Lehmann estimates: one sample's (the median of its Walsh averages) and the ratio of
two sample sets' (the median of all pairwise ratios) with the interval that inverts the
Mann-Whitney test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reportgen.stats.significance import EXACT_MAX_N, normal_quantile, u_counts

if TYPE_CHECKING:
    from numpy.typing import NDArray


def hodges_lehmann(values: Sequence[float] | NDArray[Any]) -> float:
    """The one-sample Hodges-Lehmann estimate: the median of all pairwise (Walsh) averages.
    Robust like the median, and about as efficient as the mean on near-normal noise."""
    import numpy as np

    xs = np.asarray(values, dtype=float)
    if xs.size == 0:
        raise ValueError("no values")
    rows, cols = np.triu_indices(xs.size)
    return float(np.median((xs[rows] + xs[cols]) / 2.0))


def ratio_ci(base: Sequence[float], new: Sequence[float],
             confidence: float = 0.95) -> tuple[float, float, float, bool]:
    """``(ratio, low, high, exact)``: how many times ``base`` ``new`` is, as the
    Hodges-Lehmann estimate on the log scale (the median of all pairwise ratios new/base)
    with the distribution-free interval that inverts the Mann-Whitney test (order
    statistics of the pairwise ratios). ``exact`` is False when the samples are too few
    for the interval to reach the confidence; the interval is then the full range of
    pairwise ratios."""
    xs = [float(x) for x in base]
    ys = [float(y) for y in new]
    if not xs or not ys or min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("ratio_ci needs positive samples on both sides")
    # Past ~200k pairs (thousands of samples of a fast GPU step), each side is thinned to
    # MAX_PAIR_SIDE evenly spaced order statistics: the interval then uses the smaller n
    # and is wider, never narrower, than the full samples' would be.
    if len(xs) * len(ys) > MAX_PAIR_SIDE ** 2:
        xs, ys = _thin(xs, MAX_PAIR_SIDE), _thin(ys, MAX_PAIR_SIDE)
    m, n = len(xs), len(ys)
    logs = sorted(math.log(y) - math.log(x) for x in xs for y in ys)
    mid = len(logs) // 2
    centre = logs[mid] if len(logs) % 2 else (logs[mid - 1] + logs[mid]) / 2.0
    tail = (1.0 - confidence) / 2.0
    if max(m, n) <= EXACT_MAX_N:
        counts = u_counts(m, n)
        total = math.comb(m + n, m)
        cum = 0
        k = 0  # k pairwise ratios may fall below the interval
        for c in counts:
            cum += c
            if cum / total <= tail:
                k += 1
            else:
                break
    else:
        z = normal_quantile(1.0 - tail)
        k = max(0, math.floor(m * n / 2.0 - z * math.sqrt(m * n * (m + n + 1) / 12.0)))
    exact = k >= 1
    k = max(k, 1)
    return (math.exp(centre), math.exp(logs[k - 1]), math.exp(logs[len(logs) - k]), exact)


MAX_PAIR_SIDE = 450


def _thin(values: list[float], k: int) -> list[float]:
    if len(values) <= k:
        return values
    xs = sorted(values)
    return [xs[int((i + 0.5) * len(xs) / k)] for i in range(k)]
