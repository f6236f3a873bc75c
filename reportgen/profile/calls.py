"""One recorded forward: what each module's call computed, for the structure to read.

Module classes and nesting say most of what a module is, but not all: a module may be
named for attention and compute a linear attention's recurrence (no softmax anywhere in
its call), a latent attention may carry no "Attention" in its class name, a sparse
attention's indexer returns the positions each query reads (an integer tensor), and a
mixture of experts hands its routed experts the experts each token goes to (integers)
while its shared experts see only the hidden states, and a layer that keeps several
residual streams (hyper-connections) is handed them stacked, one dimension more than the
hidden states its norms read. ``record`` runs the step once under
module hooks and a torch-function mode and keeps, per module (by its first name): its
first call's span on one clock, the ops it ran as the innermost module of a call
(the ones that tell a token mixer's kind), whether integer tensors went in or came
out, and the shape of the first floating tensor it was handed. `Calls` answers the
questions `structure.derive` asks of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from reportgen.attribution import is_core_op
from reportgen.profile.step import StepLike

# Fused attention calls (scaled_dot_product_attention, flash and flex attention): softmax
# attention in one op.
FUSED_ATTENTION_MARKERS = ("attention", "attn")
# A softmax over attention scores has four dimensions (batch, heads, queries, keys); a
# router's over its experts two or three.
SCORES_DIMS = 4
# Ops that mix tokens by products of sequences: what a linear attention or a recurrence
# runs in place of a softmax.
MIXING_MARKERS = ("matmul", "bmm", "einsum", "cumsum", "cumprod")
# Several residual streams of tokens: batch, sequence, streams and width (one stream's
# hidden states have three dimensions).
STREAMS_DIMS = 4


def _is_integer(value: Any) -> bool:
    return (isinstance(value, torch.Tensor) and not value.dtype.is_floating_point
            and not value.dtype.is_complex and value.dtype != torch.bool)


def _tensors(value: Any) -> Iterable[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _op_kind(name: str, args: Any) -> str | None:
    """``attention`` (a fused attention call, or a softmax over four-dimensional scores),
    ``softmax`` (another softmax, or its normaliser: logsumexp), ``mixing`` (a product
    over the sequence), ``core`` (another attention core op) or None."""
    lowered = name.lower()
    if any(m in lowered for m in FUSED_ATTENTION_MARKERS):
        return "attention"
    if "softmax" in lowered or "logsumexp" in lowered:  # (a softmax's normaliser, taken apart)
        first = next(iter(_tensors(args)), None)
        return ("attention" if "softmax" in lowered and first is not None and first.dim() >= SCORES_DIMS
                else "softmax")
    if any(m in lowered for m in MIXING_MARKERS):
        return "mixing"
    return "core" if is_core_op(name) else None


@dataclass
class Calls:
    """What one recorded forward saw. ``spans``: module FQN -> its first call's (start,
    end) ticks. ``ops``: (tick, kind, core, stack) of every op ``_op_kind`` names,
    ``core`` whether it is an attention core op (``attribution.is_core_op``), ``stack``
    the FQNs of the module calls open around it, outermost first. ``integer_in``:
    modules handed an integer tensor; ``integer_out``: modules returning one, with the
    most dimensions of those they return (a sparse attention's indexer returns positions
    per batch, query and choice: three; a router the experts per token: one or two).
    ``in_shapes``: the shape of the first floating tensor each module was handed."""

    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    ops: list[tuple[int, str, bool, tuple[str, ...]]] = field(default_factory=list)
    integer_in: set[str] = field(default_factory=set)
    integer_out: dict[str, int] = field(default_factory=dict)
    leaves: set[str] = field(default_factory=set)
    in_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    _index: dict[tuple[str, bool], set[str]] | None = None

    def _modules(self, kind: str, own: bool) -> set[str]:
        """The modules that ran an op of ``kind``: as the innermost module of its call
        (``own``; leaves aside: an ``nn.Softmax``), or anywhere inside their call."""
        if self._index is None:
            index: dict[tuple[str, bool], set[str]] = {}
            for _, op_kind, _, stack in self.ops:
                inner = [s for s in stack if s not in self.leaves]
                if inner:
                    index.setdefault((op_kind, True), set()).add(inner[-1])
                index.setdefault((op_kind, False), set()).update(stack)
            self._index = index
        return self._index.get((kind, own), set())

    def _own(self, fqn: str, kind: str) -> bool:
        return fqn in self._modules(kind, True)

    def _within(self, fqn: str, kind: str) -> bool:
        return fqn in self._modules(kind, False)

    def called(self, fqn: str) -> bool:
        return fqn in self.spans

    def streams(self, layer: str, readers: Iterable[str]) -> tuple[int, ...] | None:
        """The shape of the residual streams ``layer`` keeps, or None: where the layer was
        handed a tensor of four or more dimensions that is, but for one dimension of at
        least two that is not the width (the last), what any of ``readers`` (its norms)
        was handed, the hidden states, it keeps that many residual streams side by side
        and hands its parts one of them. (Hidden states of tokens have three dimensions:
        batch, sequence, width; a layer of one stream is handed those.)"""
        outer = self.in_shapes.get(layer)
        if outer is None or len(outer) < STREAMS_DIMS:
            return None
        for reader in readers:
            inner = self.in_shapes.get(reader)
            if inner is not None and any(size >= 2 and outer[:i] + outer[i + 1:] == inner
                                         for i, size in enumerate(outer[:-1])):
                return outer
        return None

    def runs_softmax_attention(self, fqn: str) -> bool:
        """The module's own call (not a module inside it) ran softmax attention: a fused
        attention call or a softmax over scores of batch, heads, queries and keys."""
        return self._own(fqn, "attention")

    def mixes_without_softmax(self, fqn: str) -> bool:
        """Somewhere in its call the module mixed tokens by products of sequences and
        nowhere ran a softmax of any shape or a fused attention call: a linear attention
        or a recurrence."""
        return self._within(fqn, "mixing") and not (self._within(fqn, "attention")
                                                    or self._within(fqn, "softmax"))


class _Mode(TorchFunctionMode):
    def __init__(self, calls: Calls, stack: list[str], tick: Any) -> None:
        super().__init__()
        self.calls, self.stack, self.tick = calls, stack, tick

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kind = _op_kind(getattr(func, "__name__", ""), args)
        if kind is not None:
            name = getattr(func, "__name__", "")
            self.calls.ops.append((self.tick(), kind, is_core_op(name), tuple(self.stack)))
        return func(*args, **(kwargs or {}))


def record(model: nn.Module, step: StepLike) -> Calls:
    """Run ``step()`` once with every module's calls recorded (then ``step.reset()``)."""
    calls = Calls()
    stack: list[str] = []
    clock = [0]

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    starts: dict[str, int] = {}
    handles = []
    for fqn, module in model.named_modules():
        if next(module.children(), None) is None:
            calls.leaves.add(fqn)

        def pre(_m: nn.Module, args: Any, kwargs: Any, fqn: str = fqn) -> None:
            stack.append(fqn)
            starts.setdefault(fqn, tick())
            if fqn not in calls.spans:
                handed = list(_tensors((args, kwargs)))
                if any(_is_integer(t) for t in handed):
                    calls.integer_in.add(fqn)
                first = next((t for t in handed if t.dtype.is_floating_point), None)
                if first is not None and fqn not in calls.in_shapes:
                    calls.in_shapes[fqn] = tuple(first.shape)

        def post(_m: nn.Module, _a: Any, _k: Any, out: Any, fqn: str = fqn) -> None:
            if stack and stack[-1] == fqn:
                stack.pop()
            if fqn not in calls.spans and fqn in starts:
                calls.spans[fqn] = (starts[fqn], tick())
                dims = [t.dim() for t in _tensors(out) if _is_integer(t)]
                if dims:
                    calls.integer_out[fqn] = max(dims)

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True, always_call=True))
    try:
        with _Mode(calls, stack, tick):
            step()
        sync = getattr(step, "sync", None)
        if sync is not None:
            sync()
    finally:
        for handle in handles:
            handle.remove()
        step.reset()
    return calls
