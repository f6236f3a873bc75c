"""GPU readings through NVML (``pynvml`` from nvidia-ml-py), read-only.

Two stages so the interesting part is testable without a GPU:

* :func:`read_raw` calls pynvml and returns what it returned, JSON-safe, keyed by the
  call (``"nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"``). A call that fails is recorded as
  ``{"nvml_error": "<reason>"}``; a missing pynvml or a failed ``nvmlInit`` is recorded
  in ``raw["error"]``. Recordings of real hosts live in ``tests/data/nvml/``.
* :func:`assemble` turns a raw reading into one dict per GPU in plain units (bytes, MHz,
  watts, degrees C); a field NVML could not give is ``None`` with its reason in
  ``nvml_errors``.

METHOD.md rule 13: this module only ever calls ``nvml*Get*`` functions (plus init and
shutdown). Clocks, power limits and modes are recorded, never set.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
from collections.abc import Mapping
from typing import Any

# Enum values from nvml.h; they are ABI and have not changed since NVML 1.0, so the raw
# keys stay stable even if a pynvml release renames its Python constants.
_ENUMS: dict[str, int] = {
    "NVML_CLOCK_GRAPHICS": 0,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_TEMPERATURE_GPU": 0,
}

# (assembled field, pynvml function, enum arguments). Everything is a getter.
SYSTEM_CALLS: tuple[tuple[str, str], ...] = (
    ("driver_version", "nvmlSystemGetDriverVersion"),  # str, e.g. "570.133.20"
    ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),  # int, 12080 = 12.8
    ("nvml_version", "nvmlSystemGetNVMLVersion"),  # str
)

DEVICE_CALLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("name", "nvmlDeviceGetName", ()),  # str
    ("uuid", "nvmlDeviceGetUUID", ()),  # str "GPU-..."; hashed by assemble
    ("memory", "nvmlDeviceGetMemoryInfo", ()),  # struct: total/free/used in bytes
    ("compute_capability", "nvmlDeviceGetCudaComputeCapability", ()),  # (major, minor)
    ("sm_clock_mhz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)),
    ("memory_clock_mhz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",)),
    ("graphics_clock_mhz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_GRAPHICS",)),
    ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",)),
    ("memory_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_MEM",)),
    ("applications_sm_clock_mhz", "nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_SM",)),
    ("applications_memory_clock_mhz", "nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_MEM",)),
    (
        "default_applications_sm_clock_mhz",
        "nvmlDeviceGetDefaultApplicationsClock",
        ("NVML_CLOCK_SM",),
    ),
    (
        "default_applications_memory_clock_mhz",
        "nvmlDeviceGetDefaultApplicationsClock",
        ("NVML_CLOCK_MEM",),
    ),
    ("power_limit_w", "nvmlDeviceGetPowerManagementLimit", ()),  # mW
    ("default_power_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", ()),  # mW
    ("enforced_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", ()),  # mW
    ("power_draw_w", "nvmlDeviceGetPowerUsage", ()),  # mW
    ("temperature_c", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    ("performance_state", "nvmlDeviceGetPerformanceState", ()),  # int, 0 = P0
    ("clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", ()),  # bitmask
    ("persistence_mode", "nvmlDeviceGetPersistenceMode", ()),  # 0/1
    ("compute_mode", "nvmlDeviceGetComputeMode", ()),  # enum
    ("ecc_mode", "nvmlDeviceGetEccMode", ()),  # [current, pending]
    ("mig_mode", "nvmlDeviceGetMigMode", ()),  # [current, pending]
    ("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration", ()),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", ()),
    ("pcie_max_generation", "nvmlDeviceGetMaxPcieLinkGeneration", ()),
    ("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", ()),
)

# The fields of one assembled GPU, in display order.
FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid_sha256",
    "memory_total_bytes",
    "compute_capability",
    *(f for f, _, _ in DEVICE_CALLS if f not in {"name", "uuid", "memory", "compute_capability"}),
    "driver_version",
    "cuda_driver_version",
)
_FIELDS_DERIVED = {
    "ecc_mode": ("ecc_current", "ecc_pending"),
    "mig_mode": ("mig_current", "mig_pending"),
}

_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

_MILLIWATT_FIELDS = {
    "power_limit_w",
    "default_power_limit_w",
    "enforced_power_limit_w",
    "power_draw_w",
}


def short_hash(value: str) -> str:
    """12 hex characters of sha256: enough to tell hosts/GPUs apart, useless to look up."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]


def uuid_hash(uuid: str) -> str:
    """Hash of a GPU UUID as NVML (``GPU-<uuid>``) or torch (``<uuid>``) spells it, so
    the two can be matched without storing either."""
    text = uuid.strip().lower()
    if text.startswith("gpu-"):
        text = text[4:]
    return short_hash(text)


def call_key(function: str, args: tuple[str, ...] = ()) -> str:
    """The raw-reading key of one pynvml call, e.g. ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``."""
    return f"{function}({', '.join(args)})" if args else function


# ---------------------------------------------------------------------------------------
# Reading (the only part that touches pynvml)


def read_raw(pynvml_module: Any = None) -> dict[str, Any]:
    """Everything NVML says about this host, as pynvml returned it; never raises.

    ``pynvml_module`` lets tests pass a fake; by default ``pynvml`` is imported lazily
    because it is an optional dependency (``reportgen[gpu]``).
    """
    raw: dict[str, Any] = {"source": "pynvml", "error": None, "system": {}, "devices": []}
    nv = pynvml_module
    if nv is None:
        try:
            nv = importlib.import_module("pynvml")
        except ImportError:
            raw["error"] = "pynvml (nvidia-ml-py) is not installed"
            return raw
    raw["pynvml_version"] = _distribution_version("nvidia-ml-py")
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raw["error"] = f"nvmlInit failed: {_reason(exc)}"
        return raw
    try:
        for _, function in SYSTEM_CALLS:
            raw["system"][function] = _call(nv, function, None, ())
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            raw["error"] = f"nvmlDeviceGetCount failed: {_reason(exc)}"
            return raw
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                raw["devices"].append({"nvml_error": _reason(exc)})
                continue
            device: dict[str, Any] = {}
            for _, function, args in DEVICE_CALLS:
                device[call_key(function, args)] = _call(nv, function, handle, args)
            raw["devices"].append(device)
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown after a good read loses nothing
            nv.nvmlShutdown()
    return raw


def _call(nv: Any, function: str, handle: Any, args: tuple[str, ...]) -> Any:
    fn = getattr(nv, function, None)
    if fn is None:
        return {"nvml_error": f"{function} is not in this pynvml version"}
    try:
        values = [_ENUMS[a] for a in args]
        result = fn(*values) if handle is None else fn(handle, *values)
    except Exception as exc:
        return {"nvml_error": _reason(exc)}
    return _jsonable(result)


def _jsonable(value: Any) -> Any:
    """pynvml returns ctypes structures for some calls; store their fields."""
    if isinstance(value, ctypes.Structure):
        return {name: _jsonable(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------
# Assembly (pure)


def driver_info(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Host-wide NVML facts; ``nvml_error`` says why NVML gave nothing, ``nvml_errors``
    which single calls failed."""
    system = raw.get("system") or {}
    out: dict[str, Any] = {"nvml_error": raw.get("error")}
    errors: dict[str, str] = {}
    for field, function in SYSTEM_CALLS:
        value, error = _value(system.get(function), function)
        if error is not None and not raw.get("error"):  # one reason is enough
            errors[field] = error
        if field == "cuda_driver_version" and value is not None:
            value = format_cuda_version(int(value))
        out[field] = value
    out["nvml_errors"] = errors
    return out


def format_cuda_version(encoded: int) -> str:
    """NVML encodes CUDA 12.8 as 12080 (1000 * major + 10 * minor)."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def assemble(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per GPU NVML enumerated, in NVML order, with every field of :data:`FIELDS`."""
    driver = driver_info(raw)
    gpus: list[dict[str, Any]] = []
    for index, device in enumerate(raw.get("devices") or []):
        if "nvml_error" in device:
            gpu = null_reading(device["nvml_error"])
            gpu["index"] = index
            gpus.append(gpu)
            continue
        gpu = {"index": index}
        errors: dict[str, str] = {}
        for field, function, args in DEVICE_CALLS:
            key = call_key(function, args)
            value, error = _value(device.get(key), key)
            if error is not None:
                errors[field] = error
            for name, converted in _convert(field, value).items():
                gpu[name] = converted
        gpu["driver_version"] = driver["driver_version"]
        gpu["cuda_driver_version"] = driver["cuda_driver_version"]
        gpu["nvml_errors"] = errors
        gpus.append(gpu)
    return gpus


def null_reading(reason: str | None) -> dict[str, Any]:
    """Every NVML field ``None``, for a GPU NVML could not read; the reason is kept."""
    out: dict[str, Any] = {name: None for name in assembled_fields()}
    out["nvml_errors"] = {"*": reason or "unknown"}
    return out


def assembled_fields() -> tuple[str, ...]:
    """The keys :func:`assemble` produces for a GPU (besides ``nvml_errors``)."""
    names: list[str] = []
    for field in FIELDS:
        if field in _FIELDS_DERIVED:
            names.extend(_FIELDS_DERIVED[field])
        else:
            names.append(field)
    return tuple(names)


def _value(entry: Any, key: str) -> tuple[Any, str | None]:
    if entry is None:
        return None, f"{key} was not read"
    if isinstance(entry, Mapping) and "nvml_error" in entry:
        return None, str(entry["nvml_error"])
    return entry, None


def _convert(field: str, value: Any) -> dict[str, Any]:
    """Raw pynvml value -> assembled field(s) in plain units."""
    if field == "uuid":
        return {"uuid_sha256": None if value is None else uuid_hash(str(value))}
    if field == "memory":
        total = value.get("total") if isinstance(value, Mapping) else None
        return {"memory_total_bytes": total}
    if value is None:
        if field in _FIELDS_DERIVED:
            return {name: None for name in _FIELDS_DERIVED[field]}
        return {field: None}
    if field == "compute_capability":
        major, minor = value
        return {field: f"{major}.{minor}"}
    if field in _MILLIWATT_FIELDS:
        return {field: int(value) / 1000.0}
    if field == "performance_state":
        return {field: None if int(value) == 32 else f"P{int(value)}"}  # 32: unknown
    if field == "clocks_event_reasons":
        return {field: decode_event_reasons(int(value))}
    if field == "persistence_mode":
        return {field: bool(value)}
    if field == "compute_mode":
        return {field: _COMPUTE_MODES.get(int(value), f"unknown({value})")}
    if field in _FIELDS_DERIVED:
        current, pending = value
        names = _FIELDS_DERIVED[field]
        return {names[0]: bool(current), names[1]: bool(pending)}
    return {field: value}


def decode_event_reasons(mask: int) -> list[str]:
    """Why the clocks are below maximum right now (``[]``: nothing is holding them back)."""
    names = [name for bit, name in _EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in _EVENT_REASONS:
        known |= bit
    if mask & ~known:
        names.append(f"other(0x{mask & ~known:x})")
    return names
