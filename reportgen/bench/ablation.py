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
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


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
