"""Measuring in rounds: each (combination, round) is one unit of work.

With ``settings.rounds`` = R > 1 every combination is timed R times, each time with
``budget_s / R`` of timing: round 0 of every combination in a shuffled order, then round
1 in another order, and so on, each round in a fresh worker process. The rounds of one
combination thus fall at different moments of the suite and in different processes,
which is what the interval of its median must span (``reportgen.intervals``). The
profiled pass and FLOP counting happen once, in round 0.

A round's result is written the moment it arrives, atomically, to
``rounds/<combination-id>/round-<r>.json`` in the run directory: a killed run loses no
round, and a rerun measures only the missing rounds. After its last round the
combination's record is written from its rounds (pooled samples, the hierarchical
interval, the profiled round's other sections); a combination is done exactly when its
record exists, as with one round. A round that fails or is skipped ends the combination
at once: its record says so and the rounds left are not measured.

With one round nothing changes: no round files, the record written directly.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from reportgen.store import atomic_write_json

if TYPE_CHECKING:
    from reportgen.execute.supervisor import Outcome
    from reportgen.suite import Combination, Settings


class Job(Protocol):
    """What a unit's task needs of the executors' job (``execute.local.Job``)."""

    settings: Settings

    def task(self, combo: Combination) -> dict[str, Any]: ...


PROFILED_ROUND = 0
# ``LocalExecutor``'s answer when every unit left belongs to a combination that another of
# its slots is measuring right now
WAIT: Any = object()


@dataclass(frozen=True)
class Unit:
    combo: Combination
    round: int
    rounds: int

    @property
    def profiled(self) -> bool:
        return self.round == PROFILED_ROUND


def rounds_dir(run_dir: str | Path, combo_id: str) -> Path:
    return Path(run_dir) / "rounds" / combo_id


def round_path(run_dir: str | Path, combo_id: str, index: int) -> Path:
    return rounds_dir(run_dir, combo_id) / f"round-{index}.json"


def read_rounds(run_dir: str | Path, combo_id: str) -> dict[int, dict[str, Any]]:
    """The finished rounds of a combination, by index (unreadable files: not finished)."""
    import json

    found: dict[int, dict[str, Any]] = {}
    directory = rounds_dir(run_dir, combo_id)
    if not directory.is_dir():
        return found
    for path in directory.glob("round-*.json"):
        try:
            index = int(path.stem.split("-", 1)[1])
            data = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        if data.get("id") == combo_id and data.get("round") == index:
            found[index] = data
    return found


def discard_rounds(run_dir: str | Path, combo_ids: Iterable[str]) -> None:
    """Forget earlier rounds of combinations measured again from scratch (``--force``,
    ``--retry-failed``)."""
    for combo_id in combo_ids:
        shutil.rmtree(rounds_dir(run_dir, combo_id), ignore_errors=True)


def order(combos: Iterable[Combination], rounds: int, seed: int, run_dir: str | Path) -> list[Unit]:
    """Every missing (combination, round), round-major, each round in its own seeded
    shuffle of the combinations."""
    combos = list(combos)
    done = {c.id: set(read_rounds(run_dir, c.id)) for c in combos} if rounds > 1 else {}
    units: list[Unit] = []
    for index in range(rounds):
        these = [c for c in combos if index not in done.get(c.id, set())]
        if rounds > 1:
            random.Random(f"{seed}:{index}").shuffle(these)
        units += [Unit(c, index, rounds) for c in these]
    return units


def task(job: Job, unit: Unit) -> dict[str, Any]:
    """What the worker gets for one unit; a one-round suite gets exactly what it always did."""
    out = job.task(unit.combo)
    if unit.rounds > 1:
        out["budget_s"] = job.settings.budget_s / unit.rounds
        # a round spends its budget: the interval is built across rounds, and rounds of
        # equal length weigh alike in it
        out["options"] = {**out.get("options", {}), "profiled": unit.profiled, "converge": False}
        out["round"] = unit.round
    return out


def round_payload(unit: Unit, outcome: Outcome, *, started: str, finished: str,
                  seconds: float) -> dict[str, Any]:
    return {"id": unit.combo.id, "round": unit.round, "rounds": unit.rounds, "status": outcome.status,
            "started": started, "finished": finished, "duration_s": seconds,
            "sections": dict(outcome.sections or {}), "execution": dict(outcome.execution),
            "preflight": outcome.preflight, "device": outcome.device}


def save_round(run_dir: str | Path, payload: Mapping[str, Any]) -> None:
    atomic_write_json(round_path(run_dir, str(payload["id"]), int(payload["round"])), payload)


def merged_sections(rounds: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The record's measurement sections from all rounds: the profiled round's sections,
    with ``timing`` pooled over the rounds and the figures that divide by the median
    (profiler overhead, achieved FLOP/s) recomputed from the pooled median."""
    from reportgen.intervals import summarize_rounds

    ordered = [rounds[i] for i in sorted(rounds)]
    profiled = next((r for r in ordered if (r["sections"] or {}).get("profile")), ordered[0])
    sections = {k: v for k, v in (profiled["sections"] or {}).items()}
    timings = [r["sections"]["timing"] for r in ordered]
    groups = [list(t["samples"]) for t in timings]
    first = timings[0]
    timing = {
        "method": first.get("method"), "unit": first.get("unit", "ms"),
        "samples": [x for g in groups for x in g],
        "warmup_samples": [x for t in timings for x in t.get("warmup_samples") or []],
        **summarize_rounds(groups),
        "stop_reason": _stop_reason([t.get("stop_reason") for t in timings]),
        "target_rel_halfwidth": first.get("target_rel_halfwidth"),
        "budget_s": sum(float(t.get("budget_s") or 0.0) for t in timings),
        **({"heap": first["heap"]} if "heap" in first else {}),
        "rounds": [{"round": r["round"], "n": len(t["samples"]), "median": t.get("median"),
                    "warmup_n": len(t.get("warmup_samples") or []), "stop_reason": t.get("stop_reason"),
                    "worker_pid": (r.get("execution") or {}).get("worker_pid"), "started": r["started"],
                    "duration_s": r["duration_s"]}
                   for r, t in zip(ordered, timings)],
    }
    sections["timing"] = timing
    median = timing["median"]
    profile = dict(sections.get("profile") or {})
    if profile.get("median_ms") is not None and median:
        profile["overhead_ratio"] = profile["median_ms"] / median
        sections["profile"] = profile
    flops = dict(sections.get("flops") or {})
    if flops.get("total_analytic") is not None and median:
        flops["achieved_flops_per_s"] = flops["total_analytic"] / (median / 1e3)
        if flops.get("peak_flops_per_s"):
            flops["percent_of_peak"] = 100.0 * flops["achieved_flops_per_s"] / flops["peak_flops_per_s"]
        sections["flops"] = flops
    return sections


def _stop_reason(reasons: list[Any]) -> str | None:
    """One reason for the record: ``converged`` only when every round converged."""
    known = [r for r in reasons if r]
    if not known:
        return None
    if all(r == "converged" for r in known):
        return "converged"
    return "budget" if "budget" in known else str(known[-1])


def combination_outcome(rounds: Mapping[int, Mapping[str, Any]]) -> tuple[Outcome, str, float]:
    """A finished combination's outcome from its rounds: (outcome, started, seconds)."""
    from reportgen.execute.supervisor import Outcome

    ordered = [rounds[i] for i in sorted(rounds)]
    last = ordered[-1]
    execution = dict(last.get("execution") or {})
    execution["rounds"] = len(ordered)
    execution["measure_s"] = sum(float((r.get("execution") or {}).get("measure_s") or 0.0) for r in ordered)
    first = ordered[0]
    outcome = Outcome("ok", sections=merged_sections(rounds), preflight=first.get("preflight"),
                      device=last.get("device"), execution=execution)
    return outcome, first["started"], sum(float(r["duration_s"]) for r in ordered)


def complete(run_dir: str | Path, unit: Unit) -> dict[int, dict[str, Any]] | None:
    """All rounds of ``unit``'s combination when every one is on disk, else None."""
    found = read_rounds(run_dir, unit.combo.id)
    return found if len(found) >= unit.rounds and all(i in found for i in range(unit.rounds)) else None
