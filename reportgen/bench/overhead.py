"""Figure 2: what measuring costs.

* Profiler overhead: the profiled pass's per-iteration time over the unprofiled median,
  for every combination of the suite run (read from the records ``measure`` wrote).
* Instrumentation overhead: reportgen's own attribution instrumentation
  (``structure.install_hooks``: each labelled module's forward wrapped in a
  ``record_function`` range) active without a profiler, against the bare forward,
  interleaved in ABBA rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reportgen.bench.common import (
    build,
    combo_label,
    each_combo,
    stopwatch,
    time_median,
)
from reportgen.bench.latency import describe_ratio
from reportgen.bench.results import figure
from reportgen.paired import interleave
from reportgen.records import fields
from reportgen.records.bench import FAIL, NOT_MEASURED, PASS
from reportgen.records.status import is_ok
from reportgen.stats import bootstrap_median, bootstrap_ratio, median

INSTRUMENTATION_GOAL = 0.03
# time_step stops at a 2% CI by default; a comparison of ~1% effects spends its budget
TIGHT = 0.001

PROFILER_QUESTION = (
    "How much slower is a forward under torch.profiler (with reportgen's ranges, shapes, "
    "memory and FLOPs recording) than unprofiled? The profiled pass only apportions time; "
    "the latency quoted comes from the unprofiled pass, so this ratio is shown, not "
    "corrected for."
)
INSTRUMENTATION_QUESTION = (
    "What does reportgen's own instrumentation (each labelled module's forward wrapped in a "
    "`record_function` range) cost when no profiler is recording? Instrumented and bare forwards of the same "
    "model alternate in one process."
)


def profiler_overhead(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for rec in records:
        if not is_ok(rec):
            continue
        unprof = fields.get(rec, "timing.median")
        prof = fields.get(rec, "profile.median_ms")
        if not unprof or not prof:
            continue
        rows.append({"combination": rec["id"], "unprofiled_ms": unprof, "profiled_ms": prof,
                     "ratio": prof / unprof, "recorded_ratio": fields.get(rec, "profile.overhead_ratio")})
    if not rows:
        return figure("Profiler overhead", PROFILER_QUESTION, value=None, unit="ratio",
                      goal="shown for every combination (no pass/fail)", goal_spec=None,
                      status=NOT_MEASURED, notes=["no ok records from the suite run"])
    ratios = [r["ratio"] for r in rows]
    lo, hi = min(ratios), max(ratios)
    worst = max(rows, key=lambda r: r["ratio"])
    return figure(
        "Profiler overhead", PROFILER_QUESTION,
        value=median(ratios), unit="ratio", interval=[lo, hi],
        interval_kind="range over combinations (not a confidence interval)",
        goal="shown for every combination (no pass/fail)", goal_spec=None,
        notes=[f"Median over {len(rows)} combinations; highest {worst['ratio']:.3f} "
               f"({worst['combination']}). Profiled time = median of the profiled pass's "
               f"iterations; unprofiled = the timing pass's median."],
        rows=rows,
    )


def instrumentation_compare(combo: Any, *, rounds: int, budget_s: float) -> dict[str, Any]:
    from reportgen.profile import structure

    built = build(combo)
    step, model = built.step, built.model

    def bare() -> float:
        return time_median(step, budget_s, target_rel_halfwidth=TIGHT)[0]

    # the labels the profiled pass places its ranges by (``measure``'s)
    labels = structure.derive(model, step).labels

    def instrumented() -> float:
        with structure.install_hooks(model, labels):
            return time_median(step, budget_s, target_rel_halfwidth=TIGHT)[0]

    with stopwatch() as wall:
        values = interleave({"bare": bare, "instrumented": instrumented}, rounds)
    ratio, lo, hi = bootstrap_ratio(values["instrumented"], values["bare"], paired=True)
    return {
        "combination": combo_label(combo),
        "mode": getattr(combo, "mode", None),
        "bare_ms": median(values["bare"]), "instrumented_ms": median(values["instrumented"]),
        "ratio": ratio, "ratio_low": lo, "ratio_high": hi,
        "modules": sum(1 for _ in model.modules()),
        "labelled": sum(1 for info in labels.values() if info.role is not None),
        "bare_rounds_ms": values["bare"], "instrumented_rounds_ms": values["instrumented"],
        "wall_s": wall[0],
    }


def instrumentation_overhead(combos: Sequence[Any], *, rounds: int = 6, budget_s: float = 0.6,
                             log: Callable[[str], None] = print,
                             stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    with stopwatch() as wall:
        rows, notes = each_combo(
            combos, "instrumentation",
            lambda c: instrumentation_compare(c, rounds=rounds, budget_s=budget_s),
            describe_ratio, log=log, stop=stop)
    return instrumentation_summary(rows, notes, rounds=rounds, budget_s=budget_s,
                                   duration_s=wall[0])


def over_causes(over: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why each combination significantly over the goal is over, from the figure's own
    rows: what its ranges cost per call, and what the same ranges at that cost are in a
    longer step of the same model (its forward or prefill at the same length)."""
    out = []
    for r in over:
        ranges = r.get("labelled")
        count = int(ranges if ranges is not None else r["modules"])
        bare = float(r["bare_ms"])
        extra = (float(r["instrumented_ms"]) - bare if r.get("instrumented_ms") is not None
                 else (float(r["ratio"]) - 1.0) * bare)
        per_us = 1e3 * extra / max(1, count)
        what = f"{count} ranges" if ranges is not None else f"{count} module ranges (every module wrapped)"
        # the same model, attention and length in another mode: model--mode--dtype--attn--bN--sL
        parts = str(r["combination"]).split("--")
        longer = [x for x in rows if x["mode"] != r["mode"] and float(x["bare_ms"]) > bare
                  and (lambda o: o[:1] + o[2:] == parts[:1] + parts[2:])(str(x["combination"]).split("--"))]
        line = (f"Why {r['combination']} is over: its instrumented step took {extra:.2f} ms more than "
                f"the bare one ({bare:.2f} ms), {per_us:.1f} µs for each of its {what}; "
                f"a range costs the same whatever the step computes, and a {r['mode']} step runs every "
                "module for little arithmetic")
        if longer:
            other = min(longer, key=lambda x: float(x["bare_ms"]))
            line += (f": at that cost the same ranges are {100 * extra / float(other['bare_ms']):.1f}% of "
                     f"its {other['mode']} ({float(other['bare_ms']):.1f} ms), which measured "
                     f"{float(other['ratio']):.3f}")
        out.append(line + ".")
    return out


def instrumentation_summary(rows: Sequence[dict[str, Any]], notes: Sequence[str] = (), *,
                            rounds: int, budget_s: float,
                            duration_s: float | None = None) -> dict[str, Any]:
    """The figure from per-combination rows (pure). Value: the median ratio over
    combinations, bootstrap interval over them; pass when it is under the goal and no
    combination is significantly over it (its interval wholly above)."""
    limit = 1 + INSTRUMENTATION_GOAL
    goal = (f"median instrumented / bare < {limit:.2f} at reference size, no combination "
            "significantly above")
    spec = {"kind": "below", "target": limit}
    if not rows:
        return figure("Instrumentation overhead", INSTRUMENTATION_QUESTION, value=None,
                      unit="ratio", goal=goal, goal_spec=spec, status=NOT_MEASURED,
                      notes=list(notes) or ["no combination measured"])
    value, lo, hi = bootstrap_median([r["ratio"] for r in rows])
    worst = max(rows, key=lambda r: r["ratio"])
    over = [r for r in rows if r["ratio_low"] > limit]
    by_mode: dict[str, list[float]] = {}
    for r in rows:
        by_mode.setdefault(str(r["mode"]), []).append(r["ratio"])
    status = PASS if value < limit and not over else FAIL
    out_notes = [
        f"{sum(r['ratio'] < limit for r in rows)} of {len(rows)} combinations have a point "
        f"ratio under {limit:.2f}; {len(over)} are significantly above"
        + (": " + ", ".join(f"{r['combination']} ({r['ratio']:.3f})" for r in over) if over else "")
        + f". Highest point: {worst['combination']} ({worst['ratio']:.4f}, interval "
          f"{worst['ratio_low']:.3f}-{worst['ratio_high']:.3f}; {worst['modules']} modules"
          + (f", {worst['labelled']} with a range" if worst.get("labelled") is not None else "")
          + f", bare forward {worst['bare_ms']:.2f} ms).",
        "Median ratio by mode: " + ", ".join(f"{m} {median(v):.4f}" for m, v in by_mode.items()) + ".",
        f"{rounds} interleaved rounds per combination, reportgen timing budget {budget_s} s per "
        "round; per-combination interval = paired bootstrap over rounds.",
        *over_causes(over, rows),
        *notes,
    ]
    return figure(
        "Instrumentation overhead", INSTRUMENTATION_QUESTION,
        value=value, unit="ratio", interval=[lo, hi],
        interval_kind="median over combinations, bootstrap over combinations",
        goal=goal, goal_spec=spec, status=status, notes=out_notes, rows=rows,
        duration_s=duration_s,
        extra={"significantly_over": len(over), "worst_ratio": worst["ratio"],
               "rounds": rounds, "budget_s": budget_s},
    )
