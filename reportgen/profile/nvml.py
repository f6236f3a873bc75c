
"""GPU readings through NVML (``pynvml`` from nvidia-ml-py), read-only.

Two stages so the interesting part is testable without a GPU:

* :func:`read_raw` calls pynvml and returns what it returned, JSON-safe, keyed by the
  call (``"nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"``). A call that fails is recorded as
  ``{"nvml_error": "<reason>"}``; a missing pynvml or a failed ``nvmlInit`` is recorded
  in ``raw["error"]``. Recordings of real hosts live in ``tests/data/nvml/``.
* :func:`assemble` turns a raw reading into one dict per GPU in plain units (bytes, MHz,
  watts, degrees C); a field NVML could not give is ``None`` with its reason in
  ``nvml_errors``.

For a measuring worker pinned to one GPU the same two stages are applied to one device:
:func:`device_identity` (which GPU this is), :func:`snapshot` (its clocks, temperature,
power and throttling just before or after a measurement) and :func:`snapshot_delta`
(what changed). They take the PHYSICAL (NVML) index: NVML ignores CUDA_VISIBLE_DEVICES,
so a worker started with ``CUDA_VISIBLE_DEVICES=3`` is CUDA device 0 but NVML device 3;
:func:`physical_indices` maps a CUDA_VISIBLE_DEVICES value to NVML indices.

METHOD.md rule 13: this module only ever calls ``nvml*Get*`` functions (plus init and
shutdown). Clocks, power limits and modes are recorded, never set.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from reportgen.records.stamps import utc_now

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
    # nvidia-ml-py names two more bits (nvmlClocksThrottleReasonBoardLimit,
    # nvmlClocksThrottleReasonReliability).
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# Reasons that say the clocks are where they were asked to be, not held back: an idle
# GPU and clocks set by applications-clocks settings. Every other reason is throttling.
NOT_THROTTLING: frozenset[str] = frozenset({"gpu_idle", "applications_clocks_setting"})

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
    nv, error = _load(pynvml_module)
    if nv is None:
        raw["error"] = error
        return raw
    raw["pynvml_version"] = _distribution_version("nvidia-ml-py")
    with _initialised(nv) as error:
        if error is not None:
            raw["error"] = error
            return raw
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
    return raw


NO_PYNVML = "pynvml (nvidia-ml-py) is not installed"


def _load(pynvml_module: Any) -> tuple[Any, str | None]:
    """The pynvml to use (the one passed, else ``import pynvml``), or why there is none."""
    if pynvml_module is not None:
        return pynvml_module, None
    try:
        return importlib.import_module("pynvml"), None
    except ImportError:
        return None, NO_PYNVML


@contextlib.contextmanager
def _initialised(nv: Any) -> Iterator[str | None]:
    """NVML initialised for the block: yields ``None``, or why ``nvmlInit`` failed (then
    nothing is to be called). NVML counts inits, so this nests inside :func:`held`."""
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        yield f"nvmlInit failed: {_reason(exc)}"
        return
    try:
        yield None
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown after a good read loses nothing
            nv.nvmlShutdown()


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
    if field == "memory_used_bytes":  # nvmlDeviceGetMemoryInfo's struct
        return {field: value.get("used") if isinstance(value, Mapping) else None}
    if field == "utilization_gpu_percent":  # nvmlDeviceGetUtilizationRates' struct
        return {field: value.get("gpu") if isinstance(value, Mapping) else None}
    if field == "pci_bus_id":  # nvmlDeviceGetPciInfo's struct; busIdLegacy before NVML 9
        bus_id = None
        if isinstance(value, Mapping):
            bus_id = value.get("busId") or value.get("busIdLegacy") or None
        return {field: bus_id}
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


# ---------------------------------------------------------------------------------------
# One GPU, for a measuring worker
#
# Every function here takes the PHYSICAL index NVML gives a GPU (0..N-1 over all GPUs of
# the host, in PCI order). NVML ignores CUDA_VISIBLE_DEVICES: a worker started with
# CUDA_VISIBLE_DEVICES=3 calls its GPU cuda:0, but must pass 3 here (see
# physical_indices). Same stages as above: read_device calls pynvml and keeps what it
# returned under call_key keys; the *_from_raw functions are pure.

# (field, pynvml function, enum arguments)
IDENTITY_CALLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("name", "nvmlDeviceGetName", ()),
    ("uuid", "nvmlDeviceGetUUID", ()),  # hashed as assemble hashes it (uuid_hash)
    ("pci_bus_id", "nvmlDeviceGetPciInfo", ()),  # struct; busId "00000000:19:00.0"
)

# (snapshot field, the _convert field giving its units, pynvml function, enum arguments)
SNAPSHOT_CALLS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("sm_clock_mhz", "sm_clock_mhz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)),
    ("mem_clock_mhz", "memory_clock_mhz", "nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",)),
    ("max_sm_clock_mhz", "sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",)),
    ("temperature_c", "temperature_c", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    # mW; on Ampere and newer (except GA100) NVML averages it over the last second
    ("power_w", "power_draw_w", "nvmlDeviceGetPowerUsage", ()),
    # the limit in force (the lowest of the management limit and any other constraint)
    ("power_limit_w", "enforced_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", ()),
    # percent of the last sample period (1/6 s to 1 s, by product) a kernel was running
    (
        "utilization_gpu_percent",
        "utilization_gpu_percent",
        "nvmlDeviceGetUtilizationRates",
        (),
    ),
    ("memory_used_bytes", "memory_used_bytes", "nvmlDeviceGetMemoryInfo", ()),
    (
        "throttle_reasons",
        "clocks_event_reasons",
        "nvmlDeviceGetCurrentClocksEventReasons",
        (),
    ),
)
SNAPSHOT_FIELDS: tuple[str, ...] = (
    "time",
    *(field for field, _, _, _ in SNAPSHOT_CALLS),
    "throttled",
    "reason",
    "nvml_errors",
)

# A call that pynvml or the driver does not have -> an older spelling of the same getter.
# nvmlDeviceGetCurrentClocksEventReasons came with driver 535 / nvidia-ml-py 12.535.
_FALLBACKS: dict[str, str] = {
    "nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
}


def device_count(pynvml_module: Any = None) -> int | None:
    """How many GPUs NVML sees on this host (all of them, whatever CUDA_VISIBLE_DEVICES
    says); ``None`` when pynvml is missing or NVML cannot be initialised."""
    nv, _ = _load(pynvml_module)
    if nv is None:
        return None
    with _initialised(nv) as error:
        if error is not None:
            return None
        try:
            return int(nv.nvmlDeviceGetCount())
        except Exception:
            return None


@contextlib.contextmanager
def held(pynvml_module: Any = None) -> Iterator[str | None]:
    """Keep NVML initialised for the block, so that the snapshots taken inside it do not
    each load and unload the library (NVML counts inits; each call still pairs its own
    init and shutdown). Yields ``None``, or why NVML is not available."""
    nv, error = _load(pynvml_module)
    if nv is None:
        yield error
        return
    with _initialised(nv) as error:
        yield error


def read_device(
    index: int,
    calls: tuple[tuple[str, tuple[str, ...]], ...],
    pynvml_module: Any = None,
) -> dict[str, Any]:
    """The given getters of the GPU with physical NVML index ``index``, as pynvml returned
    them; never raises.

    ``{"source": "pynvml", "error": None or why nothing was read, "index": index,
    "device": {call_key: value or {"nvml_error": reason}}}``: the ``device`` part has the
    shape of one entry of ``read_raw()["devices"]``.
    """
    out: dict[str, Any] = {"source": "pynvml", "error": None, "index": index, "device": {}}
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        out["error"] = f"{index!r} is not an NVML device index"
        return out
    nv, error = _load(pynvml_module)
    if nv is None:
        out["error"] = error
        return out
    with _initialised(nv) as error:
        if error is not None:
            out["error"] = error
            return out
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # NVMLError_InvalidArgument: no GPU with that index, ...
            out["error"] = f"nvmlDeviceGetHandleByIndex({index}) failed: {_reason(exc)}"
            return out
        device = out["device"]
        for function, args in calls:
            key = call_key(function, args)
            if key in device:
                continue
            device[key] = _call(nv, function, handle, args)
            fallback = _FALLBACKS.get(function)
            if fallback is not None and _failed(device[key]):
                device[call_key(fallback, args)] = _call(nv, fallback, handle, args)
    return out


def _failed(entry: Any) -> bool:
    return isinstance(entry, Mapping) and "nvml_error" in entry


def _read_value(
    device: Mapping[str, Any], function: str, args: tuple[str, ...]
) -> tuple[Any, str | None]:
    """One value of a device reading, from the call or else its fallback."""
    key = call_key(function, args)
    value, error = _value(device.get(key), key)
    fallback = _FALLBACKS.get(function)
    if error is not None and fallback is not None:
        fallback_key = call_key(fallback, args)
        if fallback_key in device:
            fallback_value, fallback_error = _value(device[fallback_key], fallback_key)
            if fallback_error is None:
                return fallback_value, None
            error = f"{error}; {fallback}: {fallback_error}"
    return value, error


def _summary(errors: Mapping[str, str]) -> str | None:
    return "; ".join(f"{field}: {error}" for field, error in errors.items()) or None


# --- identity ---------------------------------------------------------------------------


def device_identity(index: int, pynvml_module: Any = None) -> dict[str, Any]:
    """Which GPU physical NVML index ``index`` is, in the terms env.py records.

    ``{"index": index, "name": "NVIDIA H200", "uuid": uuid_hash(UUID) (the form env.py
    stores as ``uuid_sha256``, so a record and its environment can be matched),
    "pci_bus_id": "00000000:19:00.0", "reason": None}``. A field NVML could not give is
    ``None``; ``reason`` says why (every field ``None`` with no pynvml, no driver, or no
    GPU with that index). ``index`` is always the index asked about.
    """
    calls = tuple((function, args) for _, function, args in IDENTITY_CALLS)
    return identity_from_raw(read_device(index, calls, pynvml_module))


def identity_from_raw(reading: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`device_identity` of a :func:`read_device` reading (pure)."""
    out: dict[str, Any] = {"index": reading.get("index")}
    out.update({field: None for field, _, _ in IDENTITY_CALLS})
    if reading.get("error"):
        out["reason"] = str(reading["error"])
        return out
    device = reading.get("device") or {}
    errors: dict[str, str] = {}
    for field, function, args in IDENTITY_CALLS:
        value, error = _read_value(device, function, args)
        if error is not None:
            errors[field] = error
        converted = _convert(field, value)
        out[field] = converted["uuid_sha256"] if field == "uuid" else converted[field]
    out["reason"] = _summary(errors)
    return out


def compute_processes(index: int, pynvml_module: Any = None) -> list[int] | None:
    """The pids with a compute context on physical GPU ``index`` (None where NVML says
    nothing: no pynvml, a failed init, or a driver that hides them). ``pynvml_module``
    as in :func:`snapshot`."""
    nv, missing = _load(pynvml_module)
    if missing is not None:
        return None
    with _initialised(nv) as failed:
        if failed is not None:
            return None
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            return [int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)]
        except Exception:  # noqa: BLE001 - an unreadable device says nothing, it never fails a pass
            return None


# --- snapshot ---------------------------------------------------------------------------


def snapshot(index: int, pynvml_module: Any = None) -> dict[str, Any]:
    """One reading of physical NVML GPU ``index``, to take just before or after a
    measurement (outside the timed window: a read takes a few milliseconds, more when
    NVML has to be initialised; see :func:`held`).

    Keys (:data:`SNAPSHOT_FIELDS`): ``time`` (ISO 8601 UTC, when the reading began),
    ``sm_clock_mhz``, ``mem_clock_mhz``, ``max_sm_clock_mhz``, ``temperature_c``,
    ``power_w``, ``power_limit_w`` (the enforced limit), ``utilization_gpu_percent``,
    ``memory_used_bytes`` (whole device, every process), ``throttle_reasons`` (decoded
    names, ``[]`` for none), ``throttled`` (any reason other than
    :data:`NOT_THROTTLING`: power cap, thermal, hardware slowdown, ...; ``None`` when the
    reasons could not be read), ``reason`` (``None``, or why fields are missing, one
    ``field: why`` per field) and ``nvml_errors`` (the same, as a dict). A call that
    fails costs its own field only. Only getters are called (METHOD.md rule 13).
    """
    time = utc_now()
    calls = tuple((function, args) for _, _, function, args in SNAPSHOT_CALLS)
    return snapshot_from_raw(read_device(index, calls, pynvml_module), time=time)


def snapshot_from_raw(reading: Mapping[str, Any], time: str | None = None) -> dict[str, Any]:
    """:func:`snapshot` of a :func:`read_device` reading (pure); ``time`` defaults to now."""
    out: dict[str, Any] = {"time": time if time is not None else utc_now()}
    out.update({field: None for field, _, _, _ in SNAPSHOT_CALLS})
    out["throttled"] = None
    if reading.get("error"):
        out["reason"] = str(reading["error"])
        out["nvml_errors"] = {"*": str(reading["error"])}
        return out
    device = reading.get("device") or {}
    errors: dict[str, str] = {}
    for field, unit_field, function, args in SNAPSHOT_CALLS:
        value, error = _read_value(device, function, args)
        if error is not None:
            errors[field] = error
        try:
            out[field] = _convert(unit_field, value)[unit_field]
        except (TypeError, ValueError) as exc:  # a value of an unexpected shape
            out[field] = None
            errors[field] = f"unreadable value {value!r}: {_reason(exc)}"
    out["throttled"] = is_throttled(out["throttle_reasons"])
    out["reason"] = _summary(errors)
    out["nvml_errors"] = errors
    return out


def is_throttled(reasons: list[str] | None) -> bool | None:
    """Whether decoded clock-event reasons hold the clocks back (anything but
    :data:`NOT_THROTTLING`, unknown bits included); ``None`` for unknown reasons."""
    if reasons is None:
        return None
    return any(r not in NOT_THROTTLING for r in reasons)


def snapshot_delta(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What changed between the snapshots around a measurement, for a page.

    ``temperature_change_c`` (after - before), ``throttled`` (at either end),
    ``throttling_appeared`` (not throttled before, throttled after), ``throttle_reasons``
    (the throttling reasons seen at either end), ``min_sm_clock_mhz`` (the lower SM clock
    of the two). A value that needs a missing reading is ``None``. Two point readings
    cannot see throttling that started and ended between them.
    """
    b = before or {}
    a = after or {}
    t_before, t_after = b.get("temperature_c"), a.get("temperature_c")
    throttled_before, throttled_after = b.get("throttled"), a.get("throttled")
    if throttled_before is True or throttled_after is True:
        throttled: bool | None = True
    elif throttled_before is False and throttled_after is False:
        throttled = False
    else:
        throttled = None
    if throttled_after is True and throttled_before is False:
        appeared: bool | None = True
    elif throttled_after is False or throttled_before is True:
        appeared = False
    else:
        appeared = None
    reasons: list[str] = []
    for snap in (b, a):
        for name in snap.get("throttle_reasons") or []:
            if name not in NOT_THROTTLING and name not in reasons:
                reasons.append(name)
    clocks = [c for c in (b.get("sm_clock_mhz"), a.get("sm_clock_mhz")) if c is not None]
    return {
        "temperature_change_c": (
            t_after - t_before if t_before is not None and t_after is not None else None
        ),
        "throttled": throttled,
        "throttling_appeared": appeared,
        "throttle_reasons": reasons,
        "min_sm_clock_mhz": min(clocks) if clocks else None,
    }




# --- CUDA_VISIBLE_DEVICES -> NVML indices -------------------------------------------------


def physical_indices(visible: str | None) -> list[int] | None:
    """The NVML (physical) indices of the GPUs a CUDA_VISIBLE_DEVICES value exposes, in
    CUDA order: ``physical_indices("3,5") == [3, 5]``, so cuda:1 is NVML GPU 5.

    ``None`` where the value cannot be mapped without asking NVML: unset (every GPU is
    visible, how many is NVML's to say), or GPU UUIDs / MIG ids anywhere in it. Integers
    are parsed the way the CUDA driver does (as torch.cuda mirrors it): each entry is
    read like ``strtoul`` (``"1gpu"`` is 1), a negative or unparsable entry ends the list,
    a repeated index hides every GPU (``[]``), and ``""`` is no GPU. Indices beyond the
    host's GPUs are not checked here (``device_identity`` reports them).

    The integers count GPUs in CUDA's order, NVML's are in PCI order: the two agree when
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or the GPUs are all of one model (CUDA's default
    "fastest first" then falls back to PCI order). To be sure, compare
    ``device_identity(i)["uuid"]`` with ``uuid_hash`` of torch's
    ``get_device_properties(cuda_index).uuid``.
    """
    if visible is None:
        return None
    entries = [entry.strip() for entry in visible.split(",")]
    if any(entry.upper().startswith(("GPU-", "MIG-")) for entry in entries):
        return None
    indices: list[int] = []
    for entry in entries:
        index = _strtoul(entry)
        if index is None:
            break
        if index in indices:
            return []
        indices.append(index)
    return indices


def _strtoul(text: str) -> int | None:
    """The non-negative integer ``text`` starts with (an optional ``+``), else ``None``."""
    body = text.removeprefix("+")
    digits = ""
    for char in body:
        if char not in "0123456789":
            break
        digits += char
    return int(digits) if digits else None
