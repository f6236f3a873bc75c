"""What the routed experts of an expert-reduced build (``--experts N``) would cost with
every expert of the model: the correction factor the whole-model figures scale the
``moe.experts`` time by (``reportgen.depth``).

A step that routes T tokens, each to k of the model's E experts, gives each expert about
T k / E of them; a build with N < E experts gives each T k / N. Where T k / E is small
(a prefill, a decode of a large batch) the whole model runs many small products, each
reading its expert's weights, and the build runs few large ones over the same tokens:
measured as it runs, the build's experts read low by up to half (the expert-reduction
figure on the Validation page).

The probe calls the build's own experts module (its implementation, weights, dtype and
device) outside the forward, with each routed token as a row of its own (index shape
``[rows, 1]``):

* **whole**: a routing of T tokens over E experts drawn as a router spreads them (each
  token to k distinct experts, evenly at random); the experts it reaches, in groups of N,
  each group's rows one call of the module, so every group runs the products the whole
  model's experts would, on N experts' weights (each group's N experts were read N
  experts earlier, as in the whole layer: no weights stay in a cache the layer's would not);
* **build**: a routing of T tokens over the build's N experts, drawn the same way, in one
  call.

Both are timed alternately, each with a fresh routing, ``reps`` times after one warm-up
of each; the factor is the median of whole / build over the pairs, its interval a
percentile bootstrap over them. Each group is a call of its own where the whole layer
makes one: the extra calls' fixed cost (a few tensors allocated and indexed) is in
``whole``, small beside the products wherever there are several groups (a step that
reaches no more experts than the build has makes one call, and its factor is about 1).

Only a module of stacked experts called with the tokens, the router's integer expert
indices and their weights (transformers' experts modules) can be probed; for any other
(a list of expert modules the layer calls one by one) ``probe`` returns None and the
figures keep saying the experts' time is understated.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from reportgen.profile.routing import _index_tensor, _stacked_count
from reportgen.profile.step import StepLike, run_hooked
from reportgen.profile.structure import Structure, is_experts
from reportgen.stats.basic import percentiles
from reportgen.stats.bootstrap import CONFIDENCE, draws

METHOD = ("the build's experts module called outside the forward, each routed token a row of its own: the whole "
          "model's routing of the step's tokens (each to top_k of every expert, evenly at random) in groups of the "
          "build's experts, against the build's own routing in one call, alternately; factor: the median of "
          "their ratio over the pairs")
MIN_REPS = 5
MAX_REPS = 9
SEED = 0
REPLICATES = 2000


class _Call:
    """One captured call of an experts module: where its tokens, indices and weights sit
    among the arguments, to call it again with other routings."""

    def __init__(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], experts: int) -> None:
        self.module, self.args, self.kwargs = module, list(args), dict(kwargs)
        index = _index_tensor(args, kwargs, experts)
        if index is None or index.dim() != 2:
            raise LookupError("no [tokens, k] expert index among the experts' arguments")
        self.index = index
        self.hidden = self._find(lambda v: v.is_floating_point() and v.dim() == 2 and v.shape[0] == index.shape[0]
                                 and v.shape[1] != index.shape[1])
        self.weights = self._find(lambda v: v.is_floating_point() and tuple(v.shape) == tuple(index.shape))

    def _find(self, test: Callable[[torch.Tensor], bool]) -> torch.Tensor:
        for value in (*self.args, *self.kwargs.values()):
            if isinstance(value, torch.Tensor) and test(value):
                return value
        raise LookupError("the experts' arguments hold no tokens and weights beside the index")

    def with_rows(self, experts_of_rows: torch.Tensor, hidden: torch.Tensor) -> Callable[[], Any]:
        """The module called on ``len(experts_of_rows)`` rows, row i routed to that expert."""
        rows = int(experts_of_rows.numel())
        swap = {id(self.index): experts_of_rows.view(rows, 1).to(self.index.dtype),
                id(self.hidden): hidden[:rows],
                id(self.weights): torch.ones(rows, 1, dtype=self.weights.dtype, device=self.weights.device)}
        args = [swap.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in self.args]
        kwargs = {k: swap.get(id(v), v) if isinstance(v, torch.Tensor) else v for k, v in self.kwargs.items()}
        return lambda: self.module(*args, **kwargs)


def routing_loads(experts: int, tokens: int, top_k: int, generator: torch.Generator) -> torch.Tensor:
    """Tokens per expert when ``tokens`` tokens each go to ``top_k`` distinct experts of
    ``experts``, drawn evenly at random."""
    picks = torch.rand(tokens, experts, generator=generator).topk(top_k, dim=1).indices
    return torch.bincount(picks.reshape(-1), minlength=experts)


def _rows(loads: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Each row's expert, for ``loads`` tokens per expert (experts numbered from 0)."""
    return torch.repeat_interleave(torch.arange(len(loads)), loads).to(device)


def probe(model: nn.Module, step: StepLike, structure: Structure, *, full: int, top_k: int, tokens: int,
          budget_s: float = 10.0, seed: int = SEED) -> dict[str, Any] | None:
    """The correction factor for a build with fewer routed experts than ``full``: the
    first routed experts module's time with the whole model's routing of ``tokens`` over
    its time with the build's (module docstring). None where the model has no stacked
    experts module called with an expert index, or builds every expert."""
    modules = dict(model.named_modules())
    target = next((modules[fqn] for fqn, info in structure.roles.items()
                   if info.role == "experts" and info.container == "moe" and fqn in modules
                   and is_experts(modules[fqn]) and not isinstance(modules[fqn], (nn.ModuleList, nn.ModuleDict))),
                  None)
    if target is None or tokens <= 0:
        return None
    built = _stacked_count(target)
    if built >= full or top_k > built:
        return None
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def capture(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not seen:
            seen.append((args, kwargs))

    run_hooked(step, [target.register_forward_pre_hook(capture, with_kwargs=True)])
    if not seen:
        return None
    try:
        call = _Call(target, *seen[0], experts=built)
    except LookupError:
        return None
    device = call.hidden.device
    generator = torch.Generator().manual_seed(seed)
    most = max(tokens * top_k, 1)
    hidden = torch.randn(most, call.hidden.shape[1], generator=generator).to(device=device, dtype=call.hidden.dtype)
    scale = float(call.hidden.float().std()) if call.hidden.numel() > 1 else 1.0
    hidden.mul_(scale if scale > 0 else 1.0)

    def sync() -> None:
        step.sync()

    def whole_calls() -> list[Callable[[], Any]]:
        loads = routing_loads(full, tokens, top_k, generator)
        hit = loads[loads > 0]  # the experts the step reaches, N to a call
        padded = torch.cat([hit, hit.new_zeros(-len(hit) % built)]).view(-1, built)
        return [call.with_rows(_rows(group, device), hidden) for group in padded]

    def build_calls() -> list[Callable[[], Any]]:
        return [call.with_rows(_rows(routing_loads(built, tokens, top_k, generator), device), hidden)]

    def timed(calls: list[Callable[[], Any]]) -> float:
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            for run in calls:
                run()
        sync()
        return (time.perf_counter() - start) * 1e3

    whole_ms: list[float] = []
    build_ms: list[float] = []
    timed(whole_calls())  # warm-up, each side once
    timed(build_calls())
    began = time.perf_counter()
    while len(whole_ms) < MAX_REPS and (len(whole_ms) < MIN_REPS or time.perf_counter() - began < budget_s):
        whole_ms.append(timed(whole_calls()))
        build_ms.append(timed(build_calls()))
    ratios = [w / b for w, b in zip(whole_ms, build_ms)]
    factor = statistics.median(ratios)
    boot = draws(lambda idx: statistics.median([ratios[i] for i in idx]), [len(ratios)], reps=REPLICATES, seed=seed)
    low, high = percentiles(boot, CONFIDENCE)
    return {
        "factor": factor, "factor_low": min(low, factor), "factor_high": max(high, factor),
        "ratios": ratios, "whole_ms": statistics.median(whole_ms), "build_ms": statistics.median(build_ms),
        "tokens": tokens, "reached": float(full * (1.0 - (1.0 - top_k / full) ** tokens)),
        "tokens_per_expert": {"whole": tokens * top_k / full, "build": tokens * top_k / built},
        "method": METHOD,
    }
