"""Figure 1: reportgen's unprofiled median against torch.utils.benchmark, per combination.

Same model, same input, same process: the two timers alternate in ABBA rounds (reportgen's
``timing.time_step``, then ``Timer.blocked_autorange``), and the ratio of the medians of
the rounds gets a paired bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from reportgen.bench.common import (
    build,
    combo_label,
    each_combo,
    reset_cost_ms,
    stopwatch,
    time_median,
    timer_median,
)
from reportgen.bench.results import figure
from reportgen.intervals import achieved_confidence
from reportgen.paired import interleave
from reportgen.records.bench import FAIL, NOT_MEASURED, PASS
from reportgen.stats import bootstrap_median, median, median_ci

GOAL = 0.03
QUESTION = (
    "Does reportgen's unprofiled median latency agree with an independent timer? For every "
    "`cpu-default` combination, reportgen's timing pass and `torch.utils.benchmark.Timer."
    "blocked_autorange` time the same model on the same input, alternating in one process."
)


def compare(combo: Any, *, rounds: int, budget_s: float, min_run_time: float) -> dict[str, Any]:
    built = build(combo)
    step = built.step
    ours: list[float] = []

    def reportgen_round() -> float:
        med, _ = time_median(step, budget_s)
        return med

    reset_ms = reset_cost_ms(step)
    with stopwatch() as wall:
        values = interleave({"reportgen": reportgen_round,
                             "timer": lambda: timer_median(step, min_run_time, reset_ms)}, rounds)
    ours = values["reportgen"]
    ratio, lo, hi, confidence = paired_ratio_interval(ours, values["timer"])
    return {
        "combination": combo_label(combo),
        "reportgen_ms": median(ours),
        "timer_ms": median(values["timer"]),
        "ratio": ratio, "ratio_low": lo, "ratio_high": hi, "ratio_confidence": confidence,
        "rounds": rounds, "reset_ms": reset_ms,
        "reportgen_rounds_ms": ours,
        "timer_rounds_ms": values["timer"],
        "wall_s": wall[0],
    }


def paired_ratio_interval(ours: Sequence[float], timer: Sequence[float]) -> tuple[float, float, float, float]:
    """(ratio of medians, low, high, confidence): the order-statistic interval of the
    per-round ratios (rounds are paired, so drift between them cancels), at the confidence
    their number can give (six rounds: their range, 95%; four: their range, 87.5%). A percentile
    bootstrap over four rounds would call the same range 95%."""
    ratios = [a / b for a, b in zip(ours, timer) if b]
    if not ratios:
        return (float("nan"),) * 4  # type: ignore[return-value]
    _, low, high = median_ci(ratios)
    return median(ours) / median(timer), low, high, achieved_confidence(len(ratios))


def run(combos: Sequence[Any], *, rounds: int = 4, budget_s: float = 1.0,
        min_run_time: float = 0.5, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    with stopwatch() as wall:
        rows, notes = each_combo(
            combos, "latency",
            lambda c: compare(c, rounds=rounds, budget_s=budget_s, min_run_time=min_run_time),
            describe_ratio, log=log, stop=stop)
    return summarise(rows, notes, rounds=rounds, budget_s=budget_s, min_run_time=min_run_time,
                     duration_s=wall[0])


def summarise(rows: Sequence[dict[str, Any]], notes: Sequence[str] = (), *, rounds: int,
              budget_s: float, min_run_time: float, duration_s: float | None = None) -> dict[str, Any]:
    """The figure from per-combination rows (pure: re-runnable on a stored results file).

    Value: the median ratio over combinations, with a bootstrap interval over them. A
    combination misses the goal only when its own interval lies wholly outside the band
    (METHOD.md rule 5: a difference is one only when it is significant); the verdict is
    pass when the median is inside the band and no combination misses.
    """
    goal = (f"median ratio within {GOAL:.0%} of 1, and no combination whose interval lies "
            f"wholly outside {1 - GOAL:.2f}-{1 + GOAL:.2f}")
    spec = {"kind": "ratio_within", "target": GOAL}
    if not rows:
        return figure("Latency agreement", QUESTION, value=None, unit="ratio", goal=goal,
                      goal_spec=spec, status=NOT_MEASURED,
                      notes=list(notes) or ["no combination measured"])
    ratios = [r["ratio"] for r in rows]
    value, lo, hi = bootstrap_median(ratios)
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1.0))
    within = sum(abs(r["ratio"] - 1.0) <= GOAL for r in rows)
    misses = [r for r in rows if r["ratio_low"] > 1 + GOAL or r["ratio_high"] < 1 - GOAL]
    status = PASS if abs(value - 1.0) <= GOAL and not misses else FAIL
    out_notes = [
        f"{within} of {len(rows)} combinations have a point ratio within {GOAL:.0%}; "
        f"{len(misses)} lie significantly outside"
        + (": " + ", ".join(f"{r['combination']} ({r['ratio']:.3f})" for r in misses) if misses else "")
        + f". Worst point: {worst['combination']} ({worst['ratio']:.4f}, interval "
          f"{worst['ratio_low']:.3f}-{worst['ratio_high']:.3f}).",
        f"Each combination: {rounds} interleaved rounds (ABBA), reportgen budget {budget_s} s "
        f"per round, Timer min_run_time {min_run_time} s; per-combination interval = "
        "order-statistic interval of the paired per-round ratios, at the confidence "
        f"{rounds} rounds give ({achieved_confidence(rounds):.1%}).",
        "A decode step's timed region holds the forward only: the cache's growth by one "
        "token (the copy DynamicCache makes to append it) is part of every real decode step "
        "and is timed by both timers; the crop back is outside reportgen's samples and "
        "subtracted from the Timer's; the harness adds two clock reads.",
        "The Timer statement is `step(); step.sync(); step.reset()` (a decode step's reset crops "
        "the KV cache back, untimed in reportgen); the reset's own cost, measured apart, is "
        "subtracted (column reset_ms).",
        *notes,
    ]
    return figure(
        "Latency agreement", QUESTION, value=value, unit="ratio", interval=[lo, hi],
        interval_kind="median over combinations, bootstrap over combinations",
        goal=goal, goal_spec=spec, status=status, notes=out_notes, rows=rows,
        duration_s=duration_s,
        extra={"combinations_within_goal": within, "combinations": len(rows),
               "significant_misses": len(misses), "worst_ratio": worst["ratio"],
               "rounds": rounds, "budget_s": budget_s, "min_run_time": min_run_time},
    )


def describe_ratio(row: dict[str, Any]) -> str:
    return (f"{row['combination']}: ratio {row['ratio']:.4f} "
            f"[{row['ratio_low']:.4f}, {row['ratio_high']:.4f}]")
