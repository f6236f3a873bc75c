"""Pure statistics for timing samples: the median, its 95% order-statistic interval,
quantiles, significance of a difference, log-log fits.

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
    return {
        "n": len(xs),
        "median": med,
        "ci_low": low,
        "ci_high": high,
        "confidence": confidence,
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


def significantly_different(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when the two (low, high) intervals do not overlap (METHOD.md rule 5: the
    stated test is non-overlapping 95% intervals). Touching intervals overlap."""
    a_low, a_high = sorted(a)
    b_low, b_high = sorted(b)
    return a_high < b_low or b_high < a_low


def loglog_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares of ln(y) = exponent * ln(x) + intercept; returns
    ``(exponent, intercept)`` with the intercept in natural-log units."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if len(xs) < 2:
        raise ValueError("a fit needs at least two points")
    if any(x <= 0 for x in xs) or any(y <= 0 for y in ys):
        raise ValueError("log-log fit needs positive values")
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx = math.fsum(lx) / len(lx)
    my = math.fsum(ly) / len(ly)
    sxx = math.fsum((x - mx) ** 2 for x in lx)
    if sxx == 0:
        raise ValueError("log-log fit needs at least two distinct x values")
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(lx, ly))
    slope = sxy / sxx
    return slope, my - slope * mx


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond, 1.96 + a
# first-order correction (error below 0.001 from 30 on).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
MIN_FIT_POINTS = 3
"""A power law is reported only when fitted through at least three x values: a line
through two points always fits (R² = 1) and says nothing about the exponent's error."""


def t95(df: int) -> float:
    if df < 1:
        raise ValueError("t quantile needs at least one degree of freedom")
    return _T95[df - 1] if df <= len(_T95) else 1.959964 + 2.4 / df


def loglog_fit_stats(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """:func:`loglog_fit` with its goodness of fit: ``exponent``, ``intercept``, ``r2``
    and the exponent's 95% interval (``ci_low``, ``ci_high``; Student's t on n - 2
    degrees of freedom). Needs :data:`MIN_FIT_POINTS` distinct x values."""
    if len(set(xs)) < MIN_FIT_POINTS:
        raise ValueError(f"a reported fit needs at least {MIN_FIT_POINTS} distinct x values")
    slope, intercept = loglog_fit(xs, ys)
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    my = math.fsum(ly) / len(ly)
    mx = math.fsum(lx) / len(lx)
    ss_res = math.fsum((y - (intercept + slope * x)) ** 2 for x, y in zip(lx, ly))
    ss_tot = math.fsum((y - my) ** 2 for y in ly)
    sxx = math.fsum((x - mx) ** 2 for x in lx)
    df = len(xs) - 2
    half = t95(df) * math.sqrt(ss_res / df / sxx)
    return {"exponent": slope, "intercept": intercept,
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "ci_low": slope - half, "ci_high": slope + half, "points": float(len(xs))}
