"""What the routed experts of an expert-reduced build (``--experts N``) would cost with
every expert of the model: the correction factor the whole-model figures scale the
``moe.experts`` time by (``reportgen.depth``).

A step that routes T tokens, each to k of the model's E experts, gives each expert about
T k / E of them; a build with N < E experts gives each T k / N. Where T k / E is small
(a prefill, a decode of a large batch) the whole model runs many small products, each
reading its own expert's weights, and the build runs few large ones over the same tokens:
measured as it runs, the build's experts read low (by 46% in Qwen3-30B-A3B's prefill of
128 tokens with 8 of its 128 experts, on this project's 2-core host).

The probe times the build's first experts module two ways, alternately, ``reps`` times
after one warm-up of each:

* **build**: its call in the measured step, replayed with the same arguments (the step's
  tokens, routed as every step routes them, ``reportgen.profile.routing``);
* **whole**: a copy of the module widened to M experts, the build's weights repeated into
  M experts' memory of their own, called with the step's tokens routed over M experts the
  same way (one even draw, the same at every call, as a step repeats its routing). M is E
  where E experts' weights fit in half the memory the device has free (one layer's
  experts: the whole model's call, the same implementation, shapes and layout); where
  they do not, M is the most that fit and the tokens are split into C = E / M calls of
  T / C tokens each (each expert still gets T k / E tokens on average; the C - 1 extra
  calls' fixed cost, a few tensors allocated and indexed, is then in the figure). A step
  whose tokens reach no more experts than M (a decode of one token) is one call.

The factor is the median of whole / build over the pairs, its interval a percentile
bootstrap over them. It is measured for every step, one that reaches no more experts than
the build has too (a decode of one token: k experts, one token each, in either): the
products are the same, but an experts module's own work around them grows with the
experts it holds (a loop or a mask over every expert, in transformers' implementations).
On the 2-core host a decode step's experts took 3-6% longer with all of Granite's 32 or
Qwen3's 128 than with 8, where nothing was corrected.

The router scores every expert: the layer's router (its child beside the experts that
holds a per-expert weight) is timed the same way, a deep copy widened to E experts
against its own call with the step's arguments; the difference of the pairs' times, per
layer, is what each of the whole model's mixture-of-experts layers adds to ``moe.router``
(the category holds more than the scoring: the top-k, the dispatch, the combination).

Only a module of stacked experts called with the tokens, the
router's integer expert indices and their weights (transformers' experts modules) can be
probed; for any other (a list of expert modules the layer calls one by one) ``probe``
returns None and the figures keep saying the experts' time is understated.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from reportgen.profile.routing import _index_tensor, _stacked_count, draw
from reportgen.profile.step import StepLike, run_hooked
from reportgen.profile.structure import Structure, is_experts
from reportgen.stats.basic import percentiles
from reportgen.stats.bootstrap import CONFIDENCE, draws


def method(timed: str) -> str:
    """The correction's method, its pairs timed as ``timed`` says."""
    return ("the build's experts module timed in its call of the measured step (replayed) against a copy widened "
            "to the model's experts (or as many as fit in half the free memory, the tokens split over the calls that "
            "makes) called with the step's tokens routed over them by one even draw, the same at every call (as a step "
            f"repeats its routing), {timed}; factor: the median of "
            "their ratio over the pairs. Its router the same way, widened to every expert: the median difference")


METHOD = method("alternately")
MIN_REPS = 7
# a round of a combination measured in rounds, whose correction is the median over its
# rounds (``reportgen.depth.pool_costs``): DeepSeek-V3's widened prefill call takes 6 s
ROUND_MIN_REPS = 3
# as many pairs as the budget holds, so that a few seconds' disturbance (four pairs in a
# row at twice the ratio, seen in a granite prefill's 15) stays a minority the median and
# its bootstrap pass over: a small build's pair takes about 60 ms here
MAX_REPS = 61
BUDGET_S = 6.0  # timing the pairs past MIN_REPS, up to MAX_REPS
SEED = 0
REPLICATES = 2000
ROOM = 0.5  # of the device's free memory, for the widened copy's weights


class _Call:
    """One captured call of an experts module: where its tokens, indices and weights sit
    among the arguments, to call it again with other routings."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any], experts: int) -> None:
        self.args, self.kwargs = list(args), dict(kwargs)
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

    def routed(self, forward: Callable[..., Any], index: torch.Tensor) -> Callable[[], Any]:
        """``forward`` called on the first ``len(index)`` tokens, routed by ``index``
        ([tokens, k] expert numbers)."""
        rows = int(index.shape[0])
        swap = {id(self.index): index.to(device=self.index.device, dtype=self.index.dtype),
                id(self.hidden): self.hidden[:rows], id(self.weights): self.weights[:rows]}
        args = [swap.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in self.args]
        kwargs = {k: swap.get(id(v), v) if isinstance(v, torch.Tensor) else v for k, v in self.kwargs.items()}
        return lambda: forward(*args, **kwargs)


def _counts_experts(name: str) -> bool:
    return "expert" in name.lower()


def widened(module: nn.Module, built: int, width: int, *, deep: bool = False) -> nn.Module:
    """A copy of ``module`` (built with ``built`` experts) holding ``width``: each
    per-expert parameter and buffer (leading dimension ``built``) repeated into memory of
    its own, each attribute named for the experts that counts them set to ``width``; no
    hooks. The original is untouched. ``deep``: every submodule too (a router's own
    linear layer), the module copied whole first (small modules only: a router)."""
    wide = copy.deepcopy(module) if deep else copy.copy(module)
    picks = torch.arange(width) % built
    for part in (wide.modules() if deep else [wide]):
        for hooks in ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
                      "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
                      "_backward_pre_hooks"):
            if hasattr(part, hooks):
                object.__setattr__(part, hooks, OrderedDict())
        for store in ("_parameters", "_buffers"):
            held = dict(getattr(part, store))
            object.__setattr__(part, store, held)
            for name, tensor in held.items():
                if tensor is not None and tensor.dim() >= 1 and int(tensor.shape[0]) == built:
                    grown = tensor.detach().index_select(0, picks.to(tensor.device))
                    held[name] = nn.Parameter(grown, requires_grad=False) if store == "_parameters" else grown
        for name, value in vars(part).items():
            if type(value) is int and value == built and _counts_experts(name):
                object.__setattr__(part, name, width)
    return wide


def expert_bytes(module: nn.Module, built: int) -> int:
    """One expert's weights in ``module``, in bytes."""
    return sum(p.numel() * p.element_size() for p in module.parameters(recurse=False)
               if p.dim() >= 2 and int(p.shape[0]) == built) // built


def room(device: torch.device) -> int:
    """Bytes the widened copy may take: ``ROOM`` of what the device has free."""
    from reportgen.profile.preflight import available

    try:
        free, _where = available(str(device))
    except RuntimeError:  # nothing says what is free: no copy wider than the build
        return 0
    return int(ROOM * free)


def plan(full: int, built: int, tokens: int, top_k: int, fits: int) -> tuple[int, int]:
    """(M, C): the experts the widened copy holds and the calls the step's tokens are
    split into, with at most ``fits`` experts in memory (module docstring)."""
    most = max(built, min(full, fits))
    if most >= full:
        return full, 1
    reached = full * (1.0 - (1.0 - top_k / full) ** tokens)
    calls = max(1, min(tokens, -(-full // most))) if reached > most else 1
    width = max(built, min(most, -(-full // calls)))
    return width, calls


def _router_of(modules: Mapping[str, nn.Module], structure: Structure, experts_fqn: str,
               built: int) -> nn.Module | None:
    """The router beside ``experts_fqn`` in its mixture-of-experts layer (``modules``: the
    model's, by name): the layer's child, other than its experts and shared experts, that
    holds a per-expert weight (leading dimension ``built``)."""
    layer = experts_fqn.rpartition(".")[0]
    parent = modules.get(layer)
    if parent is None:
        return None
    for name, child in parent.named_children():
        fqn = f"{layer}.{name}" if layer else name
        role = structure.roles.get(fqn)
        if fqn == experts_fqn or (role is not None and role.role in ("experts", "shared")) or is_experts(child):
            continue
        if any(int(t.shape[0]) == built for t in (*child.parameters(), *child.buffers()) if t.dim() >= 1):
            return child
    return None


def _pairs(first: Callable[[], float], second: Callable[[], float], budget_s: float,
           fewest: int = MIN_REPS) -> tuple[list[float], list[float]]:
    """``first`` and ``second`` timed alternately after one warm-up of each: at least
    ``fewest`` pairs, more while ``budget_s`` lasts, at most ``MAX_REPS``."""
    a: list[float] = []
    b: list[float] = []
    first()
    second()
    began = time.perf_counter()
    while len(a) < MAX_REPS and (len(a) < fewest or time.perf_counter() - began < budget_s):
        a.append(first())
        b.append(second())
    return a, b


def _interval(values: list[float], seed: int) -> tuple[float, float, float]:
    """(median, low, high): a percentile bootstrap of the median over ``values``."""
    point = statistics.median(values)
    boot = draws(lambda idx: statistics.median([values[i] for i in idx]), [len(values)], reps=REPLICATES,
                 seed=seed)
    low, high = percentiles(boot, CONFIDENCE)
    return point, min(low, point), max(high, point)


class Correction:
    """The correction's calls on a build, captured and widened, ready to time pair by pair
    (``prepare``): ``experts_pair`` times the widened copy's call and the build's own, one
    each; ``router_pair`` the widened router's and its own; ``result`` states the figures
    from the pairs timed. ``probe`` times its pairs back to back; a caller with other
    forwards to time may interleave them with those instead (the expert figure of the
    bench times one pair in each of its cycles)."""

    def __init__(self, step: StepLike, target: nn.Module, call: _Call, wide: nn.Module, chunks: list[int],
                 width: int, top_k: int, seed: int, info: dict[str, Any],
                 router: tuple[nn.Module, nn.Module, tuple[Any, ...], dict[str, Any]] | None) -> None:
        self.step, self.target, self.call, self.wide = step, target, call, wide
        self.chunks, self.width, self.top_k, self.seed = chunks, width, top_k, seed
        self.info, self.router = info, router
        # one draw, called every time: a step routes its tokens the same way every time
        # (``routing``: one even draw per shape, or the router on the same inputs), so the
        # whole model's layer reads the same experts' weights step after step, and so does
        # the widened call
        generator = torch.Generator().manual_seed(seed)
        self.indices = [draw(n, width, top_k, generator) for n in chunks]

    def _timed(self, runs: list[Callable[[], Any]]) -> float:
        self.step.sync()
        start = time.perf_counter()
        with torch.no_grad():
            for run in runs:
                run()
        self.step.sync()
        return (time.perf_counter() - start) * 1e3

    def whole_ms(self) -> float:
        """The widened copy's call with the step's tokens routed over its experts."""
        return self._timed([self.call.routed(self.wide.forward, index) for index in self.indices])

    def build_ms(self) -> float:
        """The build's own call with the arguments it had in the step."""
        return self._timed([lambda: self.target(*self.call.args, **self.call.kwargs)])

    def experts_pair(self) -> tuple[float, float]:
        """(widened, build) milliseconds, timed one after the other."""
        return self.whole_ms(), self.build_ms()

    def router_whole_ms(self) -> float:
        """The router widened to every expert, with the arguments it had in the step."""
        assert self.router is not None
        wide, _own, args, kwargs = self.router
        return self._timed([lambda: wide(*args, **kwargs)])

    def router_build_ms(self) -> float:
        """The build's own router, with the arguments it had in the step."""
        assert self.router is not None
        _wide, own, args, kwargs = self.router
        return self._timed([lambda: own(*args, **kwargs)])

    def router_pair(self) -> tuple[float, float] | None:
        """(widened router, its own) milliseconds, or None without a router to widen."""
        return None if self.router is None else (self.router_whole_ms(), self.router_build_ms())

    def result(self, experts: tuple[list[float], list[float]],
               router: tuple[list[float], list[float]] | None, method: str = METHOD) -> dict[str, Any]:
        """The correction from the pairs timed: ``experts`` (widened, build) milliseconds
        pair by pair, ``router`` likewise (or None)."""
        whole_ms, build_ms = experts
        ratios = [w / b for w, b in zip(whole_ms, build_ms)]
        factor, low, high = _interval(ratios, self.seed)
        full = int(self.info["full"])
        steps = int(self.info["tokens"])
        out = {**self.info, "method": method}
        out["experts"] = {
            "factor": factor, "factor_low": low, "factor_high": high, "ratios": ratios,
            "whole_ms": statistics.median(whole_ms), "build_ms": statistics.median(build_ms),
            "widened_to": self.width, "calls": len(self.chunks),
            "tokens_per_expert": {"whole": steps * self.top_k / full,
                                  "build": steps * self.top_k / int(self.info["built"])}}
        if router is not None and router[0]:
            wide_ms, own_ms = router
            deltas = [w - o for w, o in zip(wide_ms, own_ms)]
            delta, dlow, dhigh = _interval(deltas, self.seed)
            out["router"] = {"delta_ms": delta, "delta_low_ms": dlow, "delta_high_ms": dhigh, "deltas_ms": deltas,
                             "whole_ms": statistics.median(wide_ms), "build_ms": statistics.median(own_ms)}
        return out


def prepare(model: nn.Module, step: StepLike, structure: Structure, *, full: int, top_k: int, tokens: int,
            seed: int = SEED, memory: int | None = None) -> Correction | None:
    """The correction's calls on a build with fewer routed experts than ``full``, on its
    first mixture-of-experts layer (module docstring), captured from one run of ``step``
    and widened; ``memory``: bytes the widened experts may take (default: ``room``). None
    where the model has no stacked experts module called with an expert index, or builds
    every expert."""
    modules = dict(model.named_modules())
    fqn = next((f for f, info in structure.roles.items()
                if info.role == "experts" and info.container == "moe" and f in modules
                and is_experts(modules[f]) and not isinstance(modules[f], (nn.ModuleList, nn.ModuleDict))), None)
    if fqn is None or tokens <= 0:
        return None
    target = modules[fqn]
    built = _stacked_count(target)
    if built >= full or top_k > built:
        return None
    router = _router_of(modules, structure, fqn, built)
    seen: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def capture(name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen.setdefault(name, (args, kwargs))
        return hook

    # registered after the step's own routing hook: it sees the indices the experts ran
    handles = [target.register_forward_pre_hook(capture("experts"), with_kwargs=True)]
    if router is not None:
        handles.append(router.register_forward_pre_hook(capture("router"), with_kwargs=True))
    run_hooked(step, handles)
    if "experts" not in seen:
        return None
    try:
        call = _Call(*seen["experts"], experts=built)
    except LookupError:
        return None
    steps = int(call.index.shape[0])
    reached = float(full * (1.0 - (1.0 - top_k / full) ** steps))
    info: dict[str, Any] = {"tokens": steps, "reached": reached, "built": built, "full": full,
                            "layers": sum(1 for f, i in structure.roles.items()
                                          if i.role == "experts" and i.container == "moe")}
    # every step, one that reaches no more experts than the build has too (module docstring)
    per_expert = max(1, expert_bytes(target, built))
    space = room(call.hidden.device) if memory is None else memory
    width, calls = plan(full, built, steps, top_k, space // per_expert)
    wide = widened(target, built, width)
    chunks = [len(c) for c in torch.arange(steps).tensor_split(calls) if len(c)]
    routers = None
    if router is not None and "router" in seen:
        args, kwargs = seen["router"]
        try:
            wide_router = widened(router, built, full, deep=True)
            with torch.no_grad():
                wide_router(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a router that reads its expert count elsewhere: scaled by count
            wide_router = None
        if wide_router is not None:
            routers = (wide_router, router, args, kwargs)
    return Correction(step, target, call, wide, chunks, width, top_k, seed, info, routers)


def probe(model: nn.Module, step: StepLike, structure: Structure, *, full: int, top_k: int, tokens: int,
          budget_s: float = BUDGET_S, seed: int = SEED, memory: int | None = None,
          min_reps: int = MIN_REPS) -> dict[str, Any] | None:
    """What a build with fewer routed experts than ``full`` would take with every expert,
    measured on its first mixture-of-experts layer (module docstring): ``experts``, the
    factor its experts' time would grow by, and ``router``, the milliseconds its router
    would add a layer scoring every expert, their pairs timed back to back. ``memory``:
    bytes the widened experts may take (default: ``room``); ``min_reps``: the fewest pairs
    of each. None where ``prepare`` finds nothing to widen."""
    found = prepare(model, step, structure, full=full, top_k=top_k, tokens=tokens, seed=seed, memory=memory)
    if found is None:
        return None
    experts = _pairs(found.whole_ms, found.build_ms, budget_s, min_reps)
    router = None if found.router is None else _pairs(found.router_whole_ms, found.router_build_ms,
                                                      budget_s / 4, min_reps)
    return found.result(experts, router)
