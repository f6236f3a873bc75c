"""The measuring process: the worker's loop, entered in a fresh process
(``execute.fresh``: ``--entry reportgen.execute.worker:serve_spec --arg SPEC``).

A fresh interpreter (spawned, or on the CPU forked from a fork server that has only
imported modules, ``execute.forkserver``: never a process with a CUDA context, locks held
or threads), one per device, that measures one combination at a time for its supervisor.
It talks over its socket (``multiprocessing.connection`` messages); its stdout and stderr
are the worker's log in the run directory, so the profiler's own output never reaches the
console.

Messages: the worker sends ``("ready", pid)``; then for each task (a dict) it receives, it
sends back one result (a dict); ``None`` asks it to exit. After an error that poisons the
device (a CUDA error other than a clean out-of-memory) it sends the result and exits
with ``POISONED_EXIT``, so the next combination gets a fresh process and CUDA context.

It exits by itself when its parent dies (checked twice a second, ``fresh.watch_parent``),
so workers never outlive the ``profile`` process, even one killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

from reportgen.execute.fresh import load_callable
from reportgen.records.status import FAILED, OK, SKIPPED

POISONED_EXIT = 3
ENTRY = "reportgen.execute.worker:serve_spec"

# Errors after which the CUDA context cannot be trusted (CUDA's "sticky" errors). A clean
# out-of-memory is not one of them: the allocator frees and the next combination runs.
_POISON_MARKERS = (
    "cuda error",
    "illegal memory access",
    "device-side assert",
    "misaligned address",
    "unspecified launch failure",
    "an illegal instruction",
    "cudaerror",
    "cublas_status_execution_failed",
    "cudnn_status_execution_failed",
    "cuda driver error",
    "nccl error",
)


@dataclass(frozen=True)
class WorkerSpec:
    device: str                       # "cpu" or "cuda"
    slot: str                         # "cpu", "cuda:0", ...: what the console and records call it
    measure: str                      # "module:function" measuring one combination
    preflight: str | None = None      # "module:function" checking memory first, or None
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES for this worker (None: inherited)
    physical_index: int | None = None   # the GPU's NVML index, for identity and readings

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        return cls(**json.loads(text))


def is_poisoning(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the device unusable for the rest of this process."""
    name = type(exc).__name__
    if name in {"OutOfMemory", "OutOfMemoryError"}:
        return False
    if name == "AcceleratorError":  # torch >= 2.8 raises this for CUDA runtime errors
        return True
    text = f"{name}: {exc}".lower()
    if "out of memory" in text and "cuda error: out of memory" not in text:
        return False
    return any(marker in text for marker in _POISON_MARKERS)


def _reason(exc: BaseException) -> str:
    """One line: the first line of the message (the traceback keeps the rest)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    if type(exc).__name__ == "OutOfMemory":
        return first  # already says what it is: "out of memory: ..."
    return f"{type(exc).__name__}: {first}"


# --- host memory of this process --------------------------------------------------------

def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def release_memory() -> None:
    """Free what the previous combination left (its model is gone with its frames).

    The heap itself is not trimmed back to the system: the next model is built into it,
    which is faster than faulting fresh pages (the isolation-cost bench measured about
    10% on cpu-default), and the pre-flight check counts it as available to this worker.
    """
    import gc

    gc.collect()
    # What survives is the interpreter's and the libraries' own (torch and transformers
    # hold about a million objects): frozen, later collections skip it, so building.free's
    # collection and the automatic ones inside timed forwards take milliseconds, not
    # 0.2 s each. Nothing of the previous combination is alive here (serve drops its
    # result first), so nothing measurable is frozen with it.
    gc.freeze()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _reset_peak_rss() -> bool:
    # Writing 5 to clear_refs resets VmHWM (Linux >= 4.0), so each combination's peak is
    # its own, not the largest of every combination this worker measured before it.
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


# --- one task ---------------------------------------------------------------------------

def run_task(task: Mapping[str, Any], spec: WorkerSpec, measure: Callable[..., Any],
             preflight: Callable[..., Any] | None) -> dict[str, Any]:
    """Measure one combination; never raises. The result carries the record's sections."""
    from reportgen.errors import (
        Skip,  # cheap; keeps this module importable without torch
    )

    combo = task["combo"]
    release_memory()
    baseline = task.get("baseline_rss_bytes")
    result: dict[str, Any] = {"status": OK, "sections": None, "reason": None, "traceback": None,
                              "preflight": None, "poisoned": False}
    reset = _reset_peak_rss()
    rss_before = _status_bytes("VmRSS")
    # what this worker holds beyond its resting size is freed heap the next model reuses
    reusable = max(0, rss_before - baseline) if rss_before is not None and baseline is not None else 0
    index = _nvml_index(spec) if spec.device == "cuda" else None
    gpu = _gpu_identity(spec, index)
    before = _gpu_snapshot(spec, index)
    t0 = time.perf_counter()
    try:
        if preflight is not None:
            result["preflight"] = preflight(combo, spec.device, reusable_bytes=reusable)
            reduced = (result["preflight"] or {}).get("reduced")
            if reduced:  # too big as asked: measured with the layers (and experts) that fit
                from reportgen.profile.fitting import applied

                combo = applied(combo, reduced)
        result["sections"] = dict(measure(
            combo, run_dir=task["run_dir"], combo_id=task["combo_id"], budget_s=task["budget_s"],
            seed=task["seed"], profile_iterations=task["profile_iterations"],
            **({"gpu_index": index} if index is not None else {}), **(task.get("options") or {})))
    except Skip as exc:
        result.update(status=SKIPPED, reason=str(exc) or "skipped")
        result["preflight"] = getattr(exc, "preflight", None) or result["preflight"]
    except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which records it
        result.update(status=FAILED, reason=_reason(exc), traceback=traceback.format_exc(limit=20),
                      poisoned=is_poisoning(exc))
        if result["poisoned"]:
            result["reason"] += "; worker restarted"
    result["seconds"] = time.perf_counter() - t0
    result["host_memory"] = {
        "baseline_rss_bytes": baseline,
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": _status_bytes("VmHWM") if reset else None,
    }
    if gpu is not None:
        after = _gpu_snapshot(spec, index)
        result["device"] = {**gpu, "nvml_before": before, "nvml_after": after}
        if before is not None and after is not None:
            from reportgen.profile import nvml

            result["device"]["nvml_delta"] = nvml.snapshot_delta(before, after)
    return result


def _nvml_index(spec: WorkerSpec) -> int | None:
    """The NVML (physical) index of this worker's GPU. NVML ignores CUDA_VISIBLE_DEVICES
    and may number GPUs in another order than CUDA, so where the spec cannot say, the GPU
    is found by its UUID; None where that fails (readings are then not taken)."""
    if spec.physical_index is not None:
        return spec.physical_index
    try:
        import torch

        from reportgen.profile import nvml

        wanted = nvml.uuid_hash(str(torch.cuda.get_device_properties(0).uuid))
        for index in range(nvml.device_count() or 0):
            if nvml.device_identity(index).get("uuid") == wanted:
                return index
    except Exception:  # noqa: BLE001 - no torch UUID or no NVML: no readings
        return None
    return None


def _gpu_identity(spec: WorkerSpec, index: int | None) -> dict[str, Any] | None:
    if spec.device != "cuda":
        return None
    if index is None:
        return {"slot": spec.slot, "reason": "this GPU's NVML index is unknown (not found by its UUID)"}
    try:
        from reportgen.profile import nvml

        return {"slot": spec.slot, **nvml.device_identity(index)}
    except Exception as exc:  # noqa: BLE001 - readings are context; their absence is recorded
        return {"slot": spec.slot, "reason": f"{type(exc).__name__}: {exc}"}


def _gpu_snapshot(spec: WorkerSpec, index: int | None) -> dict[str, Any] | None:
    if spec.device != "cuda" or index is None:
        return None
    try:
        from reportgen.profile import nvml

        return nvml.snapshot(index)
    except Exception as exc:  # noqa: BLE001
        return {"reason": f"{type(exc).__name__}: {exc}"}


# --- the process ------------------------------------------------------------------------

def serve(conn: Connection, spec: WorkerSpec) -> int:
    measure = load_callable(spec.measure)
    preflight = load_callable(spec.preflight) if spec.preflight else None
    baseline = _status_bytes("VmRSS")  # at rest: interpreter, torch, reportgen
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return 0
        if task is None:
            return 0
        print(f"--- {task['combo_id']} ({time.strftime('%H:%M:%S')})", flush=True)
        result = run_task({**task, "baseline_rss_bytes": baseline}, spec, measure, preflight)
        print(f"--- {task['combo_id']}: {result['status']} {result['reason'] or ''}".rstrip(), flush=True)
        if result["traceback"]:
            print(result["traceback"], flush=True)
        conn.send(result)
        poisoned = bool(result["poisoned"])
        del result  # before the next task's release_memory, which freezes what is alive
        if poisoned:
            return POISONED_EXIT


def serve_spec(conn: Connection, spec_json: str) -> int:
    """The fresh process's entry (``ENTRY``): the worker's loop for the spec in JSON."""
    return serve(conn, WorkerSpec.from_json(spec_json))
