"""What the process got while it measured: contention detected, not averaged in.

A timed loop on a shared host loses time to other processes in ways its own samples
cannot tell apart from a slow model: a thread of a parallel region descheduled for a
time slice stalls every region it belongs to (a 6 ms forward reads 180 ms). So around
each timed pass the host's counters are read before and after:

* the CPU time the busy CPUs spent, per CPU this process may run on (``/proc/stat``:
  user, nice, system, irq, softirq, and steal: time a hypervisor gave to another guest),
* this process's own CPU time (``getrusage``: all its threads) and its involuntary
  context switches (a thread taken off its core while it still had work).

What the CPUs spent beyond this process's own time is other processes' work. It steals
from the measurement when it exceeds the cores this process leaves idle: ``threads``
cores are this process's (``torch.get_num_threads()`` on a CPU, one host thread feeding
a GPU), the rest of the CPUs it may run on are spare. ``/proc/stat`` counts in clock
ticks, so the others' time is taken at its lower bound (one tick per CPU less) and a
window too short to resolve a quarter of a core is judged on nothing.

On a GPU the same question is asked of the device (``gpu_contention``): another process
with a context on it, or a clock held down by a thermal or power limit during the pass.

Pure standard library: the readers take their files and clocks as arguments, so every
rule is tested on recorded readings.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# other processes may use this many cores beyond the spare ones before a pass counts as
# contended: the host's own housekeeping (a few percent of a core) never counts
ALLOWANCE_CORES = 0.25
TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system irq softirq (iowait and idle: not busy)
_STEAL_FIELD = 7


@dataclass(frozen=True)
class HostCounters:
    """One reading: busy and stolen ticks summed over ``cpus``, this process's CPU
    seconds and involuntary switches, and the wall clock."""

    busy_ticks: int
    steal_ticks: int
    self_cpu_s: float
    involuntary: int
    wall_s: float
    cpus: int


def parse_proc_stat(text: str, cpus: Iterable[int] | None = None) -> tuple[int, int, int]:
    """(busy ticks, steal ticks, number of CPUs) from ``/proc/stat``, over the CPUs in
    ``cpus`` (all listed CPUs when None or when none of them is listed)."""
    wanted = set(cpus) if cpus is not None else None
    busy = steal = count = 0
    rows: list[tuple[int, list[int]]] = []
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            index = int(name[3:])
            values = [int(v) for v in rest.split()]
        except ValueError:
            continue
        rows.append((index, values))
    if wanted is not None and not any(index in wanted for index, _ in rows):
        wanted = None  # a container's affinity numbering the host's stat does not use
    for index, values in rows:
        if wanted is not None and index not in wanted:
            continue
        count += 1
        busy += sum(values[i] for i in _BUSY_FIELDS if i < len(values))
        steal += values[_STEAL_FIELD] if len(values) > _STEAL_FIELD else 0
    return busy, steal, count


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def read_host(stat_path: str = "/proc/stat", cpus: Iterable[int] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> HostCounters | None:
    """This moment's counters, or None where ``/proc/stat`` cannot be read (not Linux)."""
    try:
        with open(stat_path, encoding="ascii") as handle:
            text = handle.read()
    except OSError:
        return None
    busy, steal, count = parse_proc_stat(text, _affinity() if cpus is None else cpus)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return HostCounters(busy_ticks=busy, steal_ticks=steal, self_cpu_s=usage.ru_utime + usage.ru_stime,
                        involuntary=int(usage.ru_nivcsw), wall_s=clock(), cpus=max(count, 1))


def tick_error_s(cpus: int, tick_s: float = TICK_S) -> float:
    """How far the ticks counted over ``cpus`` may be from the time spent: up to a tick
    per CPU, independent between CPUs (two standard deviations, at most one per CPU)."""
    return min(float(cpus), 2.0 * cpus ** 0.5) * tick_s


def min_window_s(cpus: int, tick_s: float = TICK_S, allowance: float = ALLOWANCE_CORES) -> float:
    """The shortest pass in which the ticks resolve ``allowance`` cores (0.08 s on 2
    CPUs, 0.64 s on 64): a timed pass runs at least this long (``timing.time_step``)."""
    return tick_error_s(cpus, tick_s) / allowance


def judge(before: HostCounters, after: HostCounters, *, threads: int,
          tick_s: float = TICK_S, allowance: float = ALLOWANCE_CORES) -> dict[str, Any]:
    """The reading of one pass: what other processes used, in cores, and whether that
    took cores this process needed (``contended``), with the reason in words."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    cpus = after.cpus
    busy_s = (after.busy_ticks - before.busy_ticks) * tick_s
    steal_s = (after.steal_ticks - before.steal_ticks) * tick_s
    self_s = max(after.self_cpu_s - before.self_cpu_s, 0.0)
    others_s = max(busy_s + steal_s - self_s, 0.0)
    # /proc/stat counts whole ticks on each CPU: the lower bound of what others used
    others_low = max(others_s - tick_error_s(cpus, tick_s), 0.0)
    spare = max(cpus - threads, 0)
    resolvable = wall >= min_window_s(cpus, tick_s, allowance)
    others_cores = others_s / wall
    excess = others_low / wall - spare
    contended = bool(resolvable and excess > allowance)
    out: dict[str, Any] = {
        "wall_s": round(wall, 6),
        "cpus": cpus,
        "threads": threads,
        "others_cores": round(others_cores, 4),
        "others_share": round(min(others_cores / cpus, 1.0), 4),
        "steal_share": round(min(steal_s / wall / cpus, 1.0), 4),
        "self_cores": round(self_s / wall, 4),
        "involuntary_switches": after.involuntary - before.involuntary,
        "resolvable": resolvable,
        "contended": contended,
    }
    if contended:
        out["reason"] = host_reason(out)
    return out


def host_reason(reading: Mapping[str, Any]) -> str:
    share = 100.0 * float(reading.get("others_share") or 0.0)
    steal = 100.0 * float(reading.get("steal_share") or 0.0)
    if steal >= share / 2 and steal > 0:
        return f"the hypervisor gave {steal:.0f}% of the CPU to other guests"
    return f"another process used {share:.0f}% of the CPU"


class HostSampler:
    """``start()`` before a pass, ``stop()`` after it: the pass's reading (``judge``), or
    None where the host's counters cannot be read."""

    def __init__(self, threads: int, *, read: Callable[[], HostCounters | None] = read_host) -> None:
        self.threads = max(int(threads), 1)
        self.read = read
        self.before: HostCounters | None = None

    @property
    def min_window_s(self) -> float:
        """How long a pass must run for its reading to judge anything (``min_window_s``
        at the CPUs this process may run on, with a margin)."""
        cpus = len(_affinity() or ()) or os.cpu_count() or 1
        return 2.0 * min_window_s(cpus)

    def start(self) -> None:
        self.before = self.read()

    def stop(self) -> dict[str, Any] | None:
        after = self.read()
        if self.before is None or after is None:
            return None
        return judge(self.before, after, threads=self.threads)


def host_threads(device_type: str) -> int:
    """The cores a measurement of this device occupies: torch's intra-op threads on a
    CPU, the one host thread that launches work on a GPU."""
    if device_type != "cpu":
        return 1
    import torch

    return int(torch.get_num_threads())


def gpu_contention(snapshots: Iterable[Mapping[str, Any]], own_pids: Iterable[int]) -> dict[str, Any]:
    """The device's side of a pass from NVML snapshots taken around it
    (``nvml.snapshot``: ``throttled``, ``throttle_reasons`` decoded, ``sm_clock_mhz``;
    plus ``processes``, the pids with a compute context on the device): another process
    on the device, or clocks held back by a power, thermal or hardware limit."""
    from reportgen.profile.nvml import NOT_THROTTLING

    own = {int(p) for p in own_pids}
    others: set[int] = set()
    throttled: set[str] = set()
    clocks: list[float] = []
    for snap in snapshots:
        for pid in snap.get("processes") or ():
            if int(pid) not in own:
                others.add(int(pid))
        if snap.get("throttled"):
            throttled.update(r for r in snap.get("throttle_reasons") or () if r not in NOT_THROTTLING)
        if snap.get("sm_clock_mhz") is not None:
            clocks.append(float(snap["sm_clock_mhz"]))
    reasons = []
    if others:
        reasons.append(f"{len(others)} other process{'es' if len(others) > 1 else ''} ran on the GPU")
    if throttled:
        reasons.append("the GPU's clocks were held back (" + ", ".join(sorted(throttled)) + ")")
    out: dict[str, Any] = {"other_processes": sorted(others), "throttle": sorted(throttled),
                           "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
                           "contended": bool(reasons)}
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out


class GpuSampler:
    """NVML snapshots of the measured GPU at the start and end of a pass
    (``gpu_contention``); reads nothing where NVML is missing."""

    def __init__(self, index: int | None, pynvml_module: Any = None) -> None:
        self.index = index
        self.pynvml_module = pynvml_module
        self.snaps: list[dict[str, Any]] = []

    def _snap(self) -> None:
        if self.index is None:
            return
        from reportgen.profile import nvml

        try:
            snap = dict(nvml.snapshot(self.index, self.pynvml_module))
        except Exception:  # noqa: BLE001
            return
        snap["processes"] = nvml.compute_processes(self.index, self.pynvml_module)
        self.snaps.append(snap)

    def start(self) -> None:
        self.snaps = []
        self._snap()

    def stop(self) -> dict[str, Any] | None:
        self._snap()
        if not self.snaps or all(s.get("throttled") is None and s.get("processes") is None for s in self.snaps):
            return None
        return gpu_contention(self.snaps, [os.getpid()])


class PassSampler:
    """The host and, on a GPU, the device around one pass: ``merge`` of both readings."""

    def __init__(self, device_type: str, gpu_index: int | None = None) -> None:
        self.host = HostSampler(host_threads(device_type))
        self.gpu = GpuSampler(gpu_index) if device_type == "cuda" else None

    @property
    def min_window_s(self) -> float:
        return self.host.min_window_s

    def start(self) -> None:
        self.host.start()
        if self.gpu is not None:
            self.gpu.start()

    def stop(self) -> dict[str, Any] | None:
        gpu = self.gpu.stop() if self.gpu is not None else None
        return merge(self.host.stop(), gpu)


def merge(host: Mapping[str, Any] | None, gpu: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """One pass's reading from its host and device sides."""
    if host is None and gpu is None:
        return None
    out: dict[str, Any] = dict(host or {})
    if gpu is not None:
        out["gpu"] = dict(gpu)
        if gpu.get("contended"):
            out["contended"] = True
            out["reason"] = "; ".join(r for r in (out.get("reason") if host and host.get("contended") else None,
                                                  gpu.get("reason")) if r)
    out.setdefault("contended", False)
    return out
