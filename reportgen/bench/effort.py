"""Figures about effort and load: how long reportgen takes to answer, and what a busy host
does to its answers.

* Tiny-model effort: the tiny suite's combinations run as a user runs them, ``reportgen
  profile`` in a fresh process, with the default CPU suite's settings (eight rounds at
  most, its timing budget per combination): rounds stop once their interval is tight, so
  fast models cost seconds, not the budget.
* Reference effort: BERT-base at 128 and 512 tokens the same way, and side by side in the
  same bench run, the same two shapes through optimum-benchmark's inline launcher (its
  defaults), in its own virtual environment where it can be installed.
* Contention: the tiny combinations measured again while a busy process the bench starts
  on one core (and stops by its pid) runs beside them. Every median stays within 5% of the
  quiet run's, or its record says it was measured under contention (``unstable``, with
  the reason); no interval wider than twice its median goes unflagged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.bench import NOT_MEASURED
from reportgen.records.status import is_ok

TINY_GOAL_S = 120.0
TINY_GOAL_COMBINATIONS = 28
REFERENCE_GOAL = 1.0
CONTENTION_TOLERANCE = 0.05
WIDE = 2.0  # an interval wider than this many medians must be flagged

def suite_text(name: str, description: str, scale: str, matrices: str) -> str:
    """A suite file with the default CPU suite's settings (its most rounds, its timing
    budget per combination and its target) and these combinations."""
    from reportgen.suite import load_suite

    default = load_suite("cpu-default").settings
    return (f'name = "{name}"\ndescription = "{description}"\n\n[settings]\nscale = "{scale}"\n'
            f"budget_s = {default.budget_s}\nrounds = {default.rounds}\n"
            f"profile_iterations = {default.profile_iterations}\nseed = 0\ndevice = \"cpu\"\n"
            + (f"target = {default.target}\n" if default.target is not None else "") + matrices)


_ONE_BATCH = 'batch_sizes = [1]\ndtypes = ["fp32"]\n'
TINY_MATRIX = ('\n[[matrix]]\nmodels = ["bert-base", "t5-small"]\nmodes = ["forward"]\nseq_lens = [16, 32]\n'
               + _ONE_BATCH + 'attn = ["eager", "sdpa"]\n'
               '\n[[matrix]]\nmodels = ["gpt2", "llama-small"]\nmodes = ["forward", "prefill", "decode"]\n'
               'seq_lens = [16, 32]\n' + _ONE_BATCH + 'attn = ["eager", "sdpa"]\n')
REFERENCE_MATRIX = ('\n[[matrix]]\nmodels = ["bert-base"]\nmodes = ["forward"]\nseq_lens = [128, 512]\n'
                    + _ONE_BATCH + 'attn = ["sdpa"]\n')


def tiny_suite() -> str:
    return suite_text("bench-tiny", "The tiny suite's combinations with the default CPU suite's settings.",
                      "tiny", TINY_MATRIX)


def reference_suite() -> str:
    return suite_text("bench-bert", "BERT-base at 128 and 512 tokens with the default CPU suite's settings.",
                      "reference", REFERENCE_MATRIX)

OPTIMUM_SPEC = ("optimum-benchmark==0.6.0", "transformers>=4.50,<5")
OPTIMUM_SCRIPT = """
import shutil, sys, time
from pathlib import Path
t0 = time.perf_counter()
from optimum_benchmark import Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, PyTorchConfig
import optimum_benchmark.backends.base as base
from transformers import BertConfig

# its no-weights model starts from config.json, fetched from the Hub: served from disk
# (BERT-base's config, transformers' BertConfig defaults) where the Hub is unreachable
model = Path(sys.argv[1])
BertConfig().save_pretrained(model)
def config_from_disk(repo_id, filename, cache_dir=None, **kwargs):
    target = Path(cache_dir) / "config-from-disk"
    target.mkdir(parents=True, exist_ok=True)
    return shutil.copy(Path(repo_id) / filename, target / filename)
base.HF_API.hf_hub_download = config_from_disk
for seq in (128, 512):
    config = BenchmarkConfig(
        name=f"bert-base-s{seq}", launcher=InlineConfig(),
        scenario=InferenceConfig(latency=True, memory=False,
                                 input_shapes={"batch_size": 1, "sequence_length": seq}),
        backend=PyTorchConfig(model=str(model), device="cpu", no_weights=True, task="feature-extraction",
                              library="transformers", model_type="bert"))
    report = Benchmark.launch(config)
    print("latency", seq, report.forward.latency.p50, flush=True)
print("wall", time.perf_counter() - t0)
"""


@dataclass
class Measured:
    wall_s: float
    records: list[dict[str, Any]]
    run_dir: Path | None
    returncode: int


def compile_package() -> None:
    """reportgen's bytecode, as an installed package has it (pip compiles a package when it
    installs it, and a checkout writes it on its first run): on a host that sets
    PYTHONDONTWRITEBYTECODE every process of a run would compile reportgen from source."""
    import reportgen

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(reportgen.__file__).parent)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def profile_run(suite_text: str, out: Path, *, env: Mapping[str, str] | None = None) -> Measured:
    """``reportgen profile --suite FILE --out OUT`` in a fresh interpreter, as a user runs
    it (its bytecode compiled beforehand, `compile_package`); the wall time from its start
    to its exit."""
    out.mkdir(parents=True, exist_ok=True)
    suite = out / "suite.toml"
    suite.write_text(suite_text)
    compile_package()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--suite", str(suite), "--out",
                           str(out / "runs"), "--force"], env={**os.environ, **(env or {})},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    from reportgen.records.schema import iter_runs

    runs = sorted(iter_runs(out / "runs"), key=lambda r: str(fields.run_get(r.record, "started")))
    run = runs[-1] if runs else None
    records = list(run.combination_records()) if run is not None else []
    return Measured(wall_s=wall, records=[dict(r) for r in records], run_dir=run.path if run else None,
                    returncode=proc.returncode)


def tiny_effort(measured: Measured) -> dict[str, Any]:
    n = len(measured.records)
    per = measured.wall_s / n if n else None
    goal_per = TINY_GOAL_S / TINY_GOAL_COMBINATIONS
    rows = [{"combination": r["id"], "status": r["status"], "duration_s": r.get("duration_s"),
             "rounds": len(fields.get(r, "timing.rounds") or []),
             "median_ms": fields.get(r, "timing.median")} for r in measured.records]
    return figure(
        "Tiny-model effort",
        "How long does reportgen take for the tiny suite's combinations (millisecond forwards), "
        "run as a user runs it with the default CPU suite's settings?",
        value=per, unit="s per combination",
        goal=f"{TINY_GOAL_COMBINATIONS} combinations within {TINY_GOAL_S:.0f} s ({goal_per:.2f} s each)",
        goal_spec={"kind": "below", "target": goal_per + 1e-9},
        rows=rows, duration_s=measured.wall_s,
        notes=[f"{n} combinations in {measured.wall_s:.1f} s, interpreter start, model builds, warm-up, "
               "rounds, profiled pass and writing included ({} ok)".format(
                   sum(1 for r in measured.records if is_ok(r)))],
        extra={"combinations": n, "wall_s": measured.wall_s})


def optimum_python(scratch: Path, log: Callable[[str], None]) -> tuple[Path | None, str]:
    """A virtual environment (seeing this host's torch) with optimum-benchmark, made once
    under ``scratch``; (python, "") or (None, why not)."""
    venv = scratch / "optimum-venv"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    if ready.is_file() and python.is_file():
        return python, ""
    log("  installing optimum-benchmark into a virtual environment of its own")
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        return None, f"no virtual environment: {made.stderr.strip()[-200:]}"
    got = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *OPTIMUM_SPEC],
                         capture_output=True, text=True)
    if got.returncode != 0:
        return None, "pip could not install " + " ".join(OPTIMUM_SPEC) + ": " + got.stderr.strip()[-300:]
    ready.write_text("ok\n")
    return python, ""




def optimum_run(python: Path, scratch: Path) -> tuple[float | None, str, dict[int, float]]:
    """optimum-benchmark's inline launcher on BERT-base's config (random weights) at 128
    and 512 tokens: (wall seconds, why not, median latency in s by length)."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), "-c", OPTIMUM_SCRIPT, str(scratch / "optimum-bert-base")],
                          capture_output=True, text=True, cwd=scratch, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["?"]
        last = next((line for line in reversed(lines) if "Error" in line.split(":", 1)[0]), lines[-1])
        return None, "optimum-benchmark failed: " + last.strip()[:300], {}
    latencies = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["latency"] and len(parts) == 3:
            latencies[int(parts[1])] = float(parts[2])
    return wall, "", latencies


# each side runs twice, in the order reportgen, optimum-benchmark, optimum-benchmark,
# reportgen: a slow minute of the host weighs on both sides, not on whichever ran in it
REFERENCE_ORDER = ("reportgen", "optimum", "optimum", "reportgen")


def reference_effort(measured: Sequence[Measured], optimum_walls: Sequence[float], why: str,
                     optimum_latency: Mapping[int, float]) -> dict[str, Any]:
    """The figure from reportgen's runs and optimum-benchmark's (``REFERENCE_ORDER``):
    the median of each side's wall times, and their ratio."""
    from reportgen.stats import median

    mine = median([m.wall_s for m in measured]) if measured else None
    theirs = median(list(optimum_walls)) if optimum_walls else None
    ratio = mine / theirs if mine is not None and theirs else None
    rows = []
    for index, run_ in enumerate(measured):
        for r in run_.records:
            seq = fields.get(r, "combination.seq_len")
            rows.append({"run": index + 1, "combination": r["id"], "status": r["status"],
                         "duration_s": r.get("duration_s"), "median_ms": fields.get(r, "timing.median"),
                         "ci_ms": [fields.get(r, "timing.ci_low"), fields.get(r, "timing.ci_high")],
                         "rounds": len(fields.get(r, "timing.rounds") or []),
                         "optimum_benchmark_p50_ms": (1e3 * optimum_latency[int(seq)])
                         if seq is not None and int(seq) in optimum_latency else None})

    def runs(walls: Sequence[float]) -> str:
        return ("the median of " + ", ".join(f"{w:.1f}" for w in walls) + " s") if len(walls) > 1 else "one run"

    walls = [m.wall_s for m in measured]
    notes = [f"reportgen: {mine or 0.0:.1f} s for the two combinations ({runs(walls)}; each a fresh "
             "`reportgen profile`: timing in rounds with intervals, a profiled pass with both attribution "
             "methods, FLOPs and records written)"]
    if theirs is not None:
        notes.append(f"optimum-benchmark {OPTIMUM_SPEC[0].split('==')[1]}, inline launcher, its default "
                     f"latency scenario: {theirs:.1f} s for the same two shapes ({runs(optimum_walls)}), in the "
                     "same bench run (its no-weights model from BERT-base's config.json on disk: the one file it "
                     "fetches from the Hub is served from there, the Hub's round trips left out of its time)")
        if len(walls) > 1 and len(optimum_walls) > 1:
            notes.append("the runs alternate: reportgen, optimum-benchmark, optimum-benchmark, reportgen, so a "
                         "slow moment of the host weighs on both sides")
        notes.append("optimum-benchmark's median forward (its p50, in the rows) is not comparable with reportgen's: "
                     "its no-weights model draws every weight from U(0, 1) (`fast_random_tensor` in "
                     "optimum_benchmark.backends.transformers_utils), not from the model's initialisation")
    else:
        notes.append(f"optimum-benchmark not measured: {why}")
    return figure(
        "Reference-size effort",
        "How long does reportgen take for BERT-base at 128 and 512 tokens, against optimum-benchmark's "
        "inline launcher measuring the same shapes in the same bench run?",
        value=ratio, unit="ratio", goal=f"at most {REFERENCE_GOAL:.1f}x optimum-benchmark's time",
        goal_spec={"kind": "below", "target": REFERENCE_GOAL + 1e-9},
        status=None if ratio is not None else NOT_MEASURED,
        rows=rows, notes=notes, duration_s=sum(walls) + sum(optimum_walls),
        extra={"reportgen_s": mine, "optimum_benchmark_s": theirs, "reportgen_runs_s": walls,
               "optimum_benchmark_runs_s": list(optimum_walls)})


class Hog:
    """A busy process on one CPU of this process's affinity, started here and stopped by
    its pid."""

    def __init__(self, cpu: int | None = None) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        self.cpu = cpus[-1] if cpu is None else cpu
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Hog:
        code = f"import os\nos.sched_setaffinity(0, {{{self.cpu}}})\nwhile True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        return self

    def __exit__(self, *_: Any) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def contention_rows(quiet: Sequence[Mapping[str, Any]], busy: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per combination measured both ways: the busy run's median against the quiet one's,
    its interval's width in medians, and whether its record says unstable."""
    from reportgen.intervals import unstable_reason

    by_id = {r["id"]: r for r in quiet if is_ok(r)}
    rows = []
    for rec in busy:
        base = by_id.get(rec["id"])
        timing = fields.get(rec, "timing") or {}
        if base is None or not is_ok(rec) or not timing.get("median"):
            continue
        median, q = float(timing["median"]), fields.number(base, "timing.median")
        width = (float(timing["ci_high"]) - float(timing["ci_low"])) / median
        reason = unstable_reason(rec)
        within = abs(median / q - 1.0) <= CONTENTION_TOLERANCE
        rows.append({"combination": rec["id"], "quiet_ms": q, "busy_ms": median, "ratio": median / q,
                     "interval_width_medians": width, "unstable": reason,
                     "contended_rounds": timing.get("contended_rounds", 0),
                     "rounds": len(timing.get("rounds") or []),
                     "ok": bool(within or reason) and not (width > WIDE and not reason)})
    return rows


def contention_figure(rows: Sequence[Mapping[str, Any]], *, wall_s: float, quiet_wall_s: float) -> dict[str, Any]:
    passing = sum(1 for r in rows if r["ok"])
    flagged = sum(1 for r in rows if r["unstable"])
    silent_wide = sum(1 for r in rows if r["interval_width_medians"] > WIDE and not r["unstable"])
    within = sum(1 for r in rows if abs(r["ratio"] - 1.0) <= CONTENTION_TOLERANCE)
    return figure(
        "Measuring beside a busy process",
        "With a busy process on one core beside the measurement, does every median stay within 5% of "
        "the quiet run's, or does its record say it was measured under contention, and why?",
        value=(passing / len(rows)) if rows else None, unit="share",
        goal="every median within 5% of the quiet one or flagged unstable with its reason; no interval "
             "wider than 2x its median without the flag",
        goal_spec={"kind": "all"}, rows=rows, duration_s=wall_s,
        notes=[f"{len(rows)} combinations: {within} within 5% of the quiet median, {flagged} flagged unstable, "
               f"{silent_wide} with an unflagged interval wider than 2x the median",
               f"quiet run {quiet_wall_s:.0f} s, beside the busy process {wall_s:.0f} s"],
        extra={"flagged": flagged, "within": within, "silent_wide": silent_wide})


def run(scratch: Path, log: Callable[[str], None], *, optimum: bool = True) -> dict[str, dict[str, Any]]:
    """The three figures; the tiny run doubles as the contention figure's quiet run.
    ``scratch`` is made absolute first: the peer benchmark runs with it as its working
    directory, where a relative path to its interpreter would name nothing."""
    scratch = scratch.resolve()
    figures: dict[str, dict[str, Any]] = {}
    log("  tiny combinations, quiet")
    quiet = profile_run(tiny_suite(), scratch / "effort-tiny")
    figures["tiny_effort"] = tiny_effort(quiet)
    log(f"  {len(quiet.records)} combinations in {quiet.wall_s:.0f} s")
    why = "not asked for"
    python: Path | None = None
    if optimum:
        # installed (once) before either side is timed
        python, why = optimum_python(scratch, log)
    berts: list[Measured] = []
    walls: list[float] = []
    latency: dict[int, float] = {}
    for side in REFERENCE_ORDER:
        if side == "reportgen":
            log(f"  BERT-base at 128 and 512 tokens (reportgen, run {len(berts) + 1})")
            berts.append(profile_run(reference_suite(), scratch / f"effort-bert-{len(berts) + 1}"))
        elif python is not None:
            log(f"  the same shapes through optimum-benchmark (run {len(walls) + 1})")
            wall, why, got = optimum_run(python, scratch)
            if wall is None:
                python = None  # it failed: said once, not tried again
                walls.clear()
                continue
            walls.append(wall)
            latency = latency or got
    figures["reference_effort"] = reference_effort(berts, walls, why, latency)
    log("  tiny combinations beside a busy process on one core")
    with Hog() as hog:
        log(f"  busy process {hog.proc.pid if hog.proc else '?'} on CPU {hog.cpu}")
        busy = profile_run(tiny_suite(), scratch / "effort-busy")
    figures["contention"] = contention_figure(contention_rows(quiet.records, busy.records),
                                              wall_s=busy.wall_s, quiet_wall_s=quiet.wall_s)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reportgen.bench.effort OUT.json``: the three figures alone (a check)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m reportgen.bench.effort")
    parser.add_argument("out", type=Path)
    parser.add_argument("--scratch", type=Path, default=Path(".bench"))
    parser.add_argument("--no-optimum", action="store_true")
    args = parser.parse_args(argv)
    got = run(args.scratch, lambda m: print(m, flush=True), optimum=not args.no_optimum)
    args.out.write_text(json.dumps(got, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
