"""One GPU for a measuring worker: identity, snapshots around a measurement, their delta,
CUDA_VISIBLE_DEVICES -> NVML indices. CPU only: pynvml is faked from NVML readings in the
shape read_raw records (tests/data/nvml/)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

import pytest
from support.fake_nvml import (
    APPLICATIONS_CLOCKS_SETTING,
    GPU_IDLE,
    H200,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    UUID_0,
    FakeNvml,
    NvmlError,
    load,
)

from reportgen.profile import nvml


class NoNvml:
    """A pynvml whose library is missing: nvmlInit fails."""

    def nvmlInit(self) -> None:
        raise NvmlError("NVML Shared Library Not Found")


def snapshot_with(device: dict[str, Any], **fake: Any) -> dict[str, Any]:
    return nvml.snapshot(0, FakeNvml({"devices": [device]}, **fake))


# --- identity -----------------------------------------------------------------------


def test_device_identity_from_a_fake_pynvml() -> None:
    fake = FakeNvml(load())
    ident = nvml.device_identity(0, fake)
    assert ident == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": nvml.uuid_hash(UUID_0),
        "pci_bus_id": "00000000:19:00.0",
        "reason": None,
    }
    assert UUID_0[:8] not in json.dumps(ident)  # the UUID itself is never kept
    assert nvml.device_identity(1, fake)["pci_bus_id"] == "00000000:3B:00.0"
    assert fake.open == 0


def test_identity_uuid_matches_what_the_environment_stores() -> None:
    raw = load()
    gpus = nvml.assemble(raw)  # what env.gpu_info keeps as uuid_sha256
    for index, gpu in enumerate(gpus):
        assert nvml.device_identity(index, FakeNvml(raw))["uuid"] == gpu["uuid_sha256"]


def test_identity_without_pci_info_keeps_the_rest() -> None:
    raw = load(H200)  # the recording has no nvmlDeviceGetPciInfo
    ident = nvml.device_identity(0, FakeNvml(raw))
    assert ident["name"] == "NVIDIA H200"
    assert ident["uuid"] == nvml.uuid_hash("3f0c6a2e-8d1b-4c5e-9a7f-1b2c3d4e5f60")
    assert ident["pci_bus_id"] is None
    assert ident["reason"] == "pci_bus_id: NvmlError: Not Supported"


# --- snapshot -----------------------------------------------------------------------


def test_snapshot_from_a_fake_pynvml() -> None:
    fake = FakeNvml(load())
    before = dt.datetime.now(dt.UTC)
    snap = nvml.snapshot(0, fake)
    assert tuple(snap) == nvml.SNAPSHOT_FIELDS
    assert {k: v for k, v in snap.items() if k != "time"} == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "max_sm_clock_mhz": 1980,
        "temperature_c": 45,
        "power_w": 120.5,  # NVML reports milliwatts
        "power_limit_w": 700.0,
        "utilization_gpu_percent": 98,
        "memory_used_bytes": 3_245_342_720,
        "throttle_reasons": [],
        "throttled": False,
        "reason": None,
        "nvml_errors": {},
    }
    assert snap["time"].endswith("Z")
    taken = dt.datetime.strptime(snap["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert before <= taken <= dt.datetime.now(dt.UTC)
    json.dumps(snap)  # JSON-safe as it stands
    assert fake.open == 0


def test_snapshot_agrees_with_the_environment_reading() -> None:
    raw = load()
    same = {
        "sm_clock_mhz": "sm_clock_mhz",
        "mem_clock_mhz": "memory_clock_mhz",
        "max_sm_clock_mhz": "sm_clock_max_mhz",
        "temperature_c": "temperature_c",
        "power_w": "power_draw_w",
        "power_limit_w": "enforced_power_limit_w",
        "throttle_reasons": "clocks_event_reasons",
    }
    for index, gpu in enumerate(nvml.assemble(raw)):
        snap = nvml.snapshot(index, FakeNvml(raw))
        assert {k: snap[k] for k in same} == {k: gpu[v] for k, v in same.items()}


def test_snapshot_of_a_throttled_gpu_names_the_reasons() -> None:
    snap = nvml.snapshot(1, FakeNvml(load()))
    assert snap["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert snap["throttled"] is True
    assert (snap["sm_clock_mhz"], snap["max_sm_clock_mhz"]) == (1635, 1980)
    assert snap["temperature_c"] == 84 and snap["power_w"] == pytest.approx(698.74)
    assert snap["reason"] is None


@pytest.mark.parametrize(
    "mask, reasons, throttled",
    [
        (0, [], False),
        (GPU_IDLE, ["gpu_idle"], False),
        (APPLICATIONS_CLOCKS_SETTING, ["applications_clocks_setting"], False),
        (
            GPU_IDLE | APPLICATIONS_CLOCKS_SETTING,
            ["gpu_idle", "applications_clocks_setting"],
            False,
        ),
        (SW_POWER_CAP, ["sw_power_cap"], True),
        (HW_SLOWDOWN, ["hw_slowdown"], True),
        (HW_THERMAL_SLOWDOWN, ["hw_thermal_slowdown"], True),
        (GPU_IDLE | SW_THERMAL_SLOWDOWN, ["gpu_idle", "sw_thermal_slowdown"], True),
        (0x1000, ["other(0x1000)"], True),  # a bit this module does not know yet
    ],
)
def test_throttled_is_any_reason_but_idle_and_applications_clocks(
    mask: int, reasons: list[str], throttled: bool
) -> None:
    device = load()["devices"][0]
    device["nvmlDeviceGetCurrentClocksEventReasons"] = mask
    snap = snapshot_with(device)
    assert snap["throttle_reasons"] == reasons
    assert snap["throttled"] is throttled


def test_the_idle_h200_recording_is_not_throttled() -> None:
    snap = nvml.snapshot(0, FakeNvml(load(H200)))
    assert snap["throttle_reasons"] == ["gpu_idle"] and snap["throttled"] is False
    assert (snap["sm_clock_mhz"], snap["temperature_c"]) == (345, 29)
    assert snap["utilization_gpu_percent"] is None  # not in that recording
    assert set(snap["nvml_errors"]) == {"utilization_gpu_percent"}


def test_a_failing_call_costs_only_its_own_field() -> None:
    device = load()["devices"][0]
    snap = snapshot_with(device, failing={"nvmlDeviceGetPowerUsage"})
    assert snap["power_w"] is None
    assert snap["nvml_errors"] == {"power_w": "NvmlError: Not Supported"}
    assert snap["reason"] == "power_w: NvmlError: Not Supported"
    assert snap["power_limit_w"] == 700.0 and snap["temperature_c"] == 45
    assert snap["throttled"] is False

    # one enum of a function fails, the other does not
    snap = snapshot_with(device, failing={"nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"})
    assert snap["sm_clock_mhz"] is None and snap["mem_clock_mhz"] == 2619
    assert set(snap["nvml_errors"]) == {"sm_clock_mhz"}

    # several at once: each is named
    snap = snapshot_with(device, failing={"nvmlDeviceGetTemperature", "nvmlDeviceGetMemoryInfo"})
    assert snap["temperature_c"] is None and snap["memory_used_bytes"] is None
    assert snap["reason"] == (
        "temperature_c: NvmlError: Not Supported; memory_used_bytes: NvmlError: Not Supported"
    )
    assert snap["sm_clock_mhz"] == 1980


def test_unreadable_clock_event_reasons_leave_throttled_unknown() -> None:
    device = load()["devices"][1]
    snap = snapshot_with(
        device,
        failing={
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        },
    )
    assert snap["throttle_reasons"] is None and snap["throttled"] is None
    assert snap["nvml_errors"] == {
        "throttle_reasons": "NvmlError: Not Supported; "
        "nvmlDeviceGetCurrentClocksThrottleReasons: NvmlError: Not Supported"
    }


def test_an_older_pynvml_reads_the_reasons_through_the_throttle_spelling() -> None:
    device = load()["devices"][1]
    fake = FakeNvml({"devices": [device]}, missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    snap = nvml.snapshot(0, fake)
    assert snap["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert snap["throttled"] is True and snap["reason"] is None
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.called
    # a pynvml that has the new spelling is never asked the old one
    fake = FakeNvml({"devices": [device]})
    nvml.snapshot(0, fake)
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in fake.called


def test_only_getters_are_called_and_nvml_is_shut_down() -> None:
    fake = FakeNvml(load())
    nvml.device_identity(1, fake)
    nvml.snapshot(1, fake)
    nvml.device_count(fake)
    assert fake.open == 0
    assert fake.called.count("nvmlInit") == fake.called.count("nvmlShutdown") == 3
    # METHOD.md rule 13
    assert all(
        n.startswith(("nvmlDeviceGet", "nvmlSystemGet")) or n in ("nvmlInit", "nvmlShutdown")
        for n in fake.called
    )
    tables = [f for _, f, _ in nvml.IDENTITY_CALLS] + [f for *_, f, _ in nvml.SNAPSHOT_CALLS]
    assert all(f.startswith("nvmlDeviceGet") for f in [*tables, *nvml._FALLBACKS.values()])


# --- no pynvml, no driver, no such GPU ----------------------------------------------


def _all_none(record: dict[str, Any], keys: tuple[str, ...]) -> bool:
    return all(record[k] is None for k in keys)


SNAPSHOT_VALUES = tuple(f for f, *_ in nvml.SNAPSHOT_CALLS) + ("throttled",)
IDENTITY_VALUES = ("name", "uuid", "pci_bus_id")


def test_without_pynvml_every_field_is_none_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    ident = nvml.device_identity(2)
    assert ident["index"] == 2 and _all_none(ident, IDENTITY_VALUES)
    assert ident["reason"] == "pynvml (nvidia-ml-py) is not installed"
    snap = nvml.snapshot(2)
    assert tuple(snap) == nvml.SNAPSHOT_FIELDS
    assert _all_none(snap, SNAPSHOT_VALUES)
    assert snap["reason"] == "pynvml (nvidia-ml-py) is not installed"
    assert snap["nvml_errors"] == {"*": snap["reason"]}
    assert snap["time"].endswith("Z")
    assert nvml.device_count() is None
    with nvml.held() as error:
        assert error == "pynvml (nvidia-ml-py) is not installed"


def test_without_a_driver_every_field_is_none_with_the_reason() -> None:
    reason = "nvmlInit failed: NvmlError: NVML Shared Library Not Found"
    ident = nvml.device_identity(0, NoNvml())
    assert _all_none(ident, IDENTITY_VALUES) and ident["reason"] == reason
    snap = nvml.snapshot(0, NoNvml())
    assert _all_none(snap, SNAPSHOT_VALUES) and snap["reason"] == reason
    assert nvml.device_count(NoNvml()) is None


@pytest.mark.parametrize("index", [2, 7])
def test_an_index_beyond_the_hosts_gpus(index: int) -> None:
    fake = FakeNvml(load())
    ident = nvml.device_identity(index, fake)
    assert ident["index"] == index and _all_none(ident, IDENTITY_VALUES)
    assert ident["reason"] == (
        f"nvmlDeviceGetHandleByIndex({index}) failed: NvmlError: Invalid Argument"
    )
    snap = nvml.snapshot(index, fake)
    assert _all_none(snap, SNAPSHOT_VALUES) and snap["reason"] == ident["reason"]
    assert fake.open == 0


@pytest.mark.parametrize("index", [-1, True, "0"])
def test_a_value_that_is_no_index_is_not_passed_to_nvml(index: Any) -> None:
    fake = FakeNvml(load())
    snap = nvml.snapshot(index, fake)
    assert _all_none(snap, SNAPSHOT_VALUES)
    assert snap["reason"] == f"{index!r} is not an NVML device index"
    assert fake.called == []


def test_device_count() -> None:
    assert nvml.device_count(FakeNvml(load())) == 2
    assert nvml.device_count(FakeNvml(load(H200))) == 1
    assert nvml.device_count(FakeNvml(load(), failing={"nvmlDeviceGetCount"})) is None


def test_held_keeps_nvml_initialised_across_snapshots() -> None:
    fake = FakeNvml(load())
    with nvml.held(fake) as error:
        assert error is None and fake.open == 1
        nvml.snapshot(0, fake)
        nvml.snapshot(0, fake)
        assert fake.open == 1  # each snapshot paired its own init and shutdown
    assert fake.open == 0
    with nvml.held(NoNvml()) as error:
        assert error == "nvmlInit failed: NvmlError: NVML Shared Library Not Found"


# --- delta --------------------------------------------------------------------------


def test_snapshot_delta_when_throttling_appears() -> None:
    raw = load()
    before = nvml.snapshot(0, FakeNvml(raw))
    after = nvml.snapshot(1, FakeNvml(raw))  # the same GPU, hot and power capped
    assert nvml.snapshot_delta(before, after) == {
        "temperature_change_c": 39,
        "throttled": True,
        "throttling_appeared": True,
        "throttle_reasons": ["sw_power_cap", "sw_thermal_slowdown"],
        "min_sm_clock_mhz": 1635,
    }
    # throttled from the start: it did not appear, it was there
    delta = nvml.snapshot_delta(after, before)
    assert delta["throttled"] is True and delta["throttling_appeared"] is False
    assert delta["temperature_change_c"] == -39


def test_snapshot_delta_of_a_quiet_measurement() -> None:
    device = load()["devices"][0]
    before = snapshot_with(device)
    device["nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"] = 47
    device["nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"] = 1965
    device["nvmlDeviceGetCurrentClocksEventReasons"] = GPU_IDLE
    after = snapshot_with(device)
    assert nvml.snapshot_delta(before, after) == {
        "temperature_change_c": 2,
        "throttled": False,
        "throttling_appeared": False,
        "throttle_reasons": [],
        "min_sm_clock_mhz": 1965,
    }


def test_snapshot_delta_with_missing_readings() -> None:
    good = nvml.snapshot(1, FakeNvml(load()))
    missing = nvml.snapshot(0, NoNvml())
    delta = nvml.snapshot_delta(missing, good)
    assert delta["temperature_change_c"] is None
    assert delta["throttled"] is True  # seen at one end, whatever the other
    assert delta["throttling_appeared"] is None  # unknown before
    assert delta["min_sm_clock_mhz"] == 1635
    assert nvml.snapshot_delta(None, None) == {
        "temperature_change_c": None,
        "throttled": None,
        "throttling_appeared": None,
        "throttle_reasons": [],
        "min_sm_clock_mhz": None,
    }
    quiet = nvml.snapshot(0, FakeNvml(load()))
    assert nvml.snapshot_delta(quiet, missing)["throttled"] is None


# --- CUDA_VISIBLE_DEVICES -----------------------------------------------------------


@pytest.mark.parametrize(
    "visible, indices",
    [
        ("3,5", [3, 5]),
        ("3", [3]),
        (" 5 , 3 ", [5, 3]),  # CUDA order, not sorted
        ("", []),  # no GPU visible
        ("0,2,-1,1", [0, 2]),  # a negative entry ends the list
        ("1,x,2", [1]),  # so does an unparsable one
        ("1gpu,2", [1, 2]),  # strtoul: the leading digits count
        ("0,0", []),  # a repeated index hides every GPU
        (None, None),  # unset: every GPU, how many is NVML's to say
        ("GPU-5e1c9b2a-7d34-4f0e-8a61-2b9c4d7e1f03", None),
        ("GPU-5e1c9b2a", None),  # a UUID prefix
        ("MIG-5e1c9b2a-7d34-4f0e-8a61-2b9c4d7e1f03", None),
        ("MIG-GPU-5e1c9b2a-7d34-4f0e-8a61-2b9c4d7e1f03/1/0", None),  # pre-R470 MIG form
        ("0,GPU-5e1c9b2a", None),  # mixed: not guessed at
    ],
)
def test_physical_indices(visible: str | None, indices: list[int] | None) -> None:
    assert nvml.physical_indices(visible) == indices


# --- the real pynvml, where installed -----------------------------------------------


def test_the_module_uses_the_real_pynvml_values() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name, value in nvml._ENUMS.items():
        assert getattr(pynvml, name) == value
    reasons = {
        "nvmlClocksThrottleReasonGpuIdle": "gpu_idle",
        "nvmlClocksThrottleReasonApplicationsClocksSetting": "applications_clocks_setting",
        "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
        "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
        "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal_slowdown",
        "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal_slowdown",
    }
    for constant, name in reasons.items():
        assert nvml.decode_event_reasons(getattr(pynvml, constant)) == [name]
