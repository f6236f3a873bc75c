"""Measuring one suite across torch and transformers releases (``reportgen history``).

Each release set is measured in a virtual environment of its own with exactly those
versions, kept in a cache directory (``~/.cache/reportgen/history`` unless
``XDG_CACHE_HOME`` says otherwise) and reused:

- ``torch-<version>/``: one per torch release: torch and the measuring side's other
  packages (pandas, pyarrow, rich, PyYAML, numpy). A CUDA build of torch is installed
  without its ``nvidia-*`` dependencies (``--no-deps`` and torch's own pure-Python
  ones): on a CPU host torch imports and runs without them, and they are most of the
  gigabytes.
- ``<torch>-<transformers>/``: one per release set: transformers and its dependencies,
  with the torch environment's packages behind its own (a ``.pth`` file), so five
  transformers releases share one torch.

An environment is built under ``<name>.partial`` and renamed when it imports with the
asked-for versions, so a half-built one is never reused. Each release set's suite is
measured by the project's workers run by that environment's interpreter
(``execute.fresh``: ``python=``), reportgen itself from this source tree; its run is a
series of its own that names its release set (``reportgen.records.releases``). A release that
cannot be installed or started is one line, and the rest go on; a combination an old
release cannot build is recorded ``skipped`` with the reason, as in any run. Rerunning
resumes: finished runs are left as they are (and their environments neither built nor
installed: ``complete_run``), environments are reused.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from reportgen.errors import UserError
from reportgen.execute import fresh
from reportgen.records.releases import ReleaseSet, public

# what the measuring side imports besides torch and transformers
PROFILE_PACKAGES = ("numpy", "pandas", "pyarrow", "rich", "PyYAML")
# torch's own pure-Python dependencies (its CUDA libraries are left out: see the docstring)
TORCH_PURE_DEPS = ("filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec")
INSTALL_TIMEOUT_S = 1800.0
INDEX_TIMEOUT_S = 120.0
READY = ".ready"
PTH = "zz-reportgen-torch.pth"


class InstallError(RuntimeError):
    """A release could not be installed (one line: which, and why)."""


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/reportgen/history``, else ``~/.cache/reportgen/history``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(base) / "reportgen" / "history").resolve()


def site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def interpreter_of(prefix: Path) -> Path:
    return prefix / "bin" / "python"


def torch_env(cache: Path, torch: str) -> Path:
    return cache / f"torch-{torch}"


def release_env(cache: Path, release: ReleaseSet) -> Path:
    return cache / release.name


Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL, check=False)


def _last_error(output: str) -> str:
    """The line of pip's output that says why (``ERROR: ...``), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[0 if errors else -1][:300]


def index_versions(package: str, *, run: Runner = _run) -> list[str] | None:
    """The versions of ``package`` on the package index pip is configured with, or None
    where it cannot be read (no network, no index)."""
    try:
        done = run([sys.executable, "-m", "pip", "index", "versions", package], INDEX_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Available versions:\s*(.+)", done.stdout or "")
    if done.returncode != 0 or not match:
        return None
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


@dataclass
class Built:
    """What building an environment cost: its size on disk and the seconds it took
    (both None where it already existed)."""

    prefix: Path
    python: Path
    seconds: float | None = None
    megabytes: float | None = None
    notes: list[str] = field(default_factory=list)


def _size_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 1e6


def _venv(prefix: Path, run: Runner) -> None:
    done = run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], 300.0)
    if done.returncode != 0:
        raise InstallError(f"could not create a virtual environment at {prefix}: {_last_error(done.stderr)}")


def _pip(prefix: Path, args: Sequence[str], what: str, run: Runner) -> None:
    argv = [sys.executable, "-m", "pip", "--python", str(interpreter_of(prefix)), "install",
            "--quiet", "--disable-pip-version-check", *args]
    try:
        done = run(argv, INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what}: pip did not finish within {INSTALL_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise InstallError(f"{what}: {_last_error((done.stderr or '') + (done.stdout or ''))}")


def _versions(python: Path) -> dict[str, Any]:
    """The torch and transformers versions ``python`` imports (``fresh.interpreter``)."""
    try:
        return fresh.interpreter(str(python))
    except fresh.StartError as exc:
        raise InstallError(str(exc)) from None


def import_torch() -> str:
    """Import torch and run one operation (in the environment's fresh process): a CUDA
    build missing a library it links against fails here, not in the measurement."""
    import torch

    torch.ones(2).add(1)
    return str(torch.__version__)


def _imports(python: Path) -> str | None:
    """Why ``python`` cannot import torch and run one operation, or None where it can."""
    result = fresh.run(import_torch, python=str(python), timeout_s=600.0)
    return None if result.ok else str(result.reason)


def _finish(partial: Path, final: Path) -> None:
    (partial / READY).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)


def ensure_torch(cache: Path, torch: str, *, run: Runner = _run, log: Callable[[str], None] = print) -> Built:
    """The environment of one torch release (built once, then reused)."""
    final = torch_env(cache, torch)
    if (final / READY).is_file():
        return Built(final, interpreter_of(final))
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log(f"installing torch {torch} into {final}")
    _venv(partial, run)
    # torch alone first: a CUDA build's nvidia-* libraries are not needed to run on the CPU
    _pip(partial, ["--no-deps", f"torch=={torch}"], f"torch {torch}", run)
    _pip(partial, [*TORCH_PURE_DEPS, *PROFILE_PACKAGES], f"torch {torch}'s dependencies", run)
    why = _imports(interpreter_of(partial))
    if why is not None:
        # a build linked against its CUDA libraries: they are needed to import it, even here
        log(f"torch {torch} does not import without its dependencies ({why}); installing them")
        _pip(partial, [f"torch=={torch}"], f"torch {torch} with its dependencies", run)
        why = _imports(interpreter_of(partial))
        if why is not None:
            raise InstallError(f"torch {torch} does not import: {why}")
    found = _versions(interpreter_of(partial))
    if public(str(found.get("torch") or "")) != torch:
        raise InstallError(f"torch {torch}: the environment imports torch {found.get('torch')}")
    built = Built(final, interpreter_of(final), time.monotonic() - t0, _size_mb(partial))
    _finish(partial, final)
    return built


def ensure_release(cache: Path, release: ReleaseSet, *, run: Runner = _run,
                   log: Callable[[str], None] = print) -> Built:
    """The environment of one release set: transformers in its own, torch and the rest
    from the torch release's environment behind it."""
    final = release_env(cache, release)
    if (final / READY).is_file():
        return Built(final, interpreter_of(final))
    torch = ensure_torch(cache, release.torch, run=run, log=log)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    t0 = time.monotonic()
    log(f"installing transformers {release.transformers} (with torch {release.torch}) into {final}")
    _venv(partial, run)
    site = site_packages(partial)
    site.mkdir(parents=True, exist_ok=True)
    # the torch environment's packages, after this one's own: a .pth line is appended to sys.path
    (site / PTH).write_text(f"{site_packages(torch.prefix)}\n")
    _pip(partial, [f"transformers=={release.transformers}"], f"transformers {release.transformers}", run)
    found = _versions(interpreter_of(partial))
    got = (public(str(found.get("torch") or "")), public(str(found.get("transformers") or "")))
    if got != (release.torch, release.transformers):
        raise InstallError(f"{release.label}: the environment imports torch {got[0]}, transformers {got[1]}")
    built = Built(final, interpreter_of(final), time.monotonic() - t0, _size_mb(partial),
                  notes=[f"torch {release.torch}: built in {torch.seconds:.0f} s, {torch.megabytes:.0f} MB"]
                  if torch.seconds is not None and torch.megabytes is not None else [])
    _finish(partial, final)
    return built


def collect_environment(python: Path, device: str = "cpu", timeout_s: float = 300.0) -> dict[str, Any]:
    """The environment record of a run measured by ``python`` (``profile.env.collect``
    asked in a fresh process of that interpreter: its torch and transformers)."""
    result = fresh.run("reportgen.profile.env:collect", {"device": device}, python=str(python),
                       timeout_s=timeout_s)
    if not result.ok:
        raise InstallError(f"{python}: could not describe its environment: {result.reason}")
    return dict(result.value)


@cache
def this_hardware(device: str) -> str | None:
    """The hardware directory a run of ``device`` on this host is stored under, read in this
    process (a CPU's from the processor and the cores this process may use, without torch);
    None where it cannot be read here (then nothing counts as already measured)."""
    from reportgen.profile import env

    try:
        if device == "cpu":
            return env.hardware_slug({"device": {"type": "cpu"}, "host": env.host_info()})
        return env.hardware_slug(env.collect(device, probe=False))
    except (ImportError, OSError, RuntimeError, AssertionError, UserError):
        return None


def complete_run(out: Path, hardware: str | None, suite: Any, release: ReleaseSet) -> str | None:
    """The id of the release set's run of ``suite`` under ``out`` when it holds a record of
    every combination (a resume would measure nothing, so its environment need not be built
    or installed); None while anything is left to measure."""
    from reportgen.execute.plan import todo
    from reportgen.records.releases import run_base
    from reportgen.records.store import RunStore

    if hardware is None:
        return None
    store = RunStore(out, hardware, suite, base=run_base(suite.name, suite.hash, release.as_dict()))
    if store.read_run() is None or todo(store, suite.combinations()):
        return None
    return store.run_id
