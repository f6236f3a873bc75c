"""A stand-in for the attention core: same output shape, negligible cost.

Used by the ablation cross-check (figure 3b): the forward time that disappears when the
attention core is replaced is an independent estimate of what the core costs, to be
compared with the time reportgen attributes to ``attention.core``.

Generic, no model names: transformers models call the attention core through
``AttentionInterface`` (``sdpa``, flash, flex) or, for ``eager``, through the
``eager_attention_forward`` function of their own modelling module. The stand-in replaces
the registered ``sdpa`` function in the class-wide mapping and the ``eager_attention_forward``
of the module that defines each attention class found in the model.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from reportgen.shares import percentiles, ratio_of_sums
from reportgen.stats import median

# The rule the ablation figure is judged by: where the attributed attention.core is at
# least RESOLUTION of the forward, the forward's drop with the core stubbed out must agree
# with the attributed time within AGREEMENT (relative), the whole 95% interval inside.
AGREEMENT = 0.10
RESOLUTION = 0.05
VERDICTS = ("pass", "fail", "below resolution")


@dataclass
class StandIn:
    """The replacement attention function, counting its calls so a run can prove it was
    used. Output zeros are cached per shape: returning them costs a dictionary lookup."""

    calls: int = 0
    patched: list[str] = field(default_factory=list)
    _cache: dict[tuple[Any, ...], torch.Tensor] = field(default_factory=dict)

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                 value: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        self.calls += 1
        # transformers' attention functions take (batch, heads, q_len, head_dim) and return
        # (batch, q_len, heads, v_head_dim), contiguous.
        shape = (query.shape[0], query.shape[2], query.shape[1], value.shape[-1])
        key_ = (shape, query.dtype, query.device)
        out = self._cache.get(key_)
        if out is None:
            out = torch.zeros(shape, dtype=query.dtype, device=query.device)
            self._cache[key_] = out
        return out, None


def attention_classes(model: torch.nn.Module) -> list[type]:
    """Classes of the outermost modules whose class name contains ``Attention``."""
    found: dict[type, None] = {}

    def walk(mod: torch.nn.Module) -> None:
        for child in mod.children():
            if "Attention" in type(child).__name__:
                found[type(child)] = None
                # nested attention modules (BertAttention > BertSelfAttention) call the core
                for sub in child.modules():
                    if sub is not child and "Attention" in type(sub).__name__:
                        found[type(sub)] = None
            else:
                walk(child)

    walk(model)
    return list(found)


@contextlib.contextmanager
def attention_stand_in(model: torch.nn.Module) -> Iterator[StandIn]:
    """Within the block, every attention-core call of ``model`` returns cached zeros."""
    from transformers.modeling_utils import AttentionInterface

    stand_in = StandIn()
    restore: list[tuple[Any, str, Any]] = []
    mapping = AttentionInterface._global_mapping
    for name in list(mapping):
        if name in ("sdpa", "flex_attention") or name.startswith("flash_attention"):
            restore.append((mapping, name, mapping[name]))
            mapping[name] = stand_in
            stand_in.patched.append(f"AttentionInterface[{name!r}]")
    for cls in attention_classes(model):
        mod = sys.modules.get(cls.__module__)
        if mod is not None and hasattr(mod, "eager_attention_forward"):
            if any(m is mod.__dict__ for m, *_ in restore):
                continue
            restore.append((mod.__dict__, "eager_attention_forward", mod.eager_attention_forward))
            mod.eager_attention_forward = stand_in  # type: ignore[attr-defined]
            stand_in.patched.append(f"{cls.__module__}.eager_attention_forward")
    try:
        yield stand_in
    finally:
        for target, name, original in reversed(restore):
            target[name] = original


# ---------------------------------------------------------------- the agreement rule (pure)


def core_series(section: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(attention.core ms, forward ms) per iteration of an attribution method's section."""
    core = section["categories"]["attention.core"]["per_iteration_ms"]
    return [float(x) for x in core], [float(x) for x in section["iteration_ms"]]


def hodges_lehmann(values: Sequence[float]) -> float:
    """The one-sample Hodges-Lehmann estimate: the median of all pairwise (Walsh) averages.
    Robust like the median, and about as efficient as the mean on near-normal noise."""
    import numpy as np

    xs = np.asarray(values, dtype=float)
    if xs.size == 0:
        raise ValueError("no values")
    rows, cols = np.triu_indices(xs.size)
    return float(np.median((xs[rows] + xs[cols]) / 2.0))


def relative_drops(full_ms: Sequence[float], ablated_ms: Sequence[float]) -> list[float]:
    """Per pair, the fraction of the forward that disappeared: 1 - ablated / full. The two
    forwards of a pair ran back to back, so the host's slow changes of speed, which scale
    both, cancel in the ratio."""
    if len(full_ms) != len(ablated_ms) or not full_ms:
        raise ValueError(f"paired samples needed, got {len(full_ms)} full and {len(ablated_ms)} ablated")
    return [1.0 - a / f for f, a in zip(full_ms, ablated_ms)]


@dataclass(frozen=True)
class Round:
    """One round of the ablation: a fresh process at its own moment of the run.

    ``full_ms``/``ablated_ms``: unprofiled forwards in back-to-back pairs (with the core,
    with the stand-in). ``hooked``: pairs run under the hooks method's clocks among them,
    each ``(full forward ms, its attention.core ms, stand-in forward ms, its
    attention.core ms)``: what the method calls attention.core less what it still calls so
    with the stand-in in place (rotary, reshapes around the call) is what the stand-in
    can remove."""

    full_ms: Sequence[float]
    ablated_ms: Sequence[float]
    hooked: Sequence[tuple[float, float, float, float]]

    @property
    def drops(self) -> list[float]:
        return relative_drops(self.full_ms, self.ablated_ms)

    @property
    def removable(self) -> list[float]:
        """Per hooked pair, the attributed time the stand-in removes, as a fraction of the
        full forward."""
        return [(fc - ac) / fw for fw, fc, _aw, ac in self.hooked]

    @property
    def neighbours(self) -> list[float]:
        """Per hooked pair, how much the forward outside ``attention.core`` (projections,
        MLP, norms, the blocks' own time) sped up with the stand-in in place, as a fraction
        of the full forward: a cost the real core puts on the code around it, which the
        drop contains and no exclusive attribution can place in the core."""
        return [((fw - fc) - (aw - ac)) / fw for fw, fc, aw, ac in self.hooked]


def _round_estimate(drops: Sequence[float], removable: Sequence[float]) -> float:
    attributed = hodges_lehmann(removable)
    return hodges_lehmann(drops) / attributed - 1.0 if attributed > 0 else math.nan


def agreement(rounds: Sequence[Round], profiler: tuple[tuple[list[float], list[float]],
                                                       tuple[list[float], list[float]]] | None = None,
              *, reps: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """The forward's drop against the attributed attention.core time, per method, with
    intervals that span rounds.

    The drop is the Hodges-Lehmann estimate of the per-pair fraction that disappeared,
    pooled over the rounds' unprofiled pairs. The hooks method's removable fraction is the
    Hodges-Lehmann estimate over its hooked pairs, which ran among the unprofiled ones:
    the same moments, so a host whose relative costs shift over a run shifts both.
    ``profiler``: that method's per-iteration (core ms, forward ms) on the full model and
    with the stand-in in place (one profiled pass); its removable fraction is
    share - left_share * (1 - drop). The interval is a two-level percentile bootstrap:
    rounds drawn with replacement, then within each drawn round its pairs (and the
    profiler's iterations) with replacement, so variation between processes and moments
    widens it as much as the noise within them.
    """
    import numpy as np

    rounds = [r for r in rounds if len(r.full_ms) and len(r.hooked)]
    if not rounds:
        raise ValueError("no round with both unprofiled and hooked pairs")
    drops = [np.asarray(r.drops) for r in rounds]
    removable = [np.asarray(r.removable) for r in rounds]
    full_ms = [x for r in rounds for x in r.full_ms]
    forward = median(full_ms)
    drop = hodges_lehmann(np.concatenate(drops))
    hooks_removable = hodges_lehmann(np.concatenate(removable))
    hooked = [h for r in rounds for h in r.hooked]
    share = ratio_of_sums([h[1] for h in hooked], [h[0] for h in hooked], list(range(len(hooked))))
    left_share = ratio_of_sums([h[3] for h in hooked], [h[2] for h in hooked], list(range(len(hooked))))
    if profiler is not None:
        (pc, pf), (plc, plf) = profiler
        p_share = ratio_of_sums(pc, pf, list(range(len(pf))))
        p_left = ratio_of_sums(plc, plf, list(range(len(plf))))

    rng = np.random.default_rng(seed)
    drop_draws, hooks_draws, prof_draws = [], [], []
    for _ in range(reps):
        picked = rng.integers(len(rounds), size=len(rounds))
        d = hodges_lehmann(np.concatenate([drops[i][rng.integers(drops[i].size, size=drops[i].size)]
                                           for i in picked]))
        h = hodges_lehmann(np.concatenate([removable[i][rng.integers(removable[i].size, size=removable[i].size)]
                                           for i in picked]))
        drop_draws.append(d)
        if h > 0:
            hooks_draws.append(d / h - 1.0)
        if profiler is not None:
            s = ratio_of_sums(pc, pf, [int(i) for i in rng.integers(len(pf), size=len(pf))])
            s_left = ratio_of_sums(plc, plf, [int(i) for i in rng.integers(len(plf), size=len(plf))])
            attributed = s - s_left * (1.0 - d)
            if attributed > 0:
                prof_draws.append(d / attributed - 1.0)
    drop_low, drop_high = percentiles(drop_draws, confidence)
    common = {"drop_fraction": drop, "drop_ms": drop * forward, "drop_low_ms": drop_low * forward,
              "drop_high_ms": drop_high * forward}

    def method(share_: float, removable_: float, draws: list[float]) -> dict[str, Any]:
        rel = drop / removable_ - 1.0 if removable_ > 0 else math.nan
        low, high = percentiles(draws, confidence)
        return {**common, "share": share_, "attributed_ms": share_ * forward,
                "left_ms": (share_ - removable_) * forward, "removable_ms": removable_ * forward,
                "rel_diff": rel, "rel_low": low, "rel_high": high,
                "rel_diff_full": drop / share_ - 1.0 if share_ > 0 else math.nan,
                "verdict": verdict(share_, rel, low, high)}

    out = {"hooks": method(share, hooks_removable, hooks_draws)}
    out["hooks"]["left_share"] = left_share
    # what the same clocks saw change outside the core: the drop less the removable core
    # less this is what neither explains (the clocks' own effect and the noise)
    neighbours = hodges_lehmann([x for r in rounds for x in r.neighbours])
    out["hooks"]["neighbours_ms"] = neighbours * forward
    out["hooks"]["unexplained_ms"] = (drop - hooks_removable - neighbours) * forward
    out["hooks"]["round_rel_diffs"] = [_round_estimate(d, r) for d, r in zip(drops, removable)]
    if profiler is not None:
        out["profiler"] = method(p_share, p_share - p_left * (1.0 - drop), prof_draws)
        out["profiler"]["left_share"] = p_left
    return out


def verdict(share: float, rel: float, low: float, high: float) -> str:
    """``below resolution`` where the attributed core is under RESOLUTION of the forward;
    ``pass`` where the relative difference and its whole interval lie within AGREEMENT;
    ``fail`` otherwise (an interval that reaches past the bound has not shown agreement)."""
    if share < RESOLUTION:
        return "below resolution"
    values = (rel, low, high)
    if any(v is None or math.isnan(v) for v in values):
        return "fail"
    return "pass" if all(abs(v) <= AGREEMENT for v in values) else "fail"


def figure_status(verdicts: list[str]) -> str:
    """The figure passes when every combination at resolution passes and one does."""
    judged = [v for v in verdicts if v != "below resolution"]
    if not judged:
        return "not measured"
    return "pass" if all(v == "pass" for v in judged) else "fail"
