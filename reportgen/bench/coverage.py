"""Do the intervals hold across runs? The suite is measured a second time, from scratch,
and each re-measured median is checked against the first run's interval.

An interval that captures only the noise inside one process covers another process's
median far less often than its label says; rounds in fresh workers
(``reportgen.execute.rounds``) and the hierarchical interval (``reportgen.intervals``)
are meant to close that gap.

A re-measured median is itself an estimate, as noisy as the first: even two perfectly
calibrated 95% intervals of equal width leave the second median outside the first interval
about one time in six (the difference of two estimates has sqrt(2) times the spread of
one). So the figure's verdict asks whether the two runs *agree*: their medians differ by no
more than the two intervals' half-widths facing each other, combined in quadrature (the
usual 95% test of two independent estimates). How many fall inside the first interval
alone is shown beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.bench import NOT_MEASURED
from reportgen.records.paths import combination_files
from reportgen.records.status import is_ok
from reportgen.reruns import agree

GOAL = 0.90
QUESTION = (
    "Does a combination's latency interval hold when the suite is measured again? The "
    "suite is re-measured from scratch (fresh workers, the same settings) and each "
    "re-measured median, with its interval, is checked against the first run's."
)


def rows(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per combination timed in both runs (pure)."""
    again = {r["id"]: r for r in second if is_ok(r) and fields.get(r, "timing")}
    out = []
    for rec in first:
        timing = fields.get(rec, "timing") or {}
        other = fields.get(again.get(rec["id"]), "timing") or {}
        if not is_ok(rec) or timing.get("median") is None or other.get("median") is None:
            continue
        low, high, median = timing["ci_low"], timing["ci_high"], other["median"]
        out.append({"combination": rec["id"], "median_ms": timing["median"], "ci_low_ms": low,
                    "ci_high_ms": high, "confidence": timing.get("confidence"),
                    "ci_method": timing.get("ci_method"), "remeasured_ms": median,
                    "remeasured_ci_low_ms": other.get("ci_low"), "remeasured_ci_high_ms": other.get("ci_high"),
                    "inside": bool(low <= median <= high),
                    "agree": agree(timing["median"], low, high, median, other.get("ci_low"), other.get("ci_high")),
                    "rel_shift": median / timing["median"] - 1.0 if timing["median"] else None})
    return out


def common_shift(table: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What moved every combination alike between the two runs (the host's speed, not
    the intervals): the median relative shift, how many moved each way, and how many
    re-measured medians fall inside once that shift is divided out (each combination
    against the median shift of the others, so none corrects itself)."""
    shifts = [float(r["rel_shift"]) for r in table if r.get("rel_shift") is not None]
    if len(shifts) < 3:
        return None
    from reportgen import stats

    inside = 0
    for i, r in enumerate(table):
        others = [1.0 + x for j, x in enumerate(shifts) if j != i]
        scaled = float(r["remeasured_ms"]) / stats.median(others)
        inside += float(r["ci_low_ms"]) <= scaled <= float(r["ci_high_ms"])
    return {"median_shift": stats.median(shifts), "lower": sum(x < 0 for x in shifts),
            "higher": sum(x > 0 for x in shifts), "inside_without_shift": inside,
            "combinations": len(shifts)}


def summarise(table: Sequence[Mapping[str, Any]], *, duration_s: float | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    judged = [r for r in table if r.get("agree") is not None]
    by_agreement = bool(table) and len(judged) == len(table)
    goal = (f"at least {GOAL:.0%} of re-measured medians agree with the first run's (the difference "
            "within the two intervals combined)" if by_agreement or not table
            else f"at least {GOAL:.0%} of re-measured medians inside the first run's interval")
    spec = {"kind": "above", "target": GOAL}
    if not table:
        return figure("Interval coverage", QUESTION, value=None, unit="share", goal=goal, goal_spec=spec,
                      status=NOT_MEASURED, notes=list(notes) or ["no combination measured twice"])
    inside = sum(bool(r["inside"]) for r in table)
    agreeing = sum(bool(r["agree"]) for r in judged)
    value = (agreeing if by_agreement else inside) / len(table)
    disagree = [r for r in judged if not r["agree"]]
    agreement_notes = ([f"{agreeing} of {len(table)} re-measured medians agree with the first run's: "
                        "the difference is within the two intervals' facing half-widths combined in "
                        "quadrature (the 95% test of two estimates)."]
                       + (["Disagree: " + ", ".join(f"{r['combination']} ({r['rel_shift']:+.1%})"
                                                     for r in disagree)] if disagree else [])
                       if by_agreement else [])
    levels = sorted({r["confidence"] for r in table if r.get("confidence") is not None})
    methods = sorted({str(r["ci_method"]) for r in table if r.get("ci_method")})
    outside = [r for r in table if not r["inside"]]
    shift = common_shift(table)
    shift_notes = ([f"Between the runs the medians moved by a median of {shift['median_shift']:+.1%} "
                    f"({shift['lower']} lower, {shift['higher']} higher): a shift common to the "
                    "combinations is the host's speed changing between runs, which no interval "
                    "inside one run can contain. With the others' median shift divided out, "
                    f"{shift['inside_without_shift']} of {shift['combinations']} re-measured "
                    "medians fall inside."] if shift else [])
    return figure(
        "Interval coverage", QUESTION, value=value, unit="share", goal=goal, goal_spec=spec,
        notes=[*agreement_notes,
               f"{inside} of {len(table)} re-measured medians fall inside the first run's interval.",
               "Stated confidence of those intervals: "
               + (", ".join(f"{x:.1%}" for x in levels) or "not recorded")
               + f" ({', '.join(methods) or 'method not recorded'}). An interval for the median "
               "covers another run's estimate less often than its confidence: that estimate "
               "is itself noisy (two calibrated 95% intervals of equal width: about 83%).",
               *(["Outside: " + ", ".join(f"{r['combination']} ({r['rel_shift']:+.1%})" for r in outside)]
                 if outside else []),
               *shift_notes, *notes],
        rows=table, duration_s=duration_s,
        extra={"inside": inside, "agree": agreeing if by_agreement else None, "combinations": len(table),
               "common_shift": shift},
    )


def run(suite: Any, first: Sequence[Mapping[str, Any]], scratch: Path) -> dict[str, Any]:
    """Measure ``suite`` again into ``scratch`` and compare with ``first``'s records."""
    import shutil

    from reportgen.bench.efficiency import run_suite

    if scratch.exists():
        shutil.rmtree(scratch)
    again = run_suite(suite, scratch)
    return summarise(rows(first, again.records), duration_s=again.wall_s)


def rows_from_runs(first_dir: Path, again_dir: Path,
                   stored: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The rows again from the two runs' records on disk, when they are the runs
    ``stored`` rows came from (the same combinations, the same medians); else None."""
    table = rows(first_records(first_dir), first_records(again_dir))
    key = {(r["combination"], r["median_ms"], r["remeasured_ms"]) for r in table}
    return table if key == {(r["combination"], r["median_ms"], r["remeasured_ms"]) for r in stored} else None


def first_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of an earlier suite run (the bench's scratch run) from disk."""
    from reportgen.records.schema import load_combination

    return [load_combination(p) for p in combination_files(run_dir)]
