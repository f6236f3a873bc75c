"""Where a mixture-of-experts model's router sent the tokens, for the combination page:
the record's ``moe`` section (``reportgen.profile.routing``) as plain rows. A record
without one (a dense model, a compiled forward, a record made before routing was
recorded) gives None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen import fmt
from reportgen.records import fields

DECODE = "decode"
"""The mode that routes one new token per sequence: its figures describe one step."""
EVEN, ROUTER = "even", "router"
"""A record's ``moe.routing``: the experts ran an even draw, or the router's own choices."""


def section(record: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The record's ``moe`` section, where it has one with at least one layer."""
    moe = fields.get(record, "moe")
    if not isinstance(moe, Mapping):
        return None
    layers = moe.get("per_layer")
    if not isinstance(layers, list) or not any(_counts(layer) for layer in layers):
        return None
    return moe


def _counts(layer: Any) -> list[int]:
    if not isinstance(layer, Mapping):
        return []
    counts = layer.get("tokens_per_expert")
    return [int(c) for c in counts] if isinstance(counts, list) else []


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _busiest(counts: Sequence[int], stored: Any) -> float | None:
    """The busiest expert's tokens against the mean: the record's figure, else from the
    counts (None where no token was routed)."""
    value = _finite(stored)
    if value is not None:
        return value
    mean = sum(counts) / len(counts) if counts else 0.0
    return max(counts) / mean if mean else None


def layer_rows(moe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per layer, in the record's order: module, tokens per expert, the tokens
    routed, busiest/mean, coefficient of variation, idle experts."""
    out = []
    for layer in moe.get("per_layer") or []:
        counts = _counts(layer)
        if not counts:
            continue
        out.append({"module": str(layer.get("module")), "experts": len(counts),
                    "routed": sum(counts), "tokens_per_expert": counts,
                    "max_over_mean": _busiest(counts, layer.get("max_over_mean")),
                    "cv": _finite(layer.get("cv")),
                    "idle_experts": (int(layer["idle_experts"])
                                     if isinstance(layer.get("idle_experts"), int)
                                     else sum(1 for c in counts if c == 0))})
    return out


def chart_rows(layers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``charts.expert_load_chart``'s rows: one per (layer, expert)."""
    out = []
    for index, layer in enumerate(layers):
        counts = layer["tokens_per_expert"]
        mean = sum(counts) / len(counts)
        out += [{"module": layer["module"], "layer": index, "expert": expert, "tokens": tokens,
                 "mean": mean, "over_mean": tokens / mean if mean else None}
                for expert, tokens in enumerate(counts)]
    return out


def top_k(value: Any) -> str | None:
    """Expert assignments per token, as a count where it is one (``2``), else to two
    decimals (a router that drops tokens or pads)."""
    f = _finite(value)
    if f is None:
        return None
    return str(int(round(f))) if abs(f - round(f)) < 5e-3 else fmt.fixed(f)


def overview(moe: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of the section's sentence, over all layers."""
    ratios = [r["max_over_mean"] for r in layers if r["max_over_mean"] is not None]
    return {
        "tokens": int(moe["tokens"]) if isinstance(moe.get("tokens"), int) else None,
        "top_k": top_k(moe.get("top_k")),
        "experts": (int(moe["experts"]) if isinstance(moe.get("experts"), int)
                    else max(r["experts"] for r in layers)),
        "layers": len(layers),
        "max_over_mean": _finite(moe.get("max_over_mean"))
        if _finite(moe.get("max_over_mean")) is not None else (max(ratios) if ratios else None),
        "mean_max_over_mean": _finite(moe.get("mean_max_over_mean"))
        if _finite(moe.get("mean_max_over_mean")) is not None
        else (sum(ratios) / len(ratios) if ratios else None),
        "idle_experts": (int(moe["idle_experts"]) if isinstance(moe.get("idle_experts"), int)
                         else sum(r["idle_experts"] for r in layers)),
        # "even": the experts ran an even draw; "router" or None (a record made before the
        # draw): the random-weight router's own choices
        "routing": moe.get("routing") if moe.get("routing") in (EVEN, ROUTER) else None,
    } | _idle_per_layer(moe, layers)


def _idle_per_layer(moe: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The idle experts as a reader counts them: per layer (the mean over the layers), since
    the record's count is summed over every layer (96 for 4 layers of 32 experts)."""
    idle = [r["idle_experts"] for r in layers if isinstance(r.get("idle_experts"), int)]
    if idle:
        return {"idle_per_layer": sum(idle) / len(idle)}
    total = moe.get("idle_experts")
    return {"idle_per_layer": total / len(layers) if isinstance(total, int) and layers else None}


def table_rows(layers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The per-layer table's download: the counts space-separated, one cell in the CSV
    (the chart's download has one row per expert)."""
    return [{"module": r["module"], "experts": r["experts"], "routed": r["routed"],
             "tokens_per_expert": " ".join(str(c) for c in r["tokens_per_expert"]),
             "max_over_mean": r["max_over_mean"], "cv": r["cv"],
             "idle_experts": r["idle_experts"]} for r in layers]
