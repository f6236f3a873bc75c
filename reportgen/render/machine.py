"""What a reader needs to know about the machine a run measured on: a short display name
("CPU · AMD EPYC · 2 cores") and the reproducibility facts of its environment record as
label/value rows. Every field is optional: older records and other hosts lack some.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen import fmt
from reportgen.records import fields

SEP = " · "

Record = Mapping[str, Any]


def _run(env: Mapping[str, Any] | None) -> Record:
    """The run record around an environment section, so that its fields are read by their
    names in the run record (``environment.host.cpu_model``), as its JSON Schema has them."""
    return {"environment": env}


def _gpus(run: Record) -> list[int]:
    """The indices of the GPU entries in ``environment.gpus``."""
    gpus = fields.run_get(run, "environment.gpus")
    if not isinstance(gpus, list | tuple):
        return []
    return [i for i, gpu in enumerate(gpus) if isinstance(gpu, Mapping)]


def _cores(run: Record) -> int | None:
    for value in (fields.run_get(run, "environment.host.usable_cores"),
                  fields.run_get(run, "environment.host.physical_cores"),
                  fields.run_get(run, "environment.host.logical_cores")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def cpu_name(env: Mapping[str, Any]) -> str | None:
    """The most specific CPU name the record holds."""
    run = _run(env)
    for value in (fields.run_get(run, "environment.host.cpu_model"),
                  fields.run_get(run, "environment.device.name")
                  if fields.run_get(run, "environment.device.type") == "cpu" else None):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def hardware_label(slug: str, env: Mapping[str, Any] | None) -> str:
    """``GPU · NVIDIA H200 · 1 GPU`` or ``CPU · AMD EPYC · 2 cores``; the slug, tidied,
    when the record says too little."""
    run = _run(env or {})
    gpus = _gpus(run)
    if gpus:
        names = sorted({str(fields.run_get(run, ("environment", "gpus", i, "name")) or "GPU") for i in gpus})
        return SEP.join(["GPU", " + ".join(names), _plural(len(gpus), "GPU")])
    name = cpu_name(env or {})
    if name is not None:
        cores = _cores(run)
        return SEP.join(["CPU", name] + ([_plural(cores, "core")] if cores else []))
    return _label_from_slug(slug)


def _label_from_slug(slug: str) -> str:
    parts = slug.split("-")
    if not parts or parts[0] not in ("cpu", "nvidia", "amd", "gpu"):
        return slug
    kind = "CPU" if parts[0] == "cpu" else "GPU"
    rest = parts[1:] if parts[0] == "cpu" else parts
    tail = rest[-1] if rest else ""
    count = None
    if tail[:-1].isdigit() and tail[-1:] in ("c", "x"):
        count = _plural(int(tail[:-1]), "core" if tail.endswith("c") else "GPU")
        rest = rest[:-1]
    # short parts and model numbers are acronyms ("amd", "epyc", "h200"); names are not
    name = " ".join(p.upper() if len(p) <= 4 or any(ch.isdigit() for ch in p)
                    or p == "nvidia" else p.capitalize() for p in rest)
    return SEP.join([kind] + ([name] if name else []) + ([count] if count else []))


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
    run = _run(env or {})
    rows: list[dict[str, Any]] = []

    def add(label: str, value: Any, warn: bool = False) -> None:
        if value is None or value == "" or value == []:
            return
        rows.append({"label": label, "value": str(value), "warn": warn})

    gpus = _gpus(run)
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
    cpu = cpu_name(env or {})
    if cpu:
        extra = []
        sockets = fields.run_get(run, "environment.host.cpu_sockets")
        if sockets:
            extra.append(_plural(int(sockets), "socket"))
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


def measured_on(labels: Sequence[str]) -> str:
    """``CPU · AMD EPYC · 2 cores`` / ``A and B`` / ``A, B and C``."""
    items = list(labels)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def has_gpu(env: Mapping[str, Any] | None) -> bool:
    run = _run(env or {})
    return bool(_gpus(run)) or fields.run_get(run, "environment.device.type") == "cuda"
