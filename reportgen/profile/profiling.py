"""The profiled pass: torch.profiler over a few labelled forwards, a gzipped trace.

Timing comes from the unprofiled pass (METHOD.md rule 1); this pass only apportions it.
Each iteration runs inside an ``rg|iteration`` range with the module hooks of
``reportgen.profile.structure`` installed, so ``reportgen.attribution`` can split it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from reportgen.attribution import ATTRIBUTION_KEYS, ITERATION_LABEL, LABEL_PREFIX, PHASE_ROLE, analyse_trace
from reportgen.profile.step import StepLike
from reportgen.profile.structure import ModuleRole, install_hooks
from reportgen.records.paths import trace_ref
from reportgen.records.store import atomic_write_bytes
from reportgen.scrub import gzip_trace, trace_name
from reportgen.stats import median

__all__ = ["profile_step", "record_pass", "write_gzip_atomic"]



def write_gzip_atomic(path: Path, data: bytes) -> int:
    """Gzip ``data`` to ``path`` atomically (a reader never sees a half-written trace);
    returns the size written."""
    packed = gzip_trace(data)
    atomic_write_bytes(path, packed)
    return len(packed)


@contextlib.contextmanager
def phase_ranges(step: StepLike) -> Iterator[None]:
    """A training step's phases (``TrainStep.phase_hook``) as ``rg|phase|<phase>``
    profiler ranges; nothing for any other step."""
    if not hasattr(step, "phase_hook"):
        yield
        return
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    open_ranges: list[Any] = []

    def hook(name: str, start: bool) -> None:
        if start:
            open_ranges.append(enter(f"{LABEL_PREFIX}{PHASE_ROLE}|{name}", None))
        elif open_ranges:
            leave(open_ranges.pop())

    step.phase_hook = hook  # type: ignore[attr-defined]
    try:
        yield
    finally:
        step.phase_hook = None  # type: ignore[attr-defined]


def record_pass(step: StepLike, model: nn.Module, iterations: int, warmup: int, out: Path,
                labels: Mapping[str, ModuleRole] | None,
                first: Callable[[], Mapping[str, ModuleRole] | None] | None = None) -> profile:
    """Run the profiled forwards, export their Chrome trace to ``out`` and return the
    profiler (its ``key_averages()`` covers the same ``iterations``). ``labels``: the
    model's roles (a `structure.Structure`'s), whose modules get their ranges; None
    leaves the module hooks out. ``first`` runs in place of the first warm-up forward,
    whose events the profiler drops: a forward of the step's own (the structure's
    recorded one, `structure.derive`) that returns the labels the iterations after it
    carry, so the structure costs no forward of its own."""
    if first is not None and warmup < 1:
        raise ValueError("first runs as a warm-up forward: need warmup >= 1")
    activities = [ProfilerActivity.CPU]
    if step.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with warnings.catch_warnings():
        # no warm-up is the caller's choice (``measure.profiler_warmup``), not an oversight
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        plan = schedule(wait=0, warmup=warmup, active=iterations, repeat=1)
    with contextlib.ExitStack() as hooks, phase_ranges(step):
        if first is None and labels is not None:
            hooks.enter_context(install_hooks(model, labels))
        with profile(activities=activities, schedule=plan,
                     record_shapes=True, profile_memory=True, with_flops=True) as prof:
            for index in range(warmup + iterations):
                # The sync sits inside the range: on a GPU the iteration's wall time must
                # include the work it queued, or the overhead ratio is meaningless.
                with record_function(ITERATION_LABEL):
                    if index == 0 and first is not None:
                        labels = first()  # runs the step and resets it itself
                        step.sync()
                        if labels is not None:
                            hooks.enter_context(install_hooks(model, labels))
                        prof.step()
                        continue
                    step()
                    step.sync()
                step.reset()
                prof.step()
    prof.export_chrome_trace(str(out))
    return prof


def profile_step(step: StepLike, model: nn.Module, *, iterations: int = 3, warmup: int = 1,
                 trace_path: Path, labels: Mapping[str, ModuleRole] | None,
                 first: Callable[[], Mapping[str, ModuleRole] | None] | None = None) -> dict[str, Any]:
    """Profile ``iterations`` forwards of ``step`` (after ``warmup`` profiled-but-dropped
    ones) and attribute them.

    Writes the Chrome trace gzipped to ``trace_path`` (``<run>/traces/<name>``) and
    returns ``{"profile", "attribution", "ops", "memory"}`` as in ARCHITECTURE.md, less
    ``profile.overhead_ratio`` (the caller has the unprofiled timing), and
    ``per_iteration``: (forward ms, category ms) of each profiled iteration alone (and for
    a training step ``per_iteration_phases``, each iteration's phases).
    ``labels``: the model's roles (its `structure.Structure`'s ``roles``); None leaves the
    module hooks out (a compiled forward, where they would not fire). ``first``: the
    first warm-up forward's stand-in, which gives the labels (`record_pass`).
    """
    if iterations < 1 or warmup < 0:
        raise ValueError(f"need iterations >= 1 and warmup >= 0, got {iterations}, {warmup}")
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{trace_path.name}.", suffix=".json",
                                    dir=trace_path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        record_pass(step, model, iterations, warmup, tmp, labels, first)
        raw = trace_name(tmp.read_bytes(), trace_ref(trace_path))
    finally:
        tmp.unlink(missing_ok=True)
    trace = json.loads(raw)
    # A device trace whose events cannot be linked to launches raises here
    # (UnlinkedDeviceTrace): its time is never reported on the host basis instead.
    result = analyse_trace(trace)
    if step.device.type == "cuda" and result["basis"] != "device":
        raise RuntimeError("the profiler recorded no device events for this CUDA forward "
                           "(CUPTI unavailable?), so device time cannot be attributed")
    from reportgen.profile.regions import profiler_iterations

    each_phases: list[dict[str, Any]] = []
    each = profiler_iterations(trace, each_phases)
    trace_bytes = write_gzip_atomic(trace_path, raw)
    per_iteration = result["iteration_ms"]
    if len(per_iteration) != iterations:
        raise RuntimeError(f"trace holds {len(per_iteration)} profiled iterations, "
                           f"expected {iterations}")
    out = {
        "profile": {"iterations": iterations, "per_iteration_ms": per_iteration,
                    "median_ms": median(per_iteration),
                    "trace": trace_ref(trace_path), "trace_bytes": trace_bytes},
        "attribution": {key: result[key] for key in ATTRIBUTION_KEYS},
        "ops": result["ops"],
        "memory": result["memory"],
        "per_iteration": each,
    }
    if each_phases:  # a training step: each iteration's phases too
        out["per_iteration_phases"] = each_phases
    return out
