"""Structural classification of a model's modules, and the hooks that label its ops.

Classification reads module classes and nesting (ARCHITECTURE.md, "Categories") and,
where a class name could mislead, what each module computed in one recorded forward
(`calls.record`): no model names. ``install_hooks`` opens ``rg|<role>|<fqn>`` profiler ranges around the
calls of the modules whose role matters (a `Structure`'s ``labels``: the roles less the
modules inside an MLP call whose boundary moves no time between categories);
``reportgen.attribution`` turns ops inside those ranges into categories, splitting each
attention call at its core ops.

Roles: ``embed`` (embedding modules), ``norm`` (norm leaves), ``attn`` (outermost
attention modules), ``proj`` (projection leaves inside attention or a block), ``core``
(an embedding inside attention: a position bias), ``mixer`` (a token mixer that is not
softmax attention: a module in a block that holds a recurrence's parameters or a
depthwise convolution over the sequence, or a module named for attention whose call
runs no softmax attention but products over the sequence: a linear attention), ``moe``
(a mixture-of-experts layer: the module of a block that holds experts), ``experts`` (its
routed experts),
``shared`` (a mixture-of-experts layer's shared experts: those every token meets),
``indexer`` (a sparse attention's indexer: the module inside attention that picks the
positions each query reads), ``mlp`` (the outermost projection-holding module of a block
outside attention), ``act``
(activation leaves in a block), ``head`` (output embeddings, poolers, heads),
``block`` (items of the outermost ``nn.ModuleList``: the layers), ``streams`` (a layer
that keeps several residual streams side by side, hyper-connections: its own ops mix
them) and ``residual`` (a module outside attention and MLPs handed those streams: it
computes how they are mixed, collapses them into the one its layer's parts read, or
collapses them at the end).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from reportgen.attribution import (
    ITERATION_LABEL,
    LABEL_PREFIX,
    LAYER_ROLES,
    split_attention,
    split_mlp,
)
from reportgen.profile.calls import Calls, record
from reportgen.profile.step import StepLike

__all__ = ["ITERATION_LABEL", "LAYER_ROLES", "ModuleRole", "Structure", "classify", "derive", "install_hooks",
           "label", "nvtx_ranges"]

HEAD_MARKERS = ("Pooler", "Head", "Prediction", "Classifier")
# Category of an unremarkable module inside a container ("core": a position-bias
# embedding inside attention).
_CONTAINER_CATEGORY: dict[str | None, str] = {
    "embed": "embeddings", "head": "head", "attn": "attention.core", "core": "attention.core",
    "mlp": "mlp", "mixer": "mixer", "moe": "moe.router", "experts": "moe.experts",
    "shared": "moe.shared", "indexer": "attention.indexer", "residual": "residual", None: "other"}
# Containers whose whole subtree is one category: nothing inside them is hooked.
_SEALED = ("head", "core", "mixer", "experts", "shared", "indexer")
# Parameters of a recurrence over the sequence: the state-space decay and step of Mamba's
# selective scan and of gated-delta/linear attention (A_log, dt_bias), RWKV's time decay.
RECURRENCE_PARAMETERS = frozenset({"A_log", "dt_bias", "time_decay"})
# An indexer returns positions per batch, query and choice; a router (inside attention, a
# mixture of attention heads) the experts per token, in fewer dimensions.
POSITIONS_DIMS = 3



@dataclass(frozen=True)
class ModuleRole:
    """What the structure says about one module.

    ``role`` is the hook label role (None: not hooked). ``category`` is the category of
    the module's own ops as far as structure alone decides it; ``container`` (``attn``,
    ``mlp``, ``embed``, ``head``, ``core``) and ``container_fqn`` name the enclosing
    container, whose call order settles projections and plain modules inside attention
    and MLP containers. ``block`` is the enclosing layer's FQN.
    """

    fqn: str
    role: str | None
    category: str
    container: str | None
    container_fqn: str | None
    block: str | None


def label(role: str, fqn: str) -> str:
    return f"{LABEL_PREFIX}{role}|{fqn}"


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def _is_norm(module: nn.Module) -> bool:
    return _is_leaf(module) and (
        type(module).__name__.endswith("Norm")
        or isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)))


def is_attention(module: nn.Module) -> bool:
    return "Attention" in type(module).__name__


def _is_embedding(module: nn.Module) -> bool:
    return isinstance(module, nn.Embedding) or "Embedding" in type(module).__name__


def is_projection(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (_is_leaf(module) and isinstance(weight, torch.Tensor) and weight.dim() == 2
            and not _is_embedding(module))


def _is_activation(module: nn.Module) -> bool:
    cls = type(module)
    return _is_leaf(module) and (cls.__module__ == "torch.nn.modules.activation"
                                 or "Activation" in cls.__name__)


def _has_descendant(module: nn.Module, test: Callable[[nn.Module], bool]) -> bool:
    return any(test(m) for m in module.modules() if m is not module)


def _is_depthwise_conv(module: nn.Module) -> bool:
    """A 1-D convolution of each channel alone along the sequence (a short convolution)."""
    return isinstance(module, nn.Conv1d) and module.groups > 1 and module.groups == module.in_channels


def is_token_mixer(module: nn.Module) -> bool:
    """A token mixer other than softmax attention: the module that itself holds a
    recurrence's parameters (``RECURRENCE_PARAMETERS``) or a depthwise convolution over
    the sequence. State-space layers (Mamba, Mamba-2), gated-delta and linear attention,
    RWKV's time mixing and short-convolution mixers all do; softmax attention and MLPs
    hold neither."""
    if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
        return False
    if any(name in RECURRENCE_PARAMETERS for name, _ in module.named_parameters(recurse=False)):
        return True
    return any(_is_depthwise_conv(child) for child in module.children())


def is_experts(module: nn.Module) -> bool:
    """A mixture-of-experts layer's experts: a module that holds its experts' weights
    stacked (a parameter of three or more dimensions, one per expert, that is no
    convolution's kernel), or a list of at least two modules of one class that each hold
    projections."""
    if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
        items = list(module.children())
        return (len(items) >= 2 and len({type(item) for item in items}) == 1
                and all(_has_descendant(item, is_projection)
                        and not any(is_attention(m) for m in item.modules()) for item in items))
    if isinstance(module, nn.modules.conv._ConvNd):
        return False
    stacked = [p for _, p in module.named_parameters(recurse=False) if p.dim() >= 3]
    # one leading dimension per expert, at least two of them (not a broadcast (1, 1, d)
    # mix), or a class that says it holds experts (a config may keep a single one)
    return any(p.shape[0] >= 2 for p in stacked) or bool(stacked and "Experts" in type(module).__name__)


def is_moe(module: nn.Module) -> bool:
    """A mixture-of-experts layer: a module (not a list) with experts among its children."""
    return (not isinstance(module, (nn.ModuleList, nn.ModuleDict))
            and any(is_experts(child) for child in module.children()))


def _is_list(module: nn.Module) -> bool:
    return isinstance(module, (nn.ModuleList, nn.ModuleDict))


def _is_shared_mlp(module: nn.Module) -> bool:
    """An expert MLP: a module of two or more projections (a router holds one, its gate)."""
    return sum(1 for m in module.modules() if is_projection(m)) >= 2


def _routed(moe: nn.Module, moe_fqn: str, calls: Calls | None) -> set[str]:
    """Which children of a mixture-of-experts layer are its routed experts: those handed
    the experts each token goes to (an integer tensor), where the recorded forward shows
    any; else those that hold experts (stacked weights or a list of experts): a layer that
    multiplies the router's scores in before its experts hands them no integers."""
    fqns = {n: f"{moe_fqn}.{n}" for n, _ in moe.named_children()}
    # (a child that returns integers is the router: it picks the experts)
    names = [n for n, child in moe.named_children() if (is_experts(child) or _is_shared_mlp(child))
             and not (calls is not None and fqns[n] in calls.integer_out)]
    if calls is not None:
        handed = {n for n in names if fqns[n] in calls.integer_in}
        if handed:
            return {fqns[n] for n in handed}
    return {fqns[n] for n in names if is_experts(getattr(moe, n))}


def classify(model: nn.Module, calls: Calls | None = None) -> dict[str, ModuleRole]:
    """Role and structural category of every module, by FQN ("" is the root).

    From module classes and nesting alone, unless ``calls`` (one recorded forward,
    `calls.record`) says what the modules computed: then a module named for attention
    whose call runs no softmax attention but products over the sequence is a token mixer
    (a linear attention), a module inside a layer that holds projections and runs
    softmax attention in its own call is attention whatever its name, a module inside
    attention that returns positions (an integer tensor) is its indexer, and the experts
    of a mixture that are handed the routing are its routed experts, the others shared."""
    getter = getattr(model, "get_output_embeddings", None)
    out_emb = getter() if callable(getter) else None
    result: dict[str, ModuleRole] = {}
    seen: set[int] = set()
    streams = _stream_shapes(model, calls) if calls is not None else frozenset()

    def layer_role(fqn: str) -> tuple[str, str]:
        """A layer's role and the category of its own ops: with several residual
        streams, mixing them is its own work."""
        if calls is not None and calls.in_shapes.get(fqn) in streams:
            return "streams", "residual"
        return "block", "other"

    def handed_streams(fqn: str, module: nn.Module) -> bool:
        """Handed the streams to mix or collapse them: not positions with them (a rotary
        embedding handed the streams for their dtype computes from the positions)."""
        return (calls is not None and not _is_list(module) and calls.in_shapes.get(fqn) in streams
                and fqn not in calls.integer_in and not attention(fqn, module))

    def linear_attention(fqn: str, module: nn.Module) -> bool:
        return (calls is not None and is_attention(module) and calls.called(fqn)
                and calls.mixes_without_softmax(fqn))

    def attention(fqn: str, module: nn.Module) -> bool:
        if is_attention(module):
            return not linear_attention(fqn, module)
        return (calls is not None and not _is_list(module) and calls.runs_softmax_attention(fqn)
                and _has_descendant(module, is_projection))

    def any_attention(module: nn.Module, fqn: str) -> bool:
        """Attention anywhere inside ``module`` (itself excluded)."""
        return any(attention(f"{fqn}.{name}", m) for name, m in module.named_modules() if m is not module)


    def visit(fqn: str, module: nn.Module, container: str | None, container_fqn: str | None,
              block: str | None, parent_is_list: bool, routed: frozenset[str]) -> None:
        if id(module) in seen:  # shared modules (tied embeddings) keep their first name
            return
        seen.add(id(module))
        is_list = _is_list(module)
        role: str | None = None
        category = _CONTAINER_CATEGORY[container]
        inner, inner_fqn, inner_block = container, container_fqn, block
        inner_routed = routed
        if not fqn or container in _SEALED:
            pass  # the root's own ops (masks, residuals) and all of a head stay as they are
        elif container == "moe" and fqn.rpartition(".")[0] == container_fqn:
            # the layer's own children; gates and routers (and all inside them) are left
            # to the layer's own time, the router's
            if fqn in routed:
                role, category, inner, inner_fqn = "experts", "moe.experts", "experts", fqn
            elif (is_experts(module) or _is_shared_mlp(module)) and not (
                    calls is not None and fqn in calls.integer_out):
                role, category, inner, inner_fqn = "shared", "moe.shared", "shared", fqn
        elif container is None and block is not None and (is_token_mixer(module)
                                                           or linear_attention(fqn, module)):
            role, category, inner, inner_fqn = "mixer", "mixer", "mixer", fqn
        elif _is_norm(module):
            role, category = "norm", "norm"
        elif (parent_is_list and container is None and block is None and not is_list
              and is_attention(module) and (any_attention(module, fqn)
                                           or _has_descendant(module, is_token_mixer))):
            # a layer named for its attention, or for its linear attention
            (role, category), inner_block = layer_role(fqn), fqn
        elif (container is None and fqn and not (parent_is_list and block is None)
              and handed_streams(fqn, module)):
            # handed a layer's residual streams, outside attention and MLPs: it mixes or
            # collapses them (hyper-connections), whatever its name (a "head" among them)
            role, category, inner, inner_fqn = "residual", "residual", "residual", fqn
        elif (container == "attn" and calls is not None and calls.integer_out.get(fqn, 0) >= POSITIONS_DIMS
              and not _is_leaf(module) and _has_descendant(module, is_projection)):
            role, category, inner, inner_fqn = "indexer", "attention.indexer", "indexer", fqn
        elif attention(fqn, module) and (is_attention(module) or block is not None):
            if container is None:
                role, category, inner, inner_fqn = "attn", "attention.core", "attn", fqn
        elif (isinstance(module, nn.modules.conv._ConvNd) and container is None and block is None
              and _is_leaf(module)):
            # a convolution before the layers (a speech encoder's stem, a patch embedding)
            # turns the input into the sequence the layers read: an embedding
            role, category, inner, inner_fqn = "embed", "embeddings", "embed", fqn
        elif _is_embedding(module):
            if container == "attn":
                role, category, inner = "core", "attention.core", "core"
            elif container is None:
                role, category, inner, inner_fqn = "embed", "embeddings", "embed", fqn
        elif container is None and (module is out_emb or any(
                marker in type(module).__name__ for marker in HEAD_MARKERS)):
            role, category, inner, inner_fqn = "head", "head", "head", fqn
        elif is_projection(module) or (container == "attn" and _is_leaf(module) and is_experts(module)):
            # (inside attention, a leaf of stacked per-expert weights is a projection
            # that routes each token to some of its experts: a mixture of attention heads)
            if container == "attn":
                role, category = "proj", "attention.qkv"
            elif container == "mlp" or (container is None and block is not None):
                role, category = "proj", "mlp"
        elif _is_activation(module):
            if container == "mlp" or (container is None and block is not None):
                role, category = "act", "mlp"
        elif parent_is_list and container is None and block is None and not is_list:
            (role, category), inner_block = layer_role(fqn), fqn
        elif (container in (None, "mlp") and block is not None and is_moe(module)
              and not any_attention(module, fqn)):
            role, category, inner, inner_fqn = "moe", "moe.router", "moe", fqn
            inner_routed = frozenset(_routed(module, fqn, calls))
        elif container in (None, "mlp") and block is not None and not is_list and is_experts(module):
            # (a list directly in a layer holds parts the layer runs in turn, two attentions
            # or two MLPs, never experts: those sit in a layer of their own with the router)
            role, category, inner, inner_fqn = "experts", "moe.experts", "experts", fqn
        elif (container is None and block is not None and not is_list
              and _has_descendant(module, is_projection)
              and not any_attention(module, fqn)):
            role, category, inner, inner_fqn = "mlp", "mlp", "mlp", fqn
        result[fqn] = ModuleRole(fqn, role, category, container, container_fqn, block)
        for name, child in module.named_children():
            visit(f"{fqn}.{name}" if fqn else name, child, inner, inner_fqn, inner_block,
                  isinstance(module, nn.ModuleList), inner_routed)

    visit("", model, None, None, None, False, frozenset())
    return result


def _stream_shapes(model: nn.Module, calls: Calls) -> frozenset[tuple[int, ...]]:
    """The shapes of the residual streams the model's layers keep (`Calls.streams`):
    a list item handed a tensor with one dimension more than its own norms read (never
    an expert's projection, whose tokens are any number). Empty for a model of one
    stream of hidden states."""
    shapes: set[tuple[int, ...]] = set()
    for fqn, module in model.named_modules():
        if not isinstance(module, nn.ModuleList):
            continue
        for name, item in module.named_children():
            layer = f"{fqn}.{name}" if fqn else name
            readers = [f"{layer}.{n}" for n, m in item.named_modules() if m is not item and _is_norm(m)]
            shape = calls.streams(layer, readers)
            if shape is not None:
                shapes.add(shape)
    return frozenset(shapes)


_NO_FORWARD = object()


class _Forwards:
    """Module calls wrapped in place: each module's ``forward`` is replaced, on the
    instance, by a function that opens a range, calls the original and closes the range.

    Not module hooks: a module with a forward hook leaves ``nn.Module.__call__``'s fast
    path for its general one (hook tables, a closure and a try per call), which costs
    microseconds per call, more than the range itself; a forward replaced on the instance
    keeps the fast path, and the range encloses the same ops (the module's forward). A
    module is wrapped once (a shared module's one object), and ``remove`` puts back what
    was there before (the class's forward, or an instance forward of someone else's)."""

    def __init__(self) -> None:
        self._installed: list[tuple[nn.Module, object, Callable[..., Any]]] = []

    def wrap(self, module: nn.Module, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        previous = vars(module).get("forward", _NO_FORWARD)
        wrapper = functools.wraps(module.forward)(make(module.forward))
        vars(module)["forward"] = wrapper
        self._installed.append((module, previous, wrapper))

    def remove(self) -> None:
        while self._installed:
            module, previous, wrapper = self._installed.pop()
            if vars(module).get("forward") is not wrapper:
                continue  # replaced again since: that owner puts back its own
            if previous is _NO_FORWARD:
                del vars(module)["forward"]
            else:
                vars(module)["forward"] = previous


def _hooked(model: nn.Module, roles: Mapping[str, ModuleRole]) -> Iterator[tuple[str, nn.Module]]:
    """(range label, module) of every module ``roles`` gives a role, each module once."""
    modules = dict(model.named_modules())
    seen: set[int] = set()
    for fqn, info in roles.items():
        module = modules.get(fqn)
        if info.role is None or module is None or id(module) in seen:
            continue
        seen.add(id(module))
        yield label(info.role, fqn), module


def _profiler_range(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    enabled = torch.autograd._profiler_enabled

    def make(inner: Callable[..., Any]) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            # Outside a profiler the range costs one check: keep bare forwards bare.
            if not enabled():
                return inner(*args, **kwargs)
            handle = enter(name, None)
            try:
                return inner(*args, **kwargs)
            finally:
                leave(handle)
        return forward
    return make


def _nvtx_range(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop

    def make(inner: Callable[..., Any]) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            push(name)
            try:
                return inner(*args, **kwargs)
            finally:
                pop()
        return forward
    return make


@contextmanager
def _ranges(model: nn.Module, roles: Mapping[str, ModuleRole],
            kind: Callable[[str], Callable[[Callable[..., Any]], Callable[..., Any]]]) -> Iterator[None]:
    forwards = _Forwards()
    try:
        for name, module in _hooked(model, roles):
            forwards.wrap(module, kind(name))
        yield
    finally:
        forwards.remove()


@contextmanager
def install_hooks(model: nn.Module, roles: Mapping[str, ModuleRole]) -> Iterator[Mapping[str, ModuleRole]]:
    """Label the model's module calls with ``rg|<role>|<fqn>`` profiler ranges, one per
    module ``roles`` (``classify``'s, or a `Structure`'s) gives a role (see ``_Forwards``
    for how a call is wrapped). No range is opened while no profiler records.

    Yields ``roles``; the wrappers are removed on exit, even after an error.
    """
    with _ranges(model, roles, _profiler_range):
        yield roles


@contextmanager
def nvtx_ranges(model: nn.Module, roles: Mapping[str, ModuleRole]) -> Iterator[None]:
    """The same module ranges as ``install_hooks``, named alike, as NVTX ranges (what
    Nsight Systems reads); removed on exit."""
    with _ranges(model, roles, _nvtx_range):
        yield


@dataclass(frozen=True)
class Structure:
    """What the structure says about one built model, derived once (`derive`) and handed
    to everything that reads it: the profiled pass's labels, both attribution methods,
    the FLOP count, a training step's memory, the experts' load and the studies.

    ``roles``: `classify`'s answer, by FQN. ``categories``: module FQN ("" = root) ->
    category of that module's own (exclusive) ops, settled by one recorded forward.
    ``labels``: the roles the ranges and clocks are placed by (``install_hooks``,
    ``nvtx_ranges``, the hooks method): ``roles`` less the modules whose boundary moves
    no time between categories (``_inside_mlp``), which keep their category but no role.
    """

    roles: Mapping[str, ModuleRole]
    categories: Mapping[str, str]
    labels: Mapping[str, ModuleRole]


def derive(model: nn.Module, step: StepLike) -> Structure:
    """The model's `Structure`: one recorded forward (``step()``, then ``step.reset()``:
    `calls.record`), `classify` reading what each module computed in it, and the same
    forward settling what structure alone cannot: attention projections (qkv or out:
    before or after the core ops) and the ops after an attention or MLP call's output
    projection (other)."""
    calls = record(model, step)
    roles = classify(model, calls)
    categories = _module_categories(model, roles, calls)
    inner = _inside_mlp(roles, calls.spans)
    labels = {fqn: replace(info, role=None) if fqn in inner else info
              for fqn, info in roles.items()}
    return Structure(roles, categories, labels)


def _inside_mlp(roles: Mapping[str, ModuleRole], spans: Mapping[str, tuple[int, int]]) -> frozenset[str]:
    """Labelled modules whose boundary moves no time between categories: inside an MLP
    container's call, the projections and activations that start before its last
    projection ends. Their ops are ``mlp`` with a range of their own or without (the
    container's own ops before that end are ``mlp``: ``attribution.split_mlp``,
    ``shares``' MLP gaps); the last projection keeps its range, as it marks where the
    container's ops turn ``other``. Attention keeps all of its projections (qkv and out
    are told apart by them), and every other role names a category of its own."""
    members: dict[str, list[str]] = {}
    for fqn, info in roles.items():
        if (info.container == "mlp" and info.role in ("proj", "act") and fqn in spans
                and info.container_fqn is not None and info.container_fqn in spans
                and roles[info.container_fqn].role == "mlp"):
            members.setdefault(info.container_fqn, []).append(fqn)
    inner: set[str] = set()
    for names in members.values():
        projections = [n for n in names if roles[n].role == "proj"]
        if not projections:
            continue
        last = max(projections, key=lambda n: spans[n][1])
        inner.update(n for n in names if n != last and spans[n][0] < spans[last][1])
    return frozenset(inner)


def _module_categories(model: nn.Module, roles: Mapping[str, ModuleRole], calls: Calls) -> dict[str, str]:
    """The category of each module: the projections and plain modules of an attention or
    MLP call split at its core ops and projections as its first call ran them."""
    spans = calls.spans
    # core ops of attention calls, less those inside a projection or an indexer (whose
    # products are its own, as the profiled pass's ranges see them)
    inside = {fqn for fqn, info in roles.items()
              if info.role in ("proj", "indexer") or info.container == "indexer"}
    core_ticks = [tick for tick, _, core, stack in calls.ops if core and not inside.intersection(stack)]
    categories = {fqn: info.category for fqn, info in roles.items()}
    members: dict[str, list[str]] = {}
    for fqn, info in roles.items():
        if (info.container in ("attn", "mlp") and info.role in (None, "proj")
                and info.container_fqn is not None and fqn in spans):
            members.setdefault(info.container_fqn, []).append(fqn)
    for container_fqn, names in members.items():
        if container_fqn not in spans:
            continue
        first, last = spans[container_fqn]
        names.sort(key=lambda n: spans[n][0])
        kinds = ["proj" if roles[n].role == "proj" else "op" for n in names]
        items = [(k, float(spans[n][0]), float(spans[n][1])) for k, n in zip(kinds, names)]
        if roles[container_fqn].role == "attn":
            items += [("core", float(t), float(t)) for t in core_ticks if first < t < last]
            items.sort(key=lambda item: item[1])
            decided = split_attention(items)
            by_start = {s: c for (k, s, _), c in zip(items, decided) if k != "core"}
        else:
            decided = split_mlp(items)
            by_start = {s: c for (_, s, _), c in zip(items, decided)}
        for name in names:
            info = roles[name]
            if info.role is None or info.role == "proj":
                categories[name] = by_start[float(spans[name][0])]
    # A module reachable under several names (shared, tied) answers under each of them.
    canonical = {id(m): fqn for fqn, m in model.named_modules()}
    for fqn, module in model.named_modules(remove_duplicate=False):
        if fqn not in categories and canonical.get(id(module)) in categories:
            categories[fqn] = categories[canonical[id(module)]]
    return categories
