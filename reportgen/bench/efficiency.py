"""Figure 6: the suite run itself, through reportgen's own runner, and how much of its wall
time goes into timed iterations.

The records this run writes (into a scratch runs tree, never runs/) also feed the
profiler-overhead, FLOPs and trace figures, so the suite is measured once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.status import is_ok

EFFICIENCY_QUESTION = (
    "How much of the suite's wall time is spent in timed iterations (the samples a latency "
    "is computed from), and how much in building models, warming up, profiling, FLOP "
    "counting and writing?"
)
SUITE_TIME_QUESTION = "How long does the default CPU suite take on this host, end to end?"
# `nox -s report -- --force` on 2 cores within 6 minutes: the suite's part of it
SUITE_TIME_GOAL_S = 360.0


@dataclass
class SuiteRun:
    suite: Any
    records: list[dict[str, Any]]
    run_dir: Path
    wall_s: float


def run_suite(suite: Any, out: Path, command: str = "python scripts/bench.py", *,
              force: bool = True, timeout_s: float | None = None) -> SuiteRun:
    """The bench's suite run, its run.json naming ``command`` (what measures it again);
    ``force=False`` resumes a run of the same suite stopped part way, measuring its failed
    combinations again; ``timeout_s``: how long one combination's worker may take (default:
    the runner's)."""
    from reportgen.execute.runner import local_executor
    from reportgen.execute.runner import run_suite as _run

    t0 = time.perf_counter()
    executor = local_executor(suite, timeout_s=timeout_s) if timeout_s else None
    result = _run(suite, out=out, force=force, retry_failed=not force, command=command, executor=executor)
    wall = time.perf_counter() - t0
    return SuiteRun(suite=suite, records=list(result.records), run_dir=Path(result.store.run_dir),
                    wall_s=wall)


def _sum_ms(values: Any) -> float:
    return float(sum(values or []))


def figures(run: SuiteRun, *, reference_size: bool) -> dict[str, dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    timed_s = warm_s = 0.0
    for rec in run.records:
        timing = fields.get(rec, "timing") or {}
        kept = _sum_ms(timing.get("samples")) / 1000.0
        warm = _sum_ms(timing.get("warmup_samples")) / 1000.0
        timed_s += kept
        warm_s += warm
        wall = float(fields.get(rec, "duration_s") or 0.0)
        rows.append({"combination": rec["id"], "status": rec["status"], "timed_s": kept,
                     "warmup_s": warm, "wall_s": wall,
                     "share": kept / wall if wall else None,
                     "budget_s": timing.get("budget_s"), "n": timing.get("n"),
                     "stop_reason": timing.get("stop_reason")})
    ok = sum(is_ok(r) for r in rows)
    share = timed_s / run.wall_s if run.wall_s else None
    stop = _count(r.get("stop_reason") for r in rows)
    eff = figure(
        "Harness efficiency", EFFICIENCY_QUESTION,
        value=share, unit="share",
        # rounds stop once their interval is tight: time no longer fills a budget, so the
        # share is shown; the suite's wall time is the goal
        goal="shown (no pass/fail): rounds stop once their interval is within the target, so timed "
             "samples fill no fixed budget; the suite's wall time carries the goal",
        goal_spec=None,
        notes=[
            f"Kept timing samples: {timed_s:.1f} s of {run.wall_s:.1f} s wall; warm-up "
            f"iterations add {warm_s:.1f} s ({(timed_s + warm_s) / run.wall_s:.1%} with "
            "them)." if run.wall_s else "no wall time",
            "Timing stop reasons: " + ", ".join(f"{k} {v}" for k, v in stop.items()) + ".",
        ],
        rows=rows, duration_s=run.wall_s,
        extra={"timed_s": timed_s, "warmup_s": warm_s, "wall_s": run.wall_s},
    )
    name = getattr(run.suite, "name", "suite")
    total = figure(
        "Suite time", SUITE_TIME_QUESTION,
        value=run.wall_s, unit="s",
        goal=f"{name} within {SUITE_TIME_GOAL_S:.0f} s on 2 cores",
        goal_spec={"kind": "below", "target": SUITE_TIME_GOAL_S} if reference_size else None,
        notes=[f"{len(rows)} combinations ({ok} ok), through `reportgen.execute.runner.run_suite` "
               "into a scratch runs tree, timing budget "
               f"{getattr(getattr(run.suite, 'settings', None), 'budget_s', '?')} s each."],
        rows=[{"suite": name, "combinations": len(rows), "ok": ok, "wall_s": run.wall_s}],
        duration_s=run.wall_s,
    )
    return {"harness_efficiency": eff, "suite_time": total}


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[str(item)] = out.get(str(item), 0) + 1
    return out
