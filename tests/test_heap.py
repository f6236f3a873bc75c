"""The steady host heap: freed memory stays in the process, so repeated large tensors
stop page-faulting; a user's own allocator settings are left alone."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from reportgen.profile import heap

ROOT = Path(__file__).resolve().parents[1]
FAULTS = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
import torch
from reportgen.profile import heap
held = heap.steady() if sys.argv[2] == "steady" else None
def once():
    if sys.argv[3] == "big":
        return float(torch.ones(1 << 24)[-1])  # one 64 MiB block
    # eight 1 MiB tensors, freed together, like a forward's temporaries: by default glibc's
    # moving thresholds put them on the heap and trim the heap when they are freed
    xs = [torch.ones(1 << 18) for _ in range(8)]
    return float(sum(x[0] for x in xs))
for _ in range(10 if sys.argv[3] == "big" else 3):  # the heap settles within a few big blocks
    once()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    once()
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"faults_per_iteration": (after - before) / 20, "held": held}))
"""


def _faults(mode: str, *, big: bool = False) -> dict:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", FAULTS, str(ROOT), mode, "big" if big else "small"],
                         capture_output=True,
                         text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_steady_heap_stops_repeated_tensors_from_page_faulting() -> None:
    default, steady = _faults("default"), _faults("steady")
    # 8 MiB a round in 4 KiB pages is ~2,000 faults when the blocks go back to the kernel
    # (fewer where glibc's moving thresholds keep some of them, as on a loaded host)
    assert default["faults_per_iteration"] > 200, default
    assert steady["faults_per_iteration"] < 50, steady
    assert default["faults_per_iteration"] > 10 * max(steady["faults_per_iteration"], 1.0)
    assert steady["held"] == {"allocator": "glibc, freed memory kept",
                              "mmap_threshold_bytes": 32 * 1024**2,
                              "trim_threshold_bytes": 2**31 - 1, "top_pad_bytes": 256 * 1024**2,
                              "mmap_max_blocks": 0}


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_steady_heap_keeps_blocks_larger_than_any_mmap_threshold() -> None:
    # a 64 MiB block (a training step's embedding gradient is 94 MB for bert-base) is over
    # glibc's largest threshold: by default it is mapped and unmapped, faulting in every page
    default, steady = _faults("default", big=True), _faults("steady", big=True)
    pages = 64 * 1024**2 // 4096
    assert default["faults_per_iteration"] > pages / 2, default
    assert steady["faults_per_iteration"] < 50, steady


def test_the_users_allocator_settings_are_left_alone() -> None:
    held = heap.steady({"MALLOC_ARENA_MAX": "2", "HOME": "/root"})
    assert held == {"allocator": "as the environment set it", "environment": {"MALLOC_ARENA_MAX": "2"}}
    held = heap.steady({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"})
    assert held["environment"] == {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
@pytest.mark.parametrize("mmap", [False, True])
def test_the_fault_script_reports_both_steps_under_the_heap_it_says(mmap: bool) -> None:
    script = ROOT / "scripts" / "ablation_faults.py"
    argv = [sys.executable, str(script), "bert-base", "--scale", "tiny", "--seq-len", "32",
            "--pairs", "2", "--warmup", "2", *(["--mmap"] if mmap else [])]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["combination"].startswith("bert-base--train--fp32--eager--b1--s32")
    assert got["heap"]["mmap_max_blocks"] == (65536 if mmap else 0)
    for name in ("full", "stand_in"):
        assert got[name]["median_ms"] > 0 and len(got[name]["faults"]) == 2
    # a tiny model has no block over 32 MiB: once warm, neither step faults much
    assert got["full"]["median_faults"] < 100, got
    assert -1 < got["median_drop"] < 1
