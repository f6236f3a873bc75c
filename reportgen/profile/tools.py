"""The "tools" study: reportgen's category breakdown beside what other tools give on the
same forward (the record's ``studies.tools``; runs/README.md).

``toolcompare.PASSES`` profiled passes with reportgen's module ranges (as
``profiling.profile_step`` records them), each read four ways; the record holds the median
pass's figures, each with the interval of its median over the passes
(``toolcompare.aggregate``), and keeps that pass's trace as
``traces/<id>.tools.trace.json.gz``:

* ``reportgen``: ``reportgen.attribution.analyse_trace`` on the trace (the profiler
  method of the record's attribution);
* ``key_averages``: torch's own ``prof.key_averages()`` of the same pass, per ``rg|``
  range: CPU time total less the nested module ranges is the module's exclusive time; its
  self CPU time (outside every op and range in it) is ``overhead``, the rest its category;
* ``hta``: HolisticTraceAnalysis reading the saved trace (optional: ``reportgen[tools]``):
  time per user annotation (on the device per GPU annotation), idle time from its temporal
  breakdown and kernel time per kernel type (GPU traces only);
* ``nsys``: on a CUDA device with ``nsys`` on PATH, the forward in a fresh process under
  ``nsys profile`` with the same module ranges as NVTX ranges, read from
  ``nsys stats --report nvtx_gpu_proj_sum`` (GPU time projected on the ranges).

A tool that is not there is ``missing`` with the reason, one that does not apply is
``not applicable``; nothing is ever filled in for it. ``reportgen.toolcompare`` folds the
ranges into categories and explains the differences.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from reportgen import toolcompare
from reportgen.attribution import ITERATION_LABEL, analyse_trace, classify_ops
from reportgen.categories import CATEGORIES
from reportgen.profile import building
from reportgen.profile.profiling import record_pass, write_gzip_atomic
from reportgen.profile.structure import Structure, derive, nvtx_ranges
from reportgen.records.paths import trace_file, trace_ref
from reportgen.records.status import FAILED, MEASURED, MISSING, NOT_APPLICABLE, OK
from reportgen.scrub import trace_name
from reportgen.vocabulary import COMPILE_NONE

__all__ = ["ITERATIONS", "hta_tool", "key_averages_tool", "nsys_availability", "nsys_tool",
           "study"]

ITERATIONS = 3
WARMUP = 1
NSYS_TIMEOUT_S = 600
INSTALL_HINT = "pip install 'reportgen[tools]'"


def _tool(status: str, *, version: str | None = None, reason: str | None = None,
          basis: str | None = None, totals: Mapping[str, float | None] | None = None,
          forward_ms: float | None = None, idle_ms: float | None = None,
          notes: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    out = {"status": status, "version": version, "reason": reason, "basis": basis,
           "totals": dict(totals) if totals is not None else None, "forward_ms": forward_ms,
           "idle_ms": idle_ms, "notes": list(notes or [])}
    out.update(extra)
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _by_category(per_label: Mapping[str, float], module_category: Mapping[str, str],
                 iterations: int) -> dict[str, float]:
    """ms per forward per category of a per-range quantity (the iteration's own: other)."""
    out: dict[str, float] = {}
    for name, value in per_label.items():
        category = ("other" if name == ITERATION_LABEL
                    else toolcompare.label_category(name, module_category))
        if category is not None and value:
            out[category] = out.get(category, 0.0) + value / iterations
    return out


# reportgen -----------------------------------------------------------------------------
def reportgen_tool(trace: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """reportgen's profiler-method breakdown of the trace, and the ``analyse_trace`` result."""
    result = analyse_trace(trace)
    cats = result["categories"]
    entry = _tool(MEASURED, version=_version("reportgen"), basis=result["basis"],
                  totals={c: float(cats[c]["ms"]) for c in CATEGORIES},
                  forward_ms=float(result["forward_ms"]), idle_ms=result["device_idle_ms"],
                  notes=["reportgen.attribution on the trace: exclusive time of each "
                         "outermost op in the category of its module ranges, overhead the "
                         "forward outside every op"
                         + (" (device time of the kernels each category launched; overhead "
                            "the idle device)" if result["basis"] == "device" else "")],
                  categories={c: {"ms": cats[c]["ms"], "cpu_ms": cats[c]["cpu_ms"]}
                              for c in CATEGORIES})
    return entry, result


def container_tails(trace: dict[str, Any], iterations: int) -> dict[str, float]:
    """ms per forward of the ops reportgen counts as ``other`` although an attention
    (``attention.core``) or MLP (``mlp``) module's range holds them: those after the
    module's output projection."""
    out = {"attention.core": 0.0, "mlp": 0.0}
    for row in classify_ops(trace):
        if row["category"] == "other" and row["role"] in ("attn", "mlp"):
            out["attention.core" if row["role"] == "attn" else "mlp"] += row["dur"] / 1000.0
    return {k: v / iterations for k, v in out.items() if v}


# key_averages ----------------------------------------------------------------------------
def key_averages_tool(averages: Any, module_category: Mapping[str, str], iterations: int
                      ) -> tuple[dict[str, Any], dict[str, float]]:
    """Categories from ``prof.key_averages()`` of the ``rg|`` ranges (CPU time total and
    self CPU time), and the self time per category (the ``gaps`` evidence)."""
    totals: dict[str, float] = {}
    selfs: dict[str, float] = {}
    counts: dict[str, int] = {}
    for event in averages:
        if not str(event.key).startswith("rg|"):
            continue
        totals[event.key] = float(event.cpu_time_total) / 1000.0
        selfs[event.key] = float(event.self_cpu_time_total) / 1000.0
        counts[event.key] = int(event.count)
    if counts.get(ITERATION_LABEL) != iterations:
        raise RuntimeError(f"key_averages holds {counts.get(ITERATION_LABEL)} "
                           f"{ITERATION_LABEL} ranges, expected {iterations}")
    folded = toolcompare.fold_ranges(totals, module_category, iterations=iterations,
                                     self_times=selfs)
    notes = [("per rg| range: CPU time total less the nested module ranges is the module's "
              "exclusive time; its self CPU time (outside every op and range in it) is "
              "overhead, the rest its category; the iteration's exclusive time less its self "
              "time (ops outside every module range) is other")]
    if folded["negative"]:
        notes.append(f"ranges holding less than their nested ranges: {folded['negative']}")
    entry = _tool(MEASURED, version=torch.__version__, basis="cpu", totals=folded["totals"],
                  forward_ms=folded["forward_ms"], notes=notes, ranges=len(totals))
    return entry, _by_category(selfs, module_category, iterations)


# HTA -------------------------------------------------------------------------------------
def _annotation_totals(trace: dict[str, Any], whole_us: bool) -> dict[str, float]:
    """ms summed per host ``rg|`` range name; with ``whole_us`` each range rounded inward
    to whole microseconds (start up, end down) as HTA's parser does."""
    out: dict[str, float] = {}
    for e in trace.get("traceEvents", []):
        name = str(e.get("name", ""))
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and name.startswith("rg|"):
            start = float(e["ts"])
            end = start + float(e.get("dur", 0.0))
            dur = math.floor(end) - math.ceil(start) if whole_us else end - start
            out[name] = out.get(name, 0.0) + dur / 1000.0
    return out


def truncation_effect(trace: dict[str, Any], module_category: Mapping[str, str],
                      iterations: int) -> dict[str, float]:
    """What rounding every range inward to whole microseconds changes per category (ms)."""
    exact = toolcompare.fold_ranges(_annotation_totals(trace, False), module_category,
                                    iterations=iterations)["totals"]
    whole = toolcompare.fold_ranges(_annotation_totals(trace, True), module_category,
                                    iterations=iterations)["totals"]
    return {c: (whole[c] or 0.0) - (exact[c] or 0.0) for c in CATEGORIES
            if exact[c] is not None and abs((whole[c] or 0.0) - (exact[c] or 0.0)) > 0}


@contextlib.contextmanager
def _quiet() -> Any:
    """HTA logs every parse step and may print: keep the worker's log readable."""
    logger = logging.getLogger("hta")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def hta_tool(trace_path: Path, module_category: Mapping[str, str], iterations: int,
             device_type: str) -> dict[str, Any]:
    """HolisticTraceAnalysis on the saved trace (see the module docstring)."""
    version = _version("HolisticTraceAnalysis")
    try:
        with _quiet():
            from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        return _tool(MISSING, version=version,
                     reason=f"HolisticTraceAnalysis is not importable ({exc}); {INSTALL_HINT}")
    on_device = device_type == "cuda"
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reportgen-hta-") as tmp:
        # HTA reads a directory of per-rank traces; this one is rank 0
        shutil.copyfile(trace_path, Path(tmp) / "rank-0.trace.json.gz")
        try:
            with _quiet():
                # by default HTA drops the last profiler step: every forward counts here
                analysis = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
                frame = analysis.get_gpu_user_annotation_breakdown(
                    use_gpu_annotation=on_device, visualize=False, num_kernels=10**9,
                    duration_ratio=1.0)
        except Exception as exc:  # noqa: BLE001 - a tool failing is its result, not ours
            return _tool(FAILED, version=version,
                         reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        kind = "gpu_user_annotation" if on_device else "user_annotation"
        if frame is None or frame.empty:
            return _tool(FAILED, version=version,
                         reason=f"HTA found no {kind} events in the trace")
        totals = {str(n): float(s) / 1000.0 for n, s in zip(frame["name"], frame["sum (us)"])}
        if ITERATION_LABEL not in totals:
            return _tool(FAILED, version=version,
                         reason=f"HTA's {kind} breakdown has no {ITERATION_LABEL} range")
        folded = toolcompare.fold_ranges(totals, module_category, iterations=iterations)
        notes.append(f"get_gpu_user_annotation_breakdown(use_gpu_annotation={on_device}): "
                     f"{'GPU' if on_device else 'CPU'} time per rg| range (each annotation's "
                     "whole duration), folded into categories by module; the forward outside "
                     "every module range is other; HTA has no overhead category")
        idle_ms = None
        kernel_types: dict[str, float] | None = None
        try:
            with _quiet():
                temporal = analysis.get_temporal_breakdown(visualize=False)
            idle_ms = float(temporal["idle_time(us)"].iloc[0]) / 1000.0 / iterations
            notes.append("idle_ms: get_temporal_breakdown's idle time over the trace (the "
                         "profiled forwards and the resets between them), per forward")
        except Exception as exc:  # noqa: BLE001
            notes.append(f"no idle time: get_temporal_breakdown reads GPU kernels only and "
                         f"raised {type(exc).__name__} on this trace"
                         if not on_device else
                         f"no idle time: get_temporal_breakdown raised {type(exc).__name__}: {exc}")
        try:
            with _quiet():
                by_type, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
            if by_type.empty:
                notes.append("no kernel table: get_gpu_kernel_breakdown found no GPU kernels "
                             "in this trace")
            else:
                kernel_types = {str(k): float(s) / 1000.0 / iterations
                                for k, s in zip(by_type["kernel_type"], by_type["sum"])}
        except Exception as exc:  # noqa: BLE001
            notes.append(f"no kernel table: get_gpu_kernel_breakdown raised "
                         f"{type(exc).__name__}")
    if folded["negative"]:
        notes.append(f"ranges holding less than their nested ranges: {folded['negative']}")
    return _tool(MEASURED, version=version, basis="device" if on_device else "cpu",
                 totals=folded["totals"], forward_ms=folded["forward_ms"], idle_ms=idle_ms,
                 notes=notes, kernel_types_ms=kernel_types)


# Nsight Systems ----------------------------------------------------------------------------
def nsys_availability(device_type: str, which: Callable[[str], str | None] = shutil.which
                      ) -> tuple[str | None, dict[str, Any] | None]:
    """(path of nsys, None) where it can run, else (None, the tool entry saying why)."""
    if device_type != "cuda":
        return None, _tool(NOT_APPLICABLE, reason=f"Nsight Systems projects CUDA work; this "
                                                    f"forward ran on the {device_type.upper()}")
    exe = which("nsys")
    if exe is None:
        return None, _tool(MISSING, reason="nsys (Nsight Systems) is not on PATH")
    return exe, None


def nsys_tool(combo: Any, module_category: Mapping[str, str], iterations: int, *,
              seed: int, timeout_s: float = NSYS_TIMEOUT_S,
              which: Callable[[str], str | None] = shutil.which) -> dict[str, Any]:
    """The forward in a fresh process under ``nsys profile``, read from its
    ``nvtx_gpu_proj_sum`` report."""
    exe, absent = nsys_availability(torch.device(combo.device).type, which)
    if absent is not None:
        return absent
    assert exe is not None
    version_run = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    version = version_run.stdout.strip() or None
    fields = combo.as_dict() if hasattr(combo, "as_dict") else dict(vars(combo))
    spec = {**fields, "source": getattr(combo, "source", None)}
    with tempfile.TemporaryDirectory(prefix="reportgen-nsys-") as tmp:
        base = Path(tmp) / "forward"
        profile_cmd = [exe, "profile", "--trace=cuda,nvtx", "--sample=none",
                       "--cpuctxsw=none", "--force-overwrite=true", "--output", str(base),
                       sys.executable, "-m", "reportgen.profile.tools", "--nsys-child",
                       json.dumps(spec), "--iterations", str(iterations), "--seed", str(seed)]
        stats_cmd = [exe, "stats", "--report", "nvtx_gpu_proj_sum", "--format", "csv",
                     "--force-export=true", "--output", str(base), f"{base}.nsys-rep"]
        for cmd in (profile_cmd, stats_cmd):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                      timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return _tool(FAILED, version=version,
                             reason=f"nsys {cmd[1]} ran past {timeout_s:.0f} s")
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
                return _tool(FAILED, version=version,
                             reason=f"nsys {cmd[1]} exited {done.returncode}: {tail[0]}")
        report = Path(f"{base}_nvtx_gpu_proj_sum.csv")
        if not report.is_file():
            return _tool(FAILED, version=version,
                         reason="nsys stats wrote no nvtx_gpu_proj_sum report")
        try:
            rows = toolcompare.parse_nvtx_gpu_proj_sum(report.read_text(encoding="utf-8"))
        except ValueError as exc:
            return _tool(FAILED, version=version, reason=str(exc))
    return nsys_entry(rows, module_category, iterations, version=version)


def nsys_entry(rows: list[dict[str, Any]], module_category: Mapping[str, str], iterations: int,
               *, version: str | None) -> dict[str, Any]:
    """The nsys tool entry from parsed ``nvtx_gpu_proj_sum`` rows."""
    totals = {r["range"]: r["proj_ns"] / 1e6 for r in rows if r["range"].startswith("rg|")}
    count = {r["range"]: r["instances"] for r in rows}.get(ITERATION_LABEL)
    if count != iterations:
        return _tool(FAILED, version=version,
                     reason=f"the report holds {count} {ITERATION_LABEL} ranges, "
                            f"expected {iterations}")
    folded = toolcompare.fold_ranges(totals, module_category, iterations=iterations)
    notes = [("nvtx_gpu_proj_sum: each NVTX range projected on the GPU, from its first to "
              "its last GPU operation (idle gaps inside count to it); Total Proj Time less "
              "the nested module ranges, folded by module; a fresh process built the same "
              "model with the same seed, so these are other forwards than the trace's")]
    if folded["negative"]:
        notes.append(f"ranges holding less than their nested ranges: {folded['negative']}")
    return _tool(MEASURED, version=version, basis="device", totals=folded["totals"],
                 forward_ms=folded["forward_ms"], notes=notes)


def _nsys_child(spec: dict[str, Any], iterations: int, seed: int) -> None:
    from reportgen.suite import Combination

    combo = Combination(**spec)
    built = building.build(combo, seed=seed)
    step = built.step
    for _ in range(WARMUP):  # outside every range: lazy initialisation stays out
        step()
        step.sync()
        step.reset()
    # a process of its own, with a model of its own: its structure derived here, as a
    # measurement derives it (what the modules compute decides some roles)
    with nvtx_ranges(built.model, derive(built.model, step).labels):
        for _ in range(iterations):
            torch.cuda.nvtx.range_push(ITERATION_LABEL)
            step()
            step.sync()
            torch.cuda.nvtx.range_pop()
            step.reset()


# the study ---------------------------------------------------------------------------------
def study(built: building.BuiltModel, structure: Structure, combo: Any, *, run_dir: Path, combo_id: str,
          budget_s: float) -> dict[str, Any]:
    """The record's ``studies.tools`` for one combination (runs/README.md; ``structure``:
    the model's)."""
    del budget_s  # a fixed number of iterations: the study apportions, it does not time
    tools: dict[str, dict[str, Any]] = {}
    if getattr(combo, "compile", COMPILE_NONE) != COMPILE_NONE:
        reason = ("a compiled forward keeps no module boundaries, so no tool has module "
                  "ranges to report")
        return {"status": NOT_APPLICABLE, "reason": reason, "iterations": 0, "trace": None,
                "tools": {}, "comparison": None}
    step, model = built.step, built.model
    seed = int(getattr(step, "inputs_info", {}).get("seed", 0) or 0)
    module_category = structure.categories
    trace_path = trace_file(run_dir, combo_id, "tools")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    passes: list[dict[str, Any]] = []
    # PASSES profiled passes of the same forward, each read by every tool; each pass's
    # gzipped trace waits beside the traces (same file system) until the median pass is
    # known, and that one is moved into place
    with tempfile.TemporaryDirectory(prefix=f".{combo_id}.tools-", dir=trace_path.parent) as scratch:
        gzipped: list[tuple[Path, int]] = []
        for index in range(toolcompare.PASSES):
            raw_path = Path(scratch) / f"pass-{index}.json"
            prof = record_pass(step, model, ITERATIONS, WARMUP, raw_path, structure.roles)
            raw = trace_name(raw_path.read_bytes(), trace_ref(trace_path))
            raw_path.unlink()
            averages = prof.key_averages()
            trace = json.loads(raw)
            these: dict[str, dict[str, Any]] = {}
            these["reportgen"], result = reportgen_tool(trace)
            n_iter = len(result["iteration_ms"])
            these["key_averages"], gaps = key_averages_tool(averages, module_category, n_iter)
            # HTA reads a directory of per-rank traces: one directory per pass
            gz_path = Path(scratch) / f"pass-{index}" / trace_path.name
            gz_path.parent.mkdir()
            gzipped.append((gz_path, write_gzip_atomic(gz_path, raw)))
            these["hta"] = hta_tool(gz_path, module_category, n_iter, step.device.type)
            # Nsight Systems runs the forward in a process of its own: once, not per pass
            these["nsys"] = (nsys_tool(combo, module_category, n_iter, seed=seed) if index == 0
                             else _tool(toolcompare.NOT_RUN, reason="Nsight Systems runs once per study"))
            passes.append({"tools": these,
                           "evidence": {"tails": container_tails(trace, n_iter), "gaps": gaps,
                                        "rounding": truncation_effect(trace, module_category, n_iter)}})
        summary = toolcompare.aggregate(passes)
        kept, trace_bytes = gzipped[summary["pass"]]
        os.replace(kept, trace_path)
    tools = summary["tools"]
    return {"status": OK, "reason": None, "iterations": n_iter, "passes": len(passes),
            "trace": trace_ref(trace_path), "trace_bytes": trace_bytes,
            "tools": tools, "evidence": summary["evidence"],
            "comparison": summary["comparison"], "duration_s": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the forward nsys profiles (internal)")
    parser.add_argument("--nsys-child", required=True, help="the combination, as JSON")
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _nsys_child(json.loads(args.nsys_child), args.iterations, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
