"""The project's one significance test (`difference`: Mann-Whitney U on raw samples,
interval overlap where samples are too few) and the exact and normal distributions of U it
reads (pure Python).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from reportgen.stats.basic import median_ci

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
def u_counts(m: int, n: int) -> tuple[int, ...]:
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
        counts = u_counts(m, n)
        at_least = sum(counts[round(big):])
        return u, min(1.0, 2.0 * at_least / math.comb(m + n, m))
    total = m + n
    tie_term = sum(t ** 3 - t for t in ties) / (total * (total - 1))
    sigma = math.sqrt(m * n / 12.0 * ((total + 1) - tie_term))
    if sigma == 0:
        return u, 1.0  # every value equal
    z = (big - m * n / 2.0 - 0.5) / sigma
    return u, min(1.0, 2.0 * _normal_sf(z))


def normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erfc (a handful of calls per use)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 1.0 - _normal_sf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
