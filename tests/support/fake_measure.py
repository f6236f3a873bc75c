"""A measure function that workers can import (``support.fake_measure:measure``), for tests.

What it does for each combination comes from environment variables the test sets before
the workers start:

* ``REPORTGEN_FAKE_LOG``: a file each call appends ``<pid> <combo id>`` to;
* ``REPORTGEN_FAKE_PLAN``: JSON ``{combo id or "*": behaviour}``, a behaviour being
  ``ok`` (the golden record's sections), ``skip``, ``error``, ``oom`` (a clean CUDA
  out-of-memory), ``poison`` (an illegal memory access), ``kill`` (SIGKILL to itself),
  ``segfault`` (SIGSEGV), ``hang`` (sleeps for an hour), ``alloc:<cgroup dir>`` (joins that memory
  cgroup, then allocates until the kernel's OOM killer ends it) or ``sleep:<seconds>``.

The functions after ``preflight`` are calls for ``execute.fresh.run``, one per way a call
in a fresh process can end.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from reportgen.errors import Skip
from reportgen.records.schema import SECTIONS

# a complete ok record of the current schema (tests/data/schema/v1/)
GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "data" / "schema" / "v1" / "combination-ok.json")
                    .read_text())


def behaviour(combo_id: str) -> str:
    plan = json.loads(os.environ.get("REPORTGEN_FAKE_PLAN", "{}"))
    return str(plan.get(combo_id, plan.get("*", "ok")))


def measure(combo: Any, *, run_dir: Path, combo_id: str, budget_s: float, seed: int,
            profile_iterations: int, profiled: bool = True, converge: bool = True,
            target_rel_halfwidth: float | None = None, gpu_index: int | None = None,
            round_of_several: bool = False) -> dict[str, Any]:
    assert combo_id == combo.id and Path(run_dir).is_dir() and budget_s > 0 and profile_iterations >= 1
    log = os.environ.get("REPORTGEN_FAKE_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()} {combo_id}\n")
    what = behaviour(combo_id)
    print(f"fake measure: {combo_id}: {what}", flush=True)
    if what.startswith("sleep:"):
        time.sleep(float(what.split(":", 1)[1]))
    elif what == "skip":
        raise Skip(f"{combo.model} cannot run {combo.mode} here")
    elif what == "error":
        raise ValueError("a bug in one combination")
    elif what == "oom":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    elif what == "poison":
        raise RuntimeError("CUDA error: an illegal memory access was encountered\n"
                           "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    elif what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == "hang":
        time.sleep(3600)
    elif what.startswith("alloc"):
        hoard(what.split(":", 1)[1] if ":" in what else None)
    sections = {name: GOLDEN[name] for name in SECTIONS}
    sections["timing"] = {**GOLDEN["timing"], "budget_s": budget_s}
    if not converge:
        # what the real timing pass records when it has no target (a round of several)
        sections["timing"].update(target_rel_halfwidth=None, stop_reason="budget")
    if not profiled:
        return {name: sections[name] for name in ("model", "inputs", "timing")}
    return sections


def preflight(combo: Any, device: str, reusable_bytes: int = 0) -> dict[str, Any]:
    """A pre-flight that skips what the plan marks ``too-big``."""
    section = {"estimate_bytes": 1024, "available_bytes": 2048, "fits": True}
    if behaviour(combo.id) == "too-big":
        exc = Skip("needs ~27.0 GiB, 21.9 GiB available")
        exc.preflight = {**section, "estimate_bytes": 27 * 1024**3, "fits": False}  # type: ignore[attr-defined]
        raise exc
    return section


def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b, "pid": os.getpid()}


def fail() -> None:
    raise ValueError("a bug in the measurement\nsecond line")


def die(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(60)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def allocate(gib: float) -> int:
    return len(bytearray(int(gib * 1024**3)))


def hoard(cgroup: str | None = None) -> None:
    """Allocate until killed; in ``cgroup`` (a memory cgroup the test made with a limit) if given."""
    if cgroup is not None:
        with open(Path(cgroup) / "cgroup.procs", "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(3.0)  # the parent sees the move before the kill
    held = []
    while True:
        held.append(bytearray(256 * 1024 * 1024))


def measure_and_die() -> None:
    print("about to die", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
