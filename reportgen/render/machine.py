"""What a reader needs to know about the machine a run measured on: a short display name
("CPU · AMD EPYC · 2 cores") and the reproducibility facts of its environment record as
label/value rows. Every field is optional: older records and other hosts lack some.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SEP = " · "


def _get(record: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(record, Mapping):
            return None
        record = record.get(key)
    return record


def _mapping(value: Any) -> Mapping[str, Any]:
    """A section of the environment record, or an empty one where it is missing or not a mapping."""
    return value if isinstance(value, Mapping) else {}


def _gpus(env: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [g for g in env.get("gpus") or [] if isinstance(g, Mapping)]


def _cores(host: Mapping[str, Any]) -> int | None:
    for key in ("usable_cores", "physical_cores", "logical_cores"):
        value = host.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def cpu_name(env: Mapping[str, Any]) -> str | None:
    """The most specific CPU name the record holds."""
    for value in (_get(env, "host", "cpu_model_full"), _get(env, "host", "cpu_brand"),
                  _get(env, "host", "cpu_model"), _get(env, "device", "name")
                  if _get(env, "device", "type") == "cpu" else None):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def hardware_label(slug: str, env: Mapping[str, Any] | None) -> str:
    """``GPU · NVIDIA H200 · 1 GPU`` or ``CPU · AMD EPYC · 2 cores``; the slug, tidied,
    when the record says too little."""
    env = env or {}
    gpus = _gpus(env)
    if gpus:
        names = sorted({str(g.get("name") or "GPU") for g in gpus})
        return SEP.join(["GPU", " + ".join(names), _plural(len(gpus), "GPU")])
    host = _mapping(env.get("host"))
    name = cpu_name(env)
    if name is not None:
        cores = _cores(host)
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


def _yes_no(value: Any) -> str | None:
    return None if value is None else ("yes" if value else "no")


def _bytes_gib(value: Any) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return f"{value / 2 ** 30:.1f} GiB"
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
    env = env or {}
    host = _mapping(env.get("host"))
    rows: list[dict[str, Any]] = []

    def add(label: str, value: Any, warn: bool = False) -> None:
        if value is None or value == "" or value == []:
            return
        rows.append({"label": label, "value": str(value), "warn": warn})

    gpus = _gpus(env)
    for i, gpu in enumerate(gpus):
        label = "GPU" if len(gpus) == 1 else f"GPU {i}"
        parts = [str(gpu.get("name") or "unknown")]
        memory = _bytes_gib(gpu.get("memory_total_bytes") or gpu.get("cuda_memory_bytes"))
        if memory:
            parts.append(memory)
        clocks = _mapping(gpu.get("clocks_mhz"))
        if clocks.get("sm"):
            parts.append(f"SM clock {clocks['sm']} MHz")
        if gpu.get("power_limit_w"):
            parts.append(f"power limit {gpu['power_limit_w']} W")
        add(label, ", ".join(parts))
    driver = _mapping(env.get("driver"))
    add("GPU driver", driver.get("driver_version")
        or next((g.get("driver") for g in gpus if g.get("driver")), None))
    add("CUDA (driver)", _cuda_driver(driver.get("cuda_driver_version")))
    add("CUDA (runtime)", _get(env, "torch", "cuda_runtime")
        or next((g.get("cuda_runtime") for g in gpus if g.get("cuda_runtime")), None))
    add("cuDNN", _get(env, "torch", "cudnn_version")
        or next((g.get("cudnn") for g in gpus if g.get("cudnn")), None))
    nvml_error = driver.get("nvml_error")
    if isinstance(nvml_error, str) and nvml_error:
        note = ("not read: the NVIDIA management library (nvidia-ml-py) was not installed, "
                "so driver, clocks and power limits are not recorded"
                if "not installed" in nvml_error else f"not read: {nvml_error}")
        if gpus or _get(env, "device", "type") == "cuda":
            add("GPU details", note)
        else:
            add("GPU", "none: this run measured on the CPU only")
    cpu = cpu_name(env)
    if cpu:
        extra = []
        if host.get("cpu_sockets"):
            extra.append(_plural(int(host["cpu_sockets"]), "socket"))
        if host.get("physical_cores"):
            extra.append(f"{host['physical_cores']} physical cores")
        if host.get("logical_cores"):
            extra.append(f"{host['logical_cores']} logical")
        usable = host.get("usable_cores")
        if usable and usable != host.get("logical_cores"):
            extra.append(f"{usable} usable by this process")
        add("CPU", cpu + (f" ({', '.join(extra)})" if extra else ""))
    add("Memory (RAM)", _bytes_gib(host.get("ram_total_bytes")))
    add("Operating system", host.get("os_release") or host.get("os"))
    add("Kernel", host.get("kernel"))
    add("Python", _get(env, "python", "version"))
    libraries = _mapping(env.get("libraries"))
    installed = [f"{name} {version}" for name, version in sorted(libraries.items(),
                                                                   key=lambda kv: kv[0].lower())
                 if isinstance(version, str) and version]
    add("Libraries", ", ".join(installed) if installed else None)
    threads = _get(env, "torch", "threads", "num_threads")
    add("torch threads", threads)
    precision = _get(env, "torch", "numerics", "float32_matmul_precision")
    add("float32 matmul precision", precision)
    git = _mapping(env.get("git"))
    commit = git.get("commit")
    if commit:
        dirty = git.get("dirty")
        value = str(commit) + (" (modified: the source had uncommitted changes when this ran)"
                               if dirty else "")
        add("Project commit", value, warn=bool(dirty))
    add("Measured", env.get("time"))
    return rows


def measured_on(labels: Sequence[str]) -> str:
    """``CPU · AMD EPYC · 2 cores`` / ``A and B`` / ``A, B and C``."""
    items = list(labels)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def has_gpu(env: Mapping[str, Any] | None) -> bool:
    return bool(_gpus(env or {})) or _get(env, "device", "type") == "cuda"
