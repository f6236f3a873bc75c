"""Expert-reduced measurement (``--experts N``) against the same model built with every expert.

``--experts N`` builds each mixture-of-experts layer with N of its routed experts (each
token still routed to as many, of the same size, beside the same shared experts) and
takes the forward's time, scaled where the build differs from the whole model, as the
whole model's (``reportgen.depth``): the router's by what the build measured its router
take more widened to every expert (else by full / measured), the experts' by the
correction the build measured (``reportgen.profile.expertcost``: its experts module
widened to every expert, against its own call). This figure checks that claim on models
that fit with all their experts: each model, at the same reduced depth (the depth
extrapolation is validated on its own, ``depth_check``), built with all of them and with
fewer, paired forward by forward (``depth_rounds``): in each round a model's builds for
one mode share a fresh process and run in cycles, one forward of each back to back, and
for each build with fewer experts one pair of its correction's calls (the same calls a
measurement in a suite times, ``expertcost.Correction``) in a slot of each cycle of its
own; then the builds' hooks passes, in cycles the same way. A suite times the correction's pairs back to back in
its profiled round and pools them over its rounds; here they share the cycles' moments,
so the figure tests the correction itself rather than how far the host's speed moved
between the phases of a round (the factor, a memory-bound call's time over a
compute-bound one's, moved by a tenth and more within a quarter of a minute on the 2-core host; with the pairs
timed after the cycles, Qwen3's prefill read 4-5% low over ten rounds). Prefill at 128 tokens (where the whole model's
step reaches nearly every expert) and a decode step after them (where it reaches top-k);
batch 1, fp32.

Two families: Granite's 32 experts and Qwen3's 128 (8 per token in both), each also
with as few experts as a reduction may keep (8) and with a count between.

On a shared 2-core host the speed moves by tens of percent between moments a minute
apart; the forwards of one cycle share their moment. Per round, reportgen's whole-model
figures of each build (``depth.extrapolate`` over that round's hooks pass: the layers the
builds lack, by kind, and for a build with fewer experts its experts and router
corrected by that round's measurement) give each build's factor g, its whole-model time
over its measured forward's, and:

* **Latency**: per cycle, the reduced forward times its g over the forward with every
  expert times its own g; the estimate is the Hodges-Lehmann centre of the cycles' log
  ratios, less 1.
* **Shares**: per round, each category's whole-model share with fewer experts less its
  share with every expert (the hooks method on both sides); the estimate is the
  Hodges-Lehmann centre of the rounds' differences.

Each interval is a 95% two-level percentile bootstrap (rounds drawn with replacement,
then the cycles within each; shares: rounds only). A row passes when its latency
estimate and whole interval lie within ``LATENCY_TOLERANCE`` and every share difference
and its whole interval within ``SHARE_TOLERANCE``, with at least ``MIN_ROUNDS`` rounds
(``depth_check.within``): an interval that reaches past the bound has not shown
agreement. The computation from units (``model_rows``, ``summarise``) is pure; ``run``
measures.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reportgen import depth, stats
from reportgen.bench.common import stored_plan
from reportgen.bench.depth_check import (
    WHOLE,
    Block,
    _centre,
    _ci,
    _clean,
    _interval,
    _unstable,
    extrapolation,
    within,
)
from reportgen.bench.results import figure

if TYPE_CHECKING:
    pass

NAME = "expert_reduction"
TITLE = "Expert-reduced measurement"
QUESTION = (
    "Are the latency and the category shares that reportgen measures on a mixture-of-experts model built "
    "with fewer of its routed experts (--experts N) those of the same model built with all of them?")
LATENCY_TOLERANCE = 0.05  # reduced / every expert, both as reportgen states the whole model, less 1
SHARE_TOLERANCE = 0.02  # a share with fewer experts less its share with all, in absolute terms (2 points)
MODES = ("prefill", "decode")
SEQ_LEN = 128
SEED = 0
REPLICATES = 2000
# the fewest paired rounds whose interval says anything of the rounds' spread
MIN_ROUNDS = 3
GOAL = (f"with fewer experts, the whole-model latency within {LATENCY_TOLERANCE:.0%} of the latency with every "
        f"expert and every category share within {SHARE_TOLERANCE * 100:.0f} points of its share with every "
        "expert, each estimate and its whole 95% interval (over rounds of cycles paired forward by forward) "
        "inside its bound")


@dataclass(frozen=True)
class ExpertModel:
    """One model of the figure: the model a suite names, the layers it is measured at (None:
    all), the routed-expert counts it is measured with beside all of them, and where its
    configuration comes from."""

    model: str
    layers: int | None
    counts: tuple[int, ...]
    source: str


MODELS: tuple[ExpertModel, ...] = (
    ExpertModel("granitemoe-1b-a400m", 4, (8, 16),
                "ibm-granite/granite-3.0-1b-a400m's config (24 layers, 32 experts of 1024 x 512, 8 per token), "
                "4 of its layers"),
    ExpertModel("qwen3-30b-a3b", 2, (8, 32),
                "the catalog's Qwen/Qwen3-30B-A3B config (48 layers, 128 experts of 2048 x 768, 8 per token), "
                "2 of its layers (every expert in fp32: 2.4 GB a layer)"),
)


@dataclass(frozen=True)
class Plan:
    """What the figure measures and how long: ``rounds`` rounds, in each every (model, mode)
    built with every expert and with each of its counts, their forwards in cycles for
    ``budget_s`` (at least ``min_cycles``; each build warmed up for up to a third of that
    first), then each build clocked by the hooks method (at least ``hooks_iterations``
    forwards, ``hooks_budget_s``); each reduced build's correction is timed a pair in each
    cycle."""

    models: tuple[ExpertModel, ...] = MODELS
    modes: tuple[str, ...] = MODES
    seq_len: int = SEQ_LEN
    scale: str = "reference"
    # a prefill cycle of Qwen3's three builds takes about 1 s on the 2-core host (0.6 s
    # with all 128 experts), Granite's about 0.5 s. With six rounds, 5 s of cycles and 1 s
    # of hooks, Qwen3's prefill got six cycles a round (its latency interval 8 points wide)
    # and one round's hooks pass of granite's whole build read its experts 8 points low
    # (that round's ratio +10%, the interval's end +5.6%); with eight rounds of 8 s and
    # 2 s of hooks, two rows of eight had an interval end 0.2 and 0.4 points past its
    # bound: more cycles, longer hooks passes and more rounds, so one such moment stays a
    # minority
    rounds: int = 10
    budget_s: float = 10.0
    min_cycles: int = 8
    hooks_budget_s: float = 2.0
    hooks_iterations: int = 8
    timeout_s: float = 1800.0


QUICK = Plan(models=(ExpertModel("granitemoe-1b-a400m", 2, (2,), "the granitemoe preset at tiny widths "
                                 "(4 experts, 2 per token)"),),
             modes=("prefill",), seq_len=32, scale="tiny", rounds=3, budget_s=0.4, min_cycles=3,
             hooks_budget_s=0.2, hooks_iterations=3, timeout_s=600.0)


def plan_dict(plan: Plan) -> dict[str, Any]:
    """``plan`` as the figure stores it."""
    return dataclasses.asdict(plan)


def plan_of(stored: Mapping[str, Any] | None, default: Plan) -> Plan:
    """The plan a figure stored (``plan_dict``), else ``default``."""
    return stored_plan(stored, default, ExpertModel)


def unit_label(model: str, mode: str) -> str:
    """A unit's label (and, made safe, its file name's stem): the model and the mode."""
    return f"{model} {mode}"


def unit_kwargs(plan: Plan, m: ExpertModel, mode: str, index: int) -> dict[str, Any]:
    """What ``depth_rounds.builds_unit`` measures for ``m`` in ``mode`` in round ``index``:
    the model at ``m.layers`` with every expert (``WHOLE``) and with each count."""
    return {"model": m.model, "builds": [[WHOLE, m.layers, None], *[[str(n), m.layers, n] for n in m.counts]],
            "mode": mode, "seq_len": plan.seq_len, "scale": plan.scale, "budget_s": plan.budget_s,
            "min_cycles": plan.min_cycles, "hooks_budget_s": plan.hooks_budget_s,
            "hooks_iterations": plan.hooks_iterations, "seed": f"experts:{index}:{m.model}:{mode}"}


# ---------------------------------------------------------------- from units (pure)


def _share(whole: Mapping[str, Any], category: str) -> float:
    entry = (whole.get("categories") or {}).get(category) or {}
    return float(entry.get("share") or 0.0)


def _median(cycles: Sequence[Mapping[str, float]], name: str) -> float:
    return stats.median([row[name] for row in cycles])


def _cost(build: Mapping[str, Any], part: str, key: str) -> float | None:
    section = build.get("depth")
    found = (depth.experts_cost(section) if part == "experts" else depth.router_cost(section)
             ) if isinstance(section, Mapping) else None
    return float(found[key]) if found is not None else None


def block(units: Sequence[Mapping[str, Any]], counts: Sequence[int]
          ) -> tuple[Block | None, dict[int, list[Any]], list[Any], list[int]]:
    """One (model, mode)'s rounds with every build timed and its whole-model figures stated:
    (the block, whose factors are each count's g over the g with every expert, or None
    without a round; each count's whole-model figures by round; those with every expert;
    the rounds left out)."""
    import numpy as np

    columns = [WHOLE, *(str(n) for n in counts)]
    kept: list[Mapping[str, Any]] = []
    found: dict[int, list[Any]] = {n: [] for n in counts}
    every: list[Any] = []
    dropped: list[int] = []
    for unit in sorted(units, key=lambda u: int(u["round"])):
        builds, cycles = unit.get("builds") or {}, unit.get("cycles") or []
        timed = bool(cycles) and all(c in row for row in cycles for c in columns)
        got = {c: extrapolation(builds.get(c) or {}, _median(cycles, c)) if timed else None for c in columns}
        if timed and all(v is not None for v in got.values()):
            kept.append(unit)
            every.append(got[WHOLE])
            for n in counts:
                found[n].append(got[str(n)])
        else:
            dropped.append(int(unit["round"]))
    if not kept:
        return None, found, every, dropped
    times = [np.asarray([[row[c] for c in columns] for row in u["cycles"]], dtype=float) for u in kept]
    diffs: dict[int, dict[str, list[float]]] = {}
    for n in counts:
        categories = dict.fromkeys([c for f in [*found[n], *every] for c in f["categories"]])
        diffs[n] = {}
        for c in categories:
            pairs = [(_share(f, c), _share(w, c)) for f, w in zip(found[n], every)]
            if any(a or b for a, b in pairs):  # a category neither side has is left out
                diffs[n][c] = [a - b for a, b in pairs]
    factors = {n: [float(f["factor"]) / float(w["factor"]) for f, w in zip(found[n], every)] for n in counts}
    full_layers = int(kept[0]["builds"][WHOLE].get("full_layers") or 0)
    return (Block(tuple(int(u["round"]) for u in kept), tuple(counts), full_layers, times, factors, diffs,
                  line=False), found, every, dropped)


def _per_token(units: Sequence[Mapping[str, Any]], name: str, tokens: int) -> float | None:
    """A build's ``moe.experts`` milliseconds per token in its hooks pass, the centre over rounds."""
    return _centre([float(((u["builds"][name].get("hooks") or {}).get("categories") or {})
                          .get(depth.EXPERTS, {}).get("ms") or 0.0) / tokens for u in units] if tokens else [])


def _hooks_factor(unit: Mapping[str, Any], name: str) -> float | None:
    """The experts' time with every expert over the build ``name``'s, as one round's hooks
    passes read them: the factor its correction estimates, where the builds' routing draws
    give every expert the same tokens."""
    def experts_ms(build: str) -> float:
        hooks = (unit["builds"].get(build) or {}).get("hooks") or {}
        return float(((hooks.get("categories") or {}).get(depth.EXPERTS) or {}).get("ms") or 0.0)

    own = experts_ms(name)
    return experts_ms(WHOLE) / own if own > 0 else None


def _why_line(r: Mapping[str, Any]) -> str | None:
    """Why a failing row misses, where the rounds show it: its correction against the
    factor the same rounds' hooks passes read, and how closely the rounds' ratios follow it."""
    import numpy as np

    pairs = [(f, h, q) for f, h, q in zip(r.get("round_factors") or [], r.get("round_hooks_factors") or [],
                                          r.get("round_ratios") or []) if f and h and q]
    if len(pairs) < MIN_ROUNDS or r.get("experts_factor") is None:
        return None
    factors, hooked, ratios = (np.asarray(v, dtype=float) for v in zip(*pairs))
    line = (f"Why {_label(r)} misses: its correction read {factors.min():.3f} to {factors.max():.3f} over the "
            f"rounds (centre {r['experts_factor']:.3f}), while the same rounds' hooks passes read the experts "
            f"with every expert over the build's at {hooked.min():.3f} to {hooked.max():.3f} (centre "
            f"{_centre(list(hooked)):.3f})")
    if factors.std() > 0 and ratios.std() > 0:
        line += (f"; the rounds' latency ratios follow their corrections (correlation "
                 f"{float(np.corrcoef(factors, ratios)[0, 1]):.2f})")
    return line + "."


def model_rows(m: ExpertModel, mode: str, units: Sequence[Mapping[str, Any]], *, seq_len: int,
               reps: int = REPLICATES, seed: int = SEED) -> tuple[list[dict[str, Any]], list[str]]:
    """One (model, mode)'s rows (one per count) and notes, from its units (pure). Rounds
    whose cycles ran while another process took the cores are left out where at least
    ``MIN_ROUNDS`` others remain (every round is used otherwise, and each row says so)."""
    import numpy as np

    label = unit_label(m.model, mode)
    units, notes = _clean(units, label, MIN_ROUNDS)
    # a count no round built (its unit asked for another plan) is not measured, and said so
    # by ``summarise``; it takes no round of the others with it
    counts = tuple(n for n in m.counts if any(str(n) in (u.get("builds") or {}) for u in units))
    b, found, every, dropped = block(units, counts)
    notes += [f"{label}: rounds {', '.join(str(r + 1) for r in dropped)} left out (a build of the round not timed "
              "or its whole-model figures not stated)"] if dropped else []
    if b is None:
        return [], notes
    k = len(b.rounds)
    all_cycles = [np.arange(len(t)) for t in b.times]
    point, draws = b.paired(reps, seed)
    kept = [u for u in units if int(u["round"]) in b.rounds]
    tokens = 1 if mode.startswith("decode") else seq_len
    full_ms = _ci([list(t[:, 0]) for t in b.times])
    rows: list[dict[str, Any]] = []
    for j, n in enumerate(counts, start=1):
        rel = point[n]["rel"]
        rel_low, rel_high = _interval([d[n]["rel"] for d in draws])
        shares: dict[str, dict[str, Any]] = {}
        for c in b.diffs[n]:
            low, high = _interval([d[n]["shares"][c] for d in draws])
            shares[c] = {"reduced": sum(_share(f, c) for f in found[n]) / k,
                         "full": sum(_share(w, c) for w in every) / k, "diff": point[n]["shares"][c],
                         "diff_low": low, "diff_high": high}
        worst = max(shares, key=lambda c: max(abs(shares[c][x]) for x in ("diff", "diff_low", "diff_high")),
                    default=None)
        reduced_ms = _ci([list(t[:, j]) for t in b.times])
        built = (kept[0]["builds"][str(n)].get("depth") or {}).get("experts") or {}
        latency_ok = within(rel, rel_low, rel_high, LATENCY_TOLERANCE)
        shares_ok = all(within(s["diff"], s["diff_low"], s["diff_high"], SHARE_TOLERANCE) for s in shares.values())
        builds = [u["builds"][str(n)] for u in kept]
        rows.append({
            "model": m.model, "mode": mode, "combination": f"{m.model}--{mode}--{m.layers}l--{n}e",
            "layers": m.layers, "experts": n, "full_experts": built.get("full"), "top_k": built.get("top_k"),
            "rounds": k, "cycles": int(sum(len(t) for t in b.times)),
            "reduced_ms": reduced_ms[0], "reduced_low_ms": reduced_ms[1], "reduced_high_ms": reduced_ms[2],
            "full_ms": full_ms[0], "full_low_ms": full_ms[1], "full_high_ms": full_ms[2],
            "whole_model_factor": _centre(b.factors[n]),
            "experts_factor": _centre([_cost(x, "experts", "factor") for x in builds]),
            "router_delta_ms": _centre([_cost(x, "router", "delta_ms") for x in builds]),
            "ratio": 1.0 + rel, "ratio_low": 1.0 + rel_low, "ratio_high": 1.0 + rel_high,
            "round_ratios": [math.exp(stats.hodges_lehmann(b.logs(i, all_cycles[i])[n])) for i in range(k)],
            # each round's correction, and what the same round's hooks passes read it to be:
            # the experts with every expert over the build's own, per token
            "round_factors": [_cost(x, "experts", "factor") for x in builds],
            "round_hooks_factors": [_hooks_factor(u, str(n)) for u in kept],
            "worst_share_category": worst,
            "worst_share_diff": shares[worst]["diff"] if worst else None,
            "worst_share_low": shares[worst]["diff_low"] if worst else None,
            "worst_share_high": shares[worst]["diff_high"] if worst else None,
            "share_diffs": {c: s["diff"] for c, s in shares.items()}, "shares": shares, "share_method": "hooks",
            "experts_ms_per_token": _per_token(kept, str(n), tokens),
            "full_experts_ms_per_token": _per_token(kept, WHOLE, tokens),
            "unstable": _unstable(kept),
            "latency_ok": latency_ok, "shares_ok": shares_ok,
            "verdict": "pass" if latency_ok and shares_ok and k >= MIN_ROUNDS else "fail",
        })
    return rows, notes


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}"


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['model']} with {row['experts']} of {row['full_experts']} experts, {row['mode']}"


def _row_line(r: Mapping[str, Any]) -> str:
    return (f"{_label(r)}: latency {r['ratio'] - 1.0:+.1%} [{r['ratio_low'] - 1.0:+.1%}, {r['ratio_high'] - 1.0:+.1%}] "
            f"of the latency with every expert, worst share {r['worst_share_category']} "
            f"{_pct(r['worst_share_diff'])} points [{_pct(r['worst_share_low'])}, {_pct(r['worst_share_high'])}]"
            + (f" ({r['rounds']} paired rounds, fewer than {MIN_ROUNDS})" if r["rounds"] < MIN_ROUNDS else ""))


def _time_notes(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the experts took per token with fewer and with every expert: the cause, where the
    latency differs (fewer, larger expert matrix products run at another speed)."""
    out = []
    for r in table:
        few, every = r.get("experts_ms_per_token"), r.get("full_experts_ms_per_token")
        if not few or not every:
            continue
        scaled = r.get("experts_factor")
        corrected = (f", {few * scaled * 1e3:.3g} µs scaled by the build's correction ({scaled:.3g})"
                     if isinstance(scaled, (int, float)) else "")
        out.append(f"{_label(r)}: moe.experts took {few * 1e3:.3g} µs per token as built{corrected}, "
                   f"against {every * 1e3:.3g} µs with all {r['full_experts']} "
                   f"({few / every - 1.0:+.1%} as built); the forward {r['ratio'] - 1.0:+.1%} "
                   f"[{r['ratio_low'] - 1.0:+.1%}, {r['ratio_high'] - 1.0:+.1%}]")
    return out


def summarise(units: Sequence[Mapping[str, Any]], plan: Plan, *, duration_s: float | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    """The figure from the measured units (pure)."""
    table: list[dict[str, Any]] = []
    said: list[str] = []
    for m in plan.models:
        for mode in plan.modes:
            rows, more = model_rows(m, mode, [u for u in units if u.get("model") == m.model
                                              and u.get("mode", MODES[0]) == mode], seq_len=plan.seq_len)
            table += rows
            said += more
    missing = [f"{m.model} with {n} experts, {mode}" for m in plan.models for n in m.counts for mode in plan.modes
               if not any(r["model"] == m.model and r["experts"] == n and r["mode"] == mode for r in table)]
    method_notes = [
        f"{' and '.join(plan.modes)} at {plan.seq_len} tokens (decode: one token after them), batch 1, fp32, "
        f"SDPA, {plan.scale} widths; {plan.rounds} rounds, in each every model and mode (in a shuffled order) in "
        "a fresh process of its own, built with every routed expert and with fewer at the same depth, all "
        "resident: cycles of one unprofiled forward of each build and one pair of each reduced build's correction "
        "(reportgen.profile.expertcost: its widened experts' call and its own, then its routers') back to back, "
        f"each cycle in its own shuffled order, for {plan.budget_s:g} s (at least {plan.min_cycles}), then each "
        f"build's hooks pass, the builds' hooked forwards in cycles the same way (at least "
        f"{plan.hooks_iterations} of each, {plan.hooks_budget_s:g} s a build). The widened call routes the step's "
        "tokens by one draw, the same at every call, as a step repeats its routing. A suite "
        "times the same pairs back to back in its profiled round; here they share the cycles' moments. Every "
        "step runs an even draw of its routing (reportgen.profile.routing).",
        "Models: " + "; ".join(
            f"`{m.model}`, {m.source}, with {', '.join(str(n) for n in m.counts)} experts beside all" for m in
            plan.models) + ".",
        "Whole-model figures (reportgen.depth) of each build from its round's hooks pass: the layers the "
        "builds lack, by kind, and with fewer experts the experts' time scaled by the round's measured "
        "correction (`experts_factor`: the build's experts module widened to every expert against its own "
        "call) and the router's increased by what its router took more widened to every expert "
        "(`router_delta_ms`, per routed layer); `whole_model_factor` is the reduced build's factor over the "
        "factor with every expert.",
        "Paired by cycle: each cycle's reduced forward times its round's factor, over the forward with every "
        "expert of the same cycle times its own; the estimate is the Hodges-Lehmann centre of the cycles' log "
        "ratios. Shares paired by round: each category's whole-model share with fewer experts less its share "
        "with every expert, the estimate the Hodges-Lehmann centre of the rounds' differences. Intervals: a 95% "
        "two-level bootstrap (rounds, then the cycles within each).",
        f"A row passes when its latency estimate and interval lie within ±{LATENCY_TOLERANCE:.0%} and every "
        f"category's share difference and interval within ±{SHARE_TOLERANCE * 100:.0f} points, with {MIN_ROUNDS} "
        f"paired rounds at least. A round whose cycles ran while another process took the cores is left out "
        f"where {MIN_ROUNDS} others remain.",
    ]
    extra = {"plan": plan_dict(plan), "tolerances": {"latency": LATENCY_TOLERANCE, "share": SHARE_TOLERANCE}}
    if not table:
        return figure(TITLE, QUESTION, value=None, unit="ratio", goal=GOAL, goal_spec=None,
                      status="not measured", duration_s=duration_s, extra=extra,
                      notes=[*method_notes, *notes, *said,
                             "no model measured with every expert and with fewer in the same rounds"])
    worst = max(table, key=lambda r: max(abs(r["ratio_low"] - 1.0), abs(r["ratio_high"] - 1.0)))
    passed = all(r["verdict"] == "pass" for r in table) and not missing
    summary = [
        f"{sum(r['verdict'] == 'pass' for r in table)} of {len(table)} expert-reduced combinations within "
        "both tolerances, interval and all.",
        *[_row_line(r) for r in table if r["verdict"] != "pass"],
        *[why for r in table if r["verdict"] != "pass" and (why := _why_line(r))],
        *_time_notes(table),
        *[f"{m}: not measured beside the model with every expert" for m in missing],
        *[f"{_label(r)}: measured under contention: {r['unstable']}" for r in table if r["unstable"]],
    ]
    return figure(
        TITLE, QUESTION, value=worst["ratio"], unit="ratio", interval=[worst["ratio_low"], worst["ratio_high"]],
        interval_kind=("95% two-level bootstrap over rounds (then the paired cycles within each) of the row "
                       "whose interval reaches furthest from agreement"),
        goal=GOAL, goal_spec={"kind": "ratio_within", "target": LATENCY_TOLERANCE},
        status="pass" if passed else "fail",
        notes=[*summary, *method_notes, *notes, *said],
        rows=table, duration_s=duration_s, extra=extra)


# ---------------------------------------------------------------- measuring


def run(plan: Plan, scratch: Path, *, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Measure ``plan``'s units into ``scratch`` (``depth_rounds.measure_units``: a stopped
    run is resumed, a finished one measured again) and summarise them."""
    import random

    from reportgen.bench import depth_rounds

    if stop():
        return summarise([], plan, notes=["time limit reached before the figure started"])
    t0 = time.perf_counter()
    pairs = [(m, mode) for m in plan.models for mode in plan.modes]

    def todo(index: int) -> list[tuple[str, str, dict[str, Any]]]:
        shuffled = list(pairs)
        random.Random(f"experts:{SEED}:{index}").shuffle(shuffled)
        return [(depth_rounds.unit_name(unit_label(m.model, mode), index), unit_label(m.model, mode),
                 unit_kwargs(plan, m, mode, index)) for m, mode in shuffled]

    log(f"  experts: {sum(len(m.counts) + 1 for m in plan.models) * len(plan.modes)} builds in {plan.rounds} "
        f"paired rounds -> {scratch}")
    units, notes = depth_rounds.measure_units(scratch, plan.rounds, todo, [m.model for m in plan.models],
                                              timeout_s=plan.timeout_s, what="experts", log=log, stop=stop)
    return summarise(units, plan, duration_s=time.perf_counter() - t0, notes=notes)
