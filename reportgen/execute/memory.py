"""Memory as the supervisor sees it: the host's, and the memory cgroup a worker runs in.

A worker killed by SIGKILL is most often the kernel's OOM killer. Two places say so: the
host's memory in use while it ran (sampled by the supervisor, since it is freed the
moment the worker dies), and, where the worker runs in a memory cgroup (a Slurm job, a
container), the cgroup's own OOM-kill counter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GIB = 1024**3


def host_memory(meminfo: str | None = None) -> tuple[int, int] | None:
    """(bytes in use, total bytes) of the host: MemTotal - MemAvailable."""
    try:
        text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024
    if "MemTotal" not in values or "MemAvailable" not in values:
        return None
    return values["MemTotal"] - values["MemAvailable"], values["MemTotal"]


@dataclass(frozen=True)
class MemoryCgroup:
    """A process's memory cgroup: its directory, limit (None: unlimited), OOM kills so far
    and how often its usage has hit the limit (v1 ``memory.failcnt``, v2 ``max`` events).

    The kernel's OOM-kill counter does not always move for a kill its log files under the
    cgroup (seen on 6.18 with cgroup v1, under load), so a SIGKILL after the usage hit the
    limit is read as out of memory too."""

    path: Path
    version: int
    limit_bytes: int | None
    oom_kills: int | None
    limit_hits: int | None = None


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max" (v2 unlimited)
    value = int(text)
    return None if value >= 1 << 60 else value  # v1 says "unlimited" with a huge number


def _event(path: Path, name: str, wanted: str) -> int | None:
    try:
        lines = (path / name).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(" ")
        if key == wanted and value.strip().isdigit():
            return int(value)
    return None


def _oom_kills(path: Path, version: int) -> int | None:
    return _event(path, "memory.events" if version == 2 else "memory.oom_control", "oom_kill")


def _limit_hits(path: Path, version: int) -> int | None:
    if version == 2:
        return _event(path, "memory.events", "max")
    return _number(path / "memory.failcnt")


def _read(path: Path, version: int, limit: int | None) -> MemoryCgroup:
    return MemoryCgroup(path, version, limit, _oom_kills(path, version), _limit_hits(path, version))


def _mounted(mount: Path, path: str) -> list[Path]:
    """Where ``path`` (as /proc/<pid>/cgroup names it) lies under ``mount``: in a container
    the mount's root is often the container's own cgroup, so leading parts are dropped."""
    parts = [part for part in path.split("/") if part]
    return [mount.joinpath(*parts[i:]) for i in range(len(parts) + 1)]


def memory_cgroup(pid: int | str = "self", *, proc: Path = Path("/proc"),
                  root: Path = CGROUP_ROOT) -> MemoryCgroup | None:
    """The memory cgroup of ``pid`` (v1 ``memory`` hierarchy, else the v2 unified one)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    candidates = []
    if v1 is not None:
        candidates += [(base, 1) for base in _mounted(root / "memory", v1)]
    if v2 is not None:
        candidates += [(base, 2) for base in [*_mounted(root, v2), *_mounted(root / "unified", v2)]]
    for base, version in candidates:
        limit_file = base / ("memory.max" if version == 2 else "memory.limit_in_bytes")
        if limit_file.is_file():
            return _read(base, version, _number(limit_file))
    return None


def follow(current: MemoryCgroup | None, pid: int | str, alive: Callable[[], bool], *,
           proc: Path = Path("/proc"), root: Path = CGROUP_ROOT) -> MemoryCgroup | None:
    """The memory cgroup to hold a running worker to: the one it is in now, if it moved (a
    job step, a container). The reading counts only if the worker is still alive after it:
    a dead, unreaped worker's /proc entry names the hierarchy's root, and its OOM kill
    would then be looked for in the wrong place. ``alive`` alone is not enough for a worker
    that a fork server reaps, which reports the death a while after it: the worker's own
    state must not be a zombie's either."""
    seen = memory_cgroup(pid, proc=proc, root=root)
    if seen is None or not alive() or not _running(pid, proc) or (
            current is not None and seen.path == current.path):
        return current
    return seen


PF_EXITING = 0x4  # the kernel's task flag, set before an exiting task leaves its cgroup


def _running(pid: int | str, proc: Path) -> bool:
    """Whether ``pid`` exists and is not exiting: its state in /proc/<pid>/stat (the field
    after the command name) is not Z or X, and its flags (the seventh field after it) lack
    PF_EXITING. A task the OOM killer ended shows the hierarchy's root as its cgroup while
    it exits, still in state R or D (seen on 6.18 with cgroup v1)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    return not (len(fields) > 6 and fields[6].isdigit() and int(fields[6]) & PF_EXITING)


def refresh(cgroup: MemoryCgroup) -> MemoryCgroup:
    """The same cgroup read again (its OOM-kill counter after the worker died)."""
    return _read(cgroup.path, cgroup.version, cgroup.limit_bytes)
