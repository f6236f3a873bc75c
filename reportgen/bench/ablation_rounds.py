"""Figure 3b, the ablation, measured: at reference size a target category's work (the
attention core; a mixture-of-experts model's experts, its router kept; a hybrid's token
mixers) is replaced by a stand-in of negligible cost (``bench.ablation``), in forwards
paired back to back with the real work, every ``HOOKED_EVERY``-th pair under the hooks
method's clocks. Measured in rounds, each combination of a round in a fresh process of its
own (``execute.fresh``), so the interval spans what changes between processes and moments
of the run; the rounds stop by the suite's rule (``execute.rounds.Policy``). The figure
is ``ablation_figure``'s.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportgen.bench.ablation import (
    DEFAULT_TARGET,
    HOOKED_EVERY,
    TARGETS,
    category_series,
    category_stand_in,
    hooked_pair,
)
from reportgen.bench.ablation_figure import ablation_row, ablation_summary, describe, row_key
from reportgen.bench.common import build, combo_label, profile_pass, stopwatch
from reportgen.execute.rounds import Policy
from reportgen.records import fields


def paired_forwards(step: Any, model: Any, structure: Any, *, budget_s: float, min_pairs: int,
                    hooked_every: int = HOOKED_EVERY, warmup: int = 2,
                    category: str = DEFAULT_TARGET) -> dict[str, Any]:
    """Forwards in back-to-back pairs, one with the target ``category``'s work (one of
    ``ablation.TARGETS``: the attention core by default) and one with its stand-in, in ABBA
    order (full, stand-in, stand-in, full, ...), until ``budget_s`` has
    passed and at least ``min_pairs`` unprofiled pairs are done. Every ``hooked_every``-th
    pair runs under the hooks method's clocks instead, so the attribution is measured at
    the same moments as the drop. Pairing forward by forward (not block by block) matters
    on a host whose speed wanders by tens of percent within a minute: only the ratio of
    neighbours is steady.

    ``structure``: the model's (`structure.derive`). Returns ``full_ms`` and
    ``ablated_ms`` (the unprofiled pairs), ``hooked`` (per hooked
    pair: full ms, its ``category`` ms, stand-in ms, its ``category`` ms), ``calls``
    (stand-in calls per forward) and ``category``.
    """
    import time

    from reportgen.profile import regions

    clock = regions.device_clock(step)

    def one(stub: bool, hooked: bool) -> tuple[float, dict[str, float]]:
        with category_stand_in(model, category, roles=structure.roles) if stub else contextlib.nullcontext():
            if hooked:
                ms, cats = regions.hooked_forward(model, step, clock, structure)
            else:
                t0 = time.perf_counter()
                step()
                step.sync()
                ms, cats = (time.perf_counter() - t0) * 1000.0, {}
        step.reset()
        return ms, cats

    probe = _probe(step, model, category, structure)
    for _ in range(warmup):
        for hooked in (False, True):
            one(False, hooked)
            one(True, hooked)
    full: list[float] = []
    stub: list[float] = []
    hooked_pairs: list[tuple[float, float, float, float]] = []
    started = time.monotonic()
    pair = 0
    while (len(full) < min_pairs or len(hooked_pairs) < 2
           or time.monotonic() - started < budget_s):
        hooked = pair % hooked_every == hooked_every - 1
        if pair % 2 == 0:
            f, a = one(False, hooked), one(True, hooked)
        else:
            a = one(True, hooked)
            f = one(False, hooked)
        if hooked:
            hooked_pairs.append(hooked_pair(f[0], f[1], a[0], a[1], category))
        else:
            full.append(f[0])
            stub.append(a[0])
        pair += 1
    return {"full_ms": full, "ablated_ms": stub, "hooked": hooked_pairs, "calls": probe.calls,
            "category": category}


def _probe(step: Any, model: Any, category: str, structure: Any) -> Any:
    """One forward with the stand-in, untimed: it proves the stand-in is called (its
    ``calls`` per forward) and lets a mixer's stand-in record its output before any
    measured forward."""
    with category_stand_in(model, category, roles=structure.roles) as probe:
        step()
        step.reset()
    if probe.calls == 0:
        raise RuntimeError(f"the stand-in was never called: {category} not replaced")
    return probe


def _profiler_series(built: Any, structure: Any, iterations: int, trace_dir: Path, name: str,
                     category: str = DEFAULT_TARGET) -> tuple[list[float], list[float]]:
    from reportgen.profile import regions

    profiled = profile_pass(built, structure.labels, iterations, trace_dir, name)
    return category_series(regions.profiler_method(profiled["per_iteration"],
                                                   fields.get(profiled, "attribution.basis")), category)


@dataclass(frozen=True)
class Target:
    """A combination and the category whose work its ablation replaces."""

    combo: Any
    category: str = DEFAULT_TARGET

    def __post_init__(self) -> None:
        if self.category not in TARGETS:
            raise ValueError(f"no stand-in for {self.category!r}; choose from {', '.join(TARGETS)}")

    @property
    def key(self) -> str:
        """The row's identity within the figure (a combination may be ablated for two
        categories: a hybrid's attention core and its mixers)."""
        label = combo_label(self.combo)
        return label if self.category == DEFAULT_TARGET else f"{label} [{self.category}]"


def as_target(item: Any) -> Target:
    """A Target, or a bare combination: its attention core."""
    return item if isinstance(item, Target) else Target(item)


def ablation_unit(combo: Any, *, profiled: bool, min_pairs: int, budget_s: float,
                  iterations: int, trace_dir: Path, category: str = DEFAULT_TARGET) -> dict[str, Any]:
    """One combination's round for the target ``category``: its pairs and, in the
    profiled round, the profiler method's passes on the full model and with the stand-in
    in place."""
    import gc

    from reportgen.profile import building
    from reportgen.profile.structure import derive

    with stopwatch() as wall:
        # as in the suite's workers: what outlives a combination (the libraries' objects)
        # frozen, so a collection during a timed forward costs milliseconds, not 0.2 s
        gc.collect()
        gc.freeze()
        built = build(combo)
        try:
            structure = derive(built.model, built.step)  # once: every pass below reads it
            patched = list(_probe(built.step, built.model, category, structure).patched)
            profiler = None
            if profiled:
                full = _profiler_series(built, structure, iterations, trace_dir, "full", category)
                with category_stand_in(built.model, category, roles=structure.roles):
                    left = _profiler_series(built, structure, iterations, trace_dir, "ablated", category)
                profiler = {"full": full, "left": left}
            pairs = paired_forwards(built.step, built.model, structure, budget_s=budget_s,
                                    min_pairs=min_pairs, category=category)
        finally:
            building.free(built)
    return {"combination": combo_label(combo), **pairs, "patched": patched, "profiler": profiler,
            "wall_s": wall[0]}


def ablation_round(combos: Sequence[Any], *, profiled: bool, min_pairs: int, budget_s: float,
                   iterations: int) -> tuple[list[dict[str, Any]], list[str]]:
    """One round of the ablation, in the process it is called in (a fresh one for each
    combination: `ablation` spawns it): each combination (a ``Target``, or a bare combination for its attention
    core) in the order given. A combination that fails is a note."""
    from reportgen.profile import heap

    heap.steady()
    units: list[dict[str, Any]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-ablation-") as tmp:
        for item in combos:
            target = as_target(item)
            try:
                unit = ablation_unit(target.combo, profiled=profiled, min_pairs=min_pairs,
                                     budget_s=budget_s, iterations=iterations,
                                     trace_dir=Path(tmp), category=target.category)
                units.append({**unit, "own_process": len(combos) == 1, "pid": os.getpid()})
            except Exception as exc:  # noqa: BLE001 - a failure is a finding, not the end
                notes.append(f"{target.key} failed: {type(exc).__name__}: {exc}")
    return units, notes


def _half_width(row: dict[str, Any]) -> float:
    """The headline interval's half-width, or infinity where it is missing."""
    low, high = row["rel_diff_low"], row["rel_diff_high"]
    if any(v is None or v != v for v in (low, high)):
        return math.inf
    return (high - low) / 2.0


def ablation_policy(rounds: int, max_rounds: int | None = None, precision: float | None = None) -> Policy:
    """The ablation's rounds in the suite's rule (``execute.rounds.Policy``): at least
    ``rounds``, then more, up to ``max_rounds``, until the widest interval at resolution is
    within ``precision`` either side; without a precision any interval will do once every
    combination has one. A round is never measured again for contention."""
    return Policy(rounds=max(rounds, max_rounds or rounds), min_rounds=rounds,
                  target=math.inf if precision is None else precision, retries=0)


def widths(rows: Sequence[dict[str, Any]], combinations: int) -> tuple[float | None, float]:
    """(the half-width the rounds' rule reads: the widest among the combinations at
    resolution, or None while a combination has no row; that widest half-width)."""
    judged = [r for r in rows if r["verdict"] != "below resolution"]
    widest = max((_half_width(r) for r in judged), default=0.0)
    return (widest if len(rows) >= combinations else None), widest


def precise(rows: Sequence[dict[str, Any]], combinations: int,
            precision: float | None) -> tuple[bool, float]:
    """Whether the rows are precise enough to stop adding rounds (pure), and the widest
    half-width among the combinations at resolution: every combination needs a row, and
    every row at resolution an interval within ``precision`` either side. Widths only."""
    width, widest = widths(rows, combinations)
    return ablation_policy(1, precision=precision).within(width), widest


def ablation(combos: Sequence[Any], *, rounds: int = 5, max_rounds: int | None = None,
             precision: float | None = None, min_pairs: int = 12, budget_s: float = 50.0,
             iterations: int = 3, log: Callable[[str], None] = print,
             stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """The ablation figure: at least ``rounds`` rounds, each visiting the combinations in
    its own shuffled order, each combination in a freshly spawned process of its own, and
    spending ``budget_s`` (at least ``min_pairs`` pairs) on each; the profiler method's
    passes run in round 0. ``combos``:
    ``Target`` items (a combination and the category whose work is replaced) or bare
    combinations (their attention core).

    With ``precision`` and ``max_rounds``, rounds continue past ``rounds`` until every
    combination at resolution has an interval no wider than ``precision`` either side, or
    ``max_rounds`` are done: a noisy hour costs time rather than a verdict the noise
    decided. The rule reads the intervals' widths only, never where they lie."""
    import random

    from reportgen.execute import fresh

    targets = [as_target(c) for c in combos]
    units: dict[str, list[dict[str, Any]]] = {t.key: [] for t in targets}
    if len(units) < len(targets):
        raise ValueError("the same combination and category twice")
    notes: list[str] = []
    policy = ablation_policy(rounds, max_rounds, precision)
    limit = policy.rounds

    def width_now() -> float | None:
        rows = [ablation_row(m) for m in units.values() if any(u.get("profiler") for u in m)]
        width, widest = widths(rows, len(units))
        log(f"  ablation after {done_rounds} rounds: widest interval at resolution ±{widest:.1%}"
            + ("" if precision is None else f" (wanted ±{precision:.0%})"))
        return width

    done_rounds = 0
    with stopwatch() as wall:
        for index in range(limit):
            if index >= policy.floor and policy.settled(index, width_now()):
                break
            if stop():
                notes.append(f"time limit reached after {index} rounds")
                break
            order = list(targets)
            random.Random(index).shuffle(order)
            done, failed = [], []
            for target in order:
                # one process per combination and round, as the profile gives each round
                # its own worker: a model measured before it in the same process changed
                # what removing a core saved (GPT-2 eager training, +27% to +72% against -4%)
                result = fresh.run(ablation_round, {"combos": [target], "profiled": index == 0,
                                                    "min_pairs": min_pairs, "budget_s": budget_s,
                                                    "iterations": iterations})
                got, lost = result.value if result.ok else ([], [f"{target.key}: {result.reason}"])
                done += got
                failed += lost
            notes += [f"round {index}: {n}" for n in failed]
            if not done:
                log(f"  ablation round {index + 1}: nothing measured")
                continue
            done_rounds += 1
            for unit in done:
                units[row_key(unit)].append(unit)
            log(f"  ablation round {index + 1}: " + ", ".join(
                f"{row_key(u)} {len(u['full_ms'])}+{len(u['hooked'])} pairs" for u in done)
                + (f"; {len(failed)} failed" if failed else ""))
        else:
            if precision is not None and limit > rounds and not policy.within(width_now()):
                notes.append(f"{limit} rounds, the most allowed, left an interval at resolution "
                             f"wider than ±{precision:.0%}")
    rows = []
    for label, measured in units.items():
        if not any(u.get("profiler") for u in measured):
            notes.append(f"{label}: not measured (its profiled round did not complete)")
            continue
        rows.append(ablation_row(measured))
        log(f"  ablation {describe(rows[-1])}")
    return ablation_summary(rows, notes, rounds=done_rounds, min_pairs=min_pairs, budget_s=budget_s,
                            duration_s=wall[0], min_rounds=rounds, max_rounds=limit,
                            precision=precision)
