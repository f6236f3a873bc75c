"""Depth-reduced measurement (``--layers N``) against the same models measured whole.

``--layers N`` measures a model at its full width with N of its layers and extrapolates
its whole-model latency and category shares by layer kind (``reportgen.depth``).
METHOD.md rule 10c shows such a figure only for a method validated against full-depth
measurements of models that fit. This figure is that validation: a dense, a
mixture-of-experts and a hybrid model that fit this host whole, each measured whole and
with 2, 4 and 8 of its layers (prefill, 128 tokens, batch 1, fp32), paired forward by
forward (``depth_rounds``): in each round a model's builds (whole and reduced) share a
fresh process and run in cycles, one forward of each back to back, then their hooks
passes in cycles the same way.

On a shared 2-core host the speed moves by tens of percent between moments a minute
apart, which a ratio of two medians taken at different moments does not cancel; the
forwards of one cycle share their moment. Per round, the product's extrapolation
(``depth.extrapolate``, from that round's hooks pass over the reduced build) gives each
count's factor g (whole-model time over the reduced forward's), and:

* **Latency**: per cycle, g times the reduced forward over the whole forward; the
  estimate is the Hodges-Lehmann centre of the cycles' log ratios, less 1.
* **Shares**: per round, each category's extrapolated share less the share the whole
  build's hooks pass measured (one attribution method on both sides: the module-boundary
  clocks the extrapolation scales by); the estimate is the Hodges-Lehmann centre of the
  rounds' differences.
* **Linearity**: per round, the line latency = a + b x layers through the reduced
  builds' medians over its cycles, at the model's full depth, against the whole build's
  median (the extrapolation assumes each missing layer costs what a measured one did);
  the estimate is the Hodges-Lehmann centre of the rounds' log ratios.

Each interval is a 95% two-level percentile bootstrap (``stats.bootstrap.two_level``):
rounds drawn with replacement, then within each drawn round its cycles (shares: rounds
only, one hooks pass per build and round). One rule reads every row and every line
(``within``): it passes when its estimate and both ends of its interval lie within the
tolerance, with at least ``MIN_ROUNDS`` rounds. An interval reaching past the tolerance
has not shown agreement and fails as a point outside does: more rounds, not a friendlier
rule, are the remedy for a noisy host.

The computation from units (``model_figures``, ``summarise``) is pure; ``run`` measures.
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
from reportgen.bench.results import figure
from reportgen.intervals import hierarchical_median_ci
from reportgen.stats.basic import percentiles
from reportgen.stats.bootstrap import two_level

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

NAME = "depth_extrapolation"
TITLE = "Depth-reduced measurement"
QUESTION = (
    "Do the whole-model latency and category shares that reportgen extrapolates from a model "
    "measured with a few of its layers (--layers N) agree with the same model measured whole, "
    "and does a forward's latency grow linearly with its layer count?")
LATENCY_TOLERANCE = 0.05  # extrapolated / measured - 1
SHARE_TOLERANCE = 0.02  # a share's extrapolated less its measured value, in absolute terms (2 points)
LINE_TOLERANCE = 0.05  # measured whole / the line's value at full depth - 1
COUNTS: tuple[int, ...] = (2, 4, 8)
MODE = "prefill"
SEQ_LEN = 128
REPLICATES = 2000
SEED = 0
CONFIDENCE = 0.95
# the fewest paired rounds whose interval says anything of the rounds' spread
MIN_ROUNDS = 3
GOAL = (f"every extrapolated whole-model latency within {LATENCY_TOLERANCE:.0%} of the whole model measured in "
        f"the same rounds and every category share within {SHARE_TOLERANCE * 100:.0f} points of its measured "
        "share, for a dense, a mixture-of-experts and a hybrid model; each model's whole measurement within "
        f"{LINE_TOLERANCE:.0%} of the line through its medians at fewer layers; each estimate and its whole 95% "
        "interval (over paired rounds) inside its tolerance")


@dataclass(frozen=True)
class DepthModel:
    """One model of the figure: its ``group`` (``dense``, ``moe``, ``hybrid``), the model a
    suite names (a preset at full depth) and where its configuration comes from."""

    group: str
    model: str
    source: str


MODELS: tuple[DepthModel, ...] = (
    DepthModel("dense", "llama-small", "the llama-small preset (Llama architecture, 12 layers, 768 wide)"),
    DepthModel("moe", "granitemoe-1b-a400m",
               "ibm-granite/granite-3.0-1b-a400m's config (24 layers, 32 experts, 8 per token)"),
    DepthModel("hybrid", "falcon-h1-0.5b",
               "the catalog's tiiuae/Falcon-H1-0.5B (36 layers, attention beside a Mamba-2 mixer in each)"),
)


@dataclass(frozen=True)
class Plan:
    """What the figure measures and how long: ``rounds`` rounds, in each every model built
    whole and at each of ``counts`` layers, their forwards in cycles for ``budget_s`` (at
    least ``min_cycles``; each build warmed up for up to a third of that first), then each build
    clocked by the hooks method (at least ``hooks_iterations`` forwards, ``hooks_budget_s``)."""

    models: tuple[DepthModel, ...] = MODELS
    counts: tuple[int, ...] = COUNTS
    mode: str = MODE
    seq_len: int = SEQ_LEN
    scale: str = "reference"
    # eight rounds; in each, cycles of one forward of every build for 6 s, at least six (a
    # cycle of the two larger models takes about 1.8 s on a quiet 2-core host: a second
    # whole, the rest its 2, 4 and 8 layers): with three, the resampling within a round
    # left granite's paired latency interval about 9 points wide while llama-small's 15
    # cycles gave 3. Six rounds (the fewest whose bootstrap over rounds states 95%) left
    # one row of nine, a different one in each of two runs, with an interval end a few
    # tenths past its bound (falcon's 2 layers at -5.3%, llama-small's MLP share at +2.2
    # points): two more rounds, and longer hooks passes for the shares. Eight rounds, in
    # runs on two days, passed every row but left falcon's line estimate at -1.7% and
    # +3.0% with intervals about 9 points wide (a line through 2 to 8 layers read at 36
    # multiplies the slope's noise), and llama-small's MLP share at 2 layers +0.5 points
    # [-1.2, +3.0] (the whole build's hooks passes read its attention core's share between
    # 7.6% and 10.8% over the rounds): ten rounds, and twelve clocked forwards a build
    rounds: int = 10
    budget_s: float = 6.0
    min_cycles: int = 6
    # twelve clocked forwards of each build a round, 3 s at most: one burst of a busy host
    # in a pass of three moved a 2-layer build's first layer to several times its second's
    hooks_budget_s: float = 3.0
    hooks_iterations: int = 12
    # one unit at most (a model of a billion parameters built, timed and clocked on a
    # busy 2-core host)
    timeout_s: float = 1800.0


def plan_dict(plan: Plan) -> dict[str, Any]:
    """``plan`` as the figure stores it (``plan_of`` reads it back)."""
    return dataclasses.asdict(plan)


def plan_of(stored: Mapping[str, Any] | None, default: Plan) -> Plan:
    """The plan a figure stored (``plan_dict``), else ``default`` (a figure stored before
    it kept its plan, or before it measured in paired rounds: then ``default``)."""
    return stored_plan(stored, default, DepthModel)


QUICK = Plan(models=MODELS[:1], seq_len=32, rounds=MIN_ROUNDS, budget_s=1.0, hooks_budget_s=0.3, timeout_s=900.0)


# ---------------------------------------------------------------- from units (pure)


def within(point: float | None, low: float | None, high: float | None, tolerance: float) -> bool:
    """The one verdict rule of every row and line: the estimate and both ends of its
    interval within ``tolerance`` either side of no difference."""
    values = (point, low, high)
    return all(v is not None and math.isfinite(v) and abs(v) <= tolerance for v in values)


def extrapolation(build: Mapping[str, Any], median: float) -> dict[str, Any] | None:
    """What ``--layers N`` says of the whole model from one reduced build of a round: its
    median there and its hooks pass through ``depth.extrapolate`` (None where it cannot)."""
    section = build.get("depth")
    if not isinstance(section, Mapping) or not median or not isinstance(build.get("hooks"), Mapping):
        return None
    return depth.extrapolate(section, {"median": median},
                             {"headline_method": "hooks", "methods": {"hooks": build["hooks"]}})


def _hl(values: Sequence[float] | NDArray[Any]) -> float:
    return stats.hodges_lehmann(values)


def line_log(full_layers: int, counts: Sequence[int], reduced: Sequence[float], whole: float) -> float:
    """log(whole / the line through (counts, reduced) at full depth); infinite where the
    line gives no positive latency there (the whole is then no distance from it at all)."""
    slope, intercept = stats.linear_fit([float(n) for n in counts], list(reduced))
    predicted = intercept + slope * full_layers
    return math.log(whole / predicted) if predicted > 0 and whole > 0 else math.inf


WHOLE = "whole"  # a unit's key for the whole model's build (a count keys each reduced one)


@dataclass(frozen=True)
class Block:
    """One model's paired rounds: per round, its cycles' forward times (one row per cycle;
    columns ``WHOLE`` then each count), each count's extrapolation factor, and each
    category's share difference (extrapolated less measured) per count."""

    rounds: tuple[int, ...]
    counts: tuple[int, ...]
    full_layers: int
    times: Sequence[NDArray[Any]]
    factors: Mapping[int, Sequence[float]]
    diffs: Mapping[int, Mapping[str, Sequence[float]]]
    # whether the counts are layer counts a line through the medians is judged on
    line: bool = True

    def logs(self, i: int, rows: NDArray[Any]) -> dict[Any, NDArray[Any]]:
        """Round ``i``'s log ratios from the given cycles: per cycle, each count's
        extrapolated time over the whole's; and once for the round (``line``), the whole's
        median over the line through the reduced builds' medians (a line through one
        cycle's forwards, extrapolated to several times the layers it was fitted on,
        would carry each forward's noise as many times over)."""
        import numpy as np

        t = self.times[i][rows]
        out: dict[Any, NDArray[Any]] = {n: np.log(self.factors[n][i] * t[:, j + 1] / t[:, 0])
                                        for j, n in enumerate(self.counts)}
        medians = np.median(t, axis=0)
        # fewer counts: no line is judged (``_fit``)
        fitted = self.line and len(set(self.counts)) >= stats.MIN_FIT_POINTS
        out["line"] = np.asarray([line_log(self.full_layers, self.counts, list(medians[1:]), float(medians[0]))
                                  if fitted else math.nan])
        return out

    def paired(self, reps: int, seed: int) -> tuple[dict[Any, Any], list[dict[Any, Any]]]:
        """(the estimates over every round and cycle, their two-level bootstrap replicates:
        rounds drawn with replacement, then the cycles within each drawn round)."""
        import numpy as np

        point = self.estimates(range(len(self.rounds)), [np.arange(len(t)) for t in self.times])

        def replicate(rng: np.random.Generator, picked: NDArray[Any]) -> dict[Any, Any]:
            chosen = [int(p) for p in picked]
            return self.estimates(chosen, [rng.integers(0, len(self.times[i]), size=len(self.times[i]))
                                           for i in chosen])

        return point, two_level(len(self.rounds), replicate, reps=reps, seed=seed, picks="per-replicate")

    def estimates(self, picked: Sequence[int], rows: Sequence[NDArray[Any]]) -> dict[Any, Any]:
        """The estimates over the ``picked`` rounds (each with its ``rows`` of cycles): each
        count's latency ratio less 1 and its share differences, and the line's ratio less 1."""
        import numpy as np

        per_round = [self.logs(i, r) for i, r in zip(picked, rows)]
        out: dict[Any, Any] = {}
        for n in [*self.counts, "line"]:
            pooled = np.concatenate([p[n] for p in per_round])
            out[n] = {"rel": math.exp(_hl(pooled)) - 1.0}
        for n in self.counts:
            out[n]["shares"] = {c: _hl([d[i] for i in picked]) for c, d in self.diffs[n].items()}
        return out


def _share(build: Mapping[str, Any] | Any, category: str) -> float:
    entry = ((build or {}).get("categories") or {}).get(category) or {}
    return float(entry.get("share") or 0.0)


def block(units: Sequence[Mapping[str, Any]], counts: Sequence[int]) -> tuple[Block | None, dict[int, list[Any]],
                                                                             list[int]]:
    """One model's rounds with every build timed and extrapolated: (the block, or None
    without one; each count's extrapolations by round; the rounds left out)."""
    import numpy as np

    columns = [WHOLE, *(str(n) for n in counts)]
    kept: list[Mapping[str, Any]] = []
    found: dict[int, list[Any]] = {n: [] for n in counts}
    dropped: list[int] = []
    for unit in sorted(units, key=lambda u: int(u["round"])):
        builds, cycles = unit.get("builds") or {}, unit.get("cycles") or []
        timed = bool(cycles) and all(c in row for row in cycles for c in columns)
        got = {n: extrapolation(builds.get(str(n)) or {}, stats.median([row[str(n)] for row in cycles]))
               if timed else None for n in counts}
        if timed and WHOLE in builds and all(v is not None for v in got.values()):
            kept.append(unit)
            for n in counts:
                found[n].append(got[n])
        else:
            dropped.append(int(unit["round"]))
    if not kept:
        return None, found, dropped
    full_layers = int(kept[0]["builds"][str(counts[0])]["depth"]["full_layers"])
    times = [np.asarray([[row[c] for c in columns] for row in u["cycles"]], dtype=float) for u in kept]
    diffs: dict[int, dict[str, list[float]]] = {}
    for n in counts:
        categories = dict.fromkeys([c for f in found[n] for c in f["categories"]]
                                   + [c for u in kept for c in u["builds"][WHOLE]["hooks"]["categories"]])
        diffs[n] = {}
        for c in categories:
            pairs = [(_share(f, c), _share(u["builds"][WHOLE]["hooks"], c)) for f, u in zip(found[n], kept)]
            if any(e or m for e, m in pairs):  # a category neither side has is left out
                diffs[n][c] = [e - m for e, m in pairs]
    factors = {n: [float(f["factor"]) for f in found[n]] for n in counts}
    return (Block(tuple(int(u["round"]) for u in kept), tuple(counts), full_layers, times, factors, diffs),
            found, dropped)


def _interval(draws: Sequence[float | None]) -> tuple[float, float]:
    kept = [float(d) for d in draws if d is not None and not math.isnan(d)]  # an infinite draw counts
    return percentiles(kept, CONFIDENCE) if kept else (math.nan, math.nan)


def _ci(groups: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    ci = hierarchical_median_ci(groups)
    return float(ci["median"]), float(ci["ci_low"]), float(ci["ci_high"])


def _centre(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return _hl(found) if found else None


def _unstable(units: Sequence[Mapping[str, Any]]) -> str | None:
    contended = [u for u in units if u.get("contended")]
    if not contended:
        return None
    reason = contended[0].get("contention") or "the host was busy"
    more = ", ..." if len(contended) > 1 else ""
    return f"{len(contended)} of {len(units)} rounds contended ({reason}{more})"


def _clean(units: Sequence[Mapping[str, Any]], label: str,
           fewest: int = MIN_ROUNDS) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The rounds a figure reads: those whose cycles no other process disturbed, where at
    least ``fewest`` remain (every round otherwise, ``_unstable`` saying so), and the
    note naming the rounds left out."""
    clean = [u for u in units if not u.get("contended")]
    if len(clean) < len(units) and len(clean) >= fewest:
        left = sorted(int(u["round"]) + 1 for u in units if u.get("contended"))
        return clean, [f"{label}: rounds {', '.join(map(str, left))} left out (contended)"]
    return list(units), []


def _routing(units: Sequence[Mapping[str, Any]], name: str) -> float | None:
    """The busiest expert's tokens over the mean, averaged over a build's MoE layers (its
    first round's): 1 under the even draw; random-weight routers route less evenly the
    deeper a layer sits."""
    for u in units:
        routing = ((u.get("builds") or {}).get(name) or {}).get("routing")
        if isinstance(routing, Mapping) and routing.get("mean_max_over_mean") is not None:
            return float(routing["mean_max_over_mean"])
    return None


def _drawn(units: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the builds ran the even draw (``reportgen.profile.routing``)."""
    return any(((u.get("builds") or {}).get(name) or {}).get("routing", {}).get("routing") == "even"
               for u in units for name in (u.get("builds") or {}))


def kept_layers(reduced: Mapping[str, Any], whole: Mapping[str, Any]) -> float | None:
    """How much slower (positive) the layers a reduced build keeps ran in the whole build's
    own hooks pass than its average layer did: mean time of the kept positions (the
    depth section's ``index``) over the mean of all, less 1. What the choice of layers
    alone adds to the extrapolation, read at one moment in one pass; None where the
    whole pass has no per-layer times for those positions."""
    layers = [sum(float(v) for v in (row.get("categories") or {}).values())
              for row in (whole.get("hooks") or {}).get("per_layer") or []]
    kept = [int(m["index"]) for m in ((reduced.get("depth") or {}).get("measured_layers") or [])]
    if not layers or not kept or max(kept) >= len(layers) or sum(layers) <= 0:
        return None
    return (sum(layers[i] for i in kept) / len(kept)) / (sum(layers) / len(layers)) - 1.0


def layer_cost(reduced: Mapping[str, Any], whole: Mapping[str, Any]) -> float | None:
    """A reduced build's mean layer time over the whole build's mean layer time, less 1,
    each from its own hooks pass of the round: what the extrapolation assumes is 0 (each
    missing layer costs what a kept one did); None without per-layer times."""
    def mean(build: Mapping[str, Any]) -> float | None:
        rows = (build.get("hooks") or {}).get("per_layer") or []
        total = sum(sum(float(v) for v in (r.get("categories") or {}).values()) for r in rows)
        return total / len(rows) if rows and total > 0 else None

    kept, full = mean(reduced), mean(whole)
    return kept / full - 1.0 if kept is not None and full is not None else None


def model_figures(model: DepthModel, units: Sequence[Mapping[str, Any]], counts: Sequence[int], *,
                  reps: int = REPLICATES, seed: int = SEED) -> tuple[list[dict[str, Any]], dict[str, Any] | None,
                                                                      list[str]]:
    """One model's rows (one per count), its line, and notes, from its units (pure). Rounds
    whose cycles ran while another process took the cores are left out where at least
    ``MIN_ROUNDS`` others remain (every round is used otherwise, and each row says so)."""
    import numpy as np

    units, notes = _clean(units, model.model)
    found_block, found, dropped = block(units, counts)
    notes += [f"{model.model}: rounds {', '.join(str(r + 1) for r in dropped)} left out (a build of the round not "
              "timed or not extrapolated)"] if dropped else []
    if found_block is None:
        return [], None, notes
    b = found_block
    k = len(b.rounds)
    every = [np.arange(len(t)) for t in b.times]
    point, draws = b.paired(reps, seed)
    kept = [u for u in units if int(u["round"]) in b.rounds]
    whole_ms = _ci([list(t[:, 0]) for t in b.times])
    rows: list[dict[str, Any]] = []
    for j, n in enumerate(counts, start=1):
        rel = point[n]["rel"]
        rel_low, rel_high = _interval([d[n]["rel"] for d in draws])
        shares: dict[str, dict[str, Any]] = {}
        for c, diffs in b.diffs[n].items():
            low, high = _interval([d[n]["shares"][c] for d in draws])
            measured = [_share(u["builds"][WHOLE]["hooks"], c) for u in kept]
            shares[c] = {"extrapolated": sum(m + d for m, d in zip(measured, diffs)) / k,
                         "measured": sum(measured) / k, "diff": point[n]["shares"][c],
                         "diff_low": low, "diff_high": high}
        worst = max(shares, key=lambda c: max(abs(shares[c][x]) for x in ("diff", "diff_low", "diff_high")),
                    default=None)
        reduced_ms = _ci([list(t[:, j]) for t in b.times])
        extrapolated = _ci([list(f * t[:, j]) for f, t in zip(b.factors[n], b.times)])
        # the extrapolation's own interval: the rounds' times the bootstrap over the measured layers
        low = extrapolated[1] * stats.median([f["factor_low"] / f["factor"] for f in found[n]])
        high = extrapolated[2] * stats.median([f["factor_high"] / f["factor"] for f in found[n]])
        latency_ok = within(rel, rel_low, rel_high, LATENCY_TOLERANCE)
        shares_ok = all(within(s["diff"], s["diff_low"], s["diff_high"], SHARE_TOLERANCE) for s in shares.values())
        rows.append({
            "model": model.model, "group": model.group, "layers": n, "full_layers": b.full_layers,
            "rounds": k, "cycles": int(sum(len(t) for t in b.times)),
            "reduced_ms": reduced_ms[0], "reduced_low_ms": reduced_ms[1], "reduced_high_ms": reduced_ms[2],
            "extrapolated_ms": extrapolated[0], "extrapolated_low_ms": low, "extrapolated_high_ms": high,
            "measured_ms": whole_ms[0], "measured_low_ms": whole_ms[1], "measured_high_ms": whole_ms[2],
            "ratio": 1.0 + rel, "rel_diff": rel, "rel_diff_low": rel_low, "rel_diff_high": rel_high,
            "round_rel_diffs": [math.exp(_hl(b.logs(i, every[i])[n])) - 1.0 for i in range(k)],
            # each side's median over every round's cycles, divided: the pairing left out
            "unpaired_rel_diff": extrapolated[0] / whole_ms[0] - 1.0,
            "inside": low <= whole_ms[0] <= high,
            "worst_share_category": worst,
            "worst_share_diff": shares[worst]["diff"] if worst else None,
            "worst_share_low": shares[worst]["diff_low"] if worst else None,
            "worst_share_high": shares[worst]["diff_high"] if worst else None,
            "share_diffs": {c: s["diff"] for c, s in shares.items()}, "shares": shares, "share_method": "hooks",
            "routing_max_over_mean": {"reduced": _routing(kept, str(n)), "whole": _routing(kept, WHOLE)},
            "routing_drawn": _drawn(kept),
            "kept_layers_rel_diff": _centre([kept_layers(u["builds"][str(n)], u["builds"][WHOLE]) for u in kept]),
            "layer_rel_diff": _centre([layer_cost(u["builds"][str(n)], u["builds"][WHOLE]) for u in kept]),
            "extrapolation_notes": list(dict.fromkeys(x for f in found[n] for x in f["notes"])),
            "unstable": _unstable(kept),
            "latency_ok": latency_ok, "shares_ok": shares_ok,
            "verdict": "pass" if latency_ok and shares_ok and k >= MIN_ROUNDS else "fail",
        })
    line = _fit(model, rows, point["line"]["rel"], _interval([d["line"]["rel"] for d in draws]), b.full_layers)
    return rows, line, notes


def _fit(model: DepthModel, rows: Sequence[Mapping[str, Any]], rel: float, interval: tuple[float, float],
         full_layers: int) -> dict[str, Any] | None:
    """The line through the pooled medians at fewer layers (shown), with the paired
    estimate of the whole measurement against it (judged)."""
    points = sorted((int(r["layers"]), float(r["reduced_ms"])) for r in rows)
    if len({x for x, _ in points}) < stats.MIN_FIT_POINTS:
        return None
    line = stats.linear_fit_stats([float(x) for x, _ in points], [y for _, y in points])
    first = rows[0]
    return {
        "model": model.model, "group": model.group, "full_layers": full_layers, "layers": [x for x, _ in points],
        "slope_ms": line["slope"], "slope_low_ms": line["ci_low"], "slope_high_ms": line["ci_high"],
        "intercept_ms": line["intercept"], "r2": line["r2"],
        "residuals_ms": {str(x): r for (x, _), r in zip(points, line["residuals"])},
        "predicted_full_ms": line["intercept"] + line["slope"] * full_layers,
        "measured_full_ms": first["measured_ms"],
        "measured_low_ms": first["measured_low_ms"], "measured_high_ms": first["measured_high_ms"],
        "line_rel_diff": rel if math.isfinite(rel) else None,  # JSON has no infinity
        "line_rel_low": interval[0], "line_rel_high": interval[1],
        "on_line": within(rel, *interval, LINE_TOLERANCE) and int(first["rounds"]) >= MIN_ROUNDS,
    }


def _reach(row: Mapping[str, Any]) -> float:
    values = [row.get(k) for k in ("rel_diff", "rel_diff_low", "rel_diff_high")]
    return max((abs(v) if v is not None and math.isfinite(v) else math.inf) for v in values)


def _row_line(r: Mapping[str, Any]) -> str:
    share = r["worst_share_category"]
    return (f"{r['model']} at {r['layers']} of {r['full_layers']} layers: extrapolated latency {r['rel_diff']:+.1%} "
            f"[{r['rel_diff_low']:+.1%}, {r['rel_diff_high']:+.1%}] of the whole, paired by cycle"
            + (f", worst share {share} {r['worst_share_diff'] * 100:+.1f} points [{r['worst_share_low'] * 100:+.1f}, "
               f"{r['worst_share_high'] * 100:+.1f}]" if share else "")
            + (f" ({r['rounds']} paired rounds, fewer than {MIN_ROUNDS})" if r["rounds"] < MIN_ROUNDS else ""))


def _routing_notes(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per mixture of experts: how evenly its experts' tokens were spread in each build,
    and how much slower the layers each reduced build keeps ran in the whole build
    (``kept_layers``): what does not scale with the layer count."""
    out = []
    for model in dict.fromkeys(str(r["model"]) for r in table):
        rows = [r for r in table if r["model"] == model]
        routing = [r.get("routing_max_over_mean") or {} for r in rows]
        drawn = any(r.get("routing_drawn") for r in rows)
        if not any(x.get("whole") is not None for x in routing):
            continue
        reduced = ", ".join(f"{r['layers']} layers {x['reduced']:.2f}" for r, x in zip(rows, routing)
                            if x.get("reduced") is not None)
        kept = ", ".join(f"{r['layers']} layers {r['kept_layers_rel_diff']:+.1%}" for r in rows
                         if r.get("kept_layers_rel_diff") is not None)
        cost = ", ".join(f"{r['layers']} layers {r['layer_rel_diff']:+.1%}" for r in rows
                         if r.get("layer_rel_diff") is not None)
        how = ("an even draw: every expert of a layer the same tokens, to one" if drawn else
               "random-weight routers spread tokens less evenly the more layers precede them, and a reduced "
               "build's layers have fewer before them")
        out.append(f"{model}: the busiest expert's tokens over the mean, averaged over the layers: "
                   f"{routing[0]['whole']:.2f} whole, {reduced} ({how}); a reduced "
                   f"build's mean layer against the whole build's: {cost or 'not read'}; of which the layers kept, "
                   f"timed in the whole build: {kept or 'not read'}. What the choice of layers adds is not "
                   "corrected: the extrapolation assumes each missing layer costs what a kept one did.")
    return out


def summarise(units: Sequence[Mapping[str, Any]], plan: Plan, *, duration_s: float | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    """The figure from the measured units (pure)."""
    table: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    block_notes: list[str] = []
    for m in plan.models:
        rows, line, said = model_figures(m, [u for u in units if u.get("model") == m.model], plan.counts)
        table += rows
        lines += [line] if line is not None else []
        block_notes += said
    missing = [m for m in plan.models if not any(r["model"] == m.model for r in table)]
    unfitted = [m for m in plan.models if m not in missing and not any(f["model"] == m.model for f in lines)]
    described = [f"{m.group}: `{m.model}`, {m.source}" for m in plan.models]
    method_notes = [
        f"{plan.mode}, {plan.seq_len} tokens, batch 1, fp32, SDPA, {plan.scale} widths; {plan.rounds} rounds, in "
        "each every model (in a shuffled order) in a fresh process of its own, built whole and with "
        f"{', '.join(str(n) for n in plan.counts)} of its layers, all resident: cycles of one unprofiled forward "
        f"of each build back to back, each cycle in its own shuffled order, for {plan.budget_s:g} s (at least "
        f"{plan.min_cycles}), then the builds' hooks passes interleaved the same way (cycles of one hooked forward "
        f"of each, at least {plan.hooks_iterations}, for {plan.hooks_budget_s:g} s a build).",
        "Models: " + "; ".join(described) + ".",
        f"Extrapolation (reportgen.depth): {depth.METHOD}; here each round's, from that round's reduced timing and "
        "its hooks pass. Shares on both sides are the hooks method's (the module-boundary clocks the "
        "extrapolation scales by).",
        "Paired by cycle: each cycle's reduced forward times its round's extrapolation factor, over the whole "
        "model's forward of the same cycle; the estimate is the Hodges-Lehmann centre of the cycles' log ratios. "
        "Shares paired by round: each category's extrapolated share less the whole model's of the same round, "
        "the estimate the Hodges-Lehmann centre of the rounds' differences. The line: per round, through the "
        "medians of its cycles at fewer layers, at full depth, against the whole build's median. Intervals: a "
        "95% two-level bootstrap (rounds, then the cycles within each).",
        f"A row passes when its latency estimate and interval lie within ±{LATENCY_TOLERANCE:.0%} and every "
        f"category's share difference and interval within ±{SHARE_TOLERANCE * 100:.0f} points; a line when its "
        f"estimate and interval lie within ±{LINE_TOLERANCE:.0%}; each needs {MIN_ROUNDS} paired rounds. A round "
        f"whose cycles ran while another process took the cores is left out where {MIN_ROUNDS} others remain. "
        "`inside` says whether the whole median lies in the extrapolation's own interval (the pooled rounds' "
        "times the bootstrap over the measured layers); `unpaired_rel_diff` divides each side's median over "
        "every round's cycles, the pairing left out.",
    ]
    if not table:
        return figure(TITLE, QUESTION, value=None, unit="fraction", goal=GOAL, goal_spec=None,
                      status="not measured", duration_s=duration_s, extra={"plan": plan_dict(plan)},
                      notes=[*method_notes, *notes, *block_notes, "no model measured whole and reduced"])
    worst = max(table, key=_reach)
    passed = (all(r["verdict"] == "pass" for r in table) and all(f["on_line"] for f in lines)
              and not missing and not unfitted)
    summary = [
        f"{sum(r['verdict'] == 'pass' for r in table)} of {len(table)} depth-reduced combinations within both "
        f"tolerances, interval and all; {sum(bool(f['on_line']) for f in lines)} of {len(lines)} models on their line.",
        *[_row_line(r) for r in table if r["verdict"] != "pass"],
        *[f"{f['model']}: the whole measurement is "
          + (f"{f['line_rel_diff']:+.1%} [{f['line_rel_low']:+.1%}, {f['line_rel_high']:+.1%}] off the line"
             if f["line_rel_diff"] is not None else "off lines that give no positive latency in most cycles")
          + f" at {f['full_layers']} layers" for f in lines if not f["on_line"]],
        *[f"{m.model}: not measured whole and reduced" for m in missing],
        *[f"{m.model}: fewer than {stats.MIN_FIT_POINTS} layer counts to fit a line through" for m in unfitted],
        *[f"{r['model']} at {r['layers']} layers: measured under contention: {r['unstable']}"
          for r in table if r["unstable"]],
        *_routing_notes(table),
    ]
    return figure(
        TITLE, QUESTION, value=worst["rel_diff"], unit="fraction",
        interval=[worst["rel_diff_low"], worst["rel_diff_high"]],
        interval_kind=("95% two-level bootstrap over rounds (then the paired cycles within each) of the row "
                       "whose interval reaches furthest from agreement"),
        goal=GOAL, goal_spec={"kind": "rel_within", "target": LATENCY_TOLERANCE},
        status="pass" if passed else "fail",
        notes=[*summary, *method_notes, *notes, *block_notes],
        rows=table, duration_s=duration_s,
        extra={"fits": lines, "plan": plan_dict(plan),
               "tolerances": {"latency": LATENCY_TOLERANCE, "share": SHARE_TOLERANCE, "line": LINE_TOLERANCE}},
    )


# ---------------------------------------------------------------- measuring


def run(plan: Plan, scratch: Path, *, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Measure ``plan``'s units into ``scratch`` (``depth_rounds.measure``: a stopped run
    is resumed, a finished one measured again) and summarise them."""
    from reportgen.bench import depth_rounds

    if stop():
        return summarise([], plan, notes=["time limit reached before the figure started"])
    t0 = time.perf_counter()
    combos = len(plan.models) * (len(plan.counts) + 1)
    log(f"  depth: {combos} combinations in {plan.rounds} paired rounds -> {scratch}")
    units, notes = depth_rounds.measure(plan, scratch, log=log, stop=stop)
    return summarise(units, plan, duration_s=time.perf_counter() - t0, notes=notes)
