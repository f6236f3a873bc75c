"""The interval of a median measured in rounds (both sides import it; the resampling is
``stats.bootstrap_medians``).

A combination is timed in several rounds, each in a fresh worker process at a different
point of the suite, so a round carries what one process cannot vary: the allocator's
layout, thread placement, the host's load at that moment. Samples within a round are
correlated through those; an interval from the pooled samples alone would describe one
process, not the measurement.

``hierarchical_median_ci`` is a two-level bootstrap: draw the rounds with replacement,
then the samples within each drawn round with replacement, and take the median of the
pooled draw; the percentile interval of those medians spans between-round variation as
well as within-round noise. It is seeded (the same samples give the same interval).

Few rounds cannot support a 95% interval whatever the bootstrap says: with R rounds the
round medians bound the median only with probability ``1 - 2**(1 - R)`` (75% for three).
So the interval is widened to at least the order-statistic interval of the round medians
and its stated ``confidence`` is the lower of the nominal level and what that interval
achieves. One round falls back to the order-statistic interval of its samples, with that
interval's exact coverage (``stats.coverage``) as the confidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen import stats
from reportgen.records import fields
from reportgen.stats.bootstrap import BOOTSTRAP_REPLICATES

CI_METHOD = "hierarchical-bootstrap"
BOOTSTRAP_SEED = 0


def achieved_confidence(n: int, confidence: float = 0.95) -> float:
    """The confidence the order-statistic interval of ``n`` values can state: the
    requested level where n allows it, else the coverage of the full range
    (1 - 2**(1-n): 75% for three values, 0 for one)."""
    if n < 1:
        return 0.0
    k, exact = stats.order_statistic_rank(n, confidence)
    return confidence if exact else stats.coverage(n, k)


def hierarchical_median_ci(rounds: Sequence[Sequence[float]], confidence: float = 0.95, *,
                           replicates: int = BOOTSTRAP_REPLICATES,
                           seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """``{median, ci_low, ci_high, confidence, ci_method, rounds}`` of the pooled samples.

    See the module docstring: percentile interval of the two-level bootstrap, widened to
    the order-statistic interval of the round medians, with the confidence that the
    number of rounds can give.
    """
    groups = [list(map(float, r)) for r in rounds if len(r)]
    if not groups:
        raise ValueError("no samples")
    pooled = [x for g in groups for x in g]
    med = stats.median(pooled)
    if len(groups) == 1:
        _, low, high = stats.median_ci(pooled, confidence)
        return {"median": med, "ci_low": low, "ci_high": high,
                "confidence": achieved_confidence(len(pooled), confidence),
                "ci_method": stats.CI_METHOD, "rounds": 1}
    boot = stats.bootstrap_medians(groups, replicates=replicates, seed=seed)
    low, high = stats.percentiles(boot, confidence, interpolate=True)
    _, r_low, r_high = stats.median_ci([stats.median(g) for g in groups], confidence)
    return {"median": med, "ci_low": min(low, r_low), "ci_high": max(high, r_high),
            "confidence": min(confidence, achieved_confidence(len(groups), confidence)),
            "ci_method": CI_METHOD, "rounds": len(groups)}


def summarize_rounds(rounds: Sequence[Sequence[float]], confidence: float = 0.95) -> dict[str, Any]:
    """The timing summary fields (``stats.summarize``'s) of samples measured in rounds,
    with the interval, confidence and method of ``hierarchical_median_ci``."""
    pooled = [float(x) for r in rounds for x in r]
    out: dict[str, Any] = dict(stats.summarize(pooled, confidence))
    ci = hierarchical_median_ci(rounds, confidence)
    out.update(ci_low=ci["ci_low"], ci_high=ci["ci_high"], confidence=ci["confidence"],
               ci_method=ci["ci_method"])
    return out


def stated_confidence(record: Mapping[str, Any] | None) -> float | None:
    """The level ``record``'s latency interval states (``timing.confidence``: below 95%
    under six rounds); 95% for a record with an interval made before the level was
    stored (as the migration of older records fills it in); None without an interval."""
    level = fields.get(record, "timing.confidence")
    if isinstance(level, int | float) and not isinstance(level, bool):
        return float(level)
    has_interval = fields.get(record, "timing.ci_low") is not None
    return 0.95 if has_interval else None


def unstable_reason(record: Mapping[str, Any]) -> str | None:
    """Why a record's figures were taken under contention (``timing.unstable``, the
    profiled pass's ``profile.unstable``), in words; None for a clean measurement."""
    sections = (fields.get(record, "timing"), fields.get(record, "profile"))
    reasons = [str(section["unstable"]) for section in sections
               if isinstance(section, Mapping) and section.get("unstable")]
    return "; ".join(reasons) or None


WIDE = 2.0
"""An interval reaching past twice its median (or below half of it) is flagged as wide."""

TIMER_RESOLUTION_MS = {"cuda-events": 0.0005, "host-clock": 0.001}
"""The clocks' resolution (CUDA events: 0.5 µs; the host's monotonic clock read through
Python, conservatively 1 µs)."""


def is_wide(median: Any, low: Any, high: Any) -> bool:
    """Whether an interval reaches past ``WIDE`` times its median or below 1/``WIDE`` of it."""
    values = (median, low, high)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return False
    m, lo, hi = (float(v) for v in values)
    return m > 0 and (hi > WIDE * m or lo < m / WIDE)


def interval_wide_reason(median: Any, low: Any, high: Any, *, tick_ms: float = 0.001,
                         groups: Sequence[float] = (), group: str = "rounds",
                         between: str = "samples", p5: float = math.nan,
                         p95: float = math.nan) -> str | None:
    """Why an interval reaches past twice its median, in words (None where it does not):
    the timer's resolution where it spans only a few ticks of a ``tick_ms`` clock, the
    variation between ``group`` (rounds, passes) where their medians ``groups`` lie that
    far apart, else the variation between ``between`` (samples, passes: ``p5`` to ``p95``
    where known)."""
    if not is_wide(median, low, high):
        return None
    lo, hi = float(low), float(high)
    if hi - lo <= 20 * tick_ms:
        return (f"the timer's resolution: the interval spans {hi - lo:.3g} ms, "
                f"a few ticks of a {tick_ms * 1000:.2g} µs clock")
    medians = [float(m) for m in groups if isinstance(m, int | float) and m > 0]
    if len(medians) >= 2 and max(medians) > WIDE * min(medians):
        return (f"the variation between {group}: the {len(medians)} {group}' medians run from "
                f"{min(medians):.3g} to {max(medians):.3g} ms")
    spread = (f" (5th to 95th percentile {p5:.3g} to {p95:.3g} ms)"
              if math.isfinite(p5) and math.isfinite(p95) else "")
    return f"the variation between {between}{spread}"


SHARE_VARIATION = "profiled iterations (the category's share of each)"
"""What varies where a category's share, or a time carried through from it, is wide."""


def share_wide_reason(share: Any, low: Any, high: Any, ms: Any, method: Any = None) -> str | None:
    """Why a category's share interval ``[low, high]`` reaches past twice ``share``, in
    words (None where it does not): ``interval_wide_reason`` of the category's ``ms`` scaled
    by the interval, so that a category of a few ticks of the ``method``'s clock names the
    timer, and any other the variation of its share between the profiled iterations."""
    if not is_wide(share, low, high) or not isinstance(ms, int | float) or ms <= 0:
        return None
    tick = TIMER_RESOLUTION_MS.get(str(method or ""), 0.001)
    scale = float(ms) / float(share)
    return interval_wide_reason(ms, float(low) * scale, float(high) * scale, tick_ms=tick,
                                between=SHARE_VARIATION)

def wide_reason(record: Mapping[str, Any]) -> str | None:
    """Why ``record``'s latency interval reaches past twice its median, in words (None
    where it does not): ``interval_wide_reason`` of its timing, with the resolution of the
    clock it was timed by and its rounds' medians."""
    tick = TIMER_RESOLUTION_MS.get(str(fields.get(record, "timing.method") or ""), 0.001)
    rounds = [r.get("median") for r in fields.get(record, "timing.rounds") or []
              if isinstance(r, Mapping)]
    return interval_wide_reason(
        fields.number(record, "timing.median"), fields.number(record, "timing.ci_low"),
        fields.number(record, "timing.ci_high"), tick_ms=tick,
        groups=[m for m in rounds if isinstance(m, int | float)],
        p5=fields.number(record, "timing.p5"), p95=fields.number(record, "timing.p95"))
