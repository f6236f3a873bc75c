"""Stand-ins for a category's work: same output shape, negligible cost.

Used by the ablation cross-check (figure 3b): the forward time that disappears when a
category's work is replaced is an independent estimate of what it costs, to be compared
with the time reportgen attributes to that category. Targets (``TARGETS``):

- ``attention.core``: transformers models call the attention core through
  ``AttentionInterface`` (``sdpa``, flash, flex) or, for ``eager``, through the
  ``eager_attention_forward`` function of their own modelling module. The stand-in
  replaces the registered ``sdpa`` function in the class-wide mapping and the
  ``eager_attention_forward`` of the module that defines each attention class found.
- ``moe.experts``: every module the model's structure (``structure.derive``, derived once
  per combination and handed in) gives the role ``experts`` (the routed experts: shared
  experts are ``moe.shared``, and with the router they are kept) gets an instance ``forward``
  that returns cached zeros: of the first tensor argument's shape for experts whose weights
  are stacked (transformers' fused ``forward(hidden_states, top_k_index, top_k_weights)``),
  of the input's leading dimensions by the last projection's width for each item of a list
  of experts (each sees its own number of tokens), and as recorded (below) for any other
  module the structure calls routed experts.
- ``moe.shared``: every module with the role ``shared`` (the shared experts every token
  goes through) returns its output as recorded (below).
- ``mixer``: every module with the role ``mixer`` returns cached zeros of the structure its
  original returned, recorded by calling the original once per input shapes (the first
  call, which ``ablation_rounds`` makes before any timed or profiled forward).

Generic, no model names: the targets are found from the module structure alone.
"""

from __future__ import annotations

import contextlib
import math
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from reportgen.records.bench import FAIL, NOT_MEASURED, PASS
from reportgen.stats import hodges_lehmann, median, percentiles, ratio_of_sums
from reportgen.stats.bootstrap import resample, two_level

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from reportgen.profile.structure import ModuleRole

# The rule the ablation figure is judged by: where the attributed attention.core is at
# least RESOLUTION of the forward, the forward's drop with the core stubbed out must agree
# with the attributed time within AGREEMENT (relative), the whole 95% interval inside.
AGREEMENT = 0.10
RESOLUTION = 0.05
VERDICTS = (PASS, FAIL, "below resolution")
# The categories a stand-in can remove, and the structural role of the modules that do
# that category's work (attention.core is an attention function, not a module).
TARGETS: tuple[str, ...] = ("attention.core", "moe.experts", "moe.shared", "mixer")
DEFAULT_TARGET = "attention.core"
TARGET_ROLES: dict[str, str] = {"moe.experts": "experts", "moe.shared": "shared", "mixer": "mixer"}
HOOKED_EVERY = 8  # every eighth pair of the ablation runs under the hooks method's clocks


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
        if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
            # a training step: zeros that keep the graph, so the projections before the
            # call still get their (zero) gradients and only the core's backward goes
            return _ZeroCore.apply(query, key, value, shape), None
        key_ = (shape, query.dtype, query.device)
        out = self._cache.get(key_)
        if out is None:
            out = torch.zeros(shape, dtype=query.dtype, device=query.device)
            self._cache[key_] = out
        return out, None


class _ZeroCore(torch.autograd.Function):
    """The attention core's stand-in in a training step: zeros out, zero gradients back
    to the query, key and value (fresh tensors: the engine may add into a gradient in
    place, so a cached one could not be shared). Its cost is those memsets."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                shape: tuple[int, ...]) -> torch.Tensor:
        ctx.shapes = (query.shape, key.shape, value.shape)
        return query.new_zeros(shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return (*(grad.new_zeros(s) for s in ctx.shapes), None)


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
    mapping: dict[str, Any] = AttentionInterface._global_mapping
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


# ---------------------------------------------------------------- module stand-ins


@dataclass
class ModuleStandIn:
    """The replacement ``forward`` of a category's modules, counting its calls so a run
    can prove it was used; ``patched`` names the modules replaced."""

    category: str
    calls: int = 0
    patched: list[str] = field(default_factory=list)


class _Zeros:
    """One module's cached outputs by input key: structures (tensor, tuple, list, dict,
    None) whose tensors are zeros made outside inference mode, so their version counters
    tell when the caller wrote into one (an in-place add onto an expert's output); such a
    tensor is zeroed again before it is handed out once more."""

    def __init__(self) -> None:
        self._cache: dict[Any, tuple[Any, list[list[Any]]]] = {}

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        entry = self._cache.get(key)
        if entry is None:
            value = make()  # in the caller's mode: a mixer's original forward
            tensors: list[list[Any]] = []
            with torch.inference_mode(False), torch.no_grad():
                template = _zeros_like(value, tensors)
            entry = self._cache[key] = (template, tensors)
        template, tensors = entry
        for slot in tensors:
            tensor, version = slot
            if tensor._version != version:
                tensor.zero_()
                slot[1] = tensor._version
        return _fresh(template)


def _zeros_like(value: Any, tensors: list[list[Any]]) -> Any:
    if isinstance(value, torch.Tensor):
        out = torch.zeros(value.shape, dtype=value.dtype, device=value.device)
        tensors.append([out, out._version])
        return out
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_zeros_like(v, tensors) for v in value)
    if type(value) is dict:
        return {k: _zeros_like(v, tensors) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot stand in for an output of type {type(value).__name__}")


def _fresh(template: Any) -> Any:
    """The template with new containers (the caller may change a list or dict it is
    handed) around the same cached tensors."""
    if isinstance(template, list):
        return [_fresh(v) for v in template]
    if isinstance(template, dict):
        return {k: _fresh(v) for k, v in template.items()}
    return template


# module -> its stand-in's cached outputs: kept across stand-in blocks (a mixer's output
# structure is recorded once), weak so a freed model takes its entries along
_OUTPUTS: weakref.WeakKeyDictionary[torch.nn.Module, _Zeros] = weakref.WeakKeyDictionary()


def _tensors(args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]


def _signature(tensor: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(tensor.shape), tensor.dtype, tensor.device)


def _first_tensor(args: Sequence[Any], kwargs: dict[str, Any]) -> torch.Tensor:
    found = _tensors(args, kwargs)
    if not found:
        raise TypeError("the stand-in was called without a tensor argument")
    return found[0]


def _output_width(module: torch.nn.Module) -> int:
    """The width of what a module made of projections returns: its last projection's
    output features (``nn.Linear.out_features``; GPT-2's ``Conv1D`` names it ``nf``)."""
    from reportgen.profile.structure import is_projection

    projections = [m for m in module.modules() if is_projection(m)]
    if not projections:
        raise ValueError(f"{type(module).__name__} holds no projection: its output width is unknown")
    last = projections[-1]
    width = getattr(last, "out_features", None) or getattr(last, "nf", None)
    weight: Any = last.weight
    return int(width if width is not None else weight.shape[0])


def _like_first(stand_in: ModuleStandIn, module: torch.nn.Module, original: Any) -> Callable[..., Any]:
    """Fused experts: the output has the shape of the first tensor argument."""
    outputs = _OUTPUTS.setdefault(module, _Zeros())

    def forward(*args: Any, **kwargs: Any) -> Any:
        stand_in.calls += 1
        first = _first_tensor(args, kwargs)
        return outputs.get(_signature(first), lambda: first)
    return forward


def _by_width(stand_in: ModuleStandIn, module: torch.nn.Module, original: Any) -> Callable[..., Any]:
    """An expert that is a module of its own: the input's leading dimensions by the last
    projection's width (each expert of a list sees its own number of tokens)."""
    outputs = _OUTPUTS.setdefault(module, _Zeros())
    width = _output_width(module)

    def forward(*args: Any, **kwargs: Any) -> Any:
        stand_in.calls += 1
        first = _first_tensor(args, kwargs)
        shape = (*first.shape[:-1], width)
        return outputs.get((shape, first.dtype, first.device),
                           lambda: first.new_empty(shape))
    return forward


def _as_recorded(stand_in: ModuleStandIn, module: torch.nn.Module, original: Any) -> Callable[..., Any]:
    """Any module: on the first call with inputs of new shapes the original runs once and
    its output's structure is recorded; every call returns zeros of that structure."""
    outputs = _OUTPUTS.setdefault(module, _Zeros())

    def forward(*args: Any, **kwargs: Any) -> Any:
        stand_in.calls += 1
        key = tuple(_signature(t) for t in _tensors(args, kwargs))
        return outputs.get(key, lambda: original(*args, **kwargs))
    return forward


def _module_targets(model: torch.nn.Module, category: str, roles: Mapping[str, ModuleRole]
                    ) -> list[tuple[str, torch.nn.Module, Callable[..., Callable[..., Any]]]]:
    """(name, module, replacement maker) for every module doing ``category``'s work, by
    the ``roles`` of the model's structure."""
    from reportgen.profile.structure import is_experts

    role = TARGET_ROLES[category]
    modules = dict(model.named_modules())
    found: list[tuple[str, torch.nn.Module, Callable[..., Callable[..., Any]]]] = []
    for fqn, info in roles.items():
        if info.role != role or fqn not in modules:
            continue
        module = modules[fqn]
        if role == "mixer":
            found.append((fqn, module, _as_recorded))
        elif isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            # a list is never called itself: each of its experts is
            found += [(f"{fqn}.{name}", item, _by_width) for name, item in module.named_children()]
        elif is_experts(module):
            found.append((fqn, module, _like_first))
        else:
            # whatever else the structure counts as routed experts (an MLP handed the
            # routing): its output recorded, whatever its structure
            found.append((fqn, module, _as_recorded))
    return found


_UNSET = object()  # a module without a forward of its own (the class's)


@contextlib.contextmanager
def module_stand_in(model: torch.nn.Module, category: str, roles: Mapping[str, ModuleRole]
                    ) -> Iterator[ModuleStandIn]:
    """Within the block, every module doing ``category``'s work (``moe.experts``: the
    routed experts; ``moe.shared``: the shared experts; ``mixer``: token mixers) returns
    cached zeros; the
    instances' own ``forward`` attributes are restored afterwards. ``roles``: the module
    roles of the model's structure, derived once for the model (``structure.derive``'s
    ``roles``) and read here, not derived again."""
    if category not in TARGET_ROLES:
        raise ValueError(f"no module stand-in for {category!r}; choose from {', '.join(TARGET_ROLES)}")
    stand_in = ModuleStandIn(category)
    targets = _module_targets(model, category, roles)
    if not targets:
        raise ValueError(f"the model has no {TARGET_ROLES[category]!r} module: nothing stands in for {category}")
    restore: list[tuple[torch.nn.Module, Any]] = []
    try:
        for fqn, module, make in targets:
            own = module.__dict__.get("forward", _UNSET)
            replacement = make(stand_in, module, module.forward)
            restore.append((module, own))
            module.forward = replacement  # type: ignore[method-assign]
            stand_in.patched.append(f"{fqn} ({type(module).__name__})")
        yield stand_in
    finally:
        for module, own in reversed(restore):
            if own is _UNSET:
                del module.forward
            else:
                module.forward = own  # type: ignore[method-assign]


def category_stand_in(model: torch.nn.Module, category: str = DEFAULT_TARGET, *,
                      roles: Mapping[str, ModuleRole] | None = None
                      ) -> contextlib.AbstractContextManager[StandIn | ModuleStandIn]:
    """The stand-in for ``category`` (one of ``TARGETS``) on ``model``. A module stand-in
    (``TARGET_ROLES``) finds its modules by ``roles``, the model's structure's (the
    attention core's stand-in replaces the attention function and needs none)."""
    if category == "attention.core":
        return attention_stand_in(model)
    if category in TARGET_ROLES:
        if roles is None:
            raise ValueError(f"the {category} stand-in needs the model's module roles (structure.derive)")
        return module_stand_in(model, category, roles)
    raise ValueError(f"no stand-in for {category!r}; choose from {', '.join(TARGETS)}")


# ---------------------------------------------------------------- the agreement rule (pure)


def category_series(section: dict[str, Any], category: str = DEFAULT_TARGET
                    ) -> tuple[list[float], list[float]]:
    """(``category`` ms, forward ms) per iteration of an attribution method's section; a
    category the section does not list took no time."""
    forward = [float(x) for x in section["iteration_ms"]]
    entry = section["categories"].get(category)
    if entry is None:
        return [0.0] * len(forward), forward
    return [float(x) for x in entry["per_iteration_ms"]], forward


def hooked_pair(full_ms: float, full_categories: dict[str, float], stub_ms: float,
                stub_categories: dict[str, float], category: str = DEFAULT_TARGET
                ) -> tuple[float, float, float, float]:
    """A hooked pair as ``Round.hooked`` holds it, from its two forwards' category times:
    (full forward ms, its ``category`` ms, stand-in forward ms, its ``category`` ms)."""
    return (float(full_ms), float(full_categories.get(category, 0.0)), float(stub_ms),
            float(stub_categories.get(category, 0.0)))


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

    ``full_ms``/``ablated_ms``: unprofiled forwards in back-to-back pairs (with the target
    category's work, with the stand-in). ``hooked``: pairs run under the hooks method's
    clocks among them, each ``(full forward ms, its category ms, stand-in forward ms, its
    category ms)`` (``hooked_pair``): what the method attributes to the category less what
    it still attributes with the stand-in in place (for attention.core: rotary, reshapes
    around the call) is what the stand-in can remove. ``category``: the target (one of
    ``TARGETS``) the hooked times are of."""

    full_ms: Sequence[float]
    ablated_ms: Sequence[float]
    hooked: Sequence[tuple[float, float, float, float]]
    category: str = DEFAULT_TARGET

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
        """Per hooked pair, how much the forward outside the target category (for
        attention.core: projections, MLP, norms, the blocks' own time) sped up with the
        stand-in in place, as a fraction of the full forward: a cost the real work puts on
        the code around it, which the drop contains and no exclusive attribution can place
        in the category."""
        return [((fw - fc) - (aw - ac)) / fw for fw, fc, aw, ac in self.hooked]


def _round_estimate(drops: Sequence[float] | NDArray[Any],
                    removable: Sequence[float] | NDArray[Any]) -> float:
    attributed = hodges_lehmann(removable)
    return hodges_lehmann(drops) / attributed - 1.0 if attributed > 0 else math.nan


def agreement(rounds: Sequence[Round], profiler: tuple[tuple[list[float], list[float]],
                                                       tuple[list[float], list[float]]] | None = None,
              *, reps: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """The forward's drop against the time attributed to the rounds' target category
    (``Round.category``, the same in every round; recorded as each method's ``category``),
    per method, with intervals that span rounds.

    The drop is the Hodges-Lehmann estimate of the per-pair fraction that disappeared,
    pooled over the rounds' unprofiled pairs. The hooks method's removable fraction is the
    Hodges-Lehmann estimate over its hooked pairs, which ran among the unprofiled ones:
    the same moments, so a host whose relative costs shift over a run shifts both.
    ``profiler``: that method's per-iteration (category ms, forward ms) on the full model
    and with the stand-in in place (one profiled pass, ``category_series``); its removable
    fraction is
    share - left_share * (1 - drop). The interval is a two-level percentile bootstrap:
    rounds drawn with replacement, then within each drawn round its pairs (and the
    profiler's iterations) with replacement, so variation between processes and moments
    widens it as much as the noise within them.
    """
    import numpy as np

    categories = {r.category for r in rounds}
    if len(categories) > 1:
        raise ValueError(f"rounds of different target categories: {sorted(categories)}")
    rounds = [r for r in rounds if len(r.full_ms) and len(r.hooked)]
    if not rounds:
        raise ValueError("no round with both unprofiled and hooked pairs")
    category = rounds[0].category
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

    def replicate(rng: np.random.Generator, picked: NDArray[Any]) -> tuple[float, float | None, float | None]:
        d = hodges_lehmann(resample(rng, drops, picked))
        h = hodges_lehmann(resample(rng, removable, picked))
        prof = None
        if profiler is not None:
            s = ratio_of_sums(pc, pf, [int(i) for i in rng.integers(len(pf), size=len(pf))])
            s_left = ratio_of_sums(plc, plf, [int(i) for i in rng.integers(len(plf), size=len(plf))])
            attributed = s - s_left * (1.0 - d)
            prof = d / attributed - 1.0 if attributed > 0 else None
        return d, d / h - 1.0 if h > 0 else None, prof

    replicates = two_level(len(rounds), replicate, reps=reps, seed=seed, picks="per-replicate")
    drop_draws = [d for d, _, _ in replicates]
    hooks_draws = [h for _, h, _ in replicates if h is not None]
    prof_draws = [p for _, _, p in replicates if p is not None]
    drop_low, drop_high = percentiles(drop_draws, confidence)
    common = {"drop_fraction": drop, "drop_ms": drop * forward, "drop_low_ms": drop_low * forward,
              "drop_high_ms": drop_high * forward}

    def method(share_: float, removable_: float, draws: list[float]) -> dict[str, Any]:
        rel = drop / removable_ - 1.0 if removable_ > 0 else math.nan
        low, high = percentiles(draws, confidence)
        return {**common, "category": category, "share": share_, "attributed_ms": share_ * forward,
                "left_ms": (share_ - removable_) * forward, "removable_ms": removable_ * forward,
                "rel_diff": rel, "rel_low": low, "rel_high": high,
                "rel_diff_full": drop / share_ - 1.0 if share_ > 0 else math.nan,
                "verdict": verdict(share_, rel, low, high)}

    out = {"hooks": method(share, hooks_removable, hooks_draws)}
    out["hooks"]["left_share"] = left_share
    # what the same clocks saw change outside the category: the drop less the removable
    # time less this is what neither explains (the clocks' own effect and the noise)
    neighbours = hodges_lehmann([x for r in rounds for x in r.neighbours])
    out["hooks"]["neighbours_ms"] = neighbours * forward
    out["hooks"]["unexplained_ms"] = (drop - hooks_removable - neighbours) * forward
    out["hooks"]["round_rel_diffs"] = [_round_estimate(d, r) for d, r in zip(drops, removable)]
    if profiler is not None:
        out["profiler"] = method(p_share, p_share - p_left * (1.0 - drop), prof_draws)
        out["profiler"]["left_share"] = p_left
    return out


def verdict(share: float, rel: float, low: float, high: float) -> str:
    """``below resolution`` where the attributed category is under RESOLUTION of the forward;
    ``pass`` where the relative difference and its whole interval lie within AGREEMENT;
    ``fail`` otherwise (an interval that reaches past the bound has not shown agreement)."""
    if share < RESOLUTION:
        return "below resolution"
    values = (rel, low, high)
    if any(v is None or math.isnan(v) for v in values):
        return FAIL
    return PASS if all(abs(v) <= AGREEMENT for v in values) else FAIL


def figure_status(verdicts: list[str]) -> str:
    """The figure passes when every combination at resolution passes and one does."""
    judged = [v for v in verdicts if v != "below resolution"]
    if not judged:
        return NOT_MEASURED
    return PASS if all(v == PASS for v in judged) else FAIL
