"""Figure 4: FLOPs two ways, every disagreement explained by name.

For each combination of the suite run, reportgen stored per-category FLOPs from the
config (analytic) and from ``torch.utils.flop_counter`` (counted). Where a category's two
numbers differ by more than 1%, an explanation is looked for, independently of
reportgen's own notes: a census of the aten ops one forward dispatches (a
``TorchDispatchMode``) finds the ops the counter has no formula for; reportgen's notes
are quoted beside it. A disagreement with no explanation found fails the figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.bench import NOT_MEASURED
from reportgen.records.status import is_ok

TOLERANCE = 0.01
QUESTION = (
    "Do the analytic FLOPs (from the config) and torch.utils.flop_counter agree per "
    "category, and where they do not, is the reason known by name?"
)
# Ops that do real arithmetic; anything else without a formula (views, copies,
# elementwise) is not a FLOP the analytic formulas count either.
_HEAVY_MARKERS = ("attention", "attn", "softmax", "mm", "matmul", "conv", "einsum", "linear")


def op_census(combo: Any) -> dict[str, int]:
    """aten ops (overload packets) dispatched by one forward of ``combo``, with counts."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from reportgen.bench.common import build
    from reportgen.profile import building

    counts: dict[str, int] = {}

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = str(func.overloadpacket)
            counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    built = build(combo)
    try:
        built.step.reset()
        with Census(), torch.inference_mode():
            built.step()
    finally:
        building.free(built)
    return counts


def missing_formulas(census: Mapping[str, int]) -> list[str]:
    """Arithmetic-heavy ops in ``census`` that flop_counter has no formula for."""
    from torch.utils.flop_counter import flop_registry

    known = {str(k) for k in flop_registry}
    return sorted(n for n in census
                  if n not in known and any(m in n.lower() for m in _HEAVY_MARKERS))


def explain(category: str, analytic: float, counted: float, *, missing: Sequence[str],
            notes: Sequence[str]) -> str | None:
    """An explanation by name, or None. Evidence: ops of the forward that flop_counter has
    no formula for (from our own census) when the counter is short; reportgen's own notes
    that name the category or one of those ops, quoted."""
    parts: list[str] = []
    if counted < analytic:
        pool = missing
        if category.startswith("attention"):
            pool = [m for m in missing if any(k in m.lower() for k in ("attention", "attn", "softmax"))]
        if pool:
            parts.append("the counter missed " + ", ".join(pool) + " (no flop_counter formula)")
    quoted = [n for n in notes if category in n and "flop_counter" in n]
    if not parts and not quoted:
        return None
    parts += [f"reportgen notes: {n}" for n in quoted]
    return "; ".join(parts)


def run(records: Sequence[Mapping[str, Any]], combos_by_id: Mapping[str, Any], *,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    import time

    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    disagreements = explained = 0
    unexplained: list[str] = []
    for rec in records:
        flops = fields.get(rec, "flops")
        if not is_ok(rec) or not flops:
            continue
        analytic = flops.get("analytic") or {}
        counted = flops.get("counted") or {}
        notes = [str(n) for n in flops.get("notes") or []]
        census: dict[str, int] | None = None
        for cat in sorted(set(analytic) | set(counted)):
            a = float(analytic.get(cat) or 0.0)
            c = float(counted.get(cat) or 0.0)
            if a == 0 and c == 0:
                continue
            rel = (c - a) / a if a else None
            row: dict[str, Any] = {"combination": rec["id"], "category": cat, "analytic": a,
                                   "counted": c, "rel_diff": rel, "explanation": None}
            if rel is None or abs(rel) > TOLERANCE:
                disagreements += 1
                if census is None:
                    combo = combos_by_id.get(rec["id"])
                    census = op_census(combo) if combo is not None else {}
                text = explain(cat, a, c, missing=missing_formulas(census), notes=notes)
                row["explanation"] = text
                if text:
                    explained += 1
                else:
                    unexplained.append(f"{rec['id']} {cat}")
            rows.append(row)
        total_a, total_c = flops.get("total_analytic"), flops.get("total_counted")
        log(f"  flops {rec['id']}: analytic {total_a} counted {total_c}")
    duration = time.perf_counter() - t0
    if not rows:
        return figure("FLOPs two ways", QUESTION, value=None, unit="fraction",
                      goal="every disagreement over 1% explained by name", goal_spec=None,
                      status=NOT_MEASURED, notes=["no FLOPs in the suite run's records"])
    value = explained / disagreements if disagreements else 1.0
    agree = sum(1 for r in rows if r["rel_diff"] is not None and abs(r["rel_diff"]) <= TOLERANCE)
    notes = [
        f"{len(rows)} (combination, category) pairs; {agree} agree within {TOLERANCE:.0%}, "
        f"{disagreements} disagree, {explained} of those explained by name.",
        "Value = share of disagreements explained.",
    ] + [f"Unexplained: {u}" for u in unexplained]
    return figure("FLOPs two ways", QUESTION, value=value, unit="share",
                  goal=f"every disagreement over {TOLERANCE:.0%} explained by name",
                  goal_spec={"kind": "all"}, notes=notes, rows=rows, duration_s=duration,
                  extra={"disagreements": disagreements, "explained": explained})
