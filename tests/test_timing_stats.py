"""stats (order-statistic CI, quantiles, significance, fits) and timing (stop rules,
warm-up, the CUDA-event path) with fake steps, clocks and events."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from reportgen import stats
from reportgen.profile.timing import (
    BUDGET_FLOOR,
    ROUND_BUDGET_FLOOR,
    ROUND_MIN_SAMPLES,
    CudaEventTimer,
    HostClockTimer,
    default_timer,
    time_step,
)

# --- stats -------------------------------------------------------------------------


def _exact_rank(n: int, confidence: float) -> int:
    """Reference: largest k with P(Bin(n, 1/2) <= k-1) <= alpha/2, in exact integers."""
    tail = (1 - confidence) / 2
    k, cdf = 0, 0
    for i in range(n + 1):
        cdf += math.comb(n, i)
        if cdf / 2**n <= tail:
            k = i + 1
        else:
            break
    return k


@pytest.mark.parametrize(("n", "k"), [(6, 1), (10, 2), (20, 6), (100, 40), (1000, 469)])
def test_rank_matches_known_binomial_values(n: int, k: int) -> None:
    assert stats.order_statistic_rank(n) == (k, True)


def test_rank_matches_exact_integer_binomial() -> None:
    for confidence in (0.9, 0.95, 0.99):
        for n in range(1, 301):
            k, exact = stats.order_statistic_rank(n, confidence)
            ref = _exact_rank(n, confidence)
            assert exact == (ref > 0), n
            assert k == max(ref, 1), (n, confidence)


def test_rank_is_the_tightest_with_coverage() -> None:
    for n in (6, 11, 37, 250):
        k, _ = stats.order_statistic_rank(n)
        assert stats.coverage(n, k) >= 0.95
        assert stats.coverage(n, k + 1) < 0.95


def test_small_n_falls_back_to_full_range() -> None:
    assert stats.order_statistic_rank(5) == (1, False)
    assert not stats.median_ci_exact(5)
    assert stats.median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)


def test_median_ci_picks_order_statistics() -> None:
    xs = [float(i) for i in range(1, 101)]
    rng = np.random.default_rng(0)
    shuffled = list(rng.permutation(xs))
    assert stats.median_ci(shuffled) == (50.5, 40.0, 61.0)
    assert stats.median_ci([float(i) for i in range(1, 11)]) == (5.5, 2.0, 9.0)


def test_quantile_matches_numpy_default() -> None:
    rng = np.random.default_rng(1)
    xs = list(rng.lognormal(size=57))
    for q in (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0):
        assert stats.quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


def test_summarize_fields() -> None:
    s = stats.summarize([4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0])
    assert s["n"] == 7 and s["median"] == 4.0 and s["mean"] == 4.0
    assert s["ci_method"] == "order-statistic" and s["confidence"] == 0.95
    assert (s["ci_low"], s["ci_high"]) == (1.0, 7.0)
    assert s["p5"] < s["p25"] < s["median"] < s["p75"] < s["p95"]


def test_empty_and_bad_inputs_raise() -> None:
    with pytest.raises(ValueError):
        stats.median_ci([])
    with pytest.raises(ValueError):
        stats.quantile([1.0], 1.5)
    with pytest.raises(ValueError):
        stats.order_statistic_rank(10, 1.0)


def test_significance_is_non_overlap() -> None:
    def differ(a: tuple[float, float], b: tuple[float, float]) -> bool:
        verdict = stats.difference(None, None, interval_a=a, interval_b=b)
        assert verdict.method == "interval-overlap" and verdict.p_value is None
        return verdict.significant

    assert differ((1.0, 2.0), (2.5, 3.0))
    assert differ((2.5, 3.0), (1.0, 2.0))
    assert not differ((1.0, 2.0), (2.0, 3.0))  # touching overlaps
    assert not differ((1.0, 3.0), (1.5, 2.0))


def test_loglog_fit_recovers_power_law() -> None:
    xs = [128.0, 256.0, 512.0, 1024.0]
    exponent, intercept = stats.loglog_fit(xs, [3.0 * x**2 for x in xs])
    assert exponent == pytest.approx(2.0)
    assert intercept == pytest.approx(math.log(3.0))
    with pytest.raises(ValueError):
        stats.loglog_fit([1.0, 1.0], [2.0, 3.0])
    with pytest.raises(ValueError):
        stats.loglog_fit([1.0, 2.0], [0.0, 3.0])


def test_a_fitted_lines_mean_band_is_narrowest_at_its_mean_and_zero_for_exact_points() -> None:
    xs, ys = [1.0, 2.0, 3.0, 4.0], [1.1, 1.9, 3.2, 3.8]
    fit = stats.linear_fit_stats(xs, ys)
    sd = math.sqrt(sum(r * r for r in fit["residuals"]) / (len(xs) - 2))
    assert stats.mean_band(fit, 2.5) == pytest.approx(stats.t95(2) * sd / math.sqrt(4))
    assert stats.mean_band(fit, 10.0) > stats.mean_band(fit, 4.0) > stats.mean_band(fit, 2.5)
    exact = stats.linear_fit_stats(xs, [2 * x + 1 for x in xs])
    assert stats.mean_band(exact, 7.0) == pytest.approx(0.0, abs=1e-9)


# --- timing with fakes ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def advance_ms(self, ms: float) -> None:
        self.ns += int(round(ms * 1e6))

    def now_ns(self) -> int:
        return self.ns

    def now_s(self) -> float:
        return self.ns / 1e9


class FakeStep:
    """Each call takes the next duration on the fake clock; reset and sync take time too,
    which must never show up in a sample."""

    def __init__(self, clock: FakeClock, durations: Any, device: str = "cpu") -> None:
        self.clock = clock
        self.durations = iter(durations)
        self.device = torch.device(device)
        self.calls = 0
        self.resets = 0
        self.log: list[str] = []

    def __call__(self) -> None:
        self.calls += 1
        self.log.append("call")
        self.clock.advance_ms(next(self.durations))

    def reset(self) -> None:
        self.resets += 1
        self.log.append("reset")
        self.clock.advance_ms(100.0)

    def sync(self) -> None:
        self.log.append("sync")


def _cycle(*values: float) -> Any:
    while True:
        yield from values


def _run(durations: Any, **kw: Any) -> tuple[dict[str, Any], FakeStep]:
    clock = FakeClock()
    step = FakeStep(clock, durations)
    kw.setdefault("budget_s", 10.0)
    result = time_step(step, timer=HostClockTimer(clock=clock.now_ns), wall=clock.now_s, **kw)
    return result, step


def test_constant_step_converges_at_min_samples() -> None:
    result, step = _run(_cycle(2.0), min_samples=12)
    assert result["stop_reason"] == "converged"
    assert result["n"] == 12 and result["samples"] == [2.0] * 12
    assert result["median"] == result["ci_low"] == result["ci_high"] == 2.0
    assert result["method"] == "host-clock" and result["unit"] == "ms"
    # warm-up: two windows of 3 that agree
    assert result["warmup_samples"] == [2.0] * 6
    assert step.resets == step.calls == 18


def test_reset_is_outside_the_timed_region() -> None:
    result, step = _run(_cycle(1.0, 1.0, 1.0))
    assert max(result["samples"] + result["warmup_samples"]) == 1.0  # resets cost 100 ms each
    calls = [i for i, e in enumerate(step.log) if e == "call"]
    assert all(step.log[i + 1] == "sync" for i in calls)


def test_noisy_step_stops_on_budget() -> None:
    # alternating 1 and 3 ms: the interval never gets within 2% of the median
    result, _ = _run(_cycle(1.0, 3.0), budget_s=0.5, max_warmup_s=0.01)
    assert result["stop_reason"] == "budget"
    assert result["budget_s"] == 0.5
    # each iteration costs its duration plus the 100 ms reset on the fake wall clock
    assert 4 <= result["n"] <= 6
    assert set(result["samples"]) == {1.0, 3.0}


def test_budget_never_stops_before_floor() -> None:
    result, _ = _run(_cycle(50.0, 150.0), budget_s=0.001, max_warmup_s=0.001)
    assert result["stop_reason"] == "budget"
    assert result["n"] == 3


def test_max_samples() -> None:
    result, _ = _run(_cycle(1.0, 3.0), budget_s=1e9, max_samples=40, max_warmup_s=0.01)
    assert result["stop_reason"] == "max_samples" and result["n"] == 40


def test_warmup_runs_until_settled() -> None:
    slow = [20.0, 15.0, 10.0, 8.0, 6.0, 4.0, 3.0, 2.0, 1.5, 1.2]
    result, _ = _run(iter(slow + [1.0] * 1000), max_warmup_s=100.0)
    assert result["warmup_samples"][: len(slow)] == slow
    assert result["warmup_samples"][-3:] == [1.0] * 3
    assert result["samples"] == [1.0] * result["n"]
    assert result["stop_reason"] == "converged"


def test_warmup_cap() -> None:
    # never settles (every window's median doubles); the cap (in fake seconds) ends it
    growing = (2.0**i for i in range(1000))
    result, _ = _run(growing, budget_s=0.001, max_warmup_s=0.35)
    assert len(result["warmup_samples"]) == 4  # each iteration: its duration + 100 ms reset


def test_no_target_spends_the_budget() -> None:
    # a constant step would converge at min_samples; with no target only the budget stops it
    result, _ = _run(_cycle(2.0), budget_s=0.5, target_rel_halfwidth=None, max_warmup_s=0.01)
    assert result["stop_reason"] == "budget"
    assert result["target_rel_halfwidth"] is None
    # each iteration costs 2 ms + the 100 ms reset on the fake wall clock: 0.5 s is 5 of them
    assert result["n"] == 5 > 3


def test_prior_warmup_samples_count_towards_settling() -> None:
    # the build's trial (one slow first call) plus five steady ones settle the warm-up:
    # five more iterations, not six
    result, step = _run(_cycle(2.0), min_samples=12, prior_warmup=[9.0])
    assert result["warmup_samples"] == [9.0] + [2.0] * 5
    assert step.calls == 5 + 12


def test_prior_warmup_counts_against_the_cap() -> None:
    # a trial longer than the cap ends the warm-up before any further iteration
    result, step = _run(_cycle(2.0), min_samples=12, prior_warmup=[500.0], max_warmup_s=0.25)
    assert result["warmup_samples"] == [500.0]
    assert step.calls == 12


def test_convergence_needs_tight_interval() -> None:
    # 1% jitter around 10 ms converges at 2%; the median's CI is inside the spread
    rng = np.random.default_rng(0)
    result, _ = _run(iter(list(10.0 + rng.uniform(-0.1, 0.1, size=5000))), target_rel_halfwidth=0.02)
    assert result["stop_reason"] == "converged"
    halfwidth = (result["ci_high"] - result["ci_low"]) / 2
    assert halfwidth <= 0.02 * result["median"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        _run(_cycle(1.0), budget_s=0)
    with pytest.raises(ValueError):
        _run(_cycle(1.0), min_samples=20, max_samples=10)


class FakeEvent:
    """A torch.cuda.Event stand-in: record() stamps the fake clock (as the device would
    when it reaches the event); elapsed_time() refuses to answer before a synchronise."""

    def __init__(self, world: SimpleNamespace, enable_timing: bool = False) -> None:
        assert enable_timing
        self.world = world
        self.stamp: int | None = None
        self.recorded_at_sync = -1

    def record(self) -> None:
        self.stamp = self.world.clock.now_ns()
        self.recorded_at_sync = self.world.syncs

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.stamp is not None and end.stamp is not None
        assert self.world.syncs > end.recorded_at_sync, "read before synchronize"
        return (end.stamp - self.stamp) / 1e6


def test_cuda_event_path_with_fake_events() -> None:
    clock = FakeClock()
    world = SimpleNamespace(clock=clock, syncs=0)

    def synchronize() -> None:
        world.syncs += 1

    step = FakeStep(clock, _cycle(0.5, 0.5, 0.75), device="cpu")
    timer = CudaEventTimer(event_factory=lambda **kw: FakeEvent(world, **kw), synchronize=synchronize)
    result = time_step(step, budget_s=0.3, max_warmup_s=0.05, timer=timer, wall=clock.now_s)
    assert result["method"] == "cuda-events"
    assert set(result["samples"]) <= {0.5, 0.75}
    assert world.syncs == len(result["samples"]) + len(result["warmup_samples"])
    # Each reset costs 100 ms of the fake clock: the 0.3 s budget is spent as soon as the
    # floor of samples is reached, before the first convergence check.
    assert result["stop_reason"] == "budget"
    assert result["n"] == BUDGET_FLOOR


def test_a_round_of_several_stops_within_its_budget_and_converges_from_six() -> None:
    # a sample of 600 ms (a 500 ms forward and the fake step's 100 ms reset) against a
    # round's 1.25 s: a lone pass takes three (the third ending past the budget, at
    # 1.8 s); a round of several stops at two, before a third would overrun it, and
    # never below its floor, however long the forward
    long = {"budget_s": 1.25, "prior_warmup": [500.0], "max_warmup_s": 0.1}
    alone, _ = _run(_cycle(500.0), **long)
    assert (alone["stop_reason"], alone["n"]) == ("budget", BUDGET_FLOOR)
    rounds = {"min_samples": ROUND_MIN_SAMPLES, "budget_floor": ROUND_BUDGET_FLOOR, "within_budget": True}
    round_, _ = _run(_cycle(500.0), **long, **rounds)
    assert (round_["stop_reason"], round_["n"]) == ("budget", 2) == ("budget", ROUND_BUDGET_FLOOR)
    # the floor alone does not stop it sooner: the third sample starts within the budget
    assert _run(_cycle(500.0), **long, **{**rounds, "within_budget": False})[0]["n"] == 3
    longer, _ = _run(_cycle(2000.0), **{**long, "prior_warmup": [2000.0]}, **rounds)
    assert longer["n"] == ROUND_BUDGET_FLOOR
    # samples of 200 ms: seven end past the budget, six within it
    short = {"budget_s": 1.25, "prior_warmup": [100.0] * 6, "target_rel_halfwidth": None}
    assert _run(_cycle(100.0), **short)[0]["n"] == 7
    assert _run(_cycle(100.0), **short, **rounds)[0]["n"] == 6
    # a stable short forward: the round's own interval is checked from six samples, the
    # fewest whose order-statistic interval states 95%, where a lone pass waits for ten
    steady = {"budget_s": 10.0, "target_rel_halfwidth": 0.05}
    lone, _ = _run(_cycle(100.0, 101.0, 99.0), **steady)
    assert (lone["stop_reason"], lone["n"]) == ("converged", 10)
    quick, _ = _run(_cycle(100.0, 101.0, 99.0), **steady, **rounds)
    assert (quick["stop_reason"], quick["n"]) == ("converged", 6) and quick["confidence"] >= 0.95
    with pytest.raises(ValueError, match="budget_floor"):
        _run(_cycle(1.0), budget_floor=0)


def test_default_timer_follows_device() -> None:
    assert isinstance(default_timer(SimpleNamespace(device=torch.device("cuda"))), CudaEventTimer)
    assert isinstance(default_timer(SimpleNamespace(device=torch.device("cpu"))), HostClockTimer)


def test_real_cpu_step() -> None:
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))

    class MatmulStep:
        device = torch.device("cpu")

        def __call__(self) -> torch.Tensor:
            return a @ a

        def reset(self) -> None:
            pass

        def sync(self) -> None:
            pass

    result = time_step(MatmulStep(), budget_s=0.2, max_warmup_s=0.05)
    assert result["method"] == "host-clock"
    assert result["n"] == len(result["samples"]) >= 3
    assert result["ci_low"] <= result["median"] <= result["ci_high"]
    assert all(s > 0 for s in result["samples"])
