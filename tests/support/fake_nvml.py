"""A pynvml faked from NVML readings in the shape ``nvml.read_raw`` records
(tests/data/nvml/): the GPU path of the snapshot and the worker, tested on a CPU."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from reportgen.profile import nvml

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"
H100_2X = DATA / "h100-sxm-2x-snapshot.json"  # hand-written, recorded shape: see its "note"
H200 = DATA / "h200-sxm-1x.json"  # a recording of an idle H200

# Values of nvidia-ml-py's constants (pynvml.py, 13.615.71), written out so that these
# tests also check the module's own copies.
NVML_CLOCK = {0: "NVML_CLOCK_GRAPHICS", 1: "NVML_CLOCK_SM", 2: "NVML_CLOCK_MEM"}
NVML_TEMPERATURE = {0: "NVML_TEMPERATURE_GPU"}
GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle
APPLICATIONS_CLOCKS_SETTING = 0x2  # nvmlClocksEventReasonApplicationsClocksSetting
SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
HW_SLOWDOWN = 0x8  # nvmlClocksEventReasonHwSlowdown
SW_THERMAL_SLOWDOWN = 0x20  # nvmlClocksEventReasonSwThermalSlowdown
HW_THERMAL_SLOWDOWN = 0x40  # nvmlClocksEventReasonHwThermalSlowdown

UUID_0 = "5e1c9b2a-7d34-4f0e-8a61-2b9c4d7e1f03"  # device 0 of H100_2X, as torch spells it


def load(path: Path = H100_2X) -> dict[str, Any]:
    return json.loads(path.read_text())


class NvmlError(Exception):
    """Stands in for pynvml.NVMLError: str() is the reason."""


# ctypes structures as pynvml returns them (same field names and types)
class Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class PciInfo(ctypes.Structure):
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


_STRUCTS: dict[str, type[ctypes.Structure]] = {
    "nvmlDeviceGetMemoryInfo": Memory,
    "nvmlDeviceGetUtilizationRates": Utilization,
    "nvmlDeviceGetPciInfo": PciInfo,
}


class Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """pynvml over a reading in read_raw's shape: every getter answers what the reading
    holds for its call, structures as ctypes structures; records every call.

    ``failing``: function names or call keys that raise; ``missing``: functions this
    "pynvml version" lacks. A call the reading does not hold raises Not Supported.
    """

    def __init__(
        self,
        raw: dict[str, Any],
        failing: Collection[str] = (),
        missing: Collection[str] = (),
        init_error: str | None = None,
    ) -> None:
        self.devices = raw["devices"]
        self.failing = set(failing)
        self.missing = set(missing)
        self.init_error = init_error
        self.called: list[str] = []
        self.open = 0  # nvmlInit minus nvmlShutdown

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml") or name in self.missing:
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.called.append(name)
            return self._answer(name, args)

        return call

    def _answer(self, name: str, args: tuple[Any, ...]) -> Any:
        if name == "nvmlInit":
            if self.init_error:
                raise NvmlError(self.init_error)
            self.open += 1
            return None
        if name == "nvmlShutdown":
            self.open -= 1
            return None
        assert self.open > 0, f"{name} called outside nvmlInit/nvmlShutdown"
        if name in self.failing:
            raise NvmlError("Not Supported")
        if name == "nvmlDeviceGetCount":
            return len(self.devices)
        if name == "nvmlDeviceGetHandleByIndex":
            (index,) = args
            if not 0 <= index < len(self.devices):
                raise NvmlError("Invalid Argument")
            return Handle(index)
        handle, *enums = args
        assert isinstance(handle, Handle)
        device = self.devices[handle.index]
        table = NVML_TEMPERATURE if name == "nvmlDeviceGetTemperature" else NVML_CLOCK
        key = nvml.call_key(name, tuple(table[e] for e in enums))
        if key in self.failing:
            raise NvmlError("Not Supported")
        if name == "nvmlDeviceGetCurrentClocksThrottleReasons":  # the older spelling
            key = "nvmlDeviceGetCurrentClocksEventReasons"
        if key not in device:
            raise NvmlError("Not Supported")
        value = device[key]
        if name in _STRUCTS:
            fields = {
                k: v.encode() if isinstance(v, str) else v
                for k, v in value.items()
                if k in {f for f, *_ in _STRUCTS[name]._fields_}
            }
            return _STRUCTS[name](**fields)
        return value
