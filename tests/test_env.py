"""Environment record (METHOD.md rules 11-13): secrets, hashing, slugs, NVML assembly."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from reportgen.cli import main
from reportgen.errors import UserError
from reportgen.profile import env, nvml

DATA = Path(__file__).parent / "data" / "nvml"
H200 = DATA / "h200-sxm-1x.json"

TOP_KEYS = {
    "time",
    "host",
    "python",
    "libraries",
    "torch",
    "gpus",
    "driver",
    "device",
    "git",
    "environment_variables",
}


def load_raw(path: Path = H200) -> dict[str, Any]:
    return json.loads(path.read_text())


# --- secret filtering ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [
        ("HF_TOKEN", "hf_" + "a" * 34),
        ("HF_TOKEN", "short"),  # dropped by name whatever the value
        ("HUGGING_FACE_HUB_TOKEN", "x"),
        ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("MY_PASSWORD", "hunter2"),
        ("GITHUB_TOKEN", "ghp_" + "b" * 36),
        ("TORCH_AUTH_HEADER", "Bearer x"),
        ("NVIDIA_API_KEY", "nvapi-123"),
        ("CUDA_SESSION_ID", "42"),
        ("HF_COOKIE", "c"),
        ("PYTORCH_PASSWD", "p"),
        ("TORCH_CREDENTIALS", "c"),
    ],
)
def test_secret_names_are_dropped(name: str, value: str) -> None:
    assert env.filter_environment({name: value}) == {}


@pytest.mark.parametrize(
    "value",
    [
        "hf_abcdefghijklmnopqrstuvwxyz0123456789",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "sk-proj-abc123",
        "AKIAIOSFODNN7EXAMPLE",
        "a" * 20 + "0123456789abcdef0123",  # long hex/base64 run
        "0123456789abcdef0123456789abcdef01",  # 34 hex characters
    ],
)
def test_credential_values_under_innocent_names_are_dropped(value: str) -> None:
    kept = env.filter_environment({"TORCH_HOME": value, "OMP_NUM_THREADS": "8"})
    assert kept == {"OMP_NUM_THREADS": "8"}
    assert value not in json.dumps(kept)


def test_relevant_variables_are_kept_and_irrelevant_ones_ignored() -> None:
    environ = {
        "OMP_NUM_THREADS": "8",
        "MKL_NUM_THREADS": "4",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "TORCH_LOGS": "+dynamo",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "TOKENIZERS_PARALLELISM": "false",
        "HOME": "/home/someone",
        "PATH": "/usr/bin",
        "HOSTNAME": "secret-host",
    }
    kept = env.filter_environment(environ)
    assert kept == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "MKL_NUM_THREADS": "4",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "OMP_NUM_THREADS": "8",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TOKENIZERS_PARALLELISM": "false",
        "TORCH_LOGS": "+dynamo",
    }


def test_gpu_uuids_in_visible_devices_are_hashed_not_dropped() -> None:
    uuid = "GPU-3f0c6a2e-8d1b-4c5e-9a7f-1b2c3d4e5f60"
    kept = env.filter_environment({"CUDA_VISIBLE_DEVICES": uuid})
    assert uuid.lower()[4:] not in json.dumps(kept).lower()
    assert kept["CUDA_VISIBLE_DEVICES"] == f"uuid-sha256:{nvml.uuid_hash(uuid)}"


def test_collect_filters_the_live_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_livetokenvalue0123456789abcdefghij")
    monkeypatch.setenv("TORCH_HOME", "ghp_innocentnamebadvalue0123456789ab")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    record = env.collect("cpu", nvml_raw={"error": "test", "system": {}, "devices": []})
    dump = json.dumps(record)
    assert "livetokenvalue" not in dump and "innocentnamebadvalue" not in dump
    assert "HF_TOKEN" not in record["environment_variables"]
    assert record["environment_variables"]["OMP_NUM_THREADS"] == "2"
    assert record["torch"]["threads"]["env"]["OMP_NUM_THREADS"] == "2"


# --- hostname -----------------------------------------------------------------------


def test_raw_hostname_never_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = "build-box-7f3a.internal.example"
    monkeypatch.setattr(socket, "gethostname", lambda: fake)
    monkeypatch.setattr("platform.node", lambda: fake)
    monkeypatch.setenv("HOSTNAME", fake)
    # relevant names (by prefix) that happen to hold the hostname
    monkeypatch.setenv("TORCH_MASTER_ADDR", fake)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/scratch/build-box-7f3a/inductor")
    record = env.collect("cpu", nvml_raw={"error": "test", "system": {}, "devices": []})
    dump = json.dumps(record)
    assert "build-box-7f3a" not in dump
    assert "internal.example" not in dump
    assert record["host"]["hostname_sha256"] == nvml.short_hash(fake)
    assert len(record["host"]["hostname_sha256"]) == 12
    hashed = f"host-sha256:{nvml.short_hash(fake)}"
    assert record["environment_variables"]["TORCH_MASTER_ADDR"] == hashed
    # a path is not published at all (where it points is the machine's), hostname or not
    assert record["environment_variables"]["TORCHINDUCTOR_CACHE_DIR"] == env.LOCAL_PATH


def test_hostname_scrub_matches_whole_words_only() -> None:
    record = {"kernel": "6.1-kvm", "path": "/home/vm/x", "list": ["vm"]}
    scrubbed = env.scrub_hostname(record, "vm")
    assert scrubbed["kernel"] == "6.1-kvm"
    assert "vm" not in scrubbed["path"].replace("host-sha256", "")
    assert scrubbed["list"] == [f"host-sha256:{nvml.short_hash('vm')}"]


# --- device -------------------------------------------------------------------------


def test_resolve_device_on_this_cpu_host() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test describes a host without CUDA")
    assert env.resolve_device("auto") == "cpu"
    assert env.resolve_device("cpu") == "cpu"
    with pytest.raises(UserError, match="no CUDA device is available; valid here: auto, cpu"):
        env.resolve_device("cuda")
    with pytest.raises(UserError, match="unknown device"):
        env.resolve_device("tpu")


def test_resolve_device_auto_picks_cuda_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert env.resolve_device("auto") == "cuda"
    assert env.resolve_device("cuda") == "cuda"


# --- collect ------------------------------------------------------------------------


def test_collect_on_this_host_is_json_safe_with_every_section() -> None:
    record = env.collect("auto")
    # a CPU run records the measured peaks its roofline is drawn against
    on_cpu = record["device"]["type"] == "cpu"
    assert set(record) == TOP_KEYS | ({"cpu_probe"} if on_cpu else set())
    if on_cpu:
        assert record["cpu_probe"]["matmul_flops_per_s"] > 0
    again = json.loads(json.dumps(record, allow_nan=False))
    assert again == record
    assert record["device"]["type"] in {"cpu", "cuda"}
    host = record["host"]
    assert host["logical_cores"] >= 1 and host["ram_total_bytes"] > 0
    assert host["cpu_model"]
    torch_section = record["torch"]
    assert set(torch_section["sdpa"]) >= {
        "flash_enabled",
        "mem_efficient_enabled",
        "math_enabled",
        "cudnn_enabled",
    }
    assert torch_section["threads"]["num_threads"] >= 1
    assert "float32_matmul_precision" in torch_section["numerics"]
    assert record["libraries"]["torch"] and record["libraries"]["reportgen"]
    assert record["time"].endswith("Z")
    if record["device"]["type"] == "cpu":
        assert record["device"]["name"] == host["cpu_model"]


def test_collect_without_pynvml_records_the_reason() -> None:
    record = env.collect("cpu", nvml_raw=nvml.read_raw(_NoNvml()))
    assert record["driver"]["driver_version"] is None
    assert "nvmlInit failed" in record["driver"]["nvml_error"]


# --- git ----------------------------------------------------------------------------


def test_git_info_of_this_checkout_and_of_a_plain_directory(tmp_path: Path) -> None:
    assert env.git_info(tmp_path) is None
    info = env.git_info()
    if info is None:
        pytest.skip("reportgen is not running from a git checkout")
    assert set(info) == {"commit", "dirty", "branch"}
    assert info["commit"] is None or len(info["commit"]) == 40
    assert isinstance(info["dirty"], bool)


# --- hardware slug ------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, cores, slug",
    [
        ("AMD EPYC 7B13 64-Core Processor", 2, "cpu-amd-epyc-7b13-2c"),
        ("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", 16, "cpu-intel-xeon-platinum-8480-16c"),
        ("ARM Neoverse-V2", 72, "cpu-arm-neoverse-v2-72c"),
    ],
)
def test_hardware_slug_cpu(model: str, cores: int, slug: str) -> None:
    environment = {
        "device": {"type": "cpu"},
        "gpus": [],
        "host": {"cpu_model": model, "usable_cores": cores},
    }
    assert env.hardware_slug(environment) == slug


def test_hardware_slug_of_this_host_is_filesystem_safe() -> None:
    slug = env.hardware_slug(env.collect("cpu"))
    assert slug.startswith("cpu-") and slug.endswith("c")
    assert len(slug) <= env.SLUG_MAX
    assert all(c.isalnum() and c.islower() or c.isdigit() or c == "-" for c in slug)
    assert "--" not in slug


def test_hardware_slug_on_a_recorded_gpu_environment() -> None:
    gpus = [dict(g, cuda_index=g["index"]) for g in nvml.assemble(load_raw())]
    environment = {"device": {"type": "cuda"}, "gpus": gpus, "host": {"cpu_model": "x"}}
    assert env.hardware_slug(environment) == "nvidia-h200-1x"
    environment["gpus"] = gpus * 8
    assert env.hardware_slug(environment) == "nvidia-h200-8x"
    # a CPU run on a GPU host is a CPU measurement
    environment["device"] = {"type": "cpu"}
    environment["host"] = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "usable_cores": 8}
    assert env.hardware_slug(environment) == "cpu-intel-xeon-platinum-8480-8c"


def test_hardware_slug_is_bounded() -> None:
    environment = {"device": {"type": "cpu"}, "host": {"cpu_model": "Z" * 200, "usable_cores": 128}}
    slug = env.hardware_slug(environment)
    assert len(slug) <= env.SLUG_MAX and slug.endswith("-128c")


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, uuids: list[str]) -> None:
    """torch.cuda as it looks on a host with H200s, without one."""
    import types

    import torch

    def props(index: int) -> Any:
        return types.SimpleNamespace(
            name="NVIDIA H200",
            major=9,
            minor=0,
            multi_processor_count=132,
            total_memory=150_109_880_320,
            uuid=uuids[index],
            L2_cache_size=52_428_800,
        )

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(uuids))
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")


def test_gpu_info_joins_torch_and_nvml_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, ["3f0c6a2e-8d1b-4c5e-9a7f-1b2c3d4e5f60"])
    (gpu,) = env.gpu_info(load_raw())
    assert gpu["cuda_index"] == 0 and gpu["nvml_index"] == 0
    assert gpu["multi_processor_count"] == 132
    assert gpu["compute_capability"] == "9.0"
    assert gpu["cuda_memory_bytes"] == 150_109_880_320
    assert gpu["memory_total_bytes"] == 150_754_820_096  # NVML's figure when it has one
    assert gpu["power_limit_w"] == 700.0 and gpu["sm_clock_max_mhz"] == 1980
    environment = {"device": env.device_info("cuda", {}), "gpus": [gpu]}
    assert environment["device"] == {"type": "cuda", "index": 0, "name": "NVIDIA H200"}
    assert env.hardware_slug(environment) == "nvidia-h200-1x"


def test_gpu_info_without_a_matching_nvml_reading_keeps_torch_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two GPUs visible to torch, one NVML reading with another UUID: no safe match.
    _fake_cuda(monkeypatch, ["00000000-0000-0000-0000-000000000001"] * 2)
    gpus = env.gpu_info(load_raw())
    assert len(gpus) == 2
    for gpu in gpus:
        assert gpu["power_limit_w"] is None and gpu["sm_clock_mhz"] is None
        assert gpu["nvml_errors"] == {"*": "no NVML reading matched this GPU"}
        assert gpu["memory_total_bytes"] == 150_109_880_320
    gpus = env.gpu_info(nvml.read_raw(_NoNvml()))
    assert gpus[0]["nvml_errors"]["*"].startswith("nvmlInit failed")


# --- NVML ---------------------------------------------------------------------------


def test_assemble_recorded_h200() -> None:
    (gpu,) = nvml.assemble(load_raw())
    assert set(gpu) == set(nvml.assembled_fields()) | {"nvml_errors"}
    assert gpu["nvml_errors"] == {}
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["memory_total_bytes"] == 150_754_820_096  # 143771 MiB
    assert gpu["compute_capability"] == "9.0"
    assert (gpu["sm_clock_mhz"], gpu["sm_clock_max_mhz"]) == (345, 1980)
    assert (gpu["memory_clock_mhz"], gpu["memory_clock_max_mhz"]) == (3201, 3201)
    assert gpu["applications_sm_clock_mhz"] == 1980
    assert gpu["default_applications_memory_clock_mhz"] == 3201
    assert gpu["power_limit_w"] == 700.0  # NVML reports milliwatts
    assert gpu["default_power_limit_w"] == 700.0
    assert gpu["enforced_power_limit_w"] == 700.0
    assert gpu["power_draw_w"] == pytest.approx(76.412)
    assert gpu["temperature_c"] == 29
    assert gpu["performance_state"] == "P0"
    assert gpu["clocks_event_reasons"] == ["gpu_idle"]
    assert gpu["persistence_mode"] is True
    assert gpu["compute_mode"] == "default"
    assert (gpu["ecc_current"], gpu["ecc_pending"]) == (True, True)
    assert (gpu["mig_current"], gpu["mig_pending"]) == (False, False)
    assert (gpu["pcie_generation"], gpu["pcie_width"]) == (5, 16)
    assert gpu["driver_version"] == "570.133.20"
    assert gpu["cuda_driver_version"] == "12.8"
    # the UUID is hashed, in the same form torch's spelling hashes to
    assert gpu["uuid_sha256"] == nvml.uuid_hash("3f0c6a2e-8d1b-4c5e-9a7f-1b2c3d4e5f60")
    assert "3f0c6a2e" not in json.dumps(gpu)


def test_assemble_keeps_reasons_for_failed_calls() -> None:
    raw = load_raw()
    device = raw["devices"][0]
    device["nvmlDeviceGetApplicationsClock(NVML_CLOCK_SM)"] = {
        "nvml_error": "NVMLError_NotSupported: Not Supported"
    }
    del device["nvmlDeviceGetEnforcedPowerLimit"]
    (gpu,) = nvml.assemble(raw)
    assert gpu["applications_sm_clock_mhz"] is None
    assert gpu["enforced_power_limit_w"] is None
    assert gpu["nvml_errors"] == {
        "applications_sm_clock_mhz": "NVMLError_NotSupported: Not Supported",
        "enforced_power_limit_w": "nvmlDeviceGetEnforcedPowerLimit was not read",
    }
    assert gpu["power_limit_w"] == 700.0


def test_event_reasons_and_cuda_version_decoding() -> None:
    assert nvml.decode_event_reasons(0) == []
    assert nvml.decode_event_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert nvml.decode_event_reasons(0x1000) == ["other(0x1000)"]
    assert nvml.format_cuda_version(12080) == "12.8"
    assert nvml.format_cuda_version(13000) == "13.0"


class _NvmlError(Exception):
    """Stands in for pynvml.NVMLError: str() is the reason."""


class _NoNvml:
    """A pynvml whose library is missing: nvmlInit fails."""

    def nvmlInit(self) -> None:
        raise _NvmlError("NVML Shared Library Not Found")


class _FakeNvml:
    """A pynvml over one GPU where some calls are unsupported; records what is called."""

    def __init__(self, raw: dict[str, Any], failing: set[str]) -> None:
        self.device = raw["devices"][0]
        self.system = raw["system"]
        self.failing = failing
        self.called: list[str] = []
        self.shut_down = False

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.called.append(name)
            if name in self.failing:
                raise _NvmlError("Not Supported")
            if name in ("nvmlInit",):
                return None
            if name == "nvmlShutdown":
                self.shut_down = True
                return None
            if name == "nvmlDeviceGetCount":
                return 1
            if name == "nvmlDeviceGetHandleByIndex":
                return object()
            if name in self.system:
                return self.system[name]
            enum_args = tuple(a for a in args if isinstance(a, int))
            names = {v: k for k, v in nvml._ENUMS.items() if k.startswith("NVML_CLOCK")}
            if name == "nvmlDeviceGetTemperature":
                return self.device["nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"]
            key = nvml.call_key(name, tuple(names[a] for a in enum_args))
            return self.device[key]

        return call


def test_read_raw_round_trips_through_a_fake_pynvml() -> None:
    recorded = load_raw()
    fake = _FakeNvml(recorded, failing={"nvmlDeviceGetMigMode"})
    raw = nvml.read_raw(fake)
    assert raw["error"] is None and fake.shut_down
    assert raw["devices"][0]["nvmlDeviceGetMigMode"] == {"nvml_error": "_NvmlError: Not Supported"}
    (gpu,) = nvml.assemble(raw)
    assert gpu["mig_current"] is None and "mig_mode" in gpu["nvml_errors"]
    assert gpu["sm_clock_max_mhz"] == 1980
    # METHOD.md rule 13: only getters, init and shutdown are ever called
    assert all(
        n.startswith(("nvmlDeviceGet", "nvmlSystemGet")) or n in ("nvmlInit", "nvmlShutdown")
        for n in fake.called
    )


def test_missing_pynvml_yields_null_fields_and_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    raw = nvml.read_raw()
    assert raw["error"] == "pynvml (nvidia-ml-py) is not installed"
    assert nvml.assemble(raw) == []
    driver = nvml.driver_info(raw)
    assert driver["driver_version"] is None and driver["cuda_driver_version"] is None
    assert driver["nvml_error"] == raw["error"]


def test_nvml_init_error_yields_null_fields_and_a_reason() -> None:
    raw = nvml.read_raw(_NoNvml())
    assert raw["error"] == "nvmlInit failed: _NvmlError: NVML Shared Library Not Found"
    assert raw["devices"] == []
    null = nvml.null_reading(raw["error"])
    assert all(null[f] is None for f in nvml.assembled_fields())
    assert null["nvml_errors"] == {"*": raw["error"]}


def test_only_getters_are_in_the_call_tables() -> None:
    functions = [f for _, f in nvml.SYSTEM_CALLS] + [f for _, f, _ in nvml.DEVICE_CALLS]
    assert all(f.startswith(("nvmlDeviceGet", "nvmlSystemGet")) for f in functions)


# --- command ------------------------------------------------------------------------


def test_env_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "--device", "cpu", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert set(record) == TOP_KEYS | {"cpu_probe"}
    assert record["device"]["type"] == "cpu"


def test_env_command_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "hardware" in out and "hostname_sha256" in out and "sdpa.flash_enabled" in out


def test_env_command_cuda_on_a_cpu_host_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    assert main(["env", "--device", "cuda", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no CUDA device is available; valid here: auto, cpu" in captured.err


def test_the_interpreter_is_recorded_by_name_not_by_local_path() -> None:
    import sys

    assert env.python_info()["executable"] == Path(sys.executable).name


def test_a_variable_naming_a_place_on_the_machine_keeps_only_that_it_was_set() -> None:
    # torch's inductor sets TORCHINDUCTOR_CACHE_DIR to a directory under /tmp once imported
    kept = env.filter_environment({"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root",
                                   "TORCH_HOME": "~/.cache/torch", "OMP_NUM_THREADS": "2"})
    assert kept == {"OMP_NUM_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": env.LOCAL_PATH,
                    "TORCH_HOME": env.LOCAL_PATH}
