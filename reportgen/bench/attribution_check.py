"""Figure 3: attribution checked without model-specific code.

(a) Breadth: many transformers text architectures at tiny scale go through reportgen's
    profiled pass; the shares must sum to 1 and ``attention.core`` must be found.
(b) Ablation: at reference size, a target category's work (the attention core; a
    mixture-of-experts model's experts, its router kept; a hybrid's token mixers) is
    replaced by a stand-in of negligible cost (``reportgen.bench.ablation``); the drop in
    unprofiled forward time is an independent estimate of that work's cost, compared with
    what each attribution method attributes to the category (``attention.core``,
    ``moe.experts``, ``mixer``) and the stand-in removes. Measured in rounds, each a freshly
    spawned process, so the interval spans what changes between processes and moments of
    the run.
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
    AGREEMENT,
    DEFAULT_TARGET,
    RESOLUTION,
    TARGETS,
    VERDICTS,
    Round,
    agreement,
    category_series,
    category_stand_in,
    figure_status,
    hooked_pair,
)
from reportgen.bench.common import (
    build,
    combo_label,
    stopwatch,
)
from reportgen.bench.results import figure
from reportgen.execute.rounds import Policy
from reportgen.records import fields
from reportgen.records.status import is_ok
from reportgen.shares import METHODS
from reportgen.stats import median

# Encoders, decoders, encoder-decoders; fused (gpt2, gpt_neox, falcon, bloom, phi's dense
# out only) and separate QKV; learned, rotary, relative-bias and ALiBi positions.
ARCHITECTURES: tuple[str, ...] = (
    "bert", "roberta", "distilbert", "electra", "albert", "xlm-roberta", "deberta-v2",
    "gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "falcon",
    "gptj", "bloom", "gemma", "olmo", "stablelm", "starcoder2", "gpt_bigcode", "codegen",
    "t5", "mt5", "bart", "mbart", "pegasus",
)
QUICK_ARCHITECTURES: tuple[str, ...] = ("bert", "gpt2", "llama", "t5")
MIN_ARCHITECTURES = 12
HOOKED_EVERY = 8  # every eighth pair of the ablation runs under the hooks method's clocks

ARCH_QUESTION = (
    "Does attribution work on architectures it was never written for? Each transformers "
    "text model type below is built at tiny scale from its default config and profiled by "
    "the same code, with no model names anywhere: the category shares must sum to 1 and "
    "`attention.core` must be found."
)
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


def _combo(model: str, *, scale: str, mode: str = "forward", attn: str = "sdpa",
           seq_len: int = 32) -> Any:
    from reportgen.suite import Combination

    return Combination(model=model, scale=scale, mode=mode, dtype="fp32",
                       attn_implementation=attn, batch_size=1, seq_len=seq_len, device="cpu")


def _profile(built: Any, iterations: int, trace_dir: Path, name: str) -> dict[str, Any]:
    from reportgen.profile import profiling

    return profiling.profile_step(built.step, built.model, iterations=iterations,
                                  trace_path=trace_dir / f"{name}.trace.json.gz")


def _traits(model: Any) -> dict[str, Any]:
    """Descriptive traits (for the table only; nothing is decided from them)."""
    cfg = model.config
    text = " ".join(sorted(vars(cfg)))
    if "rope" in text or "rotary" in text:
        positions = "rotary"
    elif getattr(cfg, "relative_attention_num_buckets", None):
        positions = "relative bias"
    elif type(cfg).__name__.startswith(("Bloom", "Mpt")):
        positions = "alibi"
    elif getattr(cfg, "position_buckets", None) or getattr(cfg, "relative_attention", False):
        positions = "relative (disentangled)"
    else:
        positions = "learned"
    projections = None
    for module in model.modules():
        if "Attention" in type(module).__name__:
            projections = sum(
                1 for m in module.modules()
                if m is not module and getattr(getattr(m, "weight", None), "ndim", 0) == 2
                and "Embedding" not in type(m).__name__)
            break
    return {"positions": positions,
            "qkv": ("fused" if projections is not None and projections <= 2 else "separate")
            if projections else None}


def check_architecture(model_type: str, trace_dir: Path, *, iterations: int = 2) -> dict[str, Any]:
    from reportgen.profile import models

    row: dict[str, Any] = {"model_type": model_type}
    built = None
    for attn in ("sdpa", "eager"):
        try:
            built = build(_combo(model_type, scale="tiny", attn=attn))
            row["attn_implementation"] = attn
            break
        except Exception as exc:  # noqa: BLE001 - sdpa unsupported: try eager
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    if built is None:
        row.update(ok=False)
        return row
    row.pop("error", None)
    try:
        result = _profile(built, iterations, trace_dir, model_type)
        cats = fields.get(result, "attribution.categories")
        shares = {c: float(v["share"]) for c, v in cats.items()}
        total = sum(shares.values())
        row.update(
            architecture=built.info.get("architecture"), **{"class": built.info.get("class")},
            share_sum=total, attention_core_share=shares.get("attention.core", 0.0),
            other_share=shares.get("other", 0.0), overhead_share=shares.get("overhead", 0.0),
            shares=shares, **_traits(built.model),
        )
        row["ok"] = abs(total - 1.0) < 1e-6 and shares.get("attention.core", 0.0) > 0
    except Exception as exc:  # noqa: BLE001 - a failing architecture is a finding
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        models.free(built)
    return row


def architectures(model_types: Sequence[str] = ARCHITECTURES, *,
                  log: Callable[[str], None] = print,
                  stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-arch-") as tmp, stopwatch() as wall:
        for i, mt in enumerate(model_types, 1):
            if stop():
                skipped = list(model_types[i - 1:])
                break
            row = check_architecture(mt, Path(tmp))
            rows.append(row)
            log(f"  architecture {i}/{len(model_types)} {mt}: "
                + ("ok" if row.get("ok") else f"FAILED {row.get('error', '')}")
                + (f" core {row['attention_core_share']:.3f}" if "attention_core_share" in row else ""))
    passed = [r for r in rows if r.get("ok")]
    failed = [r for r in rows if not r.get("ok")]
    kinds = sorted({str(r.get("architecture")) for r in passed})
    notes = [
        f"{len(passed)} of {len(rows)} model types pass ({', '.join(kinds)}); "
        "tiny scale: 2 layers, width 64, sequence 32, sdpa where the model has it, else eager.",
        "Pass = shares sum to 1 within 1e-6 and attention.core share > 0.",
    ]
    notes += [f"{r['model_type']}: {r.get('error') or 'shares do not sum to 1 or no attention.core'}"
              for r in failed]
    if skipped:
        notes.append("time limit reached; not tried: " + ", ".join(skipped))
    status = None if not failed else "fail"
    return figure(
        "Attribution across architectures", ARCH_QUESTION,
        value=len(passed), unit="architectures",
        goal=f"at least {MIN_ARCHITECTURES} architectures, every one tested passing",
        goal_spec={"kind": "at_least", "target": MIN_ARCHITECTURES},
        status=status, notes=notes, rows=rows, duration_s=wall[0],
    )


# ---------------------------------------------------------------- ablation


def paired_forwards(step: Any, model: Any, *, budget_s: float, min_pairs: int,
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

    Returns ``full_ms`` and ``ablated_ms`` (the unprofiled pairs), ``hooked`` (per hooked
    pair: full ms, its ``category`` ms, stand-in ms, its ``category`` ms), ``calls``
    (stand-in calls per forward) and ``category``.
    """
    import time

    from reportgen.profile import regions
    from reportgen.profile.structure import module_categories

    clock = regions.device_clock(step)
    proj_category = module_categories(model, step)

    def one(stub: bool, hooked: bool) -> tuple[float, dict[str, float]]:
        with category_stand_in(model, category) if stub else contextlib.nullcontext():
            if hooked:
                ms, cats = regions.hooked_forward(model, step, clock, proj_category)
            else:
                t0 = time.perf_counter()
                step()
                step.sync()
                ms, cats = (time.perf_counter() - t0) * 1000.0, {}
        step.reset()
        return ms, cats

    probe = _probe(step, model, category)
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


def _probe(step: Any, model: Any, category: str) -> Any:
    """One forward with the stand-in, untimed: it proves the stand-in is called (its
    ``calls`` per forward) and lets a mixer's stand-in record its output before any
    measured forward."""
    with category_stand_in(model, category) as probe:
        step()
        step.reset()
    if probe.calls == 0:
        raise RuntimeError(f"the stand-in was never called: {category} not replaced")
    return probe


def _profiler_series(built: Any, iterations: int, trace_dir: Path, name: str,
                     category: str = DEFAULT_TARGET) -> tuple[list[float], list[float]]:
    from reportgen.profile import regions

    profiled = _profile(built, iterations, trace_dir, name)
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

    from reportgen.profile import models

    with stopwatch() as wall:
        # as in the suite's workers: what outlives a combination (the libraries' objects)
        # frozen, so a collection during a timed forward costs milliseconds, not 0.2 s
        gc.collect()
        gc.freeze()
        built = build(combo)
        try:
            patched = list(_probe(built.step, built.model, category).patched)
            profiler = None
            if profiled:
                full = _profiler_series(built, iterations, trace_dir, "full", category)
                with category_stand_in(built.model, category):
                    left = _profiler_series(built, iterations, trace_dir, "ablated", category)
                profiler = {"full": full, "left": left}
            pairs = paired_forwards(built.step, built.model, budget_s=budget_s, min_pairs=min_pairs,
                                    category=category)
        finally:
            models.free(built)
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


def _key(row: dict[str, Any]) -> str:
    """A row's identity within the figure, as ``Target.key`` gives it."""
    category = row.get("category", DEFAULT_TARGET)
    return row["combination"] if category == DEFAULT_TARGET else f"{row['combination']} [{category}]"


def _describe(row: dict[str, Any]) -> str:
    return (f"{_key(row)}: drop {row['drop_ms']:.2f} ms [{row['drop_low_ms']:.2f}, "
            f"{row['drop_high_ms']:.2f}] vs removable attributed {row['removable_ms']:.2f} ms "
            f"({row['rel_diff']:+.1%} [{row['rel_diff_low']:+.1%}, {row['rel_diff_high']:+.1%}], "
            f"{row['headline_method']}, {row['rounds']} rounds, {row['pairs']} pairs): {row['verdict']}")


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
                units[_key(unit)].append(unit)
            log(f"  ablation round {index + 1}: " + ", ".join(
                f"{_key(u)} {len(u['full_ms'])}+{len(u['hooked'])} pairs" for u in done)
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
        log(f"  ablation {_describe(rows[-1])}")
    return ablation_summary(rows, notes, rounds=done_rounds, min_pairs=min_pairs, budget_s=budget_s,
                            duration_s=wall[0], min_rounds=rounds, max_rounds=limit,
                            precision=precision)


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
        f"{where}: {_key(worst)} ({worst['headline_method']} method), drop "
        f"{worst['drop_ms']:.2f} ms vs {worst['removable_ms']:.2f} ms attributed "
        f"({worst['rel_diff']:+.1%}, interval {worst['rel_diff_low']:+.1%} to "
        f"{worst['rel_diff_high']:+.1%}).",
        "Verdicts by method (the headline method decides the figure): " + "; ".join(per_method) + ".",
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
            + ", ".join(_key(r) for r in rows if not r.get("own_process")) + "."]),
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
        "Every module the structure calls experts (routed and shared) returns "
        "cached zeros of its output's shape; the router (gate, top-k, dispatch, combination) "
        "still runs. What the methods still attribute to moe.experts with the stand-in in "
        "place (the replaced calls themselves) is left out of removable_ms."),
    "mixer": (
        "Every token mixer (state-space scan, linear attention, short convolution) "
        "returns cached zeros of the output its original gave once for inputs of the same "
        "shapes; what the methods still attribute to mixer with the stand-in in place is "
        "left out of removable_ms."),
}


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
    new = {_key(r) for r in current.get("rows") or []}
    when = previous.get("measured_at")
    kept = [{**r, "measured_at": r.get("measured_at") or when}
            for r in previous.get("rows") or [] if _key(r) not in new]
    if not kept:
        return current
    m = dict(current.get("measurement") or {})
    notes = [*m.get("notes", []),
             "Kept from an earlier measurement (not measured again; each row's measured_at "
             "says when): " + ", ".join(_key(r) for r in kept) + "."]
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


# ---------------------------------------------------------------- other + overhead

REMAINDER_GOAL = 0.10
REMAINDER_QUESTION = (
    "How much of each forward does the headline attribution leave in `other` and "
    "`overhead`, the categories that name no part of the model? Forward and prefill at "
    "reference size must stay at or under 10%; for decode the figure and where it comes "
    "from are shown."
)


def other_overhead(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Figure from the suite's records (pure): the headline method's other + overhead
    share per combination, with its bootstrap interval and, where the hooks method
    recorded it, the largest source."""
    from reportgen.shares import combined_share, headline_section

    rows: list[dict[str, Any]] = []
    for rec in records:
        attribution = fields.get(rec, "attribution") or {}
        if not is_ok(rec) or not attribution.get("categories"):
            continue
        cats = attribution["categories"]
        share = sum(float((cats.get(c) or {}).get("share") or 0.0) for c in ("other", "overhead"))
        section = headline_section(attribution)
        interval = combined_share(section, ["other", "overhead"]) if section else None
        hooks = (attribution.get("methods") or {}).get("hooks") or {}
        sources = hooks.get("other_sources_ms") or {}
        top = max(sources.items(), key=lambda kv: kv[1]) if sources else None
        mode = fields.get(rec, "combination.mode")
        rows.append({"combination": fields.get(rec, "id"), "mode": mode,
                     "method": attribution.get("headline_method") or "profiler",
                     "share": share,
                     "share_low": interval[1] if interval else None,
                     "share_high": interval[2] if interval else None,
                     "judged": mode in ("forward", "prefill"),
                     "largest_source": top[0] if top else None,
                     "largest_source_ms": top[1] if top else None})
    goal = (f"other + overhead at most {REMAINDER_GOAL:.0%} of the forward for forward and "
            "prefill; decode shown with its cause")
    spec = {"kind": "below", "target": REMAINDER_GOAL}
    judged = [r for r in rows if r["judged"]]
    if not judged:
        return figure("Unnamed time (other + overhead)", REMAINDER_QUESTION, value=None,
                      unit="share", goal=goal, goal_spec=spec, status="not measured",
                      notes=["no forward or prefill record"], rows=rows)
    worst = max(judged, key=lambda r: r["share"])
    over = [r for r in judged if r["share"] > REMAINDER_GOAL]
    decode = [r for r in rows if r["mode"] == "decode"]
    notes = [f"{len(judged) - len(over)} of {len(judged)} forward/prefill combinations at or "
             f"under {REMAINDER_GOAL:.0%}; highest {worst['combination']} "
             f"({worst['share']:.1%}, {worst['method']} method)."]
    if decode:
        d = max(decode, key=lambda r: r["share"])
        notes.append(f"Decode: highest {d['combination']} ({d['share']:.1%}); largest source: "
                     f"{d['largest_source'] or 'not recorded'}.")
    return figure("Unnamed time (other + overhead)", REMAINDER_QUESTION,
                  value=worst["share"], unit="share",
                  interval=([worst["share_low"], worst["share_high"]]
                            if worst["share_low"] is not None else None),
                  interval_kind="worst forward/prefill combination, bootstrap over iterations",
                  goal=goal, goal_spec=spec, status="fail" if over else "pass",
                  notes=notes, rows=rows)
