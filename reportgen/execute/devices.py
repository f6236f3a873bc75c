"""Which devices get a worker: ``--devices`` against what this host has.

Two measurements never share a device or its CPU cores: a CPU host has one worker; a
CUDA host one per GPU asked for, each pinned with ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from reportgen.errors import UserError
from reportgen.execute.worker import WorkerSpec

MEASURE = "reportgen.profile.measure:measure_in_worker"
PREFLIGHT = "reportgen.profile.preflight:check"


def visible_gpus(count: int, environ: Mapping[str, str] | None = None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES entry of each GPU torch numbers 0..count-1 in this process."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return [str(i) for i in range(count)]
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    return entries[:count]


def parse_devices(text: str | None, *, device: str, gpu_count: int) -> list[int] | None:
    """``all`` or ``0,3,5`` -> CUDA indices; None when not given. Checked against the host."""
    if text is None:
        return None
    text = text.strip()
    if device != "cuda":
        raise UserError(
            f"--devices: measuring on the {device}, which gets one worker: two measurements would "
            "share its cores (--devices is for the GPUs of a CUDA host)")
    if gpu_count == 0:
        raise UserError("--devices: this host has no CUDA GPU")
    if text == "all":
        return list(range(gpu_count))
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UserError(f"--devices: {part!r} is not a GPU index; give 'all' or indices like 0,3,5")
        index = int(part)
        if index >= gpu_count:
            raise UserError(f"--devices: no GPU {index}; this host has GPUs 0-{gpu_count - 1}")
        if index in indices:
            raise UserError(f"--devices: GPU {index} is named twice")
        indices.append(index)
    return indices


def worker_specs(device: str, indices: list[int] | None, *, gpu_count: int = 0,
                 measure: str = MEASURE, preflight: str | None = PREFLIGHT,
                 environ: Mapping[str, str] | None = None) -> list[WorkerSpec]:
    """One spec per worker. Without ``--devices`` a CUDA host measures on its first GPU."""
    if device != "cuda":
        return [WorkerSpec(device=device, slot=device, measure=measure, preflight=preflight)]
    visible = visible_gpus(gpu_count, environ)
    specs = []
    for index in indices if indices is not None else [0]:
        entry = visible[index] if index < len(visible) else str(index)
        specs.append(WorkerSpec(device="cuda", slot=f"cuda:{index}", measure=measure, preflight=preflight,
                                visible_devices=entry,
                                physical_index=int(entry) if entry.isdigit() else None))
    return specs
