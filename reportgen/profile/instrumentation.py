"""The instrumentation study: what each way of looking inside a forward costs, and what it
gives, measured on the combination's own model and step.

Each variant is an instrument that is switched on around forwards (a ``torch.profiler``
session with some options, module hooks, NVTX ranges). For each, instrumented and bare
blocks of forwards alternate in one process in ABBA order (``reportgen.paired.interleave``,
as the bench's instrumentation figure does); a block's sample is the median of its
forwards, timed like the unprofiled pass (``timing.default_timer``: CUDA events on a GPU,
a synchronised host clock on a CPU). The overhead is median(instrumented) / median(bare)
over the blocks with a paired percentile bootstrap interval (``stats.bootstrap_ratio``).
Starting and stopping the instrument (a profiler's setup and its trace processing at
exit) happens outside the timed forwards and is reported apart as ``session_ms``.

The study's budget is split evenly over the variants that can run here; each runs at
least ``MIN_PAIRS`` ABBA pairs whatever the budget, and more while its share lasts. A
variant that cannot run on this device or this forward is recorded ``not applicable``
with the reason; one that raises is recorded ``failed`` and the next still runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from torch import nn

from reportgen.paired import interleave
from reportgen.profile.step import StepLike
from reportgen.profile.structure import Structure, install_hooks, nvtx_ranges
from reportgen.profile.timing import Timer, default_timer
from reportgen.records.status import FAILED, NOT_APPLICABLE, OK
from reportgen.stats import bootstrap_ratio, median

__all__ = ["CONFIDENCE", "MIN_PAIRS", "VARIANTS", "Variant", "compare", "study"]

CONFIDENCE = 0.95
MIN_PAIRS = 6  # even: every variant gets whole ABBA cycles
MAX_PAIRS = 40
# forwards per block: sized so PLANNED_PAIRS pairs fit a variant's share of the budget
PLANNED_PAIRS = 8
MIN_FORWARDS = 2
MAX_FORWARDS = 20
ASSUMED_OVERHEAD = 1.25  # the instrumented side's expected cost, for sizing blocks only
PROBE_FORWARDS = 3

NOT_CUDA = "needs a CUDA device; this forward runs on the {device}"
COMPILED = "module hooks cannot fire inside a torch.compile graph"

Ready = Callable[[], None] | None  # readies the instrument for the next forward


@dataclass
class Context:
    """What a variant opens its instrument on."""

    model: nn.Module
    step: StepLike
    structure: Structure  # the model's, derived once for the combination
    cuda: bool
    compiled: bool


@dataclass(frozen=True)
class Variant:
    """One way of looking inside a forward. ``gives``: what it records (machine-readable:
    ``op_times``, ``shapes``, ``memory``, ``stacks``, ``flops``, ``module_ranges``,
    ``category_times``); ``device_kernels`` is added where the variant records device
    activity on a GPU."""

    name: str
    open: Callable[[Context], AbstractContextManager[Ready]]
    gives: tuple[str, ...]
    cuda_only: bool = False
    module_hooks: bool = False
    device_activity: bool = False

    def not_applicable(self, ctx: Context) -> str | None:
        if self.cuda_only and not ctx.cuda:
            return NOT_CUDA.format(device=ctx.step.device.type)
        if self.module_hooks and ctx.compiled:
            return COMPILED
        return None

    def gives_here(self, ctx: Context) -> list[str]:
        extra = ["device_kernels"] if self.device_activity and ctx.cuda else []
        gives = list(self.gives) + extra
        if ctx.compiled and self.name == "profiler-reportgen":
            gives.remove("module_ranges")  # read from its kernels alone (profiling.py)
        return gives


def _profiler(*, device: bool, **options: bool) -> Callable[[Context], AbstractContextManager[Ready]]:
    @contextlib.contextmanager
    def open_(ctx: Context) -> Iterator[Ready]:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if device and ctx.cuda:
            activities.append(ProfilerActivity.CUDA)
        settings: dict[str, Any] = dict(options)  # each a profile() switch
        with profile(activities=activities, **settings):
            yield None
    return open_


@contextlib.contextmanager
def _reportgen_profiled(ctx: Context) -> Iterator[Ready]:
    """What the profiled pass runs (``profiling._record``): the module hooks' ranges under
    a profiler that records shapes, memory and FLOPs."""
    hooks = install_hooks(ctx.model, ctx.structure.labels) if not ctx.compiled else contextlib.nullcontext()
    with hooks, _profiler(device=True, record_shapes=True, profile_memory=True, with_flops=True)(ctx):
        yield None


@contextlib.contextmanager
def _hook_ranges(ctx: Context) -> Iterator[Ready]:
    with install_hooks(ctx.model, ctx.structure.labels):
        yield None


@contextlib.contextmanager
def _hook_clocks(ctx: Context) -> Iterator[Ready]:
    from reportgen.profile import regions

    with regions.clocked(ctx.model, regions.device_clock(ctx.step), ctx.structure) as ready:
        yield ready


@contextlib.contextmanager
def _nvtx(ctx: Context) -> Iterator[Ready]:
    """NVTX ranges named like the profiler's at the same module boundaries."""
    with nvtx_ranges(ctx.model, ctx.structure.labels):
        yield None


VARIANTS: tuple[Variant, ...] = (
    Variant("profiler-cpu", _profiler(device=False), ("op_times",)),
    Variant("profiler-device", _profiler(device=True), ("op_times",), cuda_only=True,
            device_activity=True),
    Variant("profiler-shapes", _profiler(device=True, record_shapes=True), ("op_times", "shapes"),
            device_activity=True),
    Variant("profiler-memory", _profiler(device=True, profile_memory=True), ("op_times", "memory"),
            device_activity=True),
    Variant("profiler-stack", _profiler(device=True, with_stack=True), ("op_times", "stacks"),
            device_activity=True),
    Variant("profiler-flops", _profiler(device=True, with_flops=True), ("op_times", "flops"),
            device_activity=True),
    Variant("profiler-reportgen", _reportgen_profiled,
            ("op_times", "shapes", "memory", "flops", "module_ranges", "category_times"),
            device_activity=True),
    # installed with no profiler recording, reportgen's hooks open no range: what they
    # cost is the price of leaving them in place, and they give nothing by themselves
    Variant("hooks-ranges", _hook_ranges, (), module_hooks=True),
    Variant("hooks-clocks", _hook_clocks, ("module_ranges", "category_times"), module_hooks=True),
    Variant("nvtx", _nvtx, ("module_ranges",), cuda_only=True, module_hooks=True),
)


def _block(step: StepLike, timer: Timer, forwards: int, ready: Ready = None) -> list[float]:
    out = []
    for _ in range(forwards):
        if ready is not None:
            ready()
        out.append(timer.time(step))
        step.reset()
    return out


def forwards_per_block(budget_s: float, bare_ms: float) -> int:
    """Forwards per block so that ``PLANNED_PAIRS`` pairs fit ``budget_s``."""
    pair_ms = 2.0 * ASSUMED_OVERHEAD * max(bare_ms, 1e-3)
    fit = int(budget_s * 1e3 / (PLANNED_PAIRS * pair_ms))
    return max(MIN_FORWARDS, min(MAX_FORWARDS, fit))


def compare(variant: Variant, ctx: Context, timer: Timer, *, forwards: int, budget_s: float,
            wall: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """One variant against bare forwards: ABBA pairs of blocks, at least ``MIN_PAIRS``,
    more while ``budget_s`` lasts (at most ``MAX_PAIRS``)."""
    sessions: list[float] = []

    def bare() -> float:
        return median(_block(ctx.step, timer, forwards))

    def instrumented() -> float:
        t0 = time.perf_counter()
        with variant.open(ctx) as ready:
            t1 = time.perf_counter()
            times = _block(ctx.step, timer, forwards, ready)
            t2 = time.perf_counter()
        sessions.append((t1 - t0 + time.perf_counter() - t2) * 1e3)
        return median(times)

    started = wall()
    instrumented()  # the first session pays lazy initialisation (CUPTI, hook tables): dropped
    sessions.clear()
    values: dict[str, list[float]] = {"instrumented": [], "bare": []}
    while len(values["bare"]) < MIN_PAIRS or (wall() - started < budget_s
                                              and len(values["bare"]) < MAX_PAIRS):
        for name, got in interleave({"instrumented": instrumented, "bare": bare}, 2).items():
            values[name] += got
    ratio, low, high = bootstrap_ratio(values["instrumented"], values["bare"], paired=True,
                                       confidence=CONFIDENCE)
    return {
        "name": variant.name, "status": OK, "reason": None,
        # the percentile interval of a median ratio can miss its own point with few
        # pairs; widened to hold it
        "ratio": ratio, "ci_low": min(ratio, low), "ci_high": max(ratio, high),
        "confidence": CONFIDENCE, "n_pairs": len(values["bare"]),
        "bare_ms": median(values["bare"]), "instrumented_ms": median(values["instrumented"]),
        "session_ms": median(sessions), "gives": variant.gives_here(ctx),
        "forwards_per_block": forwards,
        "bare_block_ms": values["bare"], "instrumented_block_ms": values["instrumented"],
        "duration_s": wall() - started,
    }


def _row(variant: Variant, ctx: Context, status: str, reason: str) -> dict[str, Any]:
    return {"name": variant.name, "status": status, "reason": reason, "ratio": None,
            "ci_low": None, "ci_high": None, "confidence": CONFIDENCE, "n_pairs": 0,
            "bare_ms": None, "instrumented_ms": None, "session_ms": None,
            "gives": variant.gives_here(ctx)}


def study(built: Any, structure: Structure, combo: Any, *, run_dir: Any, combo_id: str, budget_s: float,
          variants: tuple[Variant, ...] = VARIANTS) -> dict[str, Any]:
    """The study's record (``studies.instrumentation``): every variant of ``variants``
    measured, not applicable or failed, on ``built``'s warm model and step (``structure``:
    the model's)."""
    started = time.perf_counter()
    step = built.step
    ctx = Context(model=built.model, step=step, structure=structure, cuda=step.device.type == "cuda",
                  compiled=getattr(step, "compiled", None) is not None)
    timer = default_timer(step)
    probe = median(_block(step, timer, PROBE_FORWARDS))
    plan = [(v, v.not_applicable(ctx)) for v in variants]
    runnable = sum(1 for _, why in plan if why is None)
    share = budget_s / max(1, runnable)
    forwards = forwards_per_block(share, probe)
    rows = []
    for variant, why in plan:
        if why is not None:
            rows.append(_row(variant, ctx, NOT_APPLICABLE, why))
            continue
        try:
            rows.append(compare(variant, ctx, timer, forwards=forwards, budget_s=share))
        except Exception as exc:  # noqa: BLE001 - one instrument failing leaves the others
            step.reset()
            message = (str(exc).strip().splitlines() or [""])[0]
            rows.append(_row(variant, ctx, FAILED, f"{type(exc).__name__}: {message}"))
    return {
        "status": OK, "device": step.device.type, "clock": timer.method,
        "method": "abba-blocks", "confidence": CONFIDENCE, "min_pairs": MIN_PAIRS,
        "budget_s": budget_s, "variant_budget_s": share, "forwards_per_block": forwards,
        "probe_bare_ms": probe, "duration_s": time.perf_counter() - started,
        "variants": rows,
    }
