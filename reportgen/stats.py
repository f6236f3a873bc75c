"""Pure statistics for timing samples: the median, its 95% order-statistic interval,
quantiles, the one significance test of the project (`difference`: Mann-Whitney U on raw
samples, interval overlap where samples are too few), the ratio of two sample sets with
its interval, log-log fits.

No numpy here: the render side imports this module and the timing loop calls it often,
so everything is plain Python over lists of floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
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


# asv's rule: a difference is significant at p < 0.002 (two-sided Mann-Whitney U on the
# raw samples) when the sample sizes let the test reach that p at all; otherwise the 95%
# intervals of the medians must not overlap.
ALPHA = 0.002
# The exact U distribution is used without ties up to this many samples a side; past it
# (or with ties) the normal approximation with tie and continuity correction.
EXACT_MAX_N = 50


@dataclass(frozen=True)
class Difference:
    """The verdict of `difference`: ``method`` is ``mann-whitney`` (``p_value`` set) or
    ``interval-overlap`` (``p_value`` None: too few samples for the test to reach
    ``alpha``, or no samples recorded)."""

    significant: bool
    p_value: float | None
    method: str


def _intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    a_low, a_high = sorted(a)
    b_low, b_high = sorted(b)
    return not (a_high < b_low or b_high < a_low)  # touching intervals overlap


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest two-sided p the Mann-Whitney U test can give for these sizes."""
    if n_a < 1 or n_b < 1:
        return 1.0
    orderings = math.comb(n_a + n_b, n_a)
    return min(1.0, 2.0 / orderings) if orderings < 10**300 else 0.0


def difference(a: Sequence[float] | None, b: Sequence[float] | None, *,
               interval_a: tuple[float, float] | None = None,
               interval_b: tuple[float, float] | None = None,
               alpha: float = ALPHA) -> Difference:
    """Whether two measurements differ (METHOD.md rule 5), the project's one test.

    With raw samples on both sides large enough for ``alpha`` to be reachable, the
    two-sided Mann-Whitney U test decides (significant when p < alpha). Otherwise the two
    95% intervals of the medians decide (significant when they do not overlap); they are
    ``interval_a``/``interval_b`` when given, else computed from the samples.
    """
    xs = list(a or ())
    ys = list(b or ())
    if xs and ys and min_p_value(len(xs), len(ys)) < alpha:
        p = mann_whitney_u(xs, ys)[1]
        return Difference(significant=p < alpha, p_value=p, method="mann-whitney")
    if interval_a is None and xs:
        interval_a = median_ci(xs)[1:]
    if interval_b is None and ys:
        interval_b = median_ci(ys)[1:]
    if interval_a is None or interval_b is None:
        raise ValueError("difference needs samples or an interval on each side")
    return Difference(significant=not _intervals_overlap(interval_a, interval_b), p_value=None,
                      method="interval-overlap")


def _midranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Ranks (1-based, ties get the mean rank) in input order, and the tie group sizes."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings give each U = 0..m*n (no ties): the
    coefficients of the Gaussian binomial [m+n choose m]_q."""
    if m > n:
        m, n = n, m
    poly = [1]
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), then divide by (1 - q^i) (a running sum with step i)
        grown = poly + [0] * (n + i)
        for k in range(len(poly)):
            grown[k + n + i] -= poly[k]
        for k in range(i, len(grown)):
            grown[k] += grown[k - i]
        poly = grown[: len(poly) + n]
    return tuple(poly)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """``(U, p)``: U of ``a`` (pairs with a > b, ties counting one half) and the two-sided
    p-value. Exact without ties while both sides have at most `EXACT_MAX_N` samples,
    otherwise the normal approximation with tie correction and continuity correction
    (scipy.stats.mannwhitneyu's ``method="exact"`` and ``"asymptotic"``)."""
    xs = [float(x) for x in a]
    ys = [float(y) for y in b]
    m, n = len(xs), len(ys)
    if m == 0 or n == 0:
        raise ValueError("mann_whitney_u needs samples on both sides")
    ranks, ties = _midranks(xs + ys)
    u = math.fsum(ranks[:m]) - m * (m + 1) / 2.0
    big = max(u, m * n - u)
    if not ties and max(m, n) <= EXACT_MAX_N:
        counts = _u_counts(m, n)
        at_least = sum(counts[round(big):])
        return u, min(1.0, 2.0 * at_least / math.comb(m + n, m))
    total = m + n
    tie_term = sum(t ** 3 - t for t in ties) / (total * (total - 1))
    sigma = math.sqrt(m * n / 12.0 * ((total + 1) - tie_term))
    if sigma == 0:
        return u, 1.0  # every value equal
    z = (big - m * n / 2.0 - 0.5) / sigma
    return u, min(1.0, 2.0 * _normal_sf(z))


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
        counts = _u_counts(m, n)
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
        z = _normal_quantile(1.0 - tail)
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


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erfc (a handful of calls per use)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 1.0 - _normal_sf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


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
