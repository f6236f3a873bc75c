"""Figure 3b, the ablation, as a figure (pure): a combination's row from its rounds,
the figure from the rows (pass/fail by ``ablation.verdict``, the worst case, the notes
that say how it was measured), and a partial run's rows merged with an earlier figure's.
The rounds themselves are ``ablation_rounds``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from reportgen.bench.ablation import (
    AGREEMENT,
    DEFAULT_TARGET,
    HOOKED_EVERY,
    RESOLUTION,
    TARGETS,
    VERDICTS,
    Round,
    agreement,
    figure_status,
)
from reportgen.bench.results import figure
from reportgen.shares import METHODS
from reportgen.stats import median

ABLATION_QUESTION = (
    "Is the time attributed to `attention.core` real? The attention core is replaced by a "
    "stand-in that returns a tensor of the right shape at negligible cost; the forward time "
    "that disappears is compared with the attributed `attention.core` time (its share times "
    "the unprofiled median), for both attribution methods: the profiler's and the "
    "module-boundary clocks'. The method the device's headline uses decides the verdict. "
    "The same check covers a mixture-of-experts model's experts (`moe.experts`: the experts "
    "stand in, the router is kept) and a hybrid's token mixers (`mixer`): each row names "
    "its category."
)


def ablation_row(units: Sequence[dict[str, Any]], device: str = "cpu") -> dict[str, Any]:
    """A combination's figure row from its rounds (pure: ``ablation_unit``'s results; a
    unit without ``category`` is of the attention core)."""
    import numpy as np

    from reportgen import shares

    first = next((u for u in units if u.get("profiler")), None)
    profiler = None if first is None else (first["profiler"]["full"], first["profiler"]["left"])
    rounds = [Round(u["full_ms"], u["ablated_ms"], [tuple(h) for h in u["hooked"]],
                    u.get("category", DEFAULT_TARGET)) for u in units]
    methods = agreement(rounds, profiler)
    headline = shares.headline_method(device)
    if headline not in methods:
        headline = "hooks"
    chosen = methods[headline]
    full_ms = [x for u in units for x in u["full_ms"]]
    ablated_ms = [x for u in units for x in u["ablated_ms"]]
    return {
        "combination": units[0]["combination"], "category": chosen["category"],
        "headline_method": headline,
        "forward_ms": median(full_ms), "ablated_ms": median(ablated_ms),
        "drop_fraction": chosen["drop_fraction"], "drop_ms": chosen["drop_ms"],
        "drop_low_ms": chosen["drop_low_ms"], "drop_high_ms": chosen["drop_high_ms"],
        "attributed_share": chosen["share"], "attributed_ms": chosen["attributed_ms"],
        "removable_ms": chosen["removable_ms"],
        "rel_diff": chosen["rel_diff"], "rel_diff_low": chosen["rel_low"],
        "rel_diff_high": chosen["rel_high"], "verdict": chosen["verdict"],
        **{f"{m}_{k}": v for m, a in methods.items() for k, v in a.items()
           if k not in ("drop_fraction", "drop_ms", "drop_low_ms", "drop_high_ms", "category")},
        "stand_in_calls": units[0]["calls"], "stand_in_patched": units[0]["patched"],
        "rounds": len(units), "pairs": len(full_ms),
        # each round in a process of its own (rows measured before that shared one per round)
        "own_process": all(u.get("own_process", False) for u in units),
        "round_pids": [u.get("pid") for u in units],
        "hooked_pairs": sum(len(u["hooked"]) for u in units),
        "pairs_per_round": [len(u["full_ms"]) for u in units],
        # the host's noise: the spread of one pair's drop, as a fraction of the forward
        "pair_drop_sd": float(np.std([d for r in rounds for d in r.drops])),
        "full_ms": full_ms, "ablated_ms_pairs": ablated_ms,
        "wall_s": sum(u["wall_s"] for u in units),
    }


def row_key(row: dict[str, Any]) -> str:
    """A row's identity within the figure, as ``Target.key`` gives it."""
    category = row.get("category", DEFAULT_TARGET)
    return row["combination"] if category == DEFAULT_TARGET else f"{row['combination']} [{category}]"


def describe(row: dict[str, Any]) -> str:
    return (f"{row_key(row)}: drop {row['drop_ms']:.2f} ms [{row['drop_low_ms']:.2f}, "
            f"{row['drop_high_ms']:.2f}] vs removable attributed {row['removable_ms']:.2f} ms "
            f"({row['rel_diff']:+.1%} [{row['rel_diff_low']:+.1%}, {row['rel_diff_high']:+.1%}], "
            f"{row['headline_method']}, {row['rounds']} rounds, {row['pairs']} pairs): {row['verdict']}")


def ablation_summary(rows: Sequence[dict[str, Any]], notes: Sequence[str] = (), *, rounds: int,
                     min_pairs: int, budget_s: float, duration_s: float | None = None,
                     min_rounds: int | None = None, max_rounds: int | None = None,
                     precision: float | None = None) -> dict[str, Any]:
    """The figure from per-combination rows (pure): pass/fail by ``ablation.verdict``.
    A row without ``category`` (measured before rows named it) is of the attention core."""
    categories = [c for c in TARGETS if any(r.get("category", DEFAULT_TARGET) == c for r in rows)]
    named = " / ".join(categories) if categories else DEFAULT_TARGET
    title = "Attention ablation" if categories in ([], [DEFAULT_TARGET]) else "Ablation"
    goal = (f"where the attributed {named} is at least {RESOLUTION:.0%} of the forward, "
            f"the drop agrees with it within {AGREEMENT:.0%} (relative), whole 95% interval "
            "inside; below that, below resolution")
    spec = {"kind": "rel_within", "target": AGREEMENT}
    # what the figure was computed from besides its rows, so merge_ablation can compute
    # it again over more rows
    measurement = {"rounds": rounds, "min_pairs": min_pairs, "budget_s": budget_s,
                   "min_rounds": min_rounds, "max_rounds": max_rounds, "precision": precision,
                   "notes": list(notes)}
    if not rows:
        return figure(title, ABLATION_QUESTION, value=None, unit="fraction",
                      goal=goal, goal_spec=spec, status="not measured",
                      notes=list(notes) or ["no combination measured"],
                      extra={"measurement": measurement})
    status = figure_status([r["verdict"] for r in rows])
    judged = [r for r in rows if r["verdict"] != "below resolution"]
    worst = max(judged or rows, key=lambda r: abs(r["rel_diff"])
                if r["rel_diff"] == r["rel_diff"] else math.inf)
    per_method = []
    for m in METHODS:
        if all(f"{m}_verdict" in r for r in rows):
            counts = {v: sum(r[f"{m}_verdict"] == v for r in rows) for v in VERDICTS}
            per_method.append(f"{m}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    where = "Worst at resolution" if judged else "No combination at resolution; largest difference"
    out_notes = [
        f"{where}: {row_key(worst)} ({worst['headline_method']} method), drop "
        f"{worst['drop_ms']:.2f} ms vs {worst['removable_ms']:.2f} ms attributed "
        f"({worst['rel_diff']:+.1%}, interval {worst['rel_diff_low']:+.1%} to "
        f"{worst['rel_diff_high']:+.1%}).",
        "Verdicts by method (the headline method decides the figure): " + "; ".join(per_method) + ".",
        *failure_causes(rows),
        *_stand_in_notes(categories),
        "hooks_neighbours_ms: how much the rest of the forward (outside the row's category: "
        "projections, MLP, norms, the blocks' own time) sped up with the stand-in in place, "
        "read by the hooks method's clocks in the same hooked pairs: a cost the real work "
        "puts on the code after it (caches, the threads' state), inside the drop but outside "
        "any exclusive attribution of the category. hooks_unexplained_ms is the drop less both.",
        f"Measurement: {rounds} rounds{_rounds_rule(min_rounds, max_rounds, precision)}, each "
        "visiting the combinations in its own shuffled order, each combination in a freshly "
        "spawned process of its own (as the profile gives each round its own worker: a model "
        "measured earlier in the same process changed what the stand-in saved), and spending "
        f"{budget_s:.0f} s (at least "
        f"{min_pairs} pairs) on each: forwards in back-to-back pairs (with the row's category's "
        "work, with the "
        f"stand-in; ABBA order), every {HOOKED_EVERY}th pair under the hooks method's clocks "
        "and the rest unprofiled. The drop is the Hodges-Lehmann estimate of the unprofiled "
        "pairs' fraction of the forward that disappeared: the host's speed wanders by tens of "
        "percent within a minute, which scales both forwards of a pair alike and cancels in "
        "their ratio. The hooks method's removable time comes from its pairs among them, at "
        "the same moments; the profiler method's from one profiled pass of each model in the "
        "first round.",
        *([] if all(r.get("own_process") for r in rows) else [
            "Measured when each round's combinations shared one process: "
            + ", ".join(row_key(r) for r in rows if not r.get("own_process")) + "."]),
        "Interval: two-level percentile bootstrap (rounds drawn with replacement, then the "
        "pairs and profiled iterations within each), so differences between processes and "
        "moments of the run widen it as much as the noise within one; `hooks_round_rel_diffs` "
        "gives each round's own estimate.",
        *notes,
    ]
    return figure(
        title, ABLATION_QUESTION,
        value=worst["rel_diff"], unit="fraction",
        interval=[worst["rel_diff_low"], worst["rel_diff_high"]],
        interval_kind="worst combination at resolution, two-level bootstrap over rounds",
        goal=goal, goal_spec=spec, status=status, notes=out_notes, rows=rows,
        duration_s=duration_s, extra={"measurement": measurement},
    )


STAND_IN_NOTES: dict[str, str] = {
    "attention.core": (
        "The stand-in replaces the attention function transformers calls "
        "(sdpa / eager), not the work around it inside the attention module (head reshapes, "
        "rotary embedding), which both methods count as attention.core. Each method therefore "
        "also attributes the model with the stand-in in place, and the drop is compared with "
        "the attributed time less what the method still calls attention.core then "
        "(removable_ms); rel_diff_full compares with the whole attributed time."),
    "moe.experts": (
        "Every module the structure calls routed experts returns "
        "cached zeros of its output's shape; the router (gate, top-k, dispatch, combination) "
        "still runs. What the methods still attribute to moe.experts with the stand-in in "
        "place (the replaced calls themselves) is left out of removable_ms."),
    "moe.shared": (
        "Every module the structure calls shared experts (those every token goes through) "
        "returns cached zeros of the output it gave once for inputs of the same shape; the "
        "router and the routed experts still run. What the methods still attribute to "
        "moe.shared with the stand-in in place is left out of removable_ms."),
    "mixer": (
        "Every token mixer (state-space scan, linear attention, short convolution) "
        "returns cached zeros of the output its original gave once for inputs of the same "
        "shapes; what the methods still attribute to mixer with the stand-in in place is "
        "left out of removable_ms."),
}


CAUSE_PREFIX = "Why "


def failure_causes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each failing row, what its own measurements say caused the failure (pure): an
    estimate that agrees whose interval reaches past the bound (the spread between its
    rounds), or a drop larger than the removable attributed time by less than the rest of
    the step sped up in the same hooked pairs (``hooks_neighbours_ms``); else that the
    cause is not measured."""
    out = []
    for r in rows:
        if r.get("verdict") != "fail":
            continue
        key, method, category = row_key(r), r.get("headline_method"), r.get("category", DEFAULT_TARGET)
        rel, low, high = r["rel_diff"], r["rel_diff_low"], r["rel_diff_high"]
        head = f"{CAUSE_PREFIX}{key} fails: "
        if abs(rel) <= AGREEMENT:
            spread = [float(x) for x in r.get(f"{method}_round_rel_diffs") or [] if x == x]
            out.append(head + f"its estimate agrees ({rel:+.1%}) but its interval [{low:+.1%}, {high:+.1%}] "
                       f"reaches past ±{AGREEMENT:.0%} after {r['rounds']} rounds"
                       + (f", its rounds' own estimates spreading from {min(spread):+.1%} to {max(spread):+.1%}"
                          if spread else "")
                       + ": the variation between rounds, not the attribution's estimate.")
            continue
        excess = float(r["drop_ms"]) - float(r["removable_ms"])
        neighbours = r.get("hooks_neighbours_ms")
        if method == "hooks" and isinstance(neighbours, (int, float)) and 0 < excess <= neighbours:
            out.append(head + f"the drop exceeds the removable attributed time by {excess:.1f} ms, and in the "
                       f"same hooked pairs the rest of the step ran {neighbours:.1f} ms faster with the stand-in "
                       f"in place (hooks_neighbours_ms): the stand-in's saving reaches past {category} into "
                       "the code after it (caches, the threads' state), time no exclusive attribution of "
                       f"{category} can count.")
        else:
            what = "exceeds" if excess > 0 else "falls short of"
            out.append(head + f"the drop {what} the removable attributed time by {abs(excess):.1f} ms; its "
                       "cause is not measured.")
    return out


def with_causes(fig: dict[str, Any]) -> dict[str, Any]:
    """An ablation figure with its failure causes (``failure_causes``) said again from its
    rows, in place of any it said before (after its verdicts by method)."""
    notes = [n for n in fig.get("notes") or [] if not n.startswith(CAUSE_PREFIX)]
    at = next((i + 1 for i, n in enumerate(notes) if n.startswith("Verdicts by method")), len(notes))
    return {**fig, "notes": [*notes[:at], *failure_causes(fig.get("rows") or []), *notes[at:]]}


def _stand_in_notes(categories: Sequence[str]) -> list[str]:
    """What each category's stand-in replaces; named by category where there are several."""
    categories = list(categories) or [DEFAULT_TARGET]
    if len(categories) == 1:
        return [STAND_IN_NOTES[categories[0]]]
    return [f"{c}: {STAND_IN_NOTES[c]}" for c in categories]


def merge_ablation(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (a figure measured for some combinations) with the rows of
    ``previous`` for the combinations and categories it did not measure (pure): the
    verdict and worst case are taken over all rows again. A kept row carries its own
    rounds and pairs, and ``measured_at`` (its own, else the previous figure's)."""
    new = {row_key(r) for r in current.get("rows") or []}
    when = previous.get("measured_at")
    kept = [{**r, "measured_at": r.get("measured_at") or when}
            for r in previous.get("rows") or [] if row_key(r) not in new]
    if not kept:
        return current
    m = dict(current.get("measurement") or {})
    notes = [*m.get("notes", []),
             "Kept from an earlier measurement (not measured again; each row's measured_at "
             "says when): " + ", ".join(row_key(r) for r in kept) + "."]
    return ablation_summary([*kept, *(current.get("rows") or [])], notes,
                            rounds=m.get("rounds", 0), min_pairs=m.get("min_pairs", 0),
                            budget_s=m.get("budget_s", 0.0), duration_s=current.get("duration_s"),
                            min_rounds=m.get("min_rounds"), max_rounds=m.get("max_rounds"),
                            precision=m.get("precision"))


def _rounds_rule(min_rounds: int | None, max_rounds: int | None, precision: float | None) -> str:
    if precision is None or min_rounds is None or not max_rounds or max_rounds <= min_rounds:
        return ""
    return (f" (at least {min_rounds}, then more until every combination at resolution had "
            f"an interval within ±{precision:.0%} of its estimate, at most {max_rounds}: the "
            "rule reads the intervals' widths, never where they lie)")
