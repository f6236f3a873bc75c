"""The unprofiled timing pass (METHOD.md rules 1-4): warm up until iteration times
settle, then repeat adaptively until the median's 95% interval is tight enough, the
budget is spent, or the sample cap is reached; every sample is kept.

On a GPU each iteration is bracketed by a pair of CUDA events and read after a
synchronise; on a CPU a host clock is read around the call and its sync. The timers take
their clock/event factory as arguments so the stop rules and the event path can be tested
on a CPU with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from reportgen import stats
from reportgen.profile.step import StepLike

# iterations per window; warm when two windows' medians agree. The build's trial
# iteration comes before, so lazy initialisation is already out of the way; three is the
# smallest window whose median ignores one stray iteration.
WARMUP_WINDOW = 3
WARMUP_TOLERANCE = 0.05
WARMUP_MAX_ITERATIONS = 200
BUDGET_FLOOR = 3  # the budget never stops a run with fewer samples than min(min_samples, this)
# One round of several (``reportgen.execute.rounds``) gives the interval across rounds its
# median, not an interval of its own: it stops before a sample that would take it past
# its share of the budget, which is the most it gets, at two samples or more (a forward
# longer than a third of the round's budget spends it in two), and its own interval is
# checked from the fewest samples that can state 95% (the order-statistic interval of six).
ROUND_BUDGET_FLOOR = 2
ROUND_MIN_SAMPLES = stats.MIN_EXACT_N



class Timer(Protocol):
    method: str

    def time(self, step: StepLike) -> float:
        """Milliseconds of one ``step()``."""
        ...


class HostClockTimer:
    """A host clock around the call and its sync: honest for CPU work, and for device
    work only because the sync waits for it (rule 3)."""

    method = "host-clock"

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock

    def time(self, step: StepLike) -> float:
        step.sync()  # nothing queued from before may land in this sample
        start = self.clock()
        step()
        step.sync()
        return (self.clock() - start) / 1e6


class CudaEventTimer:
    """A CUDA event pair on the current stream around the call; the elapsed time is read
    only after a synchronise, so the host never reads a time the device hasn't reached."""

    method = "cuda-events"

    def __init__(self, event_factory: Callable[..., Any] | None = None,
                 synchronize: Callable[[], None] | None = None) -> None:
        if event_factory is None or synchronize is None:
            import torch

            event_factory = event_factory or torch.cuda.Event
            synchronize = synchronize or torch.cuda.synchronize
        self.event_factory = event_factory
        self.synchronize = synchronize

    def time(self, step: StepLike) -> float:
        start = self.event_factory(enable_timing=True)
        end = self.event_factory(enable_timing=True)
        start.record()
        step()
        end.record()
        self.synchronize()
        return float(start.elapsed_time(end))


def default_timer(step: StepLike) -> Timer:
    device = getattr(step, "device", None)
    if getattr(device, "type", str(device)) == "cuda":
        return CudaEventTimer()
    return HostClockTimer()


def _settled(samples: list[float]) -> bool:
    if len(samples) < 2 * WARMUP_WINDOW:
        return False
    last = stats.median(samples[-WARMUP_WINDOW:])
    previous = stats.median(samples[-2 * WARMUP_WINDOW:-WARMUP_WINDOW])
    if previous == 0:
        return last == 0
    return abs(last - previous) <= WARMUP_TOLERANCE * previous


def warm_up(step: StepLike, timer: Timer, *, max_warmup_s: float,
            wall: Callable[[], float] = time.monotonic, prior: Sequence[float] = ()) -> list[float]:
    """Iterate until the median of the last window is within 5% of the window before
    (compilation, allocator growth and lazy init settle), or the time/iteration cap.

    ``prior``: iterations of this step already run and timed (the build's trial
    iteration), counted as the first warm-up samples and against the time cap."""
    samples: list[float] = [float(x) for x in prior]
    start = wall() - sum(samples) / 1e3
    if samples and (_settled(samples) or wall() - start >= max_warmup_s):
        return samples
    while True:
        samples.append(timer.time(step))
        step.reset()
        if _settled(samples) or len(samples) >= WARMUP_MAX_ITERATIONS or wall() - start >= max_warmup_s:
            return samples


def time_step(step: StepLike, *, budget_s: float, target_rel_halfwidth: float | None = 0.02,
              min_samples: int = 10, max_samples: int = 10000, max_warmup_s: float | None = None,
              timer: Timer | None = None, wall: Callable[[], float] = time.monotonic,
              confidence: float = 0.95, prior_warmup: Sequence[float] = (),
              sampler: Any = None, budget_floor: int = BUDGET_FLOOR,
              within_budget: bool = False) -> dict[str, Any]:
    """Time ``step`` and return the record's ``timing`` section.

    Stops ``converged`` when the median's CI half-width <= target * median (checked from
    ``min_samples`` on, and only once the interval reaches its confidence), ``budget``
    when ``budget_s`` of timed iterations is spent (never before min(min_samples,
    ``budget_floor``) samples), or ``max_samples``; ``within_budget`` stops it before a
    sample that would end past ``budget_s`` (the samples' mean foretelling it) instead
    of after the first that does. A target of None never converges: one round of a
    combination measured in rounds spends its budget, because the interval quoted is
    built across the rounds (``reportgen.intervals``), not inside one (such a round takes
    ``ROUND_MIN_SAMPLES``, ``ROUND_BUDGET_FLOOR`` and ``within_budget``). Warm-up is
    separate, capped at ``max_warmup_s`` (default a quarter of the budget), starts from
    ``prior_warmup`` (iterations already run and timed, e.g. the build's trial) and is
    kept as ``warmup_samples``. ``sampler`` (``contention.PassSampler``), started and
    stopped around the timed samples, gives the pass's ``contention`` reading; the pass
    then converges no sooner than the sampler's ``min_window_s`` (the host's counters
    tick at 10 ms: a shorter pass could not tell a busy host from a quiet one).
    """
    if budget_s <= 0:
        raise ValueError("budget_s must be positive")
    if min_samples < 1 or max_samples < min_samples:
        raise ValueError("need 1 <= min_samples <= max_samples")
    if budget_floor < 1:
        raise ValueError("budget_floor must be at least 1")
    timer = timer or default_timer(step)
    warmup = warm_up(step, timer, max_warmup_s=budget_s / 4 if max_warmup_s is None else max_warmup_s,
                     wall=wall, prior=prior_warmup)

    samples: list[float] = []
    floor = min(min_samples, budget_floor)
    next_check = max(min_samples, stats.MIN_EXACT_N)
    window = float(getattr(sampler, "min_window_s", 0.0) or 0.0)
    if sampler is not None:
        sampler.start()
    start = wall()
    while True:
        samples.append(timer.time(step))
        step.reset()
        n = len(samples)
        if target_rel_halfwidth is not None and n >= next_check and (not window or wall() - start >= window):
            if stats.rel_halfwidth(samples, confidence) <= target_rel_halfwidth:
                stop = "converged"
                break
            # sorting every sample after every iteration would cost more than a fast step;
            # re-check after ~5% more samples
            next_check = n + max(1, n // 20)
        if n >= max_samples:
            stop = "max_samples"
            break
        if n >= floor:
            spent = wall() - start
            if spent >= budget_s or (within_budget and spent + spent / n > budget_s):
                stop = "budget"
                break

    reading = sampler.stop() if sampler is not None else None
    return {
        "method": timer.method,
        "unit": "ms",
        "samples": samples,
        "warmup_samples": warmup,
        **stats.summarize(samples, confidence),
        "stop_reason": stop,
        "target_rel_halfwidth": target_rel_halfwidth,
        "budget_s": budget_s,
        **({"contention": reading} if reading is not None else {}),
    }
