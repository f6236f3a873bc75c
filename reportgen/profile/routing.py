"""How a mixture-of-experts model's tokens reach its experts: the routing every measured
step runs (``even_routing``), and where it sent the tokens of one forward (``expert_load``),
tokens per expert per layer, read from the experts' own inputs.

**Routing drawn evenly.** A router with random weights does not spread tokens as a
trained one does. The layers of a random-weight transformer make the tokens' hidden states
ever more alike, so a random router sends them ever more to the same few experts: in
Qwen3-30B-A3B's second layer, measured on this project's host, a prefill of 128 tokens
reached fewer experts than in its first, and its experts took 165 ms against 270 ms. A
trained router is trained to balance its experts' load. Time in a mixture of experts goes
by how many experts a step reaches and how many tokens each gets (one product per
expert reached, each reading its weights), so the tokens per expert are a shape the
measurement must get right, like the sequence length. Each stacked experts module (called
with the router's [tokens, k] expert indices, as transformers' are) therefore runs with
its indices drawn evenly: each token to k distinct experts, each expert the same number of
tokens (to one), which experts a fixed random draw per layer and shape from the
measurement's seed. A trained router balances its load over many steps, not exactly in
each: a step's experts then read somewhat low (at 128 tokens over Qwen3-30B-A3B's 128
experts, a uniformly random spread took about 10% longer than an exact one on this
project's host). The draw is exact so that every layer, and every build of a model, runs
the same load: the figures do not move with the draw. The router still computes its scores and
picks (its time is measured as it is); only which experts run is drawn. A list of expert
modules that its layer calls one by one keeps its router's own routing; ``expert_load``
says which routing a record ran.

The experts are found from the structure (``reportgen.profile.structure``: a module
holding stacked per-expert weights, or a list of like experts). A module of stacked
experts is called with the router's top-k expert indices (an integer tensor among its
arguments); those are counted per expert. A list of experts is called one expert at a
time with the tokens routed to it; its input's rows are counted. Shared experts see
every token and are not routed, so they are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from reportgen.profile.step import StepLike, run_hooked
from reportgen.profile.structure import Structure, is_experts


def _stacked_count(module: nn.Module) -> int:
    return max(int(p.shape[0]) for p in module.parameters(recurse=False) if p.dim() >= 3)


def _index_tensor(args: tuple[Any, ...], kwargs: dict[str, Any], experts: int) -> torch.Tensor | None:
    """The router's expert indices among an experts module's arguments: an integer tensor
    whose values are expert numbers."""
    for value in (*args, *kwargs.values()):
        if (isinstance(value, torch.Tensor) and not value.is_floating_point()
                and value.dtype != torch.bool and value.numel() > 0):
            if int(value.min()) >= 0 and int(value.max()) < experts:
                return value
    return None


def expert_load(model: nn.Module, step: StepLike, structure: Structure) -> dict[str, Any] | None:
    """Tokens per expert in one forward of ``step`` (then ``step.reset()``); None for a
    model without routed experts (``structure``: the model's), or whose experts' inputs
    say nothing of the routing."""
    roles = structure.roles
    modules = dict(model.named_modules())
    targets = [(fqn, modules[fqn]) for fqn, info in roles.items()
               if info.role == "experts" and fqn in modules and is_experts(modules[fqn])
               and info.container == "moe"]
    if not targets:
        return None
    counts: dict[str, torch.Tensor] = {}
    handles = []
    for fqn, module in targets:
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            items = list(module.children())
            counts[fqn] = torch.zeros(len(items), dtype=torch.long)
            for index, item in enumerate(items):
                def count_rows(_m: nn.Module, args: tuple[Any, ...], fqn: str = fqn,
                               index: int = index) -> None:
                    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                    if first is not None and first.dim() >= 1:
                        counts[fqn][index] += first.numel() // max(1, int(first.shape[-1]))
                handles.append(item.register_forward_pre_hook(count_rows))
        else:
            experts = _stacked_count(module)
            counts[fqn] = torch.zeros(experts, dtype=torch.long)

            def count_indices(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                              fqn: str = fqn, experts: int = experts) -> None:
                indices = _index_tensor(args, kwargs, experts)
                if indices is not None:
                    counts[fqn] += torch.bincount(indices.reshape(-1).long().cpu(), minlength=experts)
            handles.append(module.register_forward_pre_hook(count_indices, with_kwargs=True))
    run_hooked(step, handles)
    layers = [(fqn, c.tolist()) for fqn, c in counts.items() if int(c.sum()) > 0]
    if not layers:
        return None
    even = all(getattr(modules[fqn], _EVEN_ATTR, False) for fqn, _ in layers)
    return {**summarise(layers, tokens=int(step.inputs_info.get("tokens") or 0)), "routing": EVEN if even else ROUTER}


def summarise(layers: list[tuple[str, list[int]]], tokens: int) -> dict[str, Any]:
    """The record's ``moe`` section from per-layer tokens per expert: per layer, the
    counts and how uneven they are (the busiest expert against the mean; the coefficient
    of variation), and over the layers the same figures."""
    per_layer: list[dict[str, Any]] = []
    for fqn, row in layers:
        mean = sum(row) / len(row)
        var = sum((c - mean) ** 2 for c in row) / len(row)
        per_layer.append({"module": fqn, "tokens_per_expert": row,
                          "max_over_mean": max(row) / mean if mean else None,
                          "cv": (var ** 0.5) / mean if mean else None,
                          "idle_experts": sum(1 for c in row if c == 0)})
    experts = max(len(r) for _, r in layers)
    routed = [sum(r) for _, r in layers]
    ratios = [p["max_over_mean"] for p in per_layer if p["max_over_mean"] is not None]
    return {
        "layers": len(layers),
        "experts": experts,
        "tokens": tokens,
        # assignments per token per layer: the top-k the router used
        "top_k": round(sum(routed) / len(routed) / tokens, 3) if tokens else None,
        "max_over_mean": max(ratios) if ratios else None,
        "mean_max_over_mean": sum(ratios) / len(ratios) if ratios else None,
        "idle_experts": sum(p["idle_experts"] for p in per_layer),
        "per_layer": per_layer,
    }


EVEN = "even"
ROUTER = "router"
_EVEN_ATTR = "_reportgen_even_routing"


def draw(tokens: int, experts: int, top_k: int, generator: torch.Generator) -> torch.Tensor:
    """[tokens, top_k] expert indices, even: each token to top_k distinct experts of
    ``experts``, each expert the same number of tokens (to one), which experts in a random
    order (token i takes the experts at places i k to i k + k - 1, around the order)."""
    order = torch.randperm(experts, generator=generator)
    places = (torch.arange(tokens)[:, None] * top_k + torch.arange(top_k)[None, :]) % experts
    return order[places]


def _even_hook(experts: int, seed: int) -> Callable[..., Any]:
    """A forward pre-hook that hands the experts an even draw in place of the router's
    indices (found among the arguments at the first call; later calls swap that place)."""
    place: list[tuple[str, Any]] = []
    draws: dict[tuple[int, ...], torch.Tensor] = {}

    def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        if not place:
            found = _index_tensor(args, kwargs, experts)
            if found is None or found.dim() != 2:
                place.append(("none", None))
            else:
                at = next(i for i, a in enumerate(args) if a is found) if any(a is found for a in args) else None
                place.append(("arg", at) if at is not None else
                             ("kwarg", next(k for k, v in kwargs.items() if v is found)))
        kind, key = place[0]
        if kind == "none":
            return None
        index = args[key] if kind == "arg" else kwargs.get(key)
        if not isinstance(index, torch.Tensor) or index.dim() != 2:
            return None
        shape = tuple(index.shape)
        even = draws.get(shape)
        if even is None or even.device != index.device:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + shape[0] * 131 + shape[1])
            even = draw(shape[0], experts, shape[1], generator).to(device=index.device, dtype=index.dtype)
            draws[shape] = even
        if kind == "arg":
            return (*args[:key], even, *args[key + 1:]), kwargs
        return args, {**kwargs, key: even}

    return hook


def even_routing(model: nn.Module, seed: int) -> int:
    """Route every stacked experts module of ``model`` evenly (module docstring), for the
    model's life; the number of modules so wired (0: nothing routed, or already wired)."""
    wired = 0
    for index, module in enumerate(model.modules()):
        if (isinstance(module, (nn.ModuleList, nn.ModuleDict)) or not is_experts(module)
                or getattr(module, _EVEN_ATTR, False)):
            continue
        module.register_forward_pre_hook(_even_hook(_stacked_count(module), seed + index), with_kwargs=True)
        setattr(module, _EVEN_ATTR, True)
        wired += 1
    return wired
