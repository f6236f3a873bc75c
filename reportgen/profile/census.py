"""Parameter counts of a catalog model, from the model itself built on the meta device.

A model is built from its catalog config exactly as ``reportgen profile`` builds it
(`models.ModelSpec.make_config`, the same auto class), on ``meta``: shapes, no storage,
so DeepSeek-V3's 671B parameters take about a second and no memory.

* **total**: every distinct parameter (tied weights once), embeddings and head included.
* **active** per token: a mixture of experts runs ``k`` of its ``n`` routed experts for
  each token, so the routed experts' parameters count ``k / n``; shared experts, the
  router, attention, norms, embeddings and head count fully. Routed experts are the
  modules named ``experts`` (fused tensors or a list of expert modules); ``n`` and ``k``
  are read from the config under any of transformers' names for them. A dense model's
  active count is its total.
* **input embeddings** (the tables a token's id looks up, less any shared with the head)
  and the **head** (the output projection): a publisher who counts without them
  (`catalog.CONVENTIONS`) is compared with the total or active count less those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reportgen.catalog import Entry
from reportgen.profile import layers as layer_mod
from reportgen.profile.experts import EXPERT_NAMES as _EXPERT_NAMES
from reportgen.profile.experts import TOP_K_NAMES as _TOP_K_NAMES

__all__ = ["Census", "build_meta", "census", "config_of"]



@dataclass(frozen=True)
class Census:
    """A model's counts (parameters) and its layers by kind."""

    total: int
    active: int
    input_embeddings: int  # embedding tables not shared with the head
    head: int  # the output projection (a tied head counts here, not above)
    routed_experts: int  # parameters of the routed experts, all of them
    experts: int | None  # n routed experts per layer
    top_k: int | None  # experts each token runs
    kinds: tuple[str, ...]  # one per layer of the main stack (`layers.layer_kinds`)

    def in_convention(self, count: int, counts: str) -> int:
        """``count`` (the total or the active count) in a publisher's convention
        (`catalog.CONVENTIONS`)."""
        if counts == "without input embeddings":
            return count - self.input_embeddings
        if counts == "without embeddings":
            return count - self.input_embeddings - self.head
        return count


def config_of(entry: Entry) -> Any:
    """The transformers config of a catalog entry (its published config.json values)."""
    from reportgen.profile.modelspec import resolve

    return resolve(entry.name).make_config()


def build_meta(config: Any) -> nn.Module:
    """The model a profile run builds from ``config``, on the meta device."""
    from reportgen.profile.autoclass import architecture, auto_class

    with torch.device("meta"):
        model: nn.Module = auto_class(config, architecture(config)).from_config(config)
    return model


def _distinct(params: Any) -> dict[int, nn.Parameter]:
    return {id(p): p for p in params}


def _routing(config: Any) -> tuple[int | None, int | None]:
    parts = [config] + [layer_mod.get(config, n) for n in ("text_config",)]
    parts = [p for p in parts if p is not None]
    experts = next((v for p in parts if (v := layer_mod.first(p, _EXPERT_NAMES)) is not None), None)
    top_k = next((v for p in parts if (v := layer_mod.first(p, _TOP_K_NAMES)) is not None), None)
    return (int(experts) if layer_mod.is_int(experts) else None, int(top_k) if layer_mod.is_int(top_k) else None)


def _routed_parameters(model: nn.Module) -> dict[int, nn.Parameter]:
    routed: dict[int, nn.Parameter] = {}
    for fqn, module in model.named_modules():
        if fqn.rpartition(".")[2] == "experts":
            routed.update(_distinct(module.parameters()))
    return routed


def _embeddings(model: nn.Module) -> tuple[dict[int, nn.Parameter], dict[int, nn.Parameter]]:
    """(input embedding parameters not shared with the head, the head's parameters)."""
    tables: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            tables.update(_distinct(module.parameters(recurse=False)))
    get_output = getattr(model, "get_output_embeddings", None)
    output = get_output() if callable(get_output) else None
    head = _distinct(output.parameters(recurse=False)) if isinstance(output, nn.Module) else {}
    return {k: v for k, v in tables.items() if k not in head}, head


def census(entry: Entry) -> Census:
    """Build ``entry`` on meta and count it (conventions: the module docstring)."""
    config = config_of(entry)
    model = build_meta(config)
    return count(model, config)


def count(model: nn.Module, config: Any) -> Census:
    params = _distinct(model.parameters())
    total = sum(p.numel() for p in params.values())
    routed = _routed_parameters(model)
    routed_total = sum(p.numel() for p in routed.values())
    experts, top_k = _routing(config)
    active = total
    if routed_total and experts and top_k:
        active = total - routed_total + routed_total * top_k // experts
    tables, head = _embeddings(model)
    return Census(total=total, active=active, input_embeddings=sum(p.numel() for p in tables.values()),
                  head=sum(p.numel() for p in head.values()), routed_experts=routed_total,
                  experts=experts if routed_total else None, top_k=top_k if routed_total else None,
                  kinds=tuple(layer_mod.layer_kinds(model)))
