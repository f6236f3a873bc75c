"""The module-boundary attribution method: clocks at module calls in an unprofiled pass.

The same modules ``reportgen.profile.structure`` labels for the profiler (embeddings,
attention calls and their projections, MLP containers, norms, activations, heads, the
blocks), plus the model's own forward, get forward pre/post hooks that read a clock and
nothing else: ``time.perf_counter_ns`` on a CPU; on a GPU a CUDA event recorded on the
current stream, read only after the iteration's synchronise. No profiler, no
``record_function``, no per-op recording. ``reportgen.shares.categorise`` turns each
iteration's timed calls into the categories (``attention.core`` = the attention call less
its projections, norms and position-bias embeddings; ``other`` = the model's and blocks'
own time; ``overhead`` = the iteration outside the model's forward).

It also gives the profiler method per iteration (``reportgen.attribution.profiler_iterations``:
each profiled iteration attributed alone), so both methods give share intervals from
repetition.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from reportgen import shares
from reportgen.attribution import profiler_iterations
from reportgen.profile.step import StepLike
from reportgen.profile.structure import classify, module_categories

__all__ = ["attribute", "attribution_section", "clocked", "device_clock", "hooked_forward", "hooks_method",
           "profiler_iterations", "profiler_method"]

_ITERATION = -1


class _HostClock:
    method = "host-clock"

    def begin(self) -> None:
        return None

    def mark(self) -> int:
        return time.perf_counter_ns()

    def finish(self, step: StepLike) -> int:
        step.sync()
        return time.perf_counter_ns()

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        first = marks[0]
        return [(m - first) / 1e6 for m in marks]


class _EventClock:
    """CUDA events from a pool (no allocation inside the iteration), recorded on the
    current stream; elapsed times are read after a synchronise."""

    method = "cuda-events"

    def __init__(self, event_factory: Callable[..., Any] | None = None,
                 synchronize: Callable[[], None] | None = None) -> None:
        self.event_factory = event_factory or torch.cuda.Event
        self.synchronize = synchronize or torch.cuda.synchronize
        self.pool: list[Any] = []
        self.used = 0

    def begin(self) -> None:
        self.used = 0

    def mark(self) -> Any:
        if self.used == len(self.pool):
            self.pool.append(self.event_factory(enable_timing=True))
        event = self.pool[self.used]
        self.used += 1
        event.record()
        return event

    def finish(self, step: StepLike) -> Any:
        return self.mark()

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        self.synchronize()
        first = marks[0]
        return [0.0] + [float(first.elapsed_time(m)) for m in marks[1:]]


class _Recorder:
    """Hooks that append ``(key, is_start, stamp)`` at every labelled module call."""

    def __init__(self, model: nn.Module, clock: Any, proj_category: dict[str, str]) -> None:
        self.clock = clock
        self.log: list[tuple[int, bool, Any]] = []
        self.keys: list[tuple[str, str | None]] = []  # (role, settled category)
        self._handles: list[Any] = []
        modules = dict(model.named_modules())
        targets: list[tuple[str, str, str | None]] = [("", "model", None)]
        for fqn, info in classify(model).items():
            if info.role is not None and fqn in modules:
                targets.append((fqn, info.role, proj_category.get(fqn) if info.role == "proj"
                                else None))
        log, mark = self.log, clock.mark
        for fqn, role, category in targets:
            key = len(self.keys)
            self.keys.append((role, category))

            def pre(_m: nn.Module, _a: Any, key: int = key) -> None:
                log.append((key, True, mark()))

            def post(_m: nn.Module, _a: Any, _o: Any, key: int = key) -> None:
                log.append((key, False, mark()))

            module = modules[fqn]
            self._handles.append(module.register_forward_pre_hook(pre))
            self._handles.append(module.register_forward_hook(post, always_call=True))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def iteration(self, step: StepLike, sources: dict[str, float] | None = None
                  ) -> tuple[float, dict[str, float], int]:
        """One hooked iteration: (wall ms, category ms, module calls timed); ``sources``
        accumulates where ``other`` and ``overhead`` came from."""
        self.log.clear()
        self.clock.begin()
        start = self.clock.mark()
        step()
        end = self.clock.finish(step)
        log = list(self.log)
        times = self.clock.resolve([start, *(m for _, _, m in log), end])
        calls = [shares.Call("iteration", times[0], times[-1], None)]
        stack = [0]
        for (key, is_start, _), t in zip(log, times[1:-1]):
            role, category = self.keys[key]
            if is_start:
                calls.append(shares.Call(role, t, t, stack[-1], category))
                stack.append(len(calls) - 1)
            elif len(stack) > 1:
                index = stack.pop()
                c = calls[index]
                calls[index] = shares.Call(c.role, c.start, t, c.parent, c.category)
        return times[-1], shares.categorise(calls, sources), len(log) // 2


def hooked_forward(model: nn.Module, step: StepLike, clock: Any,
                   proj_category: dict[str, str]) -> tuple[float, dict[str, float]]:
    """One ``step()`` under the method's clocks, installed for it alone: (wall ms,
    category ms). ``proj_category`` from ``module_categories``."""
    recorder = _Recorder(model, clock, proj_category)
    try:
        ms, categories, _ = recorder.iteration(step)
    finally:
        recorder.remove()
    return ms, categories


def device_clock(step: StepLike) -> Any:
    """The method's clock for ``step``'s device: CUDA events on a GPU, else the host clock."""
    on_cuda = getattr(getattr(step, "device", None), "type", None) == "cuda"
    return _EventClock() if on_cuda else _HostClock()


@contextmanager
def clocked(model: nn.Module, clock: Any, proj_category: dict[str, str]) -> Iterator[Callable[[], None]]:
    """The method's clock hooks installed on ``model`` (``proj_category`` from
    ``module_categories``), for running forwards under them; yields a callable that readies
    them for the next forward (its clock readings cleared, the event pool reused)."""
    recorder = _Recorder(model, clock, proj_category)

    def ready() -> None:
        recorder.log.clear()
        clock.begin()

    try:
        yield ready
    finally:
        recorder.remove()


def _bare(step: StepLike, clock: Any) -> float:
    clock.begin()
    start = clock.mark()
    step()
    end = clock.finish(step)
    return clock.resolve([start, end])[1]


def hooks_method(model: nn.Module, step: StepLike, *, min_iterations: int = 6,
                 max_iterations: int = 40, budget_s: float = 2.0,
                 wall: Callable[[], float] = time.monotonic,
                 clock: Any | None = None) -> dict[str, Any]:
    """Attribute ``step`` by module-boundary clocks; returns the method's record section.

    Hooked and bare iterations alternate in ABBA order (hooked, bare, bare, hooked, ...)
    until ``budget_s`` (at least ``min_iterations`` hooked ones): the hooked ones give
    the per-iteration category times, the pairs give the hooks' own cost.
    """
    if clock is None:
        clock = device_clock(step)
    proj_category = module_categories(model, step)  # qkv or out: one recorded forward
    per_iteration: list[dict[str, float]] = []
    walls: list[float] = []
    bare: list[float] = []
    calls = 0
    sources: dict[str, float] = {}
    started = wall()
    while len(walls) < max_iterations and (len(walls) < min_iterations
                                           or wall() - started < budget_s):
        order = ("hooked", "bare") if len(walls) % 2 == 0 else ("bare", "hooked")
        for kind in order:
            if kind == "bare":
                bare.append(_bare(step, clock))
                step.reset()
                continue
            recorder = _Recorder(model, clock, proj_category)
            try:
                ms, cats, calls = recorder.iteration(step, sources)
            finally:
                recorder.remove()
            step.reset()
            walls.append(ms)
            per_iteration.append(cats)
    ratio, low, high = _paired_ratio(walls, bare)
    return shares.method_section(
        per_iteration, walls, clock=clock.method,
        basis="device" if clock.method == "cuda-events" else "cpu",
        calls_per_forward=calls,
        other_sources_ms={k: v / len(walls) for k, v in sorted(sources.items())},
        cost={"hooked_ms": _median(walls), "bare_ms": _median(bare), "ratio": ratio,
              "ratio_low": low, "ratio_high": high, "pairs": len(bare),
              "bare_iteration_ms": bare})


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else float("nan")


def _paired_ratio(a: Sequence[float], b: Sequence[float], reps: int = 1000,
                  seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b), rounds resampled in pairs (percentile bootstrap)."""
    n = min(len(a), len(b))
    point = _median(a) / _median(b)
    rng = random.Random(seed)
    draws = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        draws.append(_median([a[i] for i in idx]) / _median([b[i] for i in idx]))
    low, high = shares.percentiles(draws)
    return point, min(point, low), max(point, high)


def profiler_method(rows: Sequence[tuple[float, dict[str, float]]], basis: str) -> dict[str, Any]:
    """The profiler method's record section from ``profiler_iterations`` (per-iteration
    category times, shares with bootstrap intervals over the profiled iterations)."""
    return shares.method_section([cats for _, cats in rows], [ms for ms, _ in rows],
                                 clock="torch.profiler", basis=basis)


def attribute(profiled: dict[str, Any], model: nn.Module, step: StepLike, *,
              budget_s: float, hooks: bool = True) -> dict[str, Any]:
    """Both methods for a profiled combination (``profiling.profile_step``'s result):
    the hooks pass runs here, unprofiled; returns the record's ``attribution``.
    ``hooks=False`` (a compiled forward, whose modules no longer run as modules) keeps
    the profiler's method alone."""
    methods = {"profiler": profiler_method(profiled["per_iteration"],
                                           profiled["attribution"]["basis"])}
    if hooks:
        methods["hooks"] = hooks_method(model, step, budget_s=budget_s)
    out = attribution_section(profiled["attribution"], methods, step.device.type)
    if not hooks:
        out["headline_reason"] = shares.HEADLINE_REASON["profiler-only"]
    return out


def attribution_section(profiled: dict[str, Any], methods: dict[str, dict[str, Any]],
                        device_type: str) -> dict[str, Any]:
    """The record's ``attribution``: the profiler's section (basis, per layer, launches),
    both methods under ``methods``, and under ``categories`` / ``forward_ms`` the figures
    of the method the device's headline uses (``headline_method``, ``headline_reason``).
    Launch counts stay the profiler's: they are counts, not times."""
    out = dict(profiled)
    headline = shares.headline_method(device_type)
    if headline not in methods:
        headline = "profiler"
    out["methods"] = methods
    out["headline_method"] = headline
    out["headline_reason"] = shares.HEADLINE_REASON[headline]
    chosen = methods.get(headline)
    if chosen is None:
        return out
    prof_cats = profiled.get("categories") or {}
    categories = {}
    for c, entry in chosen["categories"].items():
        base = dict(prof_cats.get(c) or {})
        if headline != "profiler":
            on_device = chosen.get("basis") == "device"
            base.update(ms=entry["ms"], share=entry["share"],
                        cpu_ms=base.get("cpu_ms") if on_device else entry["ms"],
                        device_ms=entry["ms"] if on_device else None)
        base.update(share_low=entry["share_low"], share_high=entry["share_high"])
        base.setdefault("launches", None)
        categories[c] = base
    out["categories"] = categories
    out["forward_ms"] = chosen["forward_ms"]
    return out
