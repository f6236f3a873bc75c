"""Measuring in rounds: each (combination, round) is one unit of work.

With ``settings.rounds`` = R > 1 every combination is timed R times, each time with
``budget_s / R`` of timing: round 0 of every combination in a shuffled order, then round
1 in another order, and so on, each round in a fresh worker process. The rounds of one
combination thus fall at different moments of the suite and in different processes,
which is what the interval of its median must span (``reportgen.intervals``). The
profiled pass and FLOP counting happen once, in round 0; a build with fewer routed
experts than its model measures its correction (``reportgen.profile.expertcost``) in
every round, beside the round's timing, and the record holds the median over the clean
rounds (``reportgen.depth.pool_costs``).

A round's result is written the moment it arrives, atomically, to
``rounds/<combination-id>/round-<r>.json`` in the run directory: a killed run loses no
round, and a rerun measures only the missing rounds. After its last round the
combination's record is written from its rounds (pooled samples, the hierarchical
interval, the profiled round's other sections); a combination is done exactly when its
record exists, as with one round. A round that fails or is skipped ends the combination
at once: its record says so and the rounds left are not measured.

Effort adapts (``Policy``): each round's timing stops once its own interval is within
the target (a fast model converges in a fraction of a second), and the combination
stops taking rounds once ``min_rounds`` clean rounds give an interval within the target
of the median (six rounds can state 95%); rounds up to ``rounds`` are taken only while
it is wider and could still narrow to the target (``reachable``: up to eight rounds the
interval spans at least the round medians' full range, so once that range is wider than
the target, further rounds could only widen it).

Contention is detected, not averaged in: each round's timing pass and the profiled pass
carry what the host (and the GPU) gave the process (``reportgen.profile.contention``).
A round taken while another process took cores it needed is kept on disk but left out
of the interval and measured again at the end of the queue, at most ``retries`` times
per combination; a contended profiled pass is repeated the same way. A combination that
cannot get enough clean rounds is recorded ``ok`` with ``timing.unstable``: the reason
in words ("another process used 48% of the CPU during 2 of 8 rounds"), and its interval
from every round.

With one round nothing changes: no round files, the record written directly (a
contended pass still says so in ``timing.unstable``).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from reportgen import stats
from reportgen.depth import finish as finish_depth
from reportgen.depth import pool_costs
from reportgen.records.status import OK
from reportgen.records.store import atomic_write_json

if TYPE_CHECKING:
    from reportgen.execute.supervisor import Outcome
    from reportgen.suite import Combination, Settings


class Job(Protocol):
    """What a unit's task needs of the executors' job (``execute.job.Job``)."""

    settings: Settings

    def task(self, combo: Combination) -> dict[str, Any]: ...


PROFILED_ROUND = 0
# ``LocalExecutor``'s answer when every unit left belongs to a combination that another of
# its slots is measuring right now
WAIT: Any = object()


# six rounds bound the median with probability 1 - 2**-5 (97%): the fewest that state 95%
MIN_ROUNDS = 6
TARGET_REL_HALFWIDTH = 0.02


@dataclass(frozen=True)
class Policy:
    """How many rounds a measurement takes: at least ``min_rounds`` clean ones, then
    more (up to ``rounds``) while the interval's half-width exceeds ``target`` of the
    estimate; at most ``retries`` rounds measured again for contention. The suite's
    combinations (``decide``) and the bench's ablation stop by the same rule
    (``settled``); only what each calls its interval differs."""

    rounds: int
    min_rounds: int = MIN_ROUNDS
    target: float | None = TARGET_REL_HALFWIDTH
    retries: int | None = None

    @property
    def floor(self) -> int:
        return max(1, min(self.min_rounds, self.rounds))

    @property
    def retry_cap(self) -> int:
        return self.retries if self.retries is not None else max(2, self.rounds // 2)

    def within(self, half_width: float | None) -> bool:
        """Whether an interval of this relative half-width (None: none yet) is within
        the target (never, without a target)."""
        return self.target is not None and half_width is not None and half_width <= self.target

    def settled(self, taken: int, half_width: float | None) -> bool:
        """Whether ``taken`` rounds are enough: the most allowed, or at least the floor
        with an interval within the target. The rule reads the interval's width, never
        where it lies."""
        return taken >= self.rounds or (taken >= self.floor and self.within(half_width))

    @classmethod
    def of(cls, settings: Any) -> Policy:
        rounds = int(settings.rounds)
        target = getattr(settings, "target", None)
        return cls(rounds=rounds, min_rounds=int(getattr(settings, "min_rounds", None) or MIN_ROUNDS),
                   target=TARGET_REL_HALFWIDTH if target is None else float(target))


@dataclass(frozen=True)
class Unit:
    combo: Combination
    round: int
    rounds: int
    # a retry that repeats the profiled pass as well (the first one was contended)
    reprofile: bool = False

    @property
    def profiled(self) -> bool:
        return self.round == PROFILED_ROUND or self.reprofile


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
        # a round stops at the target or its share of the budget; the interval quoted is
        # built across rounds (reportgen.intervals)
        policy = Policy.of(job.settings)
        options = {**out.get("options", {}), "profiled": unit.profiled, "round_of_several": True}
        if policy.target is None:
            options["converge"] = False
        else:
            options["target_rel_halfwidth"] = policy.target
        out["options"] = options
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


def timing_contended(payload: Mapping[str, Any]) -> bool:
    return bool((((payload.get("sections") or {}).get("timing") or {}).get("contention") or {}).get("contended"))


def profile_contended(payload: Mapping[str, Any]) -> bool:
    return bool((((payload.get("sections") or {}).get("profile") or {}).get("contention") or {}).get("contended"))


def _profiled(payload: Mapping[str, Any]) -> bool:
    return bool((payload.get("sections") or {}).get("profile"))


def _clean(ordered: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in ordered if not timing_contended(r)]


def _used(ordered: list[Mapping[str, Any]], policy: Policy) -> tuple[list[Mapping[str, Any]], bool]:
    """The rounds the interval is built from and whether they are all clean: the clean
    ones when there are enough of them, else every round (the record is then unstable)."""
    clean = _clean(ordered)
    if len(clean) >= min(policy.floor, len(ordered)):
        return clean, True
    return ordered, False


def contention_reason(rounds: list[Mapping[str, Any]], total: int) -> str:
    """"another process used 48% of the CPU during 2 of 8 rounds" (the mean share of
    the contended rounds), or the device's reason where the GPU was contended."""
    readings = [((r.get("sections") or {}).get("timing") or {}).get("contention") or {} for r in rounds]
    readings = [c for c in readings if c.get("contended")]
    if not readings:
        return ""
    gpu = [c["gpu"]["reason"] for c in readings if (c.get("gpu") or {}).get("reason")]
    host = [c for c in readings if not (c.get("gpu") or {}).get("contended") or c.get("others_share")]
    parts = []
    if host:
        steal = sum(float(c.get("steal_share") or 0.0) for c in host) / len(host)
        share = sum(float(c.get("others_share") or 0.0) for c in host) / len(host)
        what = (f"the hypervisor gave {100 * steal:.0f}% of the CPU to other guests" if steal >= share / 2 and steal
                else f"another process used {100 * share:.0f}% of the CPU")
        parts.append(f"{what} during {len(host)} of {total} rounds")
    if gpu:
        parts.append(f"{gpu[-1]} during {len(gpu)} of {total} rounds")
    return "; ".join(parts)


def _interval_rel_halfwidth(groups: list[list[float]]) -> float:
    from reportgen.intervals import hierarchical_median_ci

    ci = hierarchical_median_ci(groups, replicates=500)
    median = ci["median"]
    if not median:
        return float("inf")
    return max(median - ci["ci_low"], ci["ci_high"] - median) / abs(median)


def reachable(medians: list[float], policy: Policy) -> bool:
    """Whether more rounds could bring the interval within the target. With ``rounds``
    clean rounds the interval spans at least the round medians' k-th smallest to k-th
    largest (k: their order-statistic rank at that count); at best the rounds still to
    come all land in the middle, so that span of the rounds already measured is the
    narrowest any later interval can be. Up to eight rounds k is 1, the full range: a
    range already wider than the target only widens."""
    if policy.target is None or not medians:
        return True
    ranked = sorted(medians)
    k, _ = stats.order_statistic_rank(max(policy.rounds, len(ranked)))
    k = min(k, (len(ranked) + 1) // 2)
    mid = stats.median(ranked)
    return (ranked[-k] - ranked[k - 1]) / 2 / abs(mid) <= policy.target


@dataclass(frozen=True)
class Decision:
    done: bool
    retry: Unit | None = None


def decide(unit: Unit, found: Mapping[int, Mapping[str, Any]], policy: Policy,
           pending: Iterable[int] = ()) -> Decision:
    """After a round of ``unit``'s combination arrived: is the combination done, and is
    a round to be measured again? ``pending``: its rounds still queued or running."""
    pending = set(pending) - set(found)
    ordered = [found[i] for i in sorted(found)]
    if not ordered:
        return Decision(False)
    clean = _clean(ordered)
    profile_ok = any(_profiled(r) and not profile_contended(r) for r in ordered)
    half_width = None
    if len(clean) >= policy.floor and policy.target is not None and profile_ok:
        groups = [list(r["sections"]["timing"]["samples"]) for r in clean]
        # the interval is never narrower than the round medians' range (intervals.py): a
        # range wider than the target needs no bootstrap to say so
        medians = sorted(stats.median(g) for g in groups)
        mid = stats.median(medians)
        if mid:
            half_width = (medians[-1] - medians[0]) / 2 / abs(mid)
            if policy.within(half_width):
                half_width = _interval_rel_halfwidth(groups)
            if not policy.within(half_width) and not reachable(medians, policy):
                return Decision(True)
    if profile_ok and policy.settled(len(clean), half_width):
        return Decision(True)
    retries_used = sum(1 for i in set(found) | pending if i >= policy.rounds)
    last = found.get(unit.round)
    needs_profile = not profile_ok and any(_profiled(r) for r in ordered) and not any(
        i >= policy.rounds for i in pending)
    if last is not None and (timing_contended(last) or needs_profile) and retries_used < policy.retry_cap:
        index = max([policy.rounds - 1, *found, *pending]) + 1
        return Decision(False, Unit(unit.combo, index, unit.rounds, reprofile=needs_profile))
    return Decision(not pending)


def merged_sections(rounds: Mapping[int, Mapping[str, Any]], policy: Policy | None = None) -> dict[str, Any]:
    """The record's measurement sections from all rounds: the profiled round's sections
    (the last one whose profiled pass was clean), with ``timing`` pooled over the clean
    rounds (every round, and ``unstable``, when too few are clean) and the figures that
    divide by the median (profiler overhead, achieved FLOP/s) recomputed from the pooled
    median."""
    from reportgen.intervals import summarize_rounds

    ordered = [rounds[i] for i in sorted(rounds)]
    policy = policy or Policy(rounds=len(ordered))
    profiled_rounds = [r for r in ordered if _profiled(r)]
    clean_profiled = [r for r in profiled_rounds if not profile_contended(r)]
    profiled = (clean_profiled or profiled_rounds or ordered)[-1]
    sections = {k: v for k, v in (profiled["sections"] or {}).items()}
    used, all_clean = _used(ordered, policy)
    timings = [r["sections"]["timing"] for r in used]
    groups = [list(t["samples"]) for t in timings]
    first = timings[0]
    every = [r["sections"]["timing"] for r in ordered]
    timing = {
        "method": first.get("method"), "unit": first.get("unit", "ms"),
        "samples": [x for g in groups for x in g],
        "warmup_samples": [x for t in timings for x in t.get("warmup_samples") or []],
        **summarize_rounds(groups),
        "stop_reason": _stop_reason([t.get("stop_reason") for t in timings]),
        "target_rel_halfwidth": policy.target if policy.target is not None else first.get("target_rel_halfwidth"),
        "budget_s": sum(float(t.get("budget_s") or 0.0) for t in every),
        **({"heap": first["heap"]} if "heap" in first else {}),
        **({"threads": first["threads"]} if "threads" in first else {}),
        "rounds": [{"round": r["round"], "n": len(t["samples"]), "median": t.get("median"),
                    "warmup_n": len(t.get("warmup_samples") or []), "stop_reason": t.get("stop_reason"),
                    "worker_pid": (r.get("execution") or {}).get("worker_pid"), "started": r["started"],
                    "duration_s": r["duration_s"],
                    **({"contention": _brief(t["contention"])} if t.get("contention") else {}),
                    **({"excluded": t["contention"].get("reason") or "contended"}
                       if all_clean and (t.get("contention") or {}).get("contended") else {})}
                   for r, t in zip(ordered, every)],
    }
    contended = [r for r in ordered if timing_contended(r)]
    if contended:
        timing["contended_rounds"] = len(contended)
    if all_clean and contended:
        # every sample is kept: the left-out rounds' too, in round order
        timing["excluded_samples"] = [x for r in contended for x in r["sections"]["timing"]["samples"]]
    if not all_clean:
        timing["unstable"] = contention_reason(contended, len(ordered))
    sections["timing"] = timing
    median = timing["median"]
    profile = dict(sections.get("profile") or {})
    if profile.get("median_ms") is not None and median:
        profile["overhead_ratio"] = profile["median_ms"] / median
    if profile_contended(profiled):
        profile["unstable"] = _profile_unstable(profile)
    if profile:
        sections["profile"] = profile
    flops = dict(sections.get("flops") or {})
    if flops.get("total_analytic") is not None and median:
        flops["achieved_flops_per_s"] = flops["total_analytic"] / (median / 1e3)
        if flops.get("peak_flops_per_s"):
            flops["percent_of_peak"] = 100.0 * flops["achieved_flops_per_s"] / flops["peak_flops_per_s"]
        sections["flops"] = flops
    _pool_expert_costs(sections, used, profiled)
    return finish_depth(sections)


def _pool_expert_costs(sections: dict[str, Any], used: list[Mapping[str, Any]],
                       profiled: Mapping[str, Any]) -> None:
    """An expert-reduced build's correction (``depth.experts.cost``) from the rounds the
    interval is built from: each measured it beside its timing (``expert_cost``), the
    profiled round after its profiled pass (``reportgen.depth.pool_costs``); a round left
    out for contention is left out here too."""
    experts = (sections.get("depth") or {}).get("experts")
    if not isinstance(experts, Mapping):
        return
    costs = []
    for r in sorted(used, key=lambda r: r["round"]):
        found = experts.get("cost") if r is profiled else (r["sections"] or {}).get("expert_cost")
        if isinstance(found, Mapping):
            costs.append((int(r["round"]), found))
    if costs and [c for _, c in costs] != [experts.get("cost")]:
        depth = dict(sections["depth"])
        depth["experts"] = {**experts, "cost": pool_costs(costs)}
        sections["depth"] = depth


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]


def _profile_unstable(profile: Mapping[str, Any]) -> str:
    reason = (profile.get("contention") or {}).get("reason") or "the host was busy"
    return f"the profiled pass ran while {_lower(reason)}: its overhead is not the profiler's alone"


def _brief(reading: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("others_share", "steal_share", "involuntary_switches", "contended", "reason")
    out = {k: reading[k] for k in keys if k in reading}
    if reading.get("gpu"):
        out["gpu"] = {k: reading["gpu"][k] for k in ("other_processes", "throttle", "contended") if k in reading["gpu"]}
    return out


def single_round(sections: Mapping[str, Any]) -> dict[str, Any]:
    """A one-round record's sections with ``unstable`` where its timing or profiled pass
    was contended (nothing is measured again in one round)."""
    out = dict(sections)
    timing = dict(out.get("timing") or {})
    reading = timing.get("contention") or {}
    if reading.get("contended"):
        timing["unstable"] = f"{reading.get('reason') or 'the host was busy'} while it was timed"
        out["timing"] = timing
    profile = dict(out.get("profile") or {})
    if (profile.get("contention") or {}).get("contended"):
        profile["unstable"] = _profile_unstable(profile)
        out["profile"] = profile
    return finish_depth(out)


def _stop_reason(reasons: list[Any]) -> str | None:
    """One reason for the record: ``converged`` only when every round converged."""
    known = [r for r in reasons if r]
    if not known:
        return None
    if all(r == "converged" for r in known):
        return "converged"
    return "budget" if "budget" in known else str(known[-1])


def _reduction(payload: Mapping[str, Any]) -> Any:
    return (payload.get("preflight") or {}).get("reduced")


def same_reduction(rounds: Mapping[int, Mapping[str, Any]]) -> tuple[dict[int, Mapping[str, Any]], list[int]]:
    """The rounds measured with the same reduction as the profiled round (the pre-flight of
    each round picks the layers and experts that fit the memory free then, which can
    differ between rounds: another reduction is another model, never pooled), and the
    numbers of the rounds set aside."""
    ordered = sorted(rounds)
    profiled = [i for i in ordered if _profiled(rounds[i])]
    reference = _reduction(rounds[(profiled or ordered)[0]])
    kept = {i: rounds[i] for i in ordered if _reduction(rounds[i]) == reference}
    return kept, [i for i in ordered if i not in kept]


def combination_outcome(rounds: Mapping[int, Mapping[str, Any]],
                        policy: Policy | None = None) -> tuple[Outcome, str, float]:
    """A finished combination's outcome from its rounds: (outcome, started, seconds)."""
    from reportgen.execute.supervisor import Outcome

    spent = [rounds[i] for i in sorted(rounds)]  # every round took its time
    rounds, other = same_reduction(rounds)
    ordered = [rounds[i] for i in sorted(rounds)]
    last = ordered[-1]
    execution = dict(last.get("execution") or {})
    execution["rounds"] = len(ordered)
    if other:
        # a round whose pre-flight found another memory figure measured another model
        execution["rounds_set_aside"] = {"rounds": other, "reason": "measured with another reduction "
                                         "(layers or experts) than the profiled round's"}
    execution["measure_s"] = sum(float((r.get("execution") or {}).get("measure_s") or 0.0) for r in ordered)
    first = ordered[0]
    outcome = Outcome(OK, sections=merged_sections(rounds, policy), preflight=first.get("preflight"),
                      device=last.get("device"), execution=execution)
    return outcome, spent[0]["started"], sum(float(r["duration_s"]) for r in spent)


def complete(run_dir: str | Path, unit: Unit, policy: Policy | None = None,
             pending: Iterable[int] = ()) -> tuple[dict[int, dict[str, Any]] | None, Unit | None]:
    """(all rounds of ``unit``'s combination when it is done, else None; a round to
    measure again, if any), after ``unit`` arrived (``decide``)."""
    found = read_rounds(run_dir, unit.combo.id)
    decision = decide(unit, found, policy or Policy(rounds=unit.rounds), pending)
    return (found if decision.done else None), decision.retry
