"""Shared pieces of the measuring bench modules (profile side: torch is imported lazily).

Interleaving (``interleave``, from ``reportgen.paired``): every comparison alternates its
variants within one process, in ABBA order, so slow drift of the host falls on both sides
alike; the rounds stay paired for the bootstrap in ``stats.bootstrap_ratio``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar


def build(combo: Any, device: str = "cpu") -> Any:
    """``reportgen.profile.building.build`` in eval mode, with the garbage of the previous model gone."""
    from reportgen.profile import building

    gc.collect()
    return building.build(combo, device)


def cpu_combo(model: str, *, scale: str, mode: str = "forward", attn: str = "sdpa",
              seq_len: int = 32) -> Any:
    """One fp32 CPU combination at batch 1."""
    from reportgen.suite import Combination

    return Combination(model=model, scale=scale, mode=mode, dtype="fp32",
                       attn_implementation=attn, batch_size=1, seq_len=seq_len, device="cpu")


def profile_pass(built: Any, roles: Any, iterations: int, trace_dir: Path, name: str) -> dict[str, Any]:
    """reportgen's profiled pass over a built model (``roles``: its modules' roles, as
    `structure.derive` gives them to a measurement: its ``labels``), its trace to
    ``trace_dir/<name>``."""
    from reportgen.profile import profiling

    return profiling.profile_step(built.step, built.model, iterations=iterations,
                                  trace_path=trace_dir / f"{name}.trace.json.gz", labels=roles)


def build_frozen(model: str, *, scale: str, mode: str, attn: str, seq_len: int) -> tuple[Any, Any]:
    """(combination, built model) for one fp32 CPU combination at batch 1, with what
    outlives it frozen first (as in the suite's workers: a collection during a timed step
    then costs milliseconds, not 0.2 s): the diagnostic scripts' setup."""
    combo = cpu_combo(model, scale=scale, mode=mode, attn=attn, seq_len=seq_len)
    gc.collect()
    gc.freeze()
    return combo, build(combo)


def process_options(parser: argparse.ArgumentParser) -> None:
    """A diagnostic script's options for the fresh process it measures in."""
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter to measure with (default: this one); another "
                             "environment's measures with its own torch and transformers")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds after which the measurement is stopped (default: none)")


def measure_fresh(function: Callable[[dict[str, Any]], dict[str, Any]], args: argparse.Namespace) -> int:
    """A diagnostic script's measurement, ``function(options)``, in a fresh process
    (``execute.fresh.run``): its result as JSON on stdout, or why there is none in one
    line on stderr (exit 1)."""
    from reportgen.execute import fresh

    options = {k: v for k, v in vars(args).items() if k not in ("python", "timeout")}
    result = fresh.run(function, {"options": options}, python=args.python, timeout_s=args.timeout)
    if not result.ok:
        print(f"{Path(sys.argv[0]).name}: {result.reason}", file=sys.stderr)
        return 1
    print(json.dumps(result.value))
    return 0


def time_median(step: Any, budget_s: float, **kwargs: Any) -> tuple[float, dict[str, Any]]:
    """reportgen's unprofiled timing pass: (median ms, the timing section). ``kwargs`` go to
    ``timing.time_step`` (a tighter ``target_rel_halfwidth`` spends the whole budget)."""
    from reportgen.profile import timing

    section = timing.time_step(step, budget_s=budget_s, **kwargs)
    return float(section["median"]), section


def reset_cost_ms(step: Any, iterations: int = 15, max_s: float = 1.0) -> float:
    """Median cost of ``step.reset()`` right after a step (a decode step crops its KV
    cache back), which the Timer statement has to include and reportgen leaves untimed.
    At least 3 samples, then up to ``iterations`` within ``max_s``."""
    costs = []
    start = time.perf_counter()
    for i in range(iterations):
        if i >= 3 and time.perf_counter() - start > max_s:
            break
        step()
        step.sync()
        t0 = time.perf_counter()
        step.reset()
        costs.append((time.perf_counter() - t0) * 1000.0)
    costs.sort()
    return costs[len(costs) // 2]


def timer_median(step: Any, min_run_time: float, reset_ms: float = 0.0) -> float:
    """torch.utils.benchmark's median per-call time of ``step(); step.sync(); step.reset()``
    in ms, less ``reset_ms`` (the reset's own cost, measured apart). Without the reset a
    decode step's cache would grow by one token per call."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="step(); step.sync(); step.reset()", globals={"step": step},
                            num_threads=_threads())
    return float(timer.blocked_autorange(min_run_time=min_run_time).median) * 1000.0 - reset_ms


def _threads() -> int:
    import torch

    return int(torch.get_num_threads())


def each_combo(combos: Sequence[Any], name: str, measure: Callable[[Any], dict[str, Any]],
               describe: Callable[[dict[str, Any]], str], *, log: Callable[[str], None],
               stop: Callable[[], bool]) -> tuple[list[dict[str, Any]], list[str]]:
    """``measure`` each combination in turn: one that fails is a note (a finding), not the
    end of the figure; once ``stop()`` says the time limit is reached the rest are noted."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for i, combo in enumerate(combos, 1):
        if stop():
            notes.append(f"time limit reached: {len(combos) - i + 1} combinations not measured")
            break
        try:
            row = measure(combo)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"{combo_label(combo)} failed: {type(exc).__name__}: {exc}")
            log(f"  {name} {i}/{len(combos)} {combo_label(combo)}: FAILED {exc}")
            continue
        rows.append(row)
        log(f"  {name} {i}/{len(combos)} {describe(row)}")
    return rows, notes


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` is the elapsed seconds."""
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


def environment_summary(device: str = "cpu") -> dict[str, Any]:
    """The environment record (reportgen.profile.env) plus a short summary the page shows."""
    from reportgen.profile import env

    full = env.collect(device)
    host = full.get("host") or {}
    libs = full.get("libraries") or {}
    torch_info = full.get("torch") or {}
    return {
        "hardware": env.hardware_slug(full),
        "cpu": host.get("cpu_model"),
        "cores": host.get("usable_cores") or host.get("logical_cores"),
        "threads": torch_info.get("num_threads") or _threads(),
        "python": (full.get("python") or {}).get("version"),
        "torch": libs.get("torch"),
        "transformers": libs.get("transformers"),
        "git": full.get("git"),
        "full": full,
    }


def combo_label(combo: Any) -> str:
    return str(getattr(combo, "id", combo))


def _proc_stat() -> tuple[float, float] | None:
    try:
        with open("/proc/stat") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields), idle


def other_cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of the host's CPU time that *other* processes used over ``seconds`` (this
    process is idle while sampling). Linux only; None elsewhere. A 2-core host shared with
    anything busy moves every timing figure, so each figure records this."""
    first = _proc_stat()
    if first is None:
        return None
    time.sleep(seconds)
    second = _proc_stat()
    if second is None:
        return None
    total = second[0] - first[0]
    if total <= 0:
        return None
    return max(0.0, min(1.0, 1.0 - (second[1] - first[1]) / total))


def wait_until_quiet(limit: float, max_wait_s: float, log: Callable[[str], None]) -> float | None:
    """Sample other processes' CPU use until it is under ``limit`` or ``max_wait_s`` passed;
    returns the last sample."""
    start = time.perf_counter()
    busy = other_cpu_busy()
    while busy is not None and busy > limit and time.perf_counter() - start < max_wait_s:
        log(f"  host busy ({busy:.0%} of CPU used by other processes); waiting")
        time.sleep(5.0)
        busy = other_cpu_busy()
    return busy


def failures(records: Sequence[Any]) -> list[str]:
    """One line per record of a suite run that did not end ok: its id, status and reason."""
    from reportgen.records import fields
    from reportgen.records.status import is_ok

    return [f"{fields.get(r, 'id')}: {fields.get(r, 'status')}: {fields.get(r, 'reason')}"
            for r in records if not is_ok(r)]


def run_finished(runs: Path) -> bool:
    """Whether the runs tree ``runs`` holds a run its runner finished (not one it was
    stopped in)."""
    from reportgen.records import fields
    from reportgen.records.schema import iter_runs

    found = list(iter_runs(runs)) if runs.is_dir() else []
    return bool(found) and all(fields.run_get(r.record, "status") == "complete" for r in found)


P = TypeVar("P")


def stored_plan(stored: Mapping[str, Any] | None, default: P, model: type) -> P:
    """The plan a figure stored (``dataclasses.asdict`` of a frozen plan whose ``models``
    are ``model``s), read back with its lists as tuples; ``default`` where none is stored,
    or one from before the figure measured in paired rounds (no ``hooks_iterations``)."""
    import dataclasses

    if not isinstance(stored, Mapping) or "hooks_iterations" not in stored:
        return default

    def frozen(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    values = {f.name: frozen(stored[f.name]) for f in dataclasses.fields(default)  # type: ignore[arg-type]
              if f.name in stored}
    values["models"] = tuple(model(**{k: frozen(v) for k, v in m.items()}) for m in values.get("models", ()))
    return dataclasses.replace(default, **values)  # type: ignore[type-var]
