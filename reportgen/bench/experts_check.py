"""Expert-reduced measurement (``--experts N``) against the same model built with every expert.

``--experts N`` builds each mixture-of-experts layer with N of its routed experts (each
token still routed to as many, of the same size, beside the same shared experts) and
takes the forward's time, scaled where the build differs from the whole model, as the
whole model's (``reportgen.depth``): the router's time by full / measured (it scores
every expert), the experts' time by the correction the build measured
(``reportgen.profile.expertcost``: its experts module widened to every expert, against its
own call). This figure checks that claim on a model that fits with all its experts: the
same model, at the same reduced depth (the depth extrapolation is validated on its own,
``depth_check``), measured with all of them and with fewer, in one suite run (prefill at
128 tokens, where the whole model's step reaches nearly every expert, and a decode step
after them, where it reaches top-k; batch 1, fp32; each combination in rounds, each round
a fresh worker process; round r of every combination runs in one shuffled stretch of the
suite, ``execute.rounds.order``).

Two families: Granite's 32 experts and Qwen3's 128 (8 per token in both), each also
with as few experts as a reduction may keep (8) and with a count between.

Two checks per reduced combination:

* **Latency**: its median, scaled as reportgen scales a reduced model's, over the median
  with every expert. The host's speed wanders by tens of percent within minutes, so the
  ratio is taken per round (the two combinations' round r ran minutes apart at most) and
  the interval is a two-level bootstrap over the paired rounds, then the samples within
  each (``stats.two_level``), as the ablation pairs its forwards; each replicate takes a
  resample of the correction's own pairs.
* **Shares**: each category's share by the headline attribution method (the router's and
  the experts' time scaled the same way) less its share with every expert, with a
  bootstrap interval over both records' attributed iterations
  (``stats.two_sample_intervals``).

A row passes when the latency ratio and its whole interval lie within
``LATENCY_TOLERANCE`` of 1 and every share difference and its whole interval within
``SHARE_TOLERANCE``: an interval that reaches past the bound has not shown agreement (the
ablation's rule). The computation from records (``rows``, ``summarise``) is pure; ``run``
measures.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reportgen import depth, shares, stats
from reportgen.bench.common import failures, run_finished
from reportgen.bench.results import figure
from reportgen.intervals import unstable_reason
from reportgen.records import fields
from reportgen.records.status import is_ok
from reportgen.stats.bootstrap import CONFIDENCE, two_level

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

NAME = "expert_reduction"
TITLE = "Expert-reduced measurement"
QUESTION = (
    "Are the latency and the category shares that reportgen measures on a mixture-of-experts model built "
    "with fewer of its routed experts (--experts N) those of the same model built with all of them?")
LATENCY_TOLERANCE = 0.05  # reduced (router scaled) / all experts - 1
SHARE_TOLERANCE = 0.02  # a share with fewer experts less its share with all, in absolute terms (2 points)
MODES = ("prefill", "decode")
SEQ_LEN = 128
SEED = 0
REPLICATES = 2000
GOAL = (f"with fewer experts, the latency within {LATENCY_TOLERANCE:.0%} of the latency with every expert "
        f"and every category share within {SHARE_TOLERANCE * 100:.0f} points of its share with every expert, "
        "each difference's whole 95% interval inside its bound (rounds paired in time)")


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
    """What the figure measures and how long (the suite's settings, as ``depth_check.Plan``)."""

    models: tuple[ExpertModel, ...] = MODELS
    modes: tuple[str, ...] = MODES
    seq_len: int = SEQ_LEN
    scale: str = "reference"
    # every combination takes exactly ``rounds`` rounds (min_rounds = rounds), so each round
    # index of the reduced combinations has its partner with every expert to pair with;
    # 1.5 s of timing a round: Granite's 4 layers take about 0.2 s a forward at 128 tokens on
    # the 2-core host, Qwen3's 2 layers with all 128 experts about 0.6 s (the cpu-today run,
    # whose rounds of it took 15 s profiled and 3.5 s each after): about 3 minutes in all
    budget_s: float = 15.0
    rounds: int = 10
    min_rounds: int = 10
    target: float = 0.05
    profile_iterations: int = 3
    timeout_s: float = 1800.0


QUICK = Plan(models=(ExpertModel("granitemoe-1b-a400m", 2, (2,), "the granitemoe preset at tiny widths "
                                 "(4 experts, 2 per token)"),),
             modes=("prefill",), seq_len=32, scale="tiny", budget_s=0.6, rounds=2, min_rounds=2, timeout_s=600.0)


def plan_dict(plan: Plan) -> dict[str, Any]:
    """``plan`` as the figure stores it."""
    return dataclasses.asdict(plan)


def suite_text(plan: Plan, name: str = "expert-check") -> str:
    """The suite (TOML) that measures each model of ``plan`` with every expert and with each
    of its counts: one matrix entry per (model, count)."""
    def entry(m: ExpertModel, experts: int | None) -> str:
        return (f"\n[[matrix]]\nmodels = [{json.dumps(m.model)}]\nmodes = {json.dumps(list(plan.modes))}\n"
                f"seq_lens = [{plan.seq_len}]\nattn = [\"sdpa\"]\n"
                + (f"layers = {m.layers}\n" if m.layers is not None else "")
                + (f"experts = {experts}\n" if experts is not None else ""))
    return (f"name = {json.dumps(name)}\n[settings]\nscale = {json.dumps(plan.scale)}\ndevice = \"cpu\"\n"
            f"budget_s = {plan.budget_s}\nrounds = {plan.rounds}\nmin_rounds = {plan.min_rounds}\n"
            f"target = {plan.target}\nprofile_iterations = {plan.profile_iterations}\n"
            + "".join(entry(m, n) for m in plan.models for n in (None, *m.counts)))


# ---------------------------------------------------------------- from records (pure)


def round_samples(record: Mapping[str, Any]) -> dict[int, list[float]]:
    """A record's timed samples by round index, the rounds its interval was built from (a
    round left out for contention is not; one round where the record has no rounds)."""
    timing = fields.get(record, "timing") or {}
    samples = [float(x) for x in timing.get("samples") or []]
    listed = timing.get("rounds")
    if not isinstance(listed, list) or not listed:
        return {0: samples} if samples else {}
    out: dict[int, list[float]] = {}
    at = 0
    for entry in listed:
        if entry.get("excluded"):  # its samples are the record's excluded ones
            continue
        n = int(entry.get("n") or 0)
        out[int(entry["round"])] = samples[at:at + n]
        at += n
    return {r: s for r, s in out.items() if s}


def paired_ratio(reduced: Mapping[int, Sequence[float]], full: Mapping[int, Sequence[float]], *,
                 reps: int = REPLICATES, seed: int = SEED, confidence: float = CONFIDENCE,
                 scale: Callable[[np.random.Generator], float] | None = None,
                 ) -> tuple[float, float, float, dict[int, float]] | None:
    """The reduced median over the full one, paired by round: the median over rounds of each
    round's median ratio, a two-level percentile bootstrap interval (the paired rounds drawn
    with replacement, then each side's samples within each drawn round), and the per-round
    ratios. None without a round both sides have. ``scale``: a factor each replicate is
    multiplied by, drawn from the same generator (a correction's own resample; the point
    and the per-round ratios are left unscaled)."""
    import numpy as np

    common = sorted(set(reduced) & set(full))
    if not common:
        return None
    a = [np.asarray(reduced[r], dtype=float) for r in common]
    b = [np.asarray(full[r], dtype=float) for r in common]
    per_round = {r: float(np.median(x) / np.median(y)) for r, x, y in zip(common, a, b)}

    def replicate(rng: np.random.Generator, picked: NDArray[Any]) -> float:
        ratios = [np.median(a[g][rng.integers(0, len(a[g]), len(a[g]))])
                  / np.median(b[g][rng.integers(0, len(b[g]), len(b[g]))]) for g in picked]
        return float(np.median(ratios)) * (scale(rng) if scale is not None else 1.0)

    low, high = stats.percentiles(two_level(len(common), replicate, reps=reps, seed=seed), confidence)
    point = float(np.median(list(per_round.values())))
    return point, low, high, per_round


@dataclass(frozen=True)
class Series:
    """A record's headline attribution per iteration: each category's ms and the iteration's,
    with the categories reportgen corrects in a reduced build corrected as it does: each
    category of ``scales`` times its factor (the experts' by the build's measured
    correction, ``depth.experts_cost``; the router's by full / measured experts where no
    router correction was measured), each of ``adds`` plus its milliseconds per iteration
    (the router's: what the build's routed layers take more scoring every expert,
    ``depth.router_cost``); none with every expert."""

    method: str
    categories: dict[str, list[float]]
    iteration_ms: list[float]
    scales: dict[str, float] = dataclasses.field(default_factory=dict)
    adds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.iteration_ms)

    def _raw(self, name: str, idx: Sequence[int]) -> float:
        values = self.categories.get(name)
        return 0.0 if values is None else math.fsum(values[i] for i in idx)

    def category(self, name: str, idx: Sequence[int], scales: Mapping[str, float] | None = None,
                 adds: Mapping[str, float] | None = None) -> float:
        if name not in self.categories:
            return 0.0
        scales, adds = (self.scales if scales is None else scales), (self.adds if adds is None else adds)
        return self._raw(name, idx) * scales.get(name, 1.0) + len(idx) * adds.get(name, 0.0)

    def forward(self, idx: Sequence[int], scales: Mapping[str, float] | None = None,
                adds: Mapping[str, float] | None = None) -> float:
        scales, adds = (self.scales if scales is None else scales), (self.adds if adds is None else adds)
        return math.fsum(self.iteration_ms[i] for i in idx) + math.fsum(
            self.category(c, idx, scales, adds) - self._raw(c, idx) for c in {*scales, *adds})

    def share(self, name: str, idx: Sequence[int]) -> float:
        total = self.forward(idx)
        return self.category(name, idx) / total if total > 0 else 0.0

    def factor(self, scales: Mapping[str, float] | None = None, adds: Mapping[str, float] | None = None) -> float:
        """What the corrections do to the forward: the reduced median's factor."""
        total = math.fsum(self.iteration_ms)
        return self.forward(range(self.n), scales, adds) / total if total > 0 else 1.0


def series(record: Mapping[str, Any]) -> Series | None:
    """``Series`` of a record's headline method; None where it stores no per-iteration times."""
    section = shares.headline_section(fields.get(record, "attribution"))
    if not isinstance(section, Mapping) or not section.get("iteration_ms"):
        return None
    walls = [float(x) for x in section["iteration_ms"]]
    cats = {str(c): [float(x) for x in e["per_iteration_ms"]]
            for c, e in (section.get("categories") or {}).items()
            if isinstance(e, Mapping) and isinstance(e.get("per_iteration_ms"), list)
            and len(e["per_iteration_ms"]) == len(walls)}
    section_depth = fields.get(record, "depth")
    scales: dict[str, float] = {}
    adds: dict[str, float] = {}
    if isinstance(section_depth, Mapping):
        cost, scoring = depth.experts_cost(section_depth), depth.router_cost(section_depth)
        if cost is not None:
            scales[depth.EXPERTS] = float(cost["factor"])
        if scoring is not None:
            adds[depth.ROUTER] = _routed_layers(section_depth) * float(scoring["delta_ms"])
        else:
            scales[depth.ROUTER] = depth.expert_ratio(section_depth)
    method = str((fields.get(record, "attribution") or {}).get("headline_method") or depth.PROFILER)
    return Series(method, cats, walls, {c: v for c, v in scales.items() if v != 1.0}, adds)


def _routed_layers(section: Mapping[str, Any]) -> int:
    """The routed layers a reduced build measured (its experts' correction counts them)."""
    return int(((section.get("experts") or {}).get("cost") or {}).get("layers") or 0)


def share_differences(reduced: Series, full: Series) -> dict[str, dict[str, float]]:
    """Per category either side holds time in: its share with fewer experts, with every
    expert, and the difference with its 95% interval (bootstrap over both sides' iterations)."""
    names = [c for c in dict.fromkeys([*full.categories, *reduced.categories])
             if math.fsum(full.categories.get(c, [])) + math.fsum(reduced.categories.get(c, [])) > 0]

    def statistic(ir: Sequence[int], jf: Sequence[int]) -> dict[str, float]:
        return {c: reduced.share(c, ir) - full.share(c, jf) for c in names}

    point = statistic(range(reduced.n), range(full.n))
    found = stats.two_sample_intervals(reduced.n, full.n, statistic, seed=SEED)
    out: dict[str, dict[str, float]] = {}
    for c in names:
        low, high = found.get(c, (point[c], point[c]))
        out[c] = {"reduced": reduced.share(c, range(reduced.n)), "full": full.share(c, range(full.n)),
                  "diff": point[c], "diff_low": min(low, point[c]), "diff_high": max(high, point[c])}
    return out


def _per_token(s: Series, category: str, median: Any, tokens: int) -> float | None:
    """A category's milliseconds per token: its share of the attributed iterations times the
    unprofiled median (what reportgen attributes to it), over the tokens of a forward."""
    values, total = s.categories.get(category), math.fsum(s.iteration_ms)
    if not values or total <= 0 or not tokens or not isinstance(median, (int, float)):
        return None
    return math.fsum(values) / total * float(median) / tokens


def _within(values: Sequence[float], bound: float) -> bool:
    return all(math.isfinite(v) and abs(v) <= bound for v in values)


def comparison_row(full: Mapping[str, Any], reduced: Mapping[str, Any]) -> dict[str, Any] | None:
    """One reduced record against its model with every expert; None where either lacks the
    rounds or the per-iteration attribution the comparison reads."""
    s_reduced, s_full = series(reduced), series(full)
    if s_reduced is None or s_full is None:
        return None
    factor = s_reduced.factor()
    # each replicate takes the corrections' own resamples (the pairs they were measured in)
    section = fields.get(reduced, "depth")
    cost = depth.experts_cost(section) if isinstance(section, Mapping) else None
    scoring = depth.router_cost(section) if isinstance(section, Mapping) else None
    pairs = [float(r) for r in (cost or {}).get("ratios") or []]
    deltas = [float(d) for d in (scoring or {}).get("deltas_ms") or []]

    def resampled(rng: np.random.Generator, values: Sequence[float]) -> float:
        return float(statistics.median(values[int(i)] for i in rng.integers(0, len(values), len(values))))

    def scaled(rng: np.random.Generator) -> float:
        scales, adds = dict(s_reduced.scales), dict(s_reduced.adds)
        if pairs:
            scales[depth.EXPERTS] = resampled(rng, pairs)
        if deltas and isinstance(section, Mapping):
            adds[depth.ROUTER] = _routed_layers(section) * resampled(rng, deltas)
        return s_reduced.factor(scales, adds)

    paired = paired_ratio(round_samples(reduced), round_samples(full), scale=scaled)
    if paired is None:
        return None
    raw, low, high, per_round = paired
    ratio = raw * factor
    low, high = min(low, ratio), max(high, ratio)
    diffs = share_differences(s_reduced, s_full)
    worst = max(diffs, key=lambda c: max(abs(diffs[c]["diff_low"]), abs(diffs[c]["diff_high"])), default=None)
    latency_ok = _within([ratio - 1.0, low - 1.0, high - 1.0], LATENCY_TOLERANCE)
    shares_ok = all(_within([d["diff"], d["diff_low"], d["diff_high"]], SHARE_TOLERANCE) for d in diffs.values())
    tokens = int(fields.get(reduced, "combination.seq_len") or 0) * int(fields.get(reduced, "combination.batch_size")
                                                                         or 1)
    counts = fields.get(reduced, "depth.experts") or {}
    return {
        "model": fields.get(full, "combination.model"), "mode": fields.get(reduced, "combination.mode"),
        "combination": fields.get(reduced, "id"),
        "layers": fields.get(reduced, "combination.layers"),
        "experts": counts.get("measured"), "full_experts": counts.get("full"), "top_k": counts.get("top_k"),
        "reduced_ms": fields.get(reduced, "timing.median"), "full_ms": fields.get(full, "timing.median"),
        "router_factor": factor, "experts_factor": s_reduced.scales.get(depth.EXPERTS),
        "ratio": ratio, "ratio_low": low, "ratio_high": high,
        "rounds": len(per_round), "round_ratios": {str(r): v * factor for r, v in per_round.items()},
        "share_method": s_reduced.method,
        "worst_share_category": worst,
        "worst_share_diff": diffs[worst]["diff"] if worst else None,
        "worst_share_low": diffs[worst]["diff_low"] if worst else None,
        "worst_share_high": diffs[worst]["diff_high"] if worst else None,
        "share_diffs": {c: d["diff"] for c, d in diffs.items()}, "shares": diffs,
        "experts_ms_per_token": _per_token(s_reduced, "moe.experts", fields.get(reduced, "timing.median"), tokens),
        "full_experts_ms_per_token": _per_token(s_full, "moe.experts", fields.get(full, "timing.median"), tokens),
        "unstable": unstable_reason(reduced), "full_unstable": unstable_reason(full),
        "latency_ok": latency_ok, "shares_ok": shares_ok,
        "verdict": "pass" if latency_ok and shares_ok else "fail",
    }


def rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A row per reduced record (``combination.experts`` set) whose model was measured at the
    same depth with every expert (both ``ok``)."""
    def key(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return (fields.get(r, "combination.model"), fields.get(r, "combination.mode"),
                fields.get(r, "combination.layers"), fields.get(r, "combination.scale"),
                fields.get(r, "combination.seq_len"))

    fulls = {key(r): r for r in records if fields.get(r, "combination.experts") is None and is_ok(r)
             and not _reduced_by_preflight(r)}
    reduced = sorted((r for r in records if fields.get(r, "combination.experts") is not None and is_ok(r)),
                     key=lambda r: (str(fields.get(r, "combination.model")), str(fields.get(r, "combination.mode")),
                                    int(fields.get(r, "combination.experts") or 0)))
    out = []
    for record in reduced:
        full = fulls.get(key(record))
        row = comparison_row(full, record) if full is not None else None
        if row is not None:
            out.append(row)
    return out


def _reduced_by_preflight(record: Mapping[str, Any]) -> str | None:
    """Why a record asked for with every expert was built with fewer (the pre-flight's
    reduction where the model did not fit), or None where it was built with all of them."""
    counts = fields.get(record, "depth.experts")
    if not isinstance(counts, Mapping) or counts.get("measured") == counts.get("full"):
        return None
    return (f"{fields.get(record, 'id')}: built with {counts.get('measured')} of {counts.get('full')} experts by the "
            f"pre-flight ({fields.get(record, 'depth.reason') or 'it did not fit'}), so it is no measurement "
            "with every expert")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}"


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['model']} with {row['experts']} of {row['full_experts']} experts, {row.get('mode') or MODES[0]}"


def _time_notes(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the experts took per token with fewer and with every expert: the cause, where the
    latency differs (fewer, larger expert matrix products run at another speed)."""
    out = []
    for r in table:
        few, every = r.get("experts_ms_per_token"), r.get("full_experts_ms_per_token")
        if few is None or every is None:
            continue
        scaled = r.get("experts_factor")
        corrected = (f", {few * scaled * 1e3:.3g} µs scaled by the build's correction ({scaled:.3g})"
                     if isinstance(scaled, (int, float)) else "")
        out.append(f"{_label(r)}: moe.experts took {few * 1e3:.3g} µs per token as built{corrected}, "
                   f"against {every * 1e3:.3g} µs with all {r['full_experts']} "
                   f"({few / every - 1.0:+.1%} as built); the forward {r['ratio'] - 1.0:+.1%} "
                   f"[{r['ratio_low'] - 1.0:+.1%}, {r['ratio_high'] - 1.0:+.1%}]")
    return out


def summarise(records: Sequence[Mapping[str, Any]], plan: Plan, *, duration_s: float | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    """The figure from the suite run's records (pure)."""
    table = rows(records)
    failed = failures(records)
    squeezed = [reason for r in records if fields.get(r, "combination.experts") is None
                for reason in [_reduced_by_preflight(r)] if reason]
    missing = [f"{m.model} with {n} experts, {mode}" for m in plan.models for n in m.counts for mode in plan.modes
               if not any(r["model"] == m.model and r["experts"] == n and r["mode"] == mode for r in table)]
    method_notes = [
        f"{' and '.join(plan.modes)} at {plan.seq_len} tokens (decode: one token after them), batch 1, fp32, "
        f"SDPA, {plan.scale} widths; each model measured with every routed expert and with fewer, at the same "
        f"depth, in one suite run: {plan.rounds} rounds of each combination ({plan.budget_s:g} s of timing "
        "split over them), each round a fresh worker process, round r of every combination in one shuffled "
        "stretch of the run. Every step runs an even draw of its routing (reportgen.profile.routing).",
        "Models: " + "; ".join(
            f"`{m.model}`, {m.source}, with {', '.join(str(n) for n in m.counts)} experts beside all" for m in
            plan.models) + ".",
        "Latency: the reduced median scaled as reportgen scales a reduced model (reportgen.depth; "
        "`router_factor`): the router's time by full / measured experts, the experts' time by the build's "
        "measured correction (`experts_factor`: its experts module timed widened to every expert against its own "
        "call, reportgen.profile.expertcost), over the median with every expert; the median of the rounds' "
        "ratios (round r of both, minutes apart at most, so the host's drift cancels), with a two-level 95% "
        "bootstrap over the paired rounds and the samples within each, each replicate scaled by a resample "
        "of the correction's own pairs.",
        "Shares: the headline attribution method's (`share_method`; the router's and the experts' time scaled "
        "the same way), each category's share with fewer experts less its share with every expert, with a 95% "
        "bootstrap over both records' attributed iterations.",
        f"A row passes when the latency ratio and its whole interval are within {LATENCY_TOLERANCE:.0%} of 1 "
        f"and every share difference and its whole interval within {SHARE_TOLERANCE * 100:.0f} points.",
    ]
    extra = {"plan": plan_dict(plan),
             "tolerances": {"latency": LATENCY_TOLERANCE, "share": SHARE_TOLERANCE}}
    if not table:
        return figure(TITLE, QUESTION, value=None, unit="ratio", goal=GOAL, goal_spec=None,
                      status="not measured", duration_s=duration_s, extra=extra,
                      notes=[*method_notes, *notes, *squeezed,
                             *(failed or ["no reduced record with its model measured with every expert"])])
    worst = max(table, key=lambda r: max(abs(r["ratio_low"] - 1.0), abs(r["ratio_high"] - 1.0)))
    passed = all(r["verdict"] == "pass" for r in table) and not missing
    contended = [str(fields.get(r, "id")) for r in records if is_ok(r) and unstable_reason(r)]
    summary = [
        f"{sum(r['verdict'] == 'pass' for r in table)} of {len(table)} expert-reduced combinations within "
        "both tolerances.",
        *[f"{_label(r)}: latency "
          f"{r['ratio'] - 1.0:+.1%} [{r['ratio_low'] - 1.0:+.1%}, {r['ratio_high'] - 1.0:+.1%}] of the latency "
          f"with every expert, worst share {r['worst_share_category']} {_pct(r['worst_share_diff'])} points "
          f"[{_pct(r['worst_share_low'])}, {_pct(r['worst_share_high'])}]"
          for r in table if r["verdict"] != "pass"],
        *_time_notes(table),
        *[f"{m}: not measured beside the model with every expert" for m in missing],
        *squeezed,
        *([f"Measured under contention (too few clean rounds, or a contended profiled pass; each row's "
           f"`unstable` says why): {len(contended)} of {len(records)} combinations: " + ", ".join(contended) + "."]
          if contended else []),
    ]
    return figure(
        TITLE, QUESTION, value=worst["ratio"], unit="ratio", interval=[worst["ratio_low"], worst["ratio_high"]],
        interval_kind="95% two-level bootstrap over the paired rounds of the worst row",
        goal=GOAL, goal_spec={"kind": "ratio_within", "target": LATENCY_TOLERANCE},
        status="pass" if passed else "fail",
        notes=[*summary, *method_notes, *notes, *(f"Failed: {f}" for f in failed)],
        rows=table, duration_s=duration_s, extra=extra)


# ---------------------------------------------------------------- measuring


def run(plan: Plan, scratch: Path, *, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False,
        command: str = "python scripts/bench.py --only experts") -> dict[str, Any]:
    """Measure ``plan``'s suite into ``scratch/runs`` and summarise it; a run stopped part
    way is resumed (its finished rounds kept), a finished one measured again from scratch."""
    from reportgen.bench import efficiency
    from reportgen.records.schema import iter_runs
    from reportgen.suite import load_suite

    if stop():
        return summarise([], plan, notes=["time limit reached before the figure started"])
    t0 = time.perf_counter()
    runs = scratch / "runs"
    if run_finished(runs):
        shutil.rmtree(runs)
    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "expert-check.toml"
    path.write_text(suite_text(plan), encoding="utf-8")
    suite = load_suite(path)
    log(f"  experts: {len(suite.combinations())} combinations in {plan.rounds} rounds -> {runs}")
    measured = efficiency.run_suite(suite, runs, command=command, force=False, timeout_s=plan.timeout_s)
    here = measured.run_dir.resolve()
    records = next((list(r.combination_records()) for r in iter_runs(runs) if r.path.resolve() == here),
                   measured.records)
    for record in records:
        log(f"  experts {fields.get(record, 'id')}: {fields.get(record, 'status')} "
            f"{fields.get(record, 'timing.median')} ms")
    return summarise(records, plan, duration_s=time.perf_counter() - t0)
