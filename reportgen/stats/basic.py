"""The median, its 95% order-statistic interval, quantiles and the percentile interval of
bootstrap draws.

No numpy here: the render side imports this module and the timing loop calls it often,
so everything is plain Python over lists of floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

CI_METHOD = "order-statistic"

# The order-statistic interval needs P(Bin(n, 1/2) <= 0) = 2**-n <= alpha/2; at 95% that
# first holds for n = 6. Below it the interval cannot reach the confidence and we fall
# back to the full range (min, max), flagged as not exact.
MIN_EXACT_N = 6


def _log_binom_pmf(n: int, i: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2.0)


@lru_cache(maxsize=4096)
def order_statistic_rank(n: int, confidence: float = 0.95) -> tuple[int, bool]:
    """The 1-based rank k such that ``[x(k), x(n-k+1)]`` is the narrowest symmetric
    order-statistic interval for the median with coverage >= ``confidence``.

    Returns ``(k, exact)``; ``exact`` is False when no interval reaches the confidence
    (small n), in which case k = 1 (the full range) is returned anyway.
    """
    if n < 1:
        raise ValueError("order_statistic_rank needs n >= 1")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0
    # k is the largest integer with P(B <= k-1) <= tail. Terms more than ~16 standard
    # deviations below n/2 are < 1e-50, so the cumulative sum can start there; this keeps
    # the cost O(sqrt(n)) instead of O(n) for the long sample lists of fast steps.
    start = max(0, int(n / 2 - 8.0 * math.sqrt(n)))
    cdf = 0.0
    k = 0
    for i in range(start, n + 1):
        cdf += math.exp(_log_binom_pmf(n, i))
        # cdf is now P(B <= i); rank i+1 is admissible when it stays within the tail
        if cdf <= tail:
            k = i + 1
        else:
            break
    if k == 0:
        return 1, False
    return min(k, (n + 1) // 2), True


def coverage(n: int, k: int) -> float:
    """Exact coverage of the order-statistic interval ``[x(k), x(n-k+1)]`` for the median."""
    below = sum(math.exp(_log_binom_pmf(n, i)) for i in range(k))
    return max(0.0, 1.0 - 2.0 * below)


def _sorted(samples: Sequence[float]) -> list[float]:
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise ValueError("no samples")
    return xs


def _median_sorted(xs: list[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def median(samples: Sequence[float]) -> float:
    return _median_sorted(_sorted(samples))


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(median, low, high)``: the median and its distribution-free order-statistic
    interval. For n below what the confidence needs (n < 6 at 95%) the interval is the
    full range (min, max); `median_ci_exact` tells which case applies."""
    xs = _sorted(samples)
    k, _ = order_statistic_rank(len(xs), confidence)
    return _median_sorted(xs), xs[k - 1], xs[len(xs) - k]


def median_ci_exact(n: int, confidence: float = 0.95) -> bool:
    """Whether `median_ci` over n samples reaches the stated confidence."""
    return order_statistic_rank(n, confidence)[1]


def quantile(samples: Sequence[float], q: float) -> float:
    """Quantile by linear interpolation between order statistics (numpy's default,
    Hyndman-Fan type 7)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    xs = _sorted(samples)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float], confidence: float = 0.95) -> dict[str, float | int | str]:
    """The summary fields of a timing record (see ARCHITECTURE.md `timing`)."""
    xs = _sorted(samples)
    med, low, high = median_ci(xs, confidence)
    k, exact = order_statistic_rank(len(xs), confidence)
    return {
        "n": len(xs),
        "median": med,
        "ci_low": low,
        "ci_high": high,
        # what the interval achieves: below MIN_EXACT_N the full range covers less
        "confidence": confidence if exact else coverage(len(xs), k),
        "ci_method": CI_METHOD,
        "mean": math.fsum(xs) / len(xs),
        "p5": quantile(xs, 0.05),
        "p25": quantile(xs, 0.25),
        "p75": quantile(xs, 0.75),
        "p95": quantile(xs, 0.95),
    }


def rel_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the CI width relative to the median (inf for a zero median)."""
    med, low, high = median_ci(samples, confidence)
    if med == 0:
        return math.inf
    return (high - low) / 2.0 / abs(med)


def percentiles(draws: list[float], confidence: float = 0.95, *,
                interpolate: bool = False) -> tuple[float, float]:
    """The central ``confidence`` interval of bootstrap draws (sorts ``draws`` in place).

    By default the order statistics at ``floor`` and ``ceil`` of the tail positions (the
    paired comparisons', shares' and bench's intervals); ``interpolate`` takes `quantile`'s
    linear interpolation between them instead (the interval of a median measured in
    rounds). NaN, NaN without draws."""
    if not draws:
        return math.nan, math.nan
    draws.sort()
    if interpolate:
        tail = (1.0 - confidence) / 2.0
        return quantile(draws, tail), quantile(draws, 1.0 - tail)
    last = len(draws) - 1
    return (draws[math.floor((1 - confidence) / 2 * last)],
            draws[math.ceil((1 + confidence) / 2 * last)])
