"""The environment record every stored result carries (METHOD.md rules 11-13).

:func:`collect` returns a JSON-safe dict: host, python, libraries, torch (versions,
threads, numerics flags, SDPA backends), gpus (torch properties plus NVML readings),
driver, device, git, environment_variables, time, and on a CPU ``cpu_probe`` (its
attainable peaks, ``reportgen.profile.probe``). The caller adds ``seeds``.

Rule 12: the hostname is stored only as a hash, environment variables are an allowlist
of performance-relevant names, and anything that looks like a credential (by name or by
value) is dropped even when its name is on the allowlist. Rule 13: nothing here changes
the hardware; NVML is read only (see :mod:`reportgen.profile.nvml`).

torch is imported inside functions so that ``reportgen.profile.env`` stays cheap to import.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from reportgen import __version__
from reportgen.errors import UserError
from reportgen.profile import nvml
from reportgen.records.stamps import utc_now
from reportgen.scrub import interpreter

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")

# Distributions whose versions change what is measured or how it is rendered.
LIBRARIES: tuple[str, ...] = (
    "torch",
    "transformers",
    "numpy",
    "pandas",
    "pyarrow",
    "rich",
    "PyYAML",
    "jinja2",
    "altair",
    "flash-attn",
    "triton",
    "accelerate",
    "safetensors",
    "tokenizers",
    "nvidia-ml-py",
    "nvidia-cudnn-cu12",
    "nvidia-cublas-cu12",
)

# --------------------------------------------------------------------------------------
# Environment variables

ENV_NAMES: frozenset[str] = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "CUBLAS_WORKSPACE_CONFIG",
        "CUBLASLT_WORKSPACE_SIZE",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "LD_PRELOAD",  # tcmalloc/jemalloc change host-side timings
        "MALLOC_CONF",
    }
)
ENV_PREFIXES: tuple[str, ...] = (
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TORCHDYNAMO_",
    "NVIDIA_",
    "CUDA_",
    "CUDNN_",
    "CUBLAS_",
    "NCCL_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "MKLDNN_",
    "ONEDNN_",
    "DNNL_",
    "TRITON_",
    "HF_",
    "TRANSFORMERS_",
)

SECRET_NAME = re.compile(
    r"token|key|secret|password|passwd|credential|auth|cookie|session", re.IGNORECASE
)
# Names the secret pattern catches that are known to hold no secret.
SECRET_NAME_EXCEPTIONS: frozenset[str] = frozenset({"TOKENIZERS_PARALLELISM"})

SECRET_VALUE_PREFIXES: tuple[str, ...] = (
    "hf_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "xox",  # Slack
    "AKIA",  # AWS access key ids
    "ASIA",
    "AIza",  # Google API keys
    "eyJ",  # a JWT's base64 header
    "-----BEGIN",
)
# A long unbroken run of base64/hex characters is a key until proven otherwise.
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-]{33,}")
_UUID = re.compile(
    r"(?:GPU-|MIG-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE
)


def is_secret_name(name: str) -> bool:
    return name not in SECRET_NAME_EXCEPTIONS and SECRET_NAME.search(name) is not None


def looks_like_credential(value: str) -> bool:
    """True for values shaped like tokens or keys, whatever the variable is called."""
    text = value.strip()
    if text.startswith(SECRET_VALUE_PREFIXES):
        return True
    # GPU/MIG UUIDs (CUDA_VISIBLE_DEVICES) are long too but are identifiers, hashed below.
    without_uuids = _UUID.sub("", text)
    return _LONG_TOKEN.search(without_uuids) is not None


def _hash_uuids(value: str) -> str:
    return _UUID.sub(lambda m: f"uuid-sha256:{nvml.uuid_hash(m.group(0))}", value)


def is_relevant_name(name: str) -> bool:
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def filter_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The performance-relevant variables of ``environ`` with secrets dropped, sorted."""
    source = os.environ if environ is None else environ
    kept: dict[str, str] = {}
    for name in sorted(source):
        value = source[name]
        if not is_relevant_name(name) or is_secret_name(name) or looks_like_credential(value):
            continue
        # a place on the machine (torch's inductor sets its cache directory once imported)
        # is not published: that the variable was set is kept, not where it points
        kept[name] = LOCAL_PATH if _is_local_path(value) else _hash_uuids(value)
    return kept


LOCAL_PATH = "(a local path)"


def _is_local_path(value: str) -> bool:
    return value.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", value) is not None


# --------------------------------------------------------------------------------------
# Device


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; refuse an unusable choice."""
    import torch

    if requested not in DEVICES:
        raise UserError(f"--device {requested}: unknown device; valid: {', '.join(DEVICES)}")
    available = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if available else "cpu"
    if requested == "cuda" and not available:
        raise UserError("--device cuda: no CUDA device is available; valid here: auto, cpu")
    return requested


# --------------------------------------------------------------------------------------
# Host


def hostname_hash() -> str:
    return nvml.short_hash(socket.gethostname())


def scrub_hostname(record: Any, hostname: str | None = None) -> Any:
    """``record`` with the hostname (and its first label) replaced by its hash wherever a
    string holds it: a path, MASTER_ADDR-like variables, a kernel build string."""
    name = socket.gethostname() if hostname is None else hostname
    names = {n for n in (name, name.split(".")[0]) if len(n) >= 2}
    if not names:
        return record
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    # Whole words only, so a host called "vm" leaves "kvm" alone.
    pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")
    replacement = f"host-sha256:{nvml.short_hash(name)}"

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(replacement, value)
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(record)


def host_info() -> dict[str, Any]:
    cpuinfo = _read_text("/proc/cpuinfo")
    physical, sockets = _physical_cores(cpuinfo)
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "hostname_sha256": hostname_hash(),
        "os": platform.system(),
        "os_release": _os_release(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(cpuinfo),
        "cpu_sockets": sockets,
        "physical_cores": physical,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,  # the affinity mask: what this process may run on
        "cgroup_cpu_limit": _cgroup_cpu_limit(),
        "ram_total_bytes": _ram_total_bytes(),
    }


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _os_release() -> str | None:
    for line in _read_text("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"') or None
    return None


# ARM parts by (implementer, part) from /proc/cpuinfo; aarch64 has no "model name".
_ARM_PARTS: dict[tuple[str, str], str] = {
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
    ("0x41", "0xd84"): "ARM Neoverse-V3",
    ("0x41", "0xd8e"): "ARM Neoverse-N3",
}


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's marketing name, e.g. ``AMD EPYC 7B13 64-Core Processor``."""
    text = _read_text("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key in ("model name", "Model Name", "cpu model", "Hardware"):
        if fields.get(key):
            return fields[key]
    implementer, part = fields.get("CPU implementer"), fields.get("CPU part")
    if implementer and part:
        return _ARM_PARTS.get((implementer, part), f"arm-{implementer}-{part}")
    return platform.processor() or platform.machine() or "unknown"


def _physical_cores(cpuinfo: str) -> tuple[int | None, int | None]:
    """(physical cores, sockets): sysfs topology first, then /proc/cpuinfo."""
    pairs: set[tuple[str, str]] = set()
    for topo in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        package = _read_text(str(topo / "physical_package_id")).strip()
        core = _read_text(str(topo / "core_id")).strip()
        if package and core:
            pairs.add((package, core))
    if not pairs:
        package = core = ""
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                package = value.strip()
            elif key == "core id":
                core = value.strip()
                pairs.add((package, core))
    if not pairs:
        return None, None
    return len(pairs), len({p for p, _ in pairs})


def _cgroup_cpu_limit() -> float | None:
    """CPUs a cgroup v2 quota allows (containers often have fewer than they can see)."""
    text = _read_text("/sys/fs/cgroup/cpu.max").split()
    if len(text) == 2 and text[0] != "max":
        try:
            return int(text[0]) / int(text[1])
        except ValueError:
            return None
    return None


def _ram_total_bytes() -> int | None:
    for line in _read_text("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            return int(parts[1]) * 1024  # reported in kB
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def python_info() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": interpreter(sys.executable),  # its name: no local path is published
        "compiler": platform.python_compiler(),
    }


def library_versions() -> dict[str, str | None]:
    """Installed distribution versions (``None``: not installed); read from metadata so
    that nothing heavy (flash_attn) is imported."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["reportgen"] = __version__
    return versions


# --------------------------------------------------------------------------------------
# torch


def _safe(read: Callable[[], Any]) -> Any:
    """A flag read that may not exist in this torch, or may warn about a new API."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = read()
    except Exception:
        return None
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def torch_info() -> dict[str, Any]:
    import torch

    b = torch.backends
    return {
        "version": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "hip_runtime": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
        "debug_build": bool(getattr(torch.version, "debug", False)),
        "cuda_available": torch.cuda.is_available(),
        "cudnn_version": _safe(lambda: b.cudnn.version()),
        "cudnn_available": _safe(lambda: b.cudnn.is_available()),
        "mkl_available": _safe(lambda: b.mkl.is_available()),
        "mkldnn_available": _safe(lambda: b.mkldnn.is_available()),
        "openmp_available": _safe(lambda: b.openmp.is_available()),
        "threads": {
            "num_threads": torch.get_num_threads(),
            "num_interop_threads": torch.get_num_interop_threads(),
            "env": {
                name: os.environ.get(name)
                # how idle OpenMP threads wait (libgomp spins, then sleeps, when unset): a
                # spinning thread that loses its core to another process stalls every
                # parallel region, which the contention readings of each pass catch
                for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY",
                             "GOMP_SPINCOUNT")
            },
        },
        "numerics": {
            "matmul_allow_tf32": _safe(lambda: b.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": _safe(lambda: b.cudnn.allow_tf32),
            "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
            # torch >= 2.9 spells TF32 control as fp32_precision; record both spellings.
            "fp32_precision": _safe(lambda: b.fp32_precision),  # type: ignore[attr-defined]
            "matmul_fp32_precision": _safe(lambda: b.cuda.matmul.fp32_precision),
            "cudnn_fp32_precision": _safe(lambda: b.cudnn.fp32_precision),
            "matmul_allow_fp16_reduced_precision_reduction": _safe(
                lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction
            ),
            "matmul_allow_bf16_reduced_precision_reduction": _safe(
                lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction
            ),
            "cudnn_benchmark": _safe(lambda: b.cudnn.benchmark),
            "cudnn_deterministic": _safe(lambda: b.cudnn.deterministic),
            "deterministic_algorithms": _safe(torch.are_deterministic_algorithms_enabled),
            "deterministic_algorithms_warn_only": _safe(
                torch.is_deterministic_algorithms_warn_only_enabled
            ),
        },
        "sdpa": {
            "flash_enabled": _safe(b.cuda.flash_sdp_enabled),
            "mem_efficient_enabled": _safe(b.cuda.mem_efficient_sdp_enabled),
            "math_enabled": _safe(b.cuda.math_sdp_enabled),
            "cudnn_enabled": _safe(lambda: b.cuda.cudnn_sdp_enabled()),
            "math_fp16_bf16_reduction_allowed": _safe(
                lambda: b.cuda.fp16_bf16_reduction_math_sdp_allowed()
            ),
            # whether this build has the kernel at all, beside whether it is enabled
            "flash_available": _safe(lambda: b.cuda.is_flash_attention_available()),
        },
    }


# --------------------------------------------------------------------------------------
# GPUs


def gpu_info(nvml_raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """torch's view of each visible GPU, joined with NVML's reading of the same GPU.

    NVML enumerates every GPU on the host in PCI order and ignores CUDA_VISIBLE_DEVICES,
    so GPUs are matched by (hashed) UUID, falling back to position only when both sides
    see the same number of GPUs.
    """
    import torch

    readings = nvml.assemble(nvml_raw)
    reason = nvml_raw.get("error") or "no NVML reading matched this GPU"
    if not torch.cuda.is_available():
        # A CPU-only torch on a GPU host: record the GPUs, they are still part of the host.
        return [dict(r, cuda_index=None) for r in readings]
    count = torch.cuda.device_count()
    by_uuid = {r["uuid_sha256"]: r for r in readings if r.get("uuid_sha256")}
    gpus: list[dict[str, Any]] = []
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        uuid_sha = nvml.uuid_hash(str(uuid)) if uuid is not None else None
        reading = by_uuid.get(uuid_sha) if uuid_sha else None
        if reading is None and len(readings) == count:
            reading = readings[index]
        merged = dict(reading) if reading is not None else nvml.null_reading(reason)
        merged.update(
            {
                "cuda_index": index,
                "nvml_index": merged.pop("index", None),
                "name": props.name,
                "uuid_sha256": uuid_sha or merged.get("uuid_sha256"),
                "compute_capability": f"{props.major}.{props.minor}",
                "multi_processor_count": props.multi_processor_count,
                "cuda_memory_bytes": int(props.total_memory),
                "l2_cache_bytes": getattr(props, "L2_cache_size", None),
            }
        )
        if merged.get("memory_total_bytes") is None:
            merged["memory_total_bytes"] = int(props.total_memory)
        gpus.append(merged)
    return gpus


def device_info(device: str, host: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    if device == "cuda":
        index = torch.cuda.current_device()
        return {"type": "cuda", "index": index, "name": torch.cuda.get_device_name(index)}
    return {"type": "cpu", "index": None, "name": host.get("cpu_model")}


# --------------------------------------------------------------------------------------
# git


def git_info(path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Commit, dirty flag and branch of the checkout holding ``path`` (default: this
    package); ``None`` when it is not a git checkout or git is unavailable.

    ``dirty`` counts changes to tracked files only (``git describe --dirty``): an untracked
    file does not change what ran, and ``runs/`` itself may be untracked.
    """
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    top = _git(where, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    commit = _git(where, "rev-parse", "--verify", "--quiet", "HEAD")
    branch = _git(where, "symbolic-ref", "--quiet", "--short", "HEAD")
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
        "branch": branch,  # None when HEAD is detached
    }


def _git(where: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()


# --------------------------------------------------------------------------------------
# The record


def collect(device: str = "auto", *, nvml_raw: Mapping[str, Any] | None = None,
            probe: bool = True, before_probe: Callable[[], None] | None = None) -> dict[str, Any]:
    """The full environment record; ``nvml_raw`` replaces a live NVML read (tests). On a
    CPU it includes ``cpu_probe`` (``reportgen.profile.probe``: the CPU's attainable
    bandwidth and fp32 matmul rate for the roofline) unless ``probe`` is false;
    ``before_probe`` is called first (what else this process started must be quiet by
    then, or the probe measures its neighbours)."""
    resolved = resolve_device(device)
    raw = nvml.read_raw() if nvml_raw is None else nvml_raw
    host = host_info()
    driver = nvml.driver_info(raw)
    record = {
        "time": utc_now(fraction=False),
        "host": host,
        "python": python_info(),
        "libraries": library_versions(),
        "torch": torch_info(),
        "gpus": gpu_info(raw),
        "driver": driver,
        "device": device_info(resolved, host),
        "git": git_info(),
        "environment_variables": filter_environment(),
    }
    if resolved == "cpu" and probe:
        from reportgen.profile.probe import cpu_probe

        if before_probe is not None:
            before_probe()
        record["cpu_probe"] = cpu_probe()
    scrubbed: dict[str, Any] = scrub_hostname(record)
    return scrubbed


# --------------------------------------------------------------------------------------
# Hardware slug

_SLUG_NOISE = re.compile(
    r"\((?:r|tm)\)|\b(?:cpu|processor|\d+-core)\b|@\s*[\d.]+\s*ghz", re.IGNORECASE
)
SLUG_MAX = 60


def slugify(text: str, limit: int = SLUG_MAX) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "unknown"


def hardware_slug(environment: Mapping[str, Any]) -> str:
    """A stable directory name for the hardware a run measured, e.g. ``nvidia-h200-1x``
    or ``cpu-amd-epyc-7b13-2c``; follows the measured device, not everything installed."""
    device = (environment.get("device") or {}).get("type")
    # GPUs torch could not see (cuda_index None) were not measured.
    gpus = [g for g in environment.get("gpus") or [] if g.get("cuda_index", 0) is not None]
    if device == "cuda" and gpus:
        counts: dict[str, int] = {}
        for gpu in gpus:
            name = str(gpu.get("name") or "gpu")
            counts[name] = counts.get(name, 0) + 1
        return slugify("-".join(f"{name}-{n}x" for name, n in counts.items()))
    host = environment.get("host") or {}
    model = _SLUG_NOISE.sub(" ", str(host.get("cpu_model") or "unknown"))
    cores = host.get("usable_cores") or host.get("logical_cores") or 0
    suffix = f"-{cores}c"
    return f"cpu-{slugify(model, SLUG_MAX - 4 - len(suffix))}{suffix}"
