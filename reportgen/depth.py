"""Whole-model figures of a combination measured with fewer layers than its model has
(``--layers N``): extrapolated by layer kind from the layers measured.

Each measured layer's milliseconds per category come from one attribution method, whose
categories and forward the whole-model figures then follow (``attribution_method``): the
headline method's where it times each layer (on a CPU the module-boundary clocks of an
unprofiled pass, the hooks method's ``per_layer``), else the profiler's (the attribution's
``per_layer``, means over the profiled iterations; on a GPU, and in records made before
the hooks method timed layers). On a CPU the profiler's per-op recording does not cost
the same in every layer of a pass: once a pass has recorded enough events (where varies
from run to run), a layer made of many small ops (a state-space mixer's reference path)
runs slower than it does unprofiled, its small ops taking fresh memory pages on every
call, while a few large matrix products do not; a profiled pass of the whole model and
one of a few layers then apportion the same layers differently. A layer's busy time is the sum of
its categories (the ``overhead`` of idle and launch gaps is the forward's, not a layer's).
For each kind, the mean over its measured layers stands for each of its layers the model
has and the measurement lacks:

    whole busy  = measured busy + sum over kinds (full count - measured count) x mean layer time
    g           = whole busy / measured busy
    whole       = measured median x g           (embeddings and head counted once, as measured)

Each category scales the same way (its measured time plus the missing layers' mean time in
it), the forward's overhead grows with the busy time (g), and shares are the categories'
whole times over the whole. Intervals carry the layer-to-layer spread: a percentile
bootstrap over the measured layers, resampled within each kind, gives g's interval, and
the whole median's interval is the measured median's interval times it (both ends).
A kind measured in one layer has no spread to resample: its layer's time stands with no
interval of its own, and ``notes`` says so. Parameters, weight bytes and analytic FLOPs of
the whole model are counted exactly (built on the meta device), not extrapolated.

A mixture of experts built with fewer routed experts per layer (``--experts``, or the
pre-flight's reduction; the section's ``experts``: ``measured`` of ``full``) keeps each
token's work: the same top-k experts of the same size, the shared experts, the router's
input width. Its FLOPs per token therefore stand as measured, and its time too except in
two parts: the router's own matmul scores every expert, so ``moe.router`` is scaled by
full / measured; and the routed experts share the step's tokens among fewer experts than
the whole model's (larger products over fewer weights, which run faster per token where
each of the whole model's experts would get only a few tokens), so ``moe.experts`` is
scaled by the factor the build measured by calling its experts with the whole model's
routing and with its own (``reportgen.profile.expertcost``; its interval comes into the
bootstrap, the pairs it was measured in drawn with the layers). Parameters and weight
memory are the whole model's with every expert resident (the meta-device count of the
whole config).

Pure: both sides import it (the executor finishes a record's ``depth`` section here once
its timing is final; the render side only reads it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportgen.presets import PRESET_FULL_LAYERS, PRESETS
from reportgen.records import fields
from reportgen.stats.basic import median as median_of
from reportgen.stats.basic import percentiles
from reportgen.stats.bootstrap import CONFIDENCE, SHARE_REPLICATES, draws

OVERHEAD = "overhead"
ROUTER = "moe.router"
EXPERTS = "moe.experts"
PROFILER_SLOWDOWN = 1.5  # a profiled pass slower than this many unprofiled forwards is noted
SEED = 0
PROFILER = "profiler"
METHOD = ("per-kind mean of the measured layers' time (the headline attribution method's where it times "
          "each layer, else the profiler's), times the layers of that kind the measurement lacks; "
          "interval: the measured median's, times a bootstrap over the measured layers within each kind")


def basis(attribution: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], Sequence[Any]]:
    """The attribution method the extrapolation scales: (its name, its section, its
    per-layer rows). The headline method where it times each layer, else the profiler's
    (its section under ``methods``, or the attribution itself in a record with one
    method; its per-layer rows are the attribution's own)."""
    methods = attribution.get("methods") or {}
    headline = str(attribution.get("headline_method") or PROFILER)
    chosen = methods.get(headline)
    if headline != PROFILER and isinstance(chosen, Mapping) and chosen.get("per_layer"):
        return headline, chosen, chosen["per_layer"]
    return PROFILER, methods.get(PROFILER) or attribution, attribution.get("per_layer") or []


def _layer_rows(depth: Mapping[str, Any], per_layer: Sequence[Any]) -> dict[str, list[dict[str, float]]]:
    """Each kind's measured layers' category times (ms per forward), from ``per_layer``."""
    by_fqn = {str(row.get("layer")): row.get("categories") or {} for row in per_layer}
    rows: dict[str, list[dict[str, float]]] = {}
    for layer in depth.get("measured_layers") or []:
        cats = by_fqn.get(str(layer.get("layer")))
        if cats is None:
            continue
        rows.setdefault(str(layer["kind"]), []).append(
            {c: float(v) for c, v in cats.items() if c != OVERHEAD and isinstance(v, (int, float))})
    return rows


def _extra(rows: Mapping[str, list[dict[str, float]]], missing: Mapping[str, int],
           picks: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Per category: the missing layers' time, each kind's at the mean of its picked layers."""
    out: dict[str, float] = {}
    for kind, count in missing.items():
        chosen = [rows[kind][i] for i in picks[kind]]
        for row in chosen:
            for cat, ms in row.items():
                out[cat] = out.get(cat, 0.0) + count * ms / len(chosen)
    return out


def _memory(depth: Mapping[str, Any], memory: Mapping[str, Any] | None) -> dict[str, Any]:
    """The whole model's weights (counted exactly) and the measured peak with the missing
    layers' weights added (a forward frees each layer's activations as it returns, so the
    weights are what more layers add; a decode's cache grows with them too, and is not
    counted)."""
    weights, full_weights = depth.get("weight_bytes"), depth.get("full_weight_bytes")
    peak = (memory or {}).get("peak_allocated_bytes")
    out: dict[str, Any] = {"weight_bytes": full_weights, "peak_allocated_bytes": None}
    if isinstance(peak, int) and isinstance(weights, int) and isinstance(full_weights, int):
        out["peak_allocated_bytes"] = peak + full_weights - weights
    return out


def extrapolate(depth: Mapping[str, Any], timing: Mapping[str, Any] | None,
                attribution: Mapping[str, Any] | None,
                memory: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``whole`` figures of a ``depth`` section, or None where the record has no
    median or no per-layer times to extrapolate from."""
    median = (timing or {}).get("median")
    if not median or attribution is None:
        return None
    # the categories and forward the per-layer times are parts of are that method's too
    method, section, per_layer = basis(attribution)
    forward = section.get("forward_ms")
    if not forward:
        return None
    rows = _layer_rows(depth, per_layer)
    full = {str(k): int(v) for k, v in (depth.get("full") or {}).items()}
    measured = {str(k): int(v) for k, v in (depth.get("measured") or {}).items()}
    if set(rows) != set(full) or any(len(rows[k]) != measured.get(k) for k in rows):
        return None  # a measured layer without its time: nothing honest to say
    missing = {k: full[k] - measured[k] for k in full}
    categories = {str(c): float(v.get("ms") or 0.0) for c, v in (section.get("categories") or {}).items()}
    busy = sum(v for c, v in categories.items() if c != OVERHEAD)
    if busy <= 0:
        return None
    scale = float(median) / float(forward)  # the method's milliseconds -> the timed forward's
    kinds = sorted(rows)
    router = expert_ratio(depth)
    cost, scoring = experts_cost(depth), router_cost(depth)
    # the unit resampled: each round's own figure where the correction was measured in
    # every round (``pool_costs``), else the pairs of its one measurement
    pooled = (depth.get("experts") or {}).get("cost")
    ratios = (round_costs(pooled, "experts", "factor") or [float(r) for r in (cost or {}).get("ratios") or []]
              or ([float(cost["factor"])] if cost else []))
    deltas = (round_costs(pooled, "router", "delta_ms") or [float(d) for d in (scoring or {}).get("deltas_ms") or []]
              or ([float(scoring["delta_ms"])] if scoring else []))
    # the whole model's mixture-of-experts layers: those of the kinds whose layers route
    routed = sum(full[k] for k in kinds if any(r.get(ROUTER, 0.0) > 0 for r in rows[k]))
    resampled = [n for n in (len(ratios), len(deltas)) if n]

    def figures(picks: Mapping[str, Sequence[int]], *chosen: Sequence[int]) -> tuple[float, dict[str, float]]:
        extra = _extra(rows, missing, picks)
        drawn = list(chosen)
        times = (median_of([ratios[i] for i in drawn.pop(0)]) if chosen and ratios
                 else float(cost["factor"]) if cost else 1.0)
        if times != 1.0 and EXPERTS in categories:
            # the experts run the whole model's routing (``experts_cost``): measured and
            # missing layers alike
            extra[EXPERTS] = (categories[EXPERTS] + extra.get(EXPERTS, 0.0)) * times - categories[EXPERTS]
        if ROUTER in categories and scoring is not None:
            # each of the whole model's routed layers scores every expert (``router_cost``)
            add = median_of([deltas[i] for i in drawn.pop(0)]) if drawn else float(scoring["delta_ms"])
            extra[ROUTER] = extra.get(ROUTER, 0.0) + routed * add
        elif router != 1.0 and ROUTER in categories:
            extra[ROUTER] = (categories[ROUTER] + extra.get(ROUTER, 0.0)) * router - categories[ROUTER]
        g = (busy + sum(extra.values())) / busy
        whole = {c: (ms + extra.get(c, 0.0)) if c != OVERHEAD else ms * g for c, ms in categories.items()}
        return g, whole

    g, whole = figures({k: range(len(rows[k])) for k in kinds})
    reps = draws(lambda *idx: figures(dict(zip(kinds, idx)), *idx[len(kinds):]),
                 [len(rows[k]) for k in kinds] + resampled, reps=SHARE_REPLICATES, seed=SEED)
    g_low, g_high = percentiles([d[0] for d in reps], CONFIDENCE)
    low = float(timing.get("ci_low") or median) if timing else float(median)
    high = float(timing.get("ci_high") or median) if timing else float(median)
    total = sum(whole.values())
    by_category: dict[str, Any] = {}
    for cat, ms in whole.items():
        ms_draws = [d[1][cat] * scale for d in reps]
        share_draws = [d[1][cat] / sum(d[1].values()) for d in reps]
        ms_low, ms_high = percentiles(ms_draws, CONFIDENCE)
        share_low, share_high = percentiles(share_draws, CONFIDENCE)
        by_category[cat] = {"ms": ms * scale, "ms_low": ms_low * low / median, "ms_high": ms_high * high / median,
                            "share": ms / total if total else None, "share_low": share_low, "share_high": share_high}
    single = [k for k in kinds if len(rows[k]) == 1 and missing[k] > 0]
    notes = [f"{k}: one layer measured, so its layer-to-layer spread is not in the intervals" for k in single]
    if scoring is not None and ROUTER in categories:
        times = len(round_costs(pooled, "router", "delta_ms"))
        notes.append(f"moe.router: {float(scoring['delta_ms']):.3g} ms [{float(scoring['delta_low_ms']):.3g}, "
                     f"{float(scoring['delta_high_ms']):.3g}] added to each of the whole model's {routed} routed "
                     "layers, what the build's router took more widened to every expert"
                     + (f" (the median of {times} rounds' measurements)" if times else ""))
    elif router != 1.0:
        notes.append(f"moe.router scaled by {router:.4g} (the router scores every expert)")
    if cost and EXPERTS in categories:
        spread = (cost["tokens_per_expert"]["whole"], cost["tokens_per_expert"]["build"])
        times = len(round_costs(pooled, "experts", "factor"))
        notes.append(f"moe.experts scaled by {float(cost['factor']):.3g} [{float(cost['factor_low']):.3g}, "
                     f"{float(cost['factor_high']):.3g}]: the build's experts widened to every expert (about "
                     f"{spread[0]:.3g} tokens an expert, against {spread[1]:.3g} in the build) took that much "
                     "their time in the build" + (f", the median of {times} rounds' measurements" if times else ""))
    elif router != 1.0:
        notes.append("the routed experts' time is the build's own (the step reaches no more experts than "
                     "the build has, or nothing was measured)")
    return {
        "method": METHOD,
        "attribution_method": method,
        "factor": g, "factor_low": g_low, "factor_high": g_high,
        "median_ms": float(median) * g, "ci_low_ms": low * g_low, "ci_high_ms": high * g_high,
        "categories": by_category,
        "layer_ms": {k: sum(sum(r.values()) for r in rows[k]) / len(rows[k]) * scale for k in kinds},
        "memory": _memory(depth, memory),
        "notes": notes,
    }


def finish(sections: Mapping[str, Any]) -> dict[str, Any]:
    """``sections`` with its ``depth`` section's ``whole`` figures from its final timing
    (unchanged where there is no depth section)."""
    depth = fields.get(sections, "depth")
    if not isinstance(depth, Mapping):
        return dict(sections)
    out = dict(sections)
    finished = dict(depth)
    finished["whole"] = extrapolate(depth, fields.get(sections, "timing"), fields.get(sections, "attribution"),
                                    fields.get(sections, "memory"))
    ratio = fields.get(sections, "profile.overhead_ratio")
    whole = finished["whole"]
    if (whole is not None and whole["attribution_method"] == PROFILER and isinstance(ratio, (int, float))
            and ratio > PROFILER_SLOWDOWN):
        # the layers' proportions come from the profiled pass: where the profiler's own cost
        # per op dominates, they need not be the unprofiled forward's
        finished["whole"]["notes"] = [*finished["whole"]["notes"],
                                      f"the profiled pass took {ratio:.1f}x the unprofiled forward, so the "
                                      "layers' share of it, which the extrapolation scales by, may differ from "
                                      "the unprofiled forward's"]
    out["depth"] = finished
    return out


def expert_ratio(depth: Mapping[str, Any]) -> float:
    """The whole model's routed experts per layer over those built (1 where all were)."""
    experts = depth.get("experts")
    if not isinstance(experts, Mapping) or not experts.get("measured") or not experts.get("full"):
        return 1.0
    return float(experts["full"]) / float(experts["measured"])


def _cost_part(depth: Mapping[str, Any], part: str, key: str) -> Mapping[str, Any] | None:
    """``part`` of the correction an expert-reduced build measured (its ``depth.experts.cost``),
    where it holds a number at ``key``; else None."""
    experts = depth.get("experts")
    cost = experts.get("cost") if isinstance(experts, Mapping) else None
    found = cost.get(part) if isinstance(cost, Mapping) else None
    return found if isinstance(found, Mapping) and isinstance(found.get(key), (int, float)) else None


def pool_costs(costs: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """One correction from those an expert-reduced build measured in each of its rounds
    (``costs``: (round, ``depth.experts.cost``), the profiled round's among them): each part
    (the experts' factor, the router's milliseconds) the median over the rounds of each
    round's own median, with a two-level 95% bootstrap (the rounds drawn with replacement,
    then the pairs within each) as for a median measured in rounds; ``rounds`` keeps each
    round's figures and pairs, the part's pairs are every round's end to end. None without
    a cost; one cost is returned as it is."""
    import numpy as np

    costs = [(int(r), c) for r, c in costs if isinstance(c, Mapping)]
    if not costs:
        return None
    if len(costs) == 1:
        return dict(costs[0][1])
    out = dict(costs[-1][1])  # tokens, reached, built, full, layers, method: the same in every round
    out["rounds"] = []
    for r, cost in costs:
        entry: dict[str, Any] = {"round": r}
        for part, key, pairs in (("experts", "factor", "ratios"), ("router", "delta_ms", "deltas_ms")):
            found = cost.get(part)
            if isinstance(found, Mapping) and isinstance(found.get(key), (int, float)):
                entry[part] = {key: float(found[key]), pairs: [float(x) for x in found.get(pairs) or [found[key]]]}
        out["rounds"].append(entry)
    for part, key, pairs, low, high in (("experts", "factor", "ratios", "factor_low", "factor_high"),
                                        ("router", "delta_ms", "deltas_ms", "delta_low_ms", "delta_high_ms")):
        measured = [(e[part][key], np.asarray(e[part][pairs], dtype=float)) for e in out["rounds"] if part in e]
        if not measured:
            out.pop(part, None)
            continue
        groups = [g for _, g in measured]
        point = median_of([v for v, _ in measured])
        lo, hi = percentiles(_median_of_medians(groups), CONFIDENCE)
        part_out = dict(next(c[part] for _, c in reversed(costs) if isinstance(c.get(part), Mapping)))
        part_out.update({key: point, low: min(lo, point), high: max(hi, point),
                         pairs: [float(x) for g in groups for x in g], "rounds": len(measured)})
        for side in ("whole_ms", "build_ms"):
            sides = [float(c[part][side]) for _, c in costs
                     if isinstance(c.get(part), Mapping) and isinstance(c[part].get(side), (int, float))]
            if sides:
                part_out[side] = median_of(sides)
        out[part] = part_out
    return out


def _median_of_medians(groups: Sequence[Any]) -> list[float]:
    """Two-level bootstrap replicates of the median over ``groups`` (numpy arrays) of each
    group's median: the groups drawn with replacement, then the values within each."""
    import numpy as np

    from reportgen.stats.bootstrap import two_level

    def replicate(rng: np.random.Generator, row: Any) -> float:
        return float(np.median([np.median(groups[g][rng.integers(0, len(groups[g]), len(groups[g]))])
                                for g in row]))

    return two_level(len(groups), replicate, reps=SHARE_REPLICATES, seed=SEED)


def round_costs(cost: Mapping[str, Any] | None, part: str, key: str) -> list[float]:
    """Each round's own figure (``key``) of ``part`` of a pooled correction (``pool_costs``);
    [] for a correction measured once."""
    entries = (cost or {}).get("rounds")
    if not isinstance(entries, list):
        return []
    return [float(e[part][key]) for e in entries if isinstance(e, Mapping) and isinstance(e.get(part), Mapping)
            and isinstance(e[part].get(key), (int, float))]


def experts_cost(depth: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The experts' correction a build with fewer routed experts measured
    (``reportgen.profile.expertcost``: its experts' time with the whole model's experts
    over their time in the build), or None where it has none (the step reaches no more
    experts than the build has, or nothing could be measured)."""
    return _cost_part(depth, "experts", "factor")


def router_cost(depth: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The milliseconds a layer's router adds scoring every expert, as the build measured
    it (``reportgen.profile.expertcost``), or None where it has none (its router's time
    then scales by full / measured experts)."""
    return _cost_part(depth, "router", "delta_ms")


def experts_reached(record: Mapping[str, Any]) -> float | None:
    """How many distinct routed experts a layer of the whole model is expected to run in
    one step of ``record``'s combination, where the record was built with fewer experts
    than the model has: the tokens the step routes (batch x sequence; batch alone in
    decode), each to ``top_k`` of the model's experts drawn evenly,
    ``E (1 - (1 - k/E)^tokens)``. None where the build kept every expert or the record does
    not say."""
    experts = fields.get(record, "depth.experts")
    if not isinstance(experts, Mapping):
        return None
    built, full, top_k = experts.get("measured"), experts.get("full"), experts.get("top_k")
    if not (isinstance(built, int) and isinstance(full, int) and isinstance(top_k, int)) \
            or min(built, full, top_k) <= 0 or built >= full:
        return None
    batch = fields.get(record, "combination.batch_size") or 1
    mode = str(fields.get(record, "combination.mode") or "")
    tokens = int(batch) * (1 if mode.startswith("decode") else int(fields.get(record, "combination.seq_len") or 1))
    return float(full) * (1.0 - (1.0 - top_k / full) ** tokens)


def experts_understated(record: Mapping[str, Any]) -> str:
    """The words a figure of an expert-reduced build carries where its step reaches more
    experts in the whole model than the build has: the tokens then share fewer experts'
    weights, and the experts' time as measured reads low. Where the build measured its
    experts' correction (``experts_cost``, in a decode step too) and the whole-model figures
    carry it, the words say by what factor they were scaled; else that the time is
    understated (the expert-reduction figure on the Validation page measures both), or
    nothing where the step reaches no more experts than the build has ("")."""
    reached = experts_reached(record)
    built = fields.get(record, "depth.experts.measured")
    if reached is None or not isinstance(built, int):
        return ""
    section = fields.get(record, "depth")
    cost = experts_cost(section) if isinstance(section, Mapping) else None
    if reached <= built + 0.5 and (cost is None or section.get("whole") is None):
        return ""  # the same products in either, and no correction measured
    if cost is not None and section.get("whole") is not None:
        full = fields.get(record, "depth.experts.full")
        width, calls = cost.get("widened_to"), cost.get("calls")
        over = "in one call" if calls == 1 else f"over {calls} calls"
        how = (f"measured widened to {width} of its {full}, the step's tokens {over}"
               if isinstance(width, int) and isinstance(full, int) and width < full else
               f"measured widened to all {full}")
        return (f"the experts' time scaled by {float(cost['factor']):.2f}, {how} "
                f"(a step reaches about {reached:.0f} of them a layer, this build has {built})")
    return (f"the experts' time is understated: a step of the whole model reaches about "
            f"{reached:.0f} of its experts a layer, this build has {built}")


def record_label(record: Mapping[str, Any]) -> str:
    """What a record's figures are of, where that is not the whole model: the ``depth``
    section's layers ("measured 4 of 48 layers; whole-model figures extrapolated", or
    "reduced depth: ..." where nothing could be extrapolated), or for a record made before
    the section existed, a preset that keeps some of its checkpoint's layers
    (``PRESET_FULL_LAYERS``: "reduced depth: 4 of 24 layers"); "" for a whole model."""
    section = fields.get(record, "depth")
    if isinstance(section, Mapping) and section.get("layers") and section.get("full_layers"):
        experts = section.get("experts")
        counts = ((int(experts["measured"]), int(experts["full"]))
                  if isinstance(experts, Mapping) and experts.get("measured") != experts.get("full") else None)
        words = label(int(section["layers"]), int(section["full_layers"]),
                      extrapolated=section.get("whole") is not None, experts=counts)
        caveat = experts_understated(record)
        return f"{words}; {caveat}" if caveat else words
    model = str(fields.get(record, "combination.model") or "")
    full = PRESET_FULL_LAYERS.get(model)
    layers = fields.get(record, "model.num_layers")
    if full is None or fields.get(record, "combination.scale") == "tiny":
        return ""
    if not isinstance(layers, int):  # a record without a model section: the preset's own count
        layers = PRESETS[model][1].get("num_hidden_layers")
    return label(layers, full, extrapolated=False) if isinstance(layers, int) and layers < full else ""


def label(measured: int, full: int, *, extrapolated: bool = True, experts: tuple[int, int] | None = None) -> str:
    """The words every figure of a depth-reduced combination carries (and of one built with
    fewer routed experts: ``experts`` is (built, the model's))."""
    layers = (f"measured {measured} of {full} layers" if extrapolated
              else f"reduced depth: {measured} of {full} layers")
    parts = [layers] if experts is None or measured < full else []  # all layers: the experts are the reduction
    if experts is not None:
        parts.append(f"measured with {experts[0]} of {experts[1]} experts")
    if extrapolated:
        parts.append("whole-model figures extrapolated")
    return "; ".join(parts)


def check(whole: Mapping[str, Any], reduced: Mapping[str, Any]) -> dict[str, Any] | None:
    """A reduced record's extrapolated whole-model median against the same combination
    measured whole: their ratio, and whether the measured median lies in the extrapolated
    interval (the check METHOD.md rule 10c asks of the method); None where either lacks
    its figure."""
    measured = fields.get(whole, "timing.median")
    section = fields.get(reduced, "depth.whole")
    if not isinstance(measured, (int, float)) or not measured or not isinstance(section, Mapping):
        return None
    low, high = float(section["ci_low_ms"]), float(section["ci_high_ms"])
    return {"layers": fields.get(reduced, "depth.layers"), "full_layers": fields.get(reduced, "depth.full_layers"),
            "measured_ms": float(measured), "extrapolated_ms": float(section["median_ms"]),
            "ci_low_ms": low, "ci_high_ms": high, "ratio": float(section["median_ms"]) / float(measured),
            "within": low <= float(measured) <= high}
