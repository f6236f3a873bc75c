"""Copies of the committed cpu-default run with a known change made to their timings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "runs" / "cpu-amd-epyc-2c" / "cpu-default-c11f32ec"


def scaled_copy(tmp: Path, factor: float, *, name: str, transformers: str | None = None,
                only: str | None = None, started: str = "2099-01-01T00:00:00Z") -> Path:
    """A copy of the committed run under ``tmp``/cpu-amd-epyc-2c/``name`` whose timings are
    multiplied by ``factor`` (only combinations whose id contains ``only``, when given)."""
    dest = tmp / "cpu-amd-epyc-2c" / name
    shutil.copytree(RUN, dest, ignore=shutil.ignore_patterns("traces", "logs"))
    run = json.loads((dest / "run.json").read_text())
    run["run_id"] = f"cpu-amd-epyc-2c/{name}"
    run["started"] = run["finished"] = started
    if transformers:
        run["environment"]["libraries"]["transformers"] = transformers
    (dest / "run.json").write_text(json.dumps(run))
    for path in (dest / "combinations").glob("*.json"):
        rec = json.loads(path.read_text())
        rec["run_id"] = run["run_id"]
        timing = rec.get("timing")
        if timing and (only is None or only in rec["id"]):
            for key in ("median", "ci_low", "ci_high", "mean", "p5", "p25", "p75", "p95"):
                timing[key] *= factor
            timing["samples"] = [x * factor for x in timing["samples"]]
        path.write_text(json.dumps(rec))
    return dest


def coverage_bench(shifts: list[float]) -> dict:
    """A bench results document whose coverage step re-measured medians by ``shifts``."""
    from reportgen.bench import coverage
    from reportgen.bench.results import results_document

    first = [{"id": f"c{i}", "status": "ok",
              "timing": {"median": 100.0, "ci_low": 90.0, "ci_high": 110.0, "confidence": 0.9375}}
             for i in range(len(shifts))]
    again = [{"id": f"c{i}", "status": "ok", "timing": {"median": 100.0 * (1 + s)}}
             for i, s in enumerate(shifts)]
    figures = {"interval_coverage": {**coverage.summarise(coverage.rows(first, again)),
                                     "measured_at": "2026-12-03T08:20:00Z"}}
    return results_document(figures, environment={"hardware": "cpu-amd-epyc-2c"},
                            created="2026-12-03T08:30:00Z", quick=False, duration_s=1.0,
                            command="python scripts/bench.py")
