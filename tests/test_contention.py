"""Contention detected, not averaged in: the host's counters around a pass, the device's
NVML readings, and what rounds do with a contended round (left out, measured again, or
the record flagged unstable with the reason in words)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from reportgen import stats
from reportgen.execute import rounds
from reportgen.intervals import unstable_reason
from reportgen.profile import contention
from reportgen.profile.contention import HostCounters, judge
from reportgen.suite import Combination

# a 2-CPU host's /proc/stat (user nice system idle iowait irq softirq steal guest guest_nice)
PROC_STAT = """cpu  4705 0 1222 91930 35 0 120 0 0 0
cpu0 2350 0 611 45965 17 0 60 5 0 0
cpu1 2355 0 611 45965 18 0 60 7 0 0
intr 1199208 19 0 0
ctxt 2227391
"""


def test_proc_stat_sums_busy_and_steal_ticks_over_the_cpus_asked_for() -> None:
    assert contention.parse_proc_stat(PROC_STAT) == (2350 + 611 + 60 + 2355 + 611 + 60, 12, 2)
    assert contention.parse_proc_stat(PROC_STAT, {1}) == (2355 + 611 + 60, 7, 1)
    # a container's affinity may name CPUs the host's stat does not list: all of them count
    assert contention.parse_proc_stat(PROC_STAT, {40, 41})[2] == 2


def _pair(*, wall: float, others: float, self_cpu: float, cpus: int = 2, steal: float = 0.0,
          switches: int = 0) -> tuple[HostCounters, HostCounters]:
    """Counters around a pass of ``wall`` seconds in which other processes used
    ``others`` CPU-seconds and this one ``self_cpu``."""
    before = HostCounters(busy_ticks=1000, steal_ticks=10, self_cpu_s=5.0, involuntary=7, wall_s=100.0,
                          cpus=cpus)
    after = HostCounters(busy_ticks=1000 + round((others + self_cpu) * 100), steal_ticks=10 + round(steal * 100),
                         self_cpu_s=5.0 + self_cpu, involuntary=7 + switches, wall_s=100.0 + wall, cpus=cpus)
    return before, after


def test_a_quiet_pass_is_clean() -> None:
    reading = judge(*_pair(wall=1.0, others=0.03, self_cpu=1.9), threads=2, tick_s=0.01)
    assert reading["contended"] is False and "reason" not in reading
    assert reading["others_cores"] == pytest.approx(0.03, abs=0.011)


def test_another_process_on_a_core_this_process_needs_is_contention_with_its_share() -> None:
    reading = judge(*_pair(wall=0.5, others=0.48, self_cpu=0.5, switches=300), threads=2, tick_s=0.01)
    assert reading["contended"] is True
    assert reading["others_share"] == pytest.approx(0.48, abs=0.02)
    assert reading["reason"] == "another process used 48% of the CPU"
    assert reading["involuntary_switches"] == 300


def test_load_on_spare_cores_is_not_contention() -> None:
    # 16 CPUs, 4 threads: others using 8 cores leave 4 idle, more than this process needs
    reading = judge(*_pair(wall=1.0, others=8.0, self_cpu=4.0, cpus=16), threads=4, tick_s=0.01)
    assert reading["contended"] is False
    reading = judge(*_pair(wall=1.0, others=12.5, self_cpu=3.5, cpus=16), threads=4, tick_s=0.01)
    assert reading["contended"] is True


def test_steal_is_named_as_the_hypervisor() -> None:
    reading = judge(*_pair(wall=1.0, others=0.0, self_cpu=1.4, steal=0.6), threads=2, tick_s=0.01)
    assert reading["contended"] is True
    assert reading["reason"] == "the hypervisor gave 30% of the CPU to other guests"


def test_a_pass_too_short_for_the_ticks_judges_nothing() -> None:
    reading = judge(*_pair(wall=0.03, others=0.03, self_cpu=0.03), threads=2, tick_s=0.01)
    assert reading["resolvable"] is False and reading["contended"] is False
    assert contention.min_window_s(2, 0.01) == pytest.approx(0.08)
    assert contention.min_window_s(64, 0.01) == pytest.approx(0.64)


def test_a_real_busy_process_is_seen(tmp_path: Any) -> None:
    """Two busy processes started here (one per CPU this process may use), stopped by
    their pids: the sampler around a half-second of this process's own work sees them."""
    import os

    cpus = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        time.sleep(0.3)
        sampler = contention.HostSampler(threads=cpus)
        sampler.start()
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            pass
        reading = sampler.stop()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert reading is not None and reading["resolvable"]
    assert reading["contended"] is True, reading
    assert reading["others_cores"] > 0.5 * cpus


# the device's side, on recorded NVML snapshots ---------------------------------------------

SNAP = {"time": "2026-12-05T08:00:00Z", "sm_clock_mhz": 1980, "throttle_reasons": ["gpu_idle"], "throttled": False,
        "processes": [4242]}


def test_gpu_readings_name_other_processes_and_throttling() -> None:
    clean = contention.gpu_contention([SNAP, {**SNAP, "throttle_reasons": []}], own_pids=[4242])
    assert clean["contended"] is False and clean["sm_clock_mhz"] == [1980, 1980]
    busy = contention.gpu_contention([SNAP, {**SNAP, "processes": [4242, 77, 78]}], own_pids=[4242])
    assert busy["contended"] is True and busy["other_processes"] == [77, 78]
    assert busy["reason"] == "2 other processes ran on the GPU"
    hot = contention.gpu_contention(
        [SNAP, {**SNAP, "sm_clock_mhz": 1410, "throttled": True, "throttle_reasons": ["sw_power_cap", "gpu_idle"]}],
        own_pids=[4242])
    assert hot["reason"] == "the GPU's clocks were held back (sw_power_cap)" and hot["sm_clock_mhz"] == [1410, 1980]
    merged = contention.merge({"contended": False, "others_share": 0.01}, hot)
    assert merged is not None and merged["contended"] is True and merged["reason"] == hot["reason"]


# rounds: left out, measured again, or unstable ----------------------------------------------

COMBO = Combination("gpt2", "tiny", "forward", "fp32", "sdpa", 1, 16, "cpu")


def _round(index: int, samples: list[float], *, contended: float | None = None, profiled: bool = False,
           profile_contended: float | None = None) -> dict[str, Any]:
    def reading(share: float | None) -> dict[str, Any]:
        if share is None:
            return {"contended": False, "others_share": 0.01}
        return {"contended": True, "others_share": share, "reason": f"another process used {share:.0%} of the CPU"}

    timing = {"samples": samples, "median": sorted(samples)[len(samples) // 2], "stop_reason": "converged",
              "contention": reading(contended), "budget_s": 1.0}
    sections: dict[str, Any] = {"timing": timing}
    if profiled or profile_contended is not None:
        sections["profile"] = {"median_ms": 1.3, "contention": reading(profile_contended)}
    return {"id": COMBO.id, "round": index, "rounds": 8, "status": "ok", "started": "2026-12-05T08:00:00Z",
            "duration_s": 0.5, "sections": sections, "execution": {"worker_pid": 100 + index}}


def _clean(index: int, base: float = 1.0) -> dict[str, Any]:
    return _round(index, [base + 0.001 * k for k in range(20)], profiled=index == 0)


def test_rounds_stop_once_six_clean_rounds_are_tight() -> None:
    policy = rounds.Policy(rounds=8)
    found = {i: _clean(i) for i in range(5)}
    assert rounds.decide(rounds.Unit(COMBO, 4, 8), found, policy, pending=[5, 6, 7]) == rounds.Decision(False)
    found[5] = _clean(5)
    assert rounds.decide(rounds.Unit(COMBO, 5, 8), found, policy, pending=[6, 7]).done


def test_wide_rounds_go_on_while_more_rounds_could_narrow_the_interval() -> None:
    # two outlying rounds of six: with twelve rounds the interval could drop them
    # ([x(3), x(10)]), so the combination goes on to the most rounds
    bases = [1.0, 1.0, 1.2, 1.0, 0.8, 1.0]
    found = {i: _clean(i, base=b) for i, b in enumerate(bases)}
    policy = rounds.Policy(rounds=12)
    assert not rounds.decide(rounds.Unit(COMBO, 5, 12), found, policy, pending=range(6, 12)).done
    found.update({i: _clean(i) for i in range(6, 11)})
    found[11] = _clean(11, 1.2)
    assert rounds.decide(rounds.Unit(COMBO, 11, 12), found, policy).done
    # with eight at most the interval spans the round medians' whole range, already 40%
    # wide: rounds seven and eight could only widen it
    six = {i: found[i] for i in range(6)}
    assert rounds.decide(rounds.Unit(COMBO, 5, 8), six, rounds.Policy(rounds=8), pending=[6, 7]).done
    medians = [stats.median(r["sections"]["timing"]["samples"]) for r in six.values()]
    assert not rounds.reachable(medians, rounds.Policy(rounds=8))
    assert rounds.reachable(medians, rounds.Policy(rounds=12))
    assert rounds.reachable(medians, rounds.Policy(rounds=8, target=None))


def test_a_contended_round_is_left_out_and_measured_again_at_the_end() -> None:
    policy = rounds.Policy(rounds=8)
    found = {i: _clean(i) for i in range(3)}
    found[3] = _round(3, [30.0] * 20, contended=0.48)
    decision = rounds.decide(rounds.Unit(COMBO, 3, 8), found, policy, pending=[4, 5, 6, 7])
    assert not decision.done and decision.retry == rounds.Unit(COMBO, 8, 8)
    found.update({i: _clean(i) for i in (4, 5, 6)})
    assert rounds.decide(rounds.Unit(COMBO, 6, 8), found, policy, pending=[7, 8]).done
    sections = rounds.merged_sections(found, policy)
    timing = sections["timing"]
    assert "unstable" not in timing and timing["contended_rounds"] == 1
    assert timing["excluded_samples"] == [30.0] * 20
    assert max(timing["samples"]) < 2 and timing["ci_high"] < 1.1
    excluded = [r.get("excluded") for r in timing["rounds"]]
    assert excluded == [None] * 3 + ["another process used 48% of the CPU"] + [None] * 3


def test_too_few_clean_rounds_make_the_record_unstable_with_the_reason_in_words() -> None:
    policy = rounds.Policy(rounds=8)
    found = {i: _clean(i) for i in range(3)}
    for i, share in zip(range(3, 12), (0.5, 0.46, 0.48, 0.5, 0.5, 0.46, 0.48, 0.5, 0.5)):
        found[i] = _round(i, [30.0 + i] * 20, contended=share)
    # the retries are spent (four, after the eight planned): nothing left to try
    decision = rounds.decide(rounds.Unit(COMBO, 11, 8), found, policy)
    assert decision.done and decision.retry is None
    sections = rounds.merged_sections(found, policy)
    assert sections["timing"]["unstable"] == "another process used 49% of the CPU during 9 of 12 rounds"
    record = {"status": "ok", **sections}
    assert unstable_reason(record) == sections["timing"]["unstable"]
    # every round is in the interval: it is as wide as what was measured
    assert sections["timing"]["ci_high"] > 30


def test_a_contended_profiled_pass_is_repeated_and_the_clean_one_kept() -> None:
    policy = rounds.Policy(rounds=8)
    found = {0: _round(0, [1.0] * 20, profile_contended=0.6)}
    decision = rounds.decide(rounds.Unit(COMBO, 0, 8), found, policy, pending=range(1, 8))
    assert decision.retry == rounds.Unit(COMBO, 8, 8, reprofile=True) and decision.retry.profiled
    found.update({i: _clean(i) for i in range(1, 8)})
    # the retry is still queued: the combination waits for it
    assert not rounds.decide(rounds.Unit(COMBO, 7, 8), {**found}, policy, pending=[8]).done
    found[8] = _round(8, [1.0] * 20, profiled=True)
    found[8]["sections"]["profile"]["median_ms"] = 1.1
    assert rounds.decide(rounds.Unit(COMBO, 8, 8), found, policy).done
    profile = rounds.merged_sections(found, policy)["profile"]
    assert "unstable" not in profile and profile["median_ms"] == 1.1


def test_a_profiled_pass_never_clean_says_its_overhead_is_not_the_profilers_alone() -> None:
    found = {i: _clean(i) for i in range(1, 8)}
    found[0] = _round(0, [1.0] * 20, profile_contended=0.6)
    profile = rounds.merged_sections(found, rounds.Policy(rounds=8, retries=0))["profile"]
    assert profile["unstable"] == ("the profiled pass ran while another process used 60% of the CPU: "
                                   "its overhead is not the profiler's alone")


def test_one_round_flags_a_contended_pass() -> None:
    sections = _round(0, [1.0] * 20, contended=0.5)["sections"]
    out = rounds.single_round(sections)
    assert out["timing"]["unstable"] == "another process used 50% of the CPU while it was timed"


def test_a_timed_pass_runs_at_least_the_samplers_window() -> None:
    from reportgen.profile.timing import time_step

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()

    class Step:
        inputs_info: dict[str, Any] = {}

        def __call__(self) -> None:
            clock.now += 0.001

        def sync(self) -> None:
            pass

        def reset(self) -> None:
            pass

    class Timer:
        method = "fake"

        def time(self, step: Any) -> float:
            step()
            return 1.0

    class Sampler:
        min_window_s = 0.25

        def start(self) -> None:
            pass

        def stop(self) -> dict[str, Any]:
            return {"contended": False}

    out = time_step(Step(), budget_s=5.0, timer=Timer(), wall=clock, sampler=Sampler(), max_warmup_s=0.01)
    assert out["stop_reason"] == "converged" and out["n"] >= 250 and out["contention"] == {"contended": False}
    plain = time_step(Step(), budget_s=5.0, timer=Timer(), wall=clock, max_warmup_s=0.01)
    assert plain["n"] < 50


def test_the_gpu_sampler_reads_nvml_around_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler's NVML path on recorded readings: a snapshot and the device's process
    list before and after the pass (a fake pynvml answers what a driver answered)."""
    import os
    import types

    from reportgen.profile import nvml

    calls: list[str] = []
    # another process's pid: never this one's (a fixed pid is this worker's own now and then
    # on a fresh machine, and the sampler rightly leaves its own process out)
    other = os.getpid() + 1
    listed = iter([[os.getpid()], [os.getpid(), other]])
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda index: ("handle", index),
        nvmlDeviceGetComputeRunningProcesses=lambda handle: [types.SimpleNamespace(pid=p) for p in next(listed)])
    snaps = iter([SNAP, {**SNAP, "sm_clock_mhz": 1755}])

    def snapshot(index: int, pynvml_module: object = None) -> dict[str, object]:
        assert pynvml_module is fake  # the sampler's module reaches every reading
        return dict(next(snaps))

    monkeypatch.setattr(nvml, "snapshot", snapshot)
    sampler = contention.GpuSampler(1, pynvml_module=fake)
    sampler.start()
    reading = sampler.stop()
    assert reading is not None and reading["contended"] is True
    assert reading["other_processes"] == [other] and reading["sm_clock_mhz"] == [1755, 1980]
    assert calls == ["init", "shutdown", "init", "shutdown"]
    # no NVML at all: the device side reads nothing, and the pass is judged on the host
    monkeypatch.setattr(nvml, "snapshot", lambda index, pynvml_module=None: {"throttled": None})
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert nvml.compute_processes(0) is None
    quiet = contention.GpuSampler(0)
    quiet.start()
    assert quiet.stop() is None
