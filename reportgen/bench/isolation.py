"""Two figures about how combinations are executed.

* Isolation cost: the suite measured by supervised worker processes (the default) against
  the same suite measured inside one process, one right after the other on the same
  host: what process isolation adds to the suite's wall time.
* Memory estimate: each combination's pre-flight estimate of its peak memory against what
  its worker's resident memory reached above the worker's resting size (peak VmHWM, reset
  before each combination, less the resident set after importing torch), so the estimate
  that decides "skipped: needs ~X GiB" stays honest. A warm worker keeps the previous
  model's freed heap, so the growth can only be over-stated, never hidden.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reportgen.bench.efficiency import SuiteRun
from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.paths import combination_files
from reportgen.records.status import is_ok
from reportgen.stats import bootstrap_ratio, median

ISOLATION_QUESTION = (
    "What does measuring every combination in a supervised worker process (so a crash, hang "
    "or out-of-memory costs one combination) add to the suite's wall time, against measuring "
    "in the suite's own process?"
)
ISOLATION_GOAL = 1.10
MEMORY_QUESTION = (
    "Is the pre-flight memory estimate (from the config, before anything is allocated) at least "
    "the peak memory each combination's worker really reached, and by how much does it overshoot?"
)
GIB = 1024**3


def fresh_run(suite: Any, out: Path, executor: str) -> SuiteRun:
    """The suite measured by a fresh ``python`` process, as ``reportgen profile`` would be:
    ``workers`` (supervised worker processes, the default) or ``inline`` (measured in that
    process itself, as before workers existed). Both pay the same interpreter start and
    imports, so the difference is what isolation costs. The wall time includes them."""
    from reportgen.execute import fresh

    t0 = time.perf_counter()
    # its output to a log beside the runs, as the console of a run nobody watches
    result = fresh.run(suite_in_process, {"executor": executor, "suite": suite, "out": str(out)},
                       log_path=out.parent / f"isolation-{executor}.log")
    wall = time.perf_counter() - t0
    if not result.ok:
        raise RuntimeError(f"the suite's process ({executor}): {result.reason}\n{result.log_tail}")
    from reportgen.records.schema import iter_runs

    (run,) = list(iter_runs(out))
    records = [json.loads(path.read_text()) for path in combination_files(run.path)]
    return SuiteRun(suite=suite, records=records, run_dir=run.path, wall_s=wall)


def suite_in_process(executor: str, suite: Any, out: str) -> None:
    """The suite run by the fresh process ``fresh_run`` starts."""
    from reportgen.execute.runner import run_suite

    if executor == "inline":
        from reportgen.execute.inline import InlineExecutor
        from reportgen.profile.measure import measure
        from reportgen.profile.preflight import check

        run_suite(suite, out=out, force=True, command=f"scripts/bench.py (isolation: {executor})",
                  executor=InlineExecutor(measure, preflight=check, device=suite.settings.device),
                  show_progress=False)
    else:
        run_suite(suite, out=out, force=True, command=f"scripts/bench.py (isolation: {executor})",
                  show_progress=False)


def isolation_cost(workers: SuiteRun, inline: SuiteRun) -> dict[str, Any]:
    by_id = {r["id"]: r for r in inline.records}
    rows = []
    for rec in workers.records:
        other = by_id.get(rec["id"])
        if other is None:
            continue
        rows.append({"combination": rec["id"], "workers_s": rec["duration_s"], "inline_s": other["duration_s"],
                     "ratio": rec["duration_s"] / other["duration_s"] if other["duration_s"] else None,
                     "status": rec["status"], "inline_status": other["status"]})
    ratio = workers.wall_s / inline.wall_s if inline.wall_s else None
    per_combo, low, high = bootstrap_ratio([r["workers_s"] for r in rows], [r["inline_s"] for r in rows],
                                           paired=True)
    return figure(
        "Isolation cost", ISOLATION_QUESTION,
        value=ratio, unit="ratio",
        goal=f"suite wall time with workers / in one process at most {ISOLATION_GOAL:.2f}",
        goal_spec={"kind": "below", "target": ISOLATION_GOAL + 1e-12},
        notes=[
            f"Workers: {workers.wall_s:.1f} s; in one process: {inline.wall_s:.1f} s: each a fresh "
            "Python process running the whole suite (start-up and imports included), one right after "
            "the other on this host.",
            f"Per combination (worker start-up excluded), median ratio {per_combo:.3f} "
            f"[{low:.3f}, {high:.3f}] (paired bootstrap, 95%).",
            "The worker starts once per device (a fresh interpreter importing torch) and again only "
            "after a combination that killed it.",
        ],
        rows=rows, duration_s=workers.wall_s + inline.wall_s,
        extra={"workers_wall_s": workers.wall_s, "inline_wall_s": inline.wall_s,
               "per_combination_ratio": [per_combo, low, high]},
    )


def memory_estimate(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    rows = []
    for rec in records:
        estimate = fields.get(rec, "preflight.estimate_bytes")
        host = fields.get(rec, "execution.host_memory") or {}
        peak, before = host.get("peak_rss_bytes"), host.get("baseline_rss_bytes")
        if not is_ok(rec) or not estimate or not peak or before is None or peak <= before:
            continue
        rows.append({"combination": rec["id"], "estimate_gib": estimate / GIB, "baseline_rss_gib": before / GIB,
                     "peak_rss_gib": peak / GIB, "grew_gib": (peak - before) / GIB,
                     "ratio": estimate / (peak - before)})
    if not rows:
        return figure("Memory estimate", MEMORY_QUESTION, value=None, unit="ratio",
                      goal="estimate / measured growth at least 1 in every combination", goal_spec=None,
                      status="not measured",
                      notes=["No combination carried both a pre-flight estimate and a worker peak."])
    ratios = [r["ratio"] for r in rows]
    return figure(
        "Memory estimate", MEMORY_QUESTION,
        value=min(ratios), unit="ratio",
        goal="shown (no pass/fail): in a warm worker the growth is over-stated, so the lowest ratio is a "
             "lower bound",
        goal_spec=None,
        notes=[f"Over {len(rows)} combinations: estimate / growth of the worker's resident memory from "
               f"{min(ratios):.2f} to {max(ratios):.2f}, median {median(ratios):.2f}.",
               "Growth is the worker's peak resident set during the combination (VmHWM, reset before it) "
               "less its resting size (after importing torch). A warm worker keeps the heap the previous "
               "model freed, so growth is at least what the combination needed: the ratio is a lower "
               "bound. On a GPU the device's own peak (allocator statistics) is in each record's memory "
               "section."],
        rows=rows,
        extra={"median_ratio": median(ratios), "max_ratio": max(ratios)},
    )


def run(suite: Any, scratch: Path, log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    import shutil

    runs = {}
    for kind in ("workers", "inline"):
        out = scratch / f"runs-{kind}"
        if out.exists():
            shutil.rmtree(out)
        log(f"isolation: the suite in a fresh process, {kind} ...")
        runs[kind] = fresh_run(suite, out, kind)
        log(f"isolation: {kind} {runs[kind].wall_s:.1f} s")
    return {"isolation_cost": isolation_cost(runs["workers"], runs["inline"]),
            "memory_estimate": memory_estimate(runs["workers"].records)}
