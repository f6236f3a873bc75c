"""What a reader needs to know about the machine a run measured on: the reproducibility
facts of its environment record as label/value rows (its short name, the hardware label,
is ``records.hardware.hardware_label``). Every field is optional: older records and other
hosts lack some.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reportgen import fmt
from reportgen.records import fields
from reportgen.records.hardware import cpu_name, gpu_indices, plural, run_of


def _bytes_gib(value: Any) -> str | None:
    """A memory size the record states (a positive, finite byte count), else None."""
    if (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            and math.isfinite(value)):
        return fmt.gib(value)
    return None


def _cuda_driver(value: Any) -> Any:
    # NVML reports the CUDA driver version as an integer: 12080 is 12.8
    if isinstance(value, int) and not isinstance(value, bool) and value > 1000:
        return f"{value // 1000}.{value % 1000 // 10}"
    return value


def environment_facts(env: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The facts a reader checks before comparing with their own numbers, in reading
    order: ``{"label", "value", "warn"}``; ``warn`` marks a fact that weakens the result
    (a modified source tree). Facts the record lacks are left out; a note the record
    carries instead of a value (NVML unavailable) becomes a sentence."""
    run = run_of(env)
    rows: list[dict[str, Any]] = []

    def add(label: str, value: Any, warn: bool = False) -> None:
        if value is None or value == "" or value == []:
            return
        rows.append({"label": label, "value": str(value), "warn": warn})

    gpus = gpu_indices(run)
    for n, i in enumerate(gpus):
        label = "GPU" if len(gpus) == 1 else f"GPU {n}"
        parts = [str(fields.run_get(run, ("environment", "gpus", i, "name")) or "unknown")]
        memory = _bytes_gib(fields.run_get(run, ("environment", "gpus", i, "memory_total_bytes"))
                            or fields.run_get(run, ("environment", "gpus", i, "cuda_memory_bytes")))
        if memory:
            parts.append(memory)
        sm_clock = fields.run_get(run, ("environment", "gpus", i, "sm_clock_mhz"))
        if sm_clock:
            parts.append(f"SM clock {sm_clock} MHz")
        power_limit = fields.run_get(run, ("environment", "gpus", i, "power_limit_w"))
        if power_limit:
            parts.append(f"power limit {power_limit} W")
        add(label, ", ".join(parts))
    gpu_drivers = [fields.run_get(run, ("environment", "gpus", i, "driver_version")) for i in gpus]
    add("GPU driver", fields.run_get(run, "environment.driver.driver_version")
        or next((d for d in gpu_drivers if d), None))
    add("CUDA (driver)", _cuda_driver(fields.run_get(run, "environment.driver.cuda_driver_version")))
    add("CUDA (runtime)", fields.run_get(run, "environment.torch.cuda_runtime"))
    add("cuDNN", fields.run_get(run, "environment.torch.cudnn_version"))
    nvml_error = fields.run_get(run, "environment.driver.nvml_error")
    if isinstance(nvml_error, str) and nvml_error:
        note = ("not read: the NVIDIA management library (nvidia-ml-py) was not installed, "
                "so driver, clocks and power limits are not recorded"
                if "not installed" in nvml_error else f"not read: {nvml_error}")
        if gpus or fields.run_get(run, "environment.device.type") == "cuda":
            add("GPU details", note)
        else:
            add("GPU", "none: this run measured on the CPU only")
    cpu = cpu_name(env)
    if cpu:
        extra = []
        sockets = fields.run_get(run, "environment.host.cpu_sockets")
        if sockets:
            extra.append(plural(int(sockets), "socket"))
        physical = fields.run_get(run, "environment.host.physical_cores")
        if physical:
            extra.append(f"{physical} physical cores")
        logical = fields.run_get(run, "environment.host.logical_cores")
        if logical:
            extra.append(f"{logical} logical")
        usable = fields.run_get(run, "environment.host.usable_cores")
        if usable and usable != logical:
            extra.append(f"{usable} usable by this process")
        add("CPU", cpu + (f" ({', '.join(extra)})" if extra else ""))
    add("Memory (RAM)", _bytes_gib(fields.run_get(run, "environment.host.ram_total_bytes")))
    add("Operating system", fields.run_get(run, "environment.host.os_release")
        or fields.run_get(run, "environment.host.os"))
    add("Kernel", fields.run_get(run, "environment.host.kernel"))
    add("Python", fields.run_get(run, "environment.python.version"))
    libraries = fields.run_get(run, "environment.libraries")
    installed = ([f"{name} {version}" for name, version in sorted(libraries.items(), key=lambda kv: kv[0].lower())
                  if isinstance(version, str) and version] if isinstance(libraries, Mapping) else [])
    add("Libraries", ", ".join(installed) if installed else None)
    add("torch threads", fields.run_get(run, "environment.torch.threads.num_threads"))
    add("float32 matmul precision", fields.run_get(run, "environment.torch.numerics.float32_matmul_precision"))
    commit = fields.run_get(run, "environment.git.commit")
    if commit:
        dirty = fields.run_get(run, "environment.git.dirty")
        value = str(commit) + (" (modified: the source had uncommitted changes when this ran)"
                               if dirty else "")
        add("Project commit", value, warn=bool(dirty))
    add("Measured", fields.run_get(run, "environment.time"))
    return rows
