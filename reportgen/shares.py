"""Attribution methods, pure parts (no torch: both sides use them).

Two methods apportion a forward to the categories of ``reportgen.categories``:

* ``profiler``: torch.profiler's per-op records of a profiled pass, split by the
  ``rg|`` ranges (``reportgen.attribution``); it gives the op and kernel tables too.
* ``hooks``: clocks read at module boundaries in an unprofiled pass (host clock on a
  CPU, CUDA event pairs on a GPU; ``reportgen.profile.regions``). No per-op recording,
  so the small ops that dominate some categories are not inflated by recording them.

Both methods keep per-iteration category times; a share's interval is a bootstrap over
those iterations of (category time / forward time), never a point share rescaled.
This module turns timed module calls into categories (``categorise``), computes share
intervals (``method_section``) and says which method a device's headline figures use.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reportgen.attribution import LAYER_ROLES, PHASES, ROLE_CATEGORY
from reportgen.categories import CATEGORIES, OPTIMIZER
from reportgen.stats.bootstrap import CONFIDENCE, share_interval
from reportgen.stats.bootstrap import two_sample_intervals as two_sample_intervals  # the findings' pages

METHODS: tuple[str, ...] = ("profiler", "hooks")

# The method whose figures a device's pages quote, and why: a method earns the headline
# by passing the validation on that kind of device (METHOD.md rule 10b). On a CPU the
# profiler records every op, which costs several microseconds each and inflates the
# categories made of many small ops (norms, residual adds, reshapes around the attention
# call); the module-boundary clocks cost one clock read per module call, and it is their
# attention.core time that the forward's drop under the attention ablation reproduces.
# On a GPU the profiler's kernel times are the device's own timestamps, which its host
# recording does not inflate, and kernel attribution is the method validated there.
HEADLINE: dict[str, str] = {"cpu": "hooks", "cuda": "profiler"}
HEADLINE_REASON: dict[str, str] = {
    "hooks": ("module-boundary clocks in an unprofiled pass: on a CPU the per-op recording "
              "of the profiler inflates categories made of many small ops, and the "
              "attention ablation is judged on the module-boundary method there"),
    "profiler": ("kernel times from the profiler are the device's own timestamps, which "
                 "per-op recording on the host does not inflate; module-boundary events "
                 "are shown beside them"),
    "profiler-only": ("a compiled forward keeps no module boundaries for clocks to read, so "
                      "only the profiler's kernel records attribute it"),
}
# Ops an attention or MLP container runs after its output projection (dropout, the
# residual add) go to "other", as in ``reportgen.attribution.split_attention``.


def headline_method(device_type: str) -> str:
    """The method whose figures the headline uses on a device type (``cpu``, ``cuda``)."""
    return HEADLINE.get(device_type, "profiler")


@dataclass(frozen=True)
class Call:
    """One timed region of an iteration: a hooked module call, the model's forward
    (``role="model"``) or the whole iteration (``role="iteration"``). ``category`` is the
    settled category of a projection call (``attention.qkv``, ``attention.out``, ``mlp``);
    ``parent`` indexes the enclosing call (None for the iteration).

    A training step adds ``role="phase"`` calls (``category`` names the phase: forward,
    backward, optimizer) under the iteration, and under the backward phase the modules'
    backward calls (``backward=True``): from the moment the gradient of a module's
    outputs is ready to the moment the gradient of its inputs is. ``fqn`` names the
    module called (a block's is its layer's)."""

    role: str
    start: float
    end: float
    parent: int | None
    category: str | None = None
    backward: bool = False
    fqn: str | None = None


def _gaps(call: Call, kids: Sequence[Call]) -> list[tuple[float, float]]:
    gaps: list[tuple[float, float]] = []
    cursor = call.start
    for kid in sorted(kids, key=lambda k: k.start):
        start = min(max(kid.start, cursor), call.end)
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, min(kid.end, call.end))
    if call.end > cursor:
        gaps.append((cursor, call.end))
    return gaps


def _gap_category(call: Call, kids: Sequence[Call], start: float) -> str:
    role = call.role
    if role == "iteration":
        return "overhead"  # outside the model's forward: the harness's call and sync
    if role == "phase":
        # a training step outside the model's modules: the optimizer's step, or the loss,
        # its backward and the gradients' accumulation
        return OPTIMIZER if call.category == OPTIMIZER else "other"
    if role in ROLE_CATEGORY:
        return ROLE_CATEGORY[role]
    if role == "proj":
        return call.category or "mlp"
    projections = [k for k in kids if k.role == "proj"]
    if call.backward:
        # the backward runs the call in reverse: what followed the output projection in
        # the forward (dropout, residual add) is differentiated before it
        if role == "attn":
            outs = [k.start for k in projections if k.category == "attention.out"]
            if not outs and projections:
                outs = [min(projections, key=lambda k: k.start).start]
            return "other" if outs and start < min(outs) else "attention.core"
        if role == "mlp":
            first = min((k.start for k in projections), default=-math.inf)
            return "other" if start < first else "mlp"
        return "other"
    if role == "attn":
        outs = [k.end for k in projections if k.category == "attention.out"]
        if not outs and projections:
            outs = [max(projections, key=lambda k: k.start).end]
        return "other" if outs and start >= min(outs) else "attention.core"
    if role == "mlp":
        last = max((k.end for k in projections), default=math.inf)
        return "other" if start >= last else "mlp"
    return "other"  # the model's own work outside any module: masks, position ids


# Where ``other`` and ``overhead`` time comes from, by the role of the call it lies in.
SOURCES: dict[str, str] = {
    "iteration": "harness (outside the model's forward)",
    "model": "model forward outside its modules (masks, position ids, cache bookkeeping)",
    "block": "blocks outside their modules (residual adds, reshapes)",
    "attn": "after the attention output projection (dropout, residual add)",
    "mlp": "after the MLP's last projection (dropout, residual add)",
    "phase": "training step outside the model's modules (the loss, its backward, gradient accumulation)",
}


def categorise(calls: Sequence[Call], sources: dict[str, float] | None = None) -> dict[str, float]:
    """Exclusive time per category of one iteration's timed calls (same unit as the
    calls). Each instant of the iteration lies in exactly one call's own time (the
    innermost call around it), so the categories sum to the iteration's duration.
    ``sources``, when given, accumulates ``other`` and ``overhead`` time by ``SOURCES``."""
    children: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        if call.parent is not None:
            children[call.parent].append(call)
    out = {c: 0.0 for c in CATEGORIES}
    for index, call in enumerate(calls):
        kids = children.get(index, [])
        for start, end in _gaps(call, kids):
            category = _gap_category(call, kids, start)
            out[category] += end - start
            if sources is not None and category in ("other", "overhead"):
                where = SOURCES.get(call.role, call.role)
                sources[where] = sources.get(where, 0.0) + end - start
    return out


def categorise_layers(calls: Sequence[Call]) -> dict[str, dict[str, float]]:
    """Exclusive time per category inside each layer (``role="block"`` call, by its
    ``fqn``), in the order the layers ran: what ``categorise`` gives, restricted to the
    time within each block call (its backward calls too, under the same layer)."""
    children: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        if call.parent is not None:
            children[call.parent].append(call)
    layer_of: list[str | None] = []
    out: dict[str, dict[str, float]] = {}
    for index, call in enumerate(calls):
        # a call's parent is recorded before it: its layer is known already
        inherited = layer_of[call.parent] if call.parent is not None and call.parent < index else None
        layer = call.fqn if call.role in LAYER_ROLES and call.fqn is not None else inherited
        layer_of.append(layer)
        if layer is None:
            continue
        row = out.setdefault(layer, {c: 0.0 for c in CATEGORIES})
        kids = children.get(index, [])
        for start, end in _gaps(call, kids):
            row[_gap_category(call, kids, start)] += end - start
    return out


def categorise_phases(calls: Sequence[Call]) -> dict[str, dict[str, float]] | None:
    """A training step's exclusive time per phase and category (None without phases).
    The phases tile the iteration (see ``reportgen.attribution``): time of the iteration
    outside every phase (``overhead``) goes to the phase whose tile holds it."""
    phase_of: dict[int, str] = {}
    for index, call in enumerate(calls):
        if call.role == "phase" and call.category:
            phase_of[index] = call.category
    if not phase_of:
        return None
    children: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        if call.parent is not None:
            children[call.parent].append(call)
    root = calls[0]
    starts = sorted((calls[i].start, name) for i, name in phase_of.items())
    tiles = [(name, root.start if k == 0 else start,
              starts[k + 1][0] if k + 1 < len(starts) else root.end)
             for k, (start, name) in enumerate(starts)]
    out: dict[str, dict[str, float]] = {name: {c: 0.0 for c in CATEGORIES} for _, name in starts}

    def phase(index: int | None) -> str | None:
        while index is not None:
            if index in phase_of:
                return phase_of[index]
            index = calls[index].parent
        return None

    for index, call in enumerate(calls):
        kids = children.get(index, [])
        name = phase(index)
        for start, end in _gaps(call, kids):
            category = _gap_category(call, kids, start)
            if name is not None:
                out[name][category] += end - start
                continue
            for tile, begin, stop in tiles:  # the iteration's own time, split by tile
                piece = min(end, stop) - max(start, begin)
                if piece > 0:
                    out[tile][category] += piece
    return out


# ---------------------------------------------------------------- share intervals
# (the bootstrap itself: ``stats.bootstrap.share_interval``)


def phases_section(per_iteration: Sequence[Mapping[str, Mapping[str, float]]],
                   iteration_ms: Sequence[float]) -> dict[str, Any]:
    """A training step's phases from per-iteration ``{phase: {category: ms}}``: each
    phase's mean ms, its share of the step with a bootstrap interval over the iterations,
    the series, and its mean ms and share of the step per category."""
    names = sorted({name for row in per_iteration for name in row},
                   key=lambda p: PHASES.index(p) if p in PHASES else len(PHASES))
    n = len(iteration_ms)
    out: dict[str, Any] = {}
    for name in names:
        rows = [row.get(name) or {} for row in per_iteration]
        series = [float(sum(r.values())) for r in rows]
        share, low, high = share_interval(series, iteration_ms)
        total = sum(iteration_ms)
        cats = {}
        for c in CATEGORIES:
            ms = sum(float(r.get(c, 0.0)) for r in rows)
            cats[c] = {"ms": ms / n, "share": ms / total if total > 0 else 0.0}
        out[name] = {"ms": sum(series) / n, "share": share, "share_low": low, "share_high": high,
                     "per_iteration_ms": series, "categories": cats}
    return out


def method_section(per_iteration: Sequence[Mapping[str, float]], iteration_ms: Sequence[float],
                   phases: Sequence[Mapping[str, Mapping[str, float]]] | None = None,
                   **extra: Any) -> dict[str, Any]:
    """A method's record section from its per-iteration category times (ms): the mean
    per iteration, the share with its bootstrap interval, and the series itself. For a
    training step, ``phases`` (per iteration ``{phase: {category: ms}}``) adds the
    ``phases`` section (``phases_section``)."""
    n = len(iteration_ms)
    if n == 0 or len(per_iteration) != n:
        raise ValueError("need per-iteration category times for every iteration")
    if phases:
        if len(phases) != n:
            raise ValueError("need the phases of every iteration")
        extra["phases"] = phases_section(phases, iteration_ms)
    categories: dict[str, Any] = {}
    for c in CATEGORIES:
        series = [float(row.get(c, 0.0)) for row in per_iteration]
        share, low, high = share_interval(series, iteration_ms)
        categories[c] = {"ms": sum(series) / n, "share": share, "share_low": low,
                         "share_high": high, "per_iteration_ms": series}
    return {**extra, "iterations": n, "forward_ms": sum(iteration_ms) / n,
            "iteration_ms": [float(x) for x in iteration_ms],
            "interval": f"{CONFIDENCE:.0%} percentile bootstrap over {n} iterations",
            "categories": categories}


def combined_share(section: Mapping[str, Any], cats: Sequence[str]) -> tuple[float, float, float] | None:
    """Share of several categories together, with its bootstrap interval over the
    method's iterations; None when the section holds no per-iteration series."""
    walls = section.get("iteration_ms")
    entries = [(section.get("categories") or {}).get(c) or {} for c in cats]
    series = [e.get("per_iteration_ms") for e in entries]
    if not walls or any(not isinstance(s, list) or len(s) != len(walls) for s in series):
        return None
    summed = [sum(s[i] for s in series) for i in range(len(walls))]  # type: ignore[index]
    return share_interval(summed, walls)


def headline_section(attribution: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The record's section of the method its headline uses (None for records written
    before methods were stored)."""
    if not attribution:
        return None
    methods = attribution.get("methods") or {}
    return methods.get(attribution.get("headline_method") or "profiler")


def disagreement(attribution: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per category: each method's share (with interval) and hooks - profiler."""
    methods = (attribution or {}).get("methods") or {}
    prof = (methods.get("profiler") or {}).get("categories") or {}
    hooks = (methods.get("hooks") or {}).get("categories") or {}
    if not prof or not hooks:
        return []
    rows = []
    for c in CATEGORIES:
        p, h = prof.get(c) or {}, hooks.get(c) or {}
        ps, hs = p.get("share"), h.get("share")
        rows.append({"category": c, "profiler": ps, "profiler_low": p.get("share_low"),
                     "profiler_high": p.get("share_high"), "hooks": hs,
                     "hooks_low": h.get("share_low"), "hooks_high": h.get("share_high"),
                     "difference": hs - ps if ps is not None and hs is not None else None})
    return rows
