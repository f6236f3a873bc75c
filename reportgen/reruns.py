"""What a rerun gives: two measurements of one combination, in two runs, set against each
other. ``agree`` is the test the interval coverage figure of the bench applies to a suite
measured twice; ``across_days`` applies it to the committed runs themselves, each median
measured again on a later day against the earlier day's run (no torch, no pandas: the bench
and the render side both read it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportgen import stats


def agree(first: float, low: float, high: float, second: float, second_low: float | None,
          second_high: float | None) -> bool | None:
    """Whether two runs' medians agree: their difference is within the half-widths of the
    two intervals that face each other, combined in quadrature. None without the second
    run's interval."""
    if second_low is None or second_high is None:
        return None
    if second >= first:
        reach = ((high - first) ** 2 + (second - second_low) ** 2) ** 0.5
    else:
        reach = ((first - low) ** 2 + (second_high - second) ** 2) ** 0.5
    return abs(second - first) <= reach


def across_days(measurements: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Reruns on other days, from committed runs alone (pure): ``measurements`` are one
    per run and combination, each with ``hardware``, ``key`` (what makes two the same
    measurement: the combination and its torch and transformers releases), ``run_id``,
    ``day`` and its ``median``, ``ci_low`` and ``ci_high``. Each measurement is set
    against the latest one of the same key on an earlier day: one row per such pair, with
    whether the later median falls inside the earlier interval and whether the two agree
    (``agree``, the test of the figure above)."""
    groups: dict[tuple[str, Any], list[Mapping[str, Any]]] = {}
    for m in measurements:
        if m.get("median") is None or m.get("ci_low") is None or m.get("ci_high") is None or not m.get("day"):
            continue
        groups.setdefault((str(m["hardware"]), m["key"]), []).append(m)
    out = []
    for (hardware, _), group in sorted(groups.items(), key=lambda kv: str(kv[0])):
        group.sort(key=lambda m: (str(m["day"]), str(m["run_id"])))
        for i, later in enumerate(group):
            earlier = [m for m in group[:i] if str(m["day"]) < str(later["day"])]
            if not earlier:
                continue
            first = earlier[-1]
            median = float(later["median"])
            out.append({"hardware": hardware, "first_run": first["run_id"], "first_day": first["day"],
                        "run": later["run_id"], "day": later["day"],
                        "inside": bool(float(first["ci_low"]) <= median <= float(first["ci_high"])),
                        "agree": agree(float(first["median"]), float(first["ci_low"]), float(first["ci_high"]),
                                       median, float(later["ci_low"]), float(later["ci_high"])),
                        "rel_shift": median / float(first["median"]) - 1.0 if first["median"] else None})
    return out


def across_days_summary(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per hardware: how many re-measured medians on another day, how many agree with the
    earlier run's, how many fall inside its interval, over which days, and the median
    absolute shift between the two."""
    out = []
    for hardware in sorted({str(p["hardware"]) for p in pairs}):
        mine = [p for p in pairs if p["hardware"] == hardware]
        days = sorted({str(p["day"]) for p in mine} | {str(p["first_day"]) for p in mine})
        shifts = [abs(float(p["rel_shift"])) for p in mine if p.get("rel_shift") is not None]
        out.append({"hardware": hardware, "pairs": len(mine),
                    "agree": sum(bool(p["agree"]) for p in mine),
                    "inside": sum(bool(p["inside"]) for p in mine),
                    "runs": len({p["run"] for p in mine} | {p["first_run"] for p in mine}),
                    "first_day": days[0], "last_day": days[-1], "days": len(days),
                    "median_abs_shift": stats.median(shifts) if shifts else None})
    return out
