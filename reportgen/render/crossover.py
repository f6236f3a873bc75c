"""Where attention overtakes the rest of a layer: the length at which its time (every
``attention.*`` category together) passes its counterpart's (the MLP, the experts or the
token mixers), with an interval that carries each length's uncertainty.

A pure function of a combinations frame's rows (one setting, one row per length): the
point is interpolated on log-log axes between the two measured lengths around it; its
interval is where the ends of each length's intervals cross (attention at the top of its
interval against its counterpart at the bottom of its own crosses first, the other way
round last). Where attention has not passed its counterpart by the longest length, the two
parts' power-law fits in length are extended beyond it, their confidence bands through
those same ends giving the interval, and the figure says it is extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from reportgen import stats
from reportgen.categories import ATTENTION_CATEGORIES, MOE_CATEGORIES
from reportgen.stats.bootstrap import CONFIDENCE

# What attention is weighed against: the model's largest other part, by name
COUNTERPARTS: dict[str, tuple[str, ...]] = {
    "the MLP": ("mlp",), "the experts": MOE_CATEGORIES, "the token mixers": ("mixer",)}

LEVEL = CONFIDENCE
"""The level of each length's share intervals (``stats.share_interval``) and of the fits'
confidence bands (Student's t at ``stats.t95``) the crossover's interval is read from."""
assert LEVEL == 0.95, "the fits' bands are drawn at 95% (stats.t95)"

HORIZON = 8.0
"""How far past the longest measured length an extrapolated crossing is looked for (a
factor on the length): three doublings, about as far as the measured range itself spans;
power laws fitted over a few lengths say nothing about a length a thousand times longer."""

_GRID = 4000  # steps of the log-spaced search for where a confidence band reaches zero

Points = list[tuple[float, float]]  # (ln length, ln attention - ln counterpart)


def part_ms(row: Mapping[str, Any], categories: Sequence[str]) -> float:
    """The time of several categories together (ms), the positive ones only."""
    values = [row.get(f"ms:{c}") for c in categories]
    return sum(float(v) for v in values if isinstance(v, int | float) and not math.isnan(v) and v > 0)


def counterpart(rows: pd.DataFrame) -> str | None:
    """The part attention is weighed against: the MLP, the experts (a mixture of
    experts, whose MLP is its experts) or the token mixers (a hybrid's), whichever takes
    the most time at the longest length; None where the model has none of them."""
    if rows.empty:
        return None
    longest = rows.sort_values("seq", kind="mergesort").iloc[-1].to_dict()
    times = {name: part_ms(longest, cats) for name, cats in COUNTERPARTS.items()}
    name, ms = max(times.items(), key=lambda kv: kv[1])
    return name if ms > 0 else None


def _share_end(row: Mapping[str, Any], categories: Sequence[str], end: str) -> float | None:
    """The sum of the categories' share interval ends (``end``: "low" or "high"), over
    the categories with time; None where one of them has no interval."""
    total = 0.0
    for c in categories:
        ms = row.get(f"ms:{c}")
        if not isinstance(ms, int | float) or math.isnan(ms) or ms <= 0:
            continue
        value = row.get(f"share_ci_{end}:{c}")
        if not isinstance(value, int | float) or math.isnan(value):
            return None
        total += float(value)
    return total


def _curves(rows: pd.DataFrame, against: str) -> tuple[Points, Points | None, Points | None]:
    """The log ratio of attention's time to its counterpart's at each length: the point,
    and where every length has share intervals, its upper end (attention high, counterpart
    low) and lower end (the other way round); None where some length has none."""
    other = COUNTERPARTS[against]
    mid: Points = []
    upper: Points | None = []
    lower: Points | None = []
    for _, series in rows.iterrows():
        row = series.to_dict()
        att, oth = part_ms(row, ATTENTION_CATEGORIES), part_ms(row, other)
        if att <= 0 or oth <= 0:
            continue
        x = math.log(float(row["seq"]))
        mid.append((x, math.log(att) - math.log(oth)))
        ends = (_share_end(row, ATTENTION_CATEGORIES, "high"), _share_end(row, other, "low"),
                _share_end(row, ATTENTION_CATEGORIES, "low"), _share_end(row, other, "high"))
        if any(e is None or e <= 0 for e in ends) or upper is None or lower is None:
            upper = lower = None
            continue
        a_hi, o_lo, a_lo, o_hi = (float(e) for e in ends if e is not None)
        upper.append((x, math.log(a_hi) - math.log(o_lo)))
        lower.append((x, math.log(a_lo) - math.log(o_hi)))
    for pts in (mid, upper, lower):
        if pts is not None:
            pts.sort()
    return mid, upper, lower


def _first_crossing(pts: Points) -> float | None:
    """The length where the piecewise-linear log ratio first reaches zero from below,
    interpolated on log-log axes; None where it never does (or starts at or above zero)."""
    for (x0, d0), (x1, d1) in zip(pts, pts[1:]):
        if d0 < 0 <= d1:
            return math.exp(x0 + (0 - d0) * (x1 - x0) / (d1 - d0))
    return None


def _band_crossing(pts: Points, start: float, side: float) -> float | None:
    """Where the straight line fitted through ``pts`` (ln length against log ratio), at the
    top (``side`` +1) or bottom (-1) of its ``LEVEL`` confidence band, first reaches zero
    past ``start`` (ln length), within ``HORIZON``; None where it does not."""
    fit = stats.linear_fit_stats([p[0] for p in pts], [p[1] for p in pts])
    end = start + math.log(HORIZON)
    for i in range(_GRID + 1):
        x = start + (end - start) * i / _GRID
        band = fit["intercept"] + fit["slope"] * x + side * stats.mean_band(fit, x)
        if band >= 0:
            return math.exp(x)
    return None


def _extrapolated(mid: Points, upper: Points | None, lower: Points | None) -> dict[str, Any]:
    """The crossing of attention's and its counterpart's power-law fits beyond the longest
    length (the line through the log ratios: the difference of the two fits), with the
    interval from the confidence bands of the lines through the intervals' ends."""
    xs = [p[0] for p in mid]
    slope, intercept = stats.linear_fit(xs, [p[1] for p in mid])
    top = xs[-1]
    # the fits must cross past the longest length (the measured ratios have not) and
    # within the horizon
    if slope <= 0 or not top < -intercept / slope <= top + math.log(HORIZON):
        return {}
    seq = math.exp(-intercept / slope)
    low = _band_crossing(upper if upper is not None else mid, top, 1.0)
    high = _band_crossing(lower if lower is not None else mid, top, -1.0)
    return {"seq": seq, "seq_low": min(low, seq) if low is not None else None,
            "seq_high": max(high, seq) if high is not None else None,
            "extrapolated": True, "per_length": upper is not None}


def attention_crossover(rows: pd.DataFrame) -> dict[str, Any]:
    """The sequence length where attention (all ``attention.*``) overtakes the model's
    largest other part (``against``: the MLP, the experts or the token mixers).

    ``status``: "crossover" (``seq`` interpolated on log-log axes between the two
    measured lengths that bracket it; ``seq_low``/``seq_high`` where the ends of each
    length's ``LEVEL`` share intervals cross, None where that end lies outside the measured
    range, ``below`` and ``beyond`` saying which), "attention-already-larger",
    "not-within-range" (``fitted`` where enough lengths were measured for power-law fits;
    ``extrapolated`` True, ``seq`` and its interval where the two parts' fits cross within
    ``horizon``, ``HORIZON`` times the longest length, an end None where its band does
    not reach the crossing within it) or
    "insufficient-data". ``level`` is the intervals' level; ``per_length`` whether the
    interval carries each length's uncertainty (the records hold share intervals).
    """
    against = counterpart(rows)
    out: dict[str, Any] = {"status": "insufficient-data", "seq": None, "seq_low": None, "seq_high": None,
                           "below": False, "beyond": False, "extrapolated": False, "fitted": False,
                           "horizon": None, "per_length": False, "level": LEVEL, "seq_min": None,
                           "seq_max": None, "against": against}
    if against is None:
        return out
    mid, upper, lower = _curves(rows, against)
    if len(mid) < 2:
        return out
    out.update(seq_min=int(round(math.exp(mid[0][0]))), seq_max=int(round(math.exp(mid[-1][0]))))
    if mid[0][1] >= 0:
        return {**out, "status": "attention-already-larger"}
    seq = _first_crossing(mid)
    if seq is None:
        out["status"] = "not-within-range"
        if len({p[0] for p in mid}) >= stats.MIN_FIT_POINTS:
            out.update(fitted=True, horizon=out["seq_max"] * HORIZON, **_extrapolated(mid, upper, lower))
        return out
    out.update(status="crossover", seq=seq)
    if upper is not None and lower is not None:
        # attention's top against its counterpart's bottom reaches zero no later than the
        # point, the other way round no earlier (an interval that misses its own point,
        # which a percentile bootstrap can, is widened to hold it)
        low, high = _first_crossing(upper), _first_crossing(lower)
        below, beyond = low is None and upper[0][1] >= 0, high is None
        out.update(per_length=True, below=below, beyond=beyond,
                   seq_low=None if below else min(low if low is not None else seq, seq),
                   seq_high=None if beyond else max(high if high is not None else seq, seq))
    return out
