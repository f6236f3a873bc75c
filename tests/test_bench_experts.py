"""The bench's expert-reduction figure (``reportgen.bench.experts_check``): its pairing,
intervals and verdict on constructed units (a model whose experts run faster as built
with fewer of them, on a host whose speed wanders), the corrections it applies as
reportgen's whole-model figures do, its place in the bench and on the Validation page,
and one tiny real run."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from reportgen.bench import experts_check as E
from reportgen.bench import results as R
from reportgen.records import bench as B
from reportgen.render.validation import chart_specs, render_validation

MODEL = "granitemoe-1b-a400m"
PLAN = E.Plan(models=(E.ExpertModel(MODEL, 4, (8,), "a constructed model"),), modes=("prefill",))
LAYERS, FULL_LAYERS, FULL_EXPERTS, TOKENS = 4, 24, 32, 128
# each layer's milliseconds with every expert, by category; the head's once per forward
LAYER = {"attention.core": 2.0, "moe.router": 0.2, "moe.experts": 6.0}
HEAD = 5.0
# the host's speed in each round: it wanders by tens of percent between rounds
SPEEDS = (1.0, 1.3, 0.8, 1.15, 0.9, 1.25)


def hooks(layer: dict[str, float]) -> dict[str, Any]:
    """A hooks pass over the build's 4 layers with ``layer``'s times in each, and the head."""
    categories = {c: LAYERS * ms for c, ms in layer.items()}
    categories["head"] = HEAD
    forward = sum(categories.values())
    return {"forward_ms": forward,
            "categories": {c: {"ms": ms, "share": ms / forward} for c, ms in categories.items()},
            "per_layer": [{"layer": f"l.{i}", "categories": dict(layer)} for i in range(LAYERS)]}


def section(experts: int | None = None, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """A build's depth section: 4 of 24 layers of one kind, and with ``experts`` of 32."""
    out: dict[str, Any] = {"layers": LAYERS, "full_layers": FULL_LAYERS, "measured": {"a": LAYERS},
                           "full": {"a": FULL_LAYERS},
                           "measured_layers": [{"index": i, "kind": "a", "layer": f"l.{i}"} for i in range(LAYERS)]}
    if experts is not None:
        out["experts"] = {"measured": experts, "full": FULL_EXPERTS, "top_k": 8,
                          **({"cost": cost} if cost is not None else {})}
    return out


def experts_cost(factor: float, spread: float = 0.02) -> dict[str, Any]:
    ratios = [factor * (1 + spread * k) for k in (-1, -0.5, 0, 0.5, 1)]
    return {"tokens": TOKENS, "layers": LAYERS, "experts": {
        "factor": factor, "factor_low": min(ratios), "factor_high": max(ratios), "ratios": ratios,
        "tokens_per_expert": {"whole": 32.0, "build": 128.0}}}


def units(*, rounds: int = 6, speedup: float = 1.25, measured: float | None = None, cycles: int = 5,
          jitter: float = 0.002, share_off: float = 0.0, contended: tuple[int, ...] = (), mode: str = "prefill",
          seed: int = 1) -> list[dict[str, Any]]:
    """One (model, mode)'s units: with 8 of 32 experts the experts run ``speedup`` times faster
    per token as built, and the build measures a correction of ``measured`` (default: the
    truth, ``speedup``); its router scores a quarter of the experts (a quarter of the time,
    which reportgen scales by 4 where no router correction was measured). Every forward is
    its quiet time times its round's speed (1 +- ``jitter``). ``share_off``: that much of
    the reduced build's attention read as its experts' in its hooks pass."""
    rng = random.Random(seed)
    reduced = {"attention.core": LAYER["attention.core"], "moe.router": LAYER["moe.router"] / 4,
               "moe.experts": LAYER["moe.experts"] / speedup}
    whole_ms = HEAD + LAYERS * sum(LAYER.values())
    reduced_ms = HEAD + LAYERS * sum(reduced.values())
    seen = dict(reduced)
    moved = share_off * reduced_ms / LAYERS
    seen["attention.core"] -= moved
    seen["moe.experts"] += moved
    out = []
    for r in range(rounds):
        speed = SPEEDS[r % len(SPEEDS)]
        table = [{"whole": speed * whole_ms * (1 + rng.uniform(-jitter, jitter)),
                  "8": speed * reduced_ms * (1 + rng.uniform(-jitter, jitter))} for _ in range(cycles)]
        builds = {"whole": {"layers": LAYERS, "experts": None, "full_layers": FULL_LAYERS, "depth": section(),
                            "hooks": hooks(LAYER)},
                  "8": {"layers": LAYERS, "experts": 8, "full_layers": FULL_LAYERS,
                        "depth": section(8, experts_cost(speedup if measured is None else measured)),
                        "hooks": hooks(seen)}}
        out.append({"model": MODEL, "mode": mode, "round": r, "builds": builds, "cycles": table,
                    "contended": r in contended, "contention": "another process used 60% of the CPU"})
    return out


def test_a_correct_correction_agrees_though_the_host_speed_wanders_by_a_third() -> None:
    fig = E.summarise(units(), PLAN)
    assert fig["status"] == "pass", fig["notes"]
    (row,) = fig["rows"]
    assert (row["experts"], row["full_experts"], row["top_k"], row["rounds"], row["cycles"]) == (8, 32, 8, 6, 30)
    assert row["ratio"] == pytest.approx(1.0, abs=0.002)
    # paired by cycle, the drift cancels: the interval is the forwards' jitter alone
    assert row["ratio_high"] - row["ratio_low"] < 0.01
    assert row["full_high_ms"] / row["full_low_ms"] > 1.2  # each side alone spans the rounds' speeds
    assert row["experts_factor"] == pytest.approx(1.25)
    assert all(abs(d) < 1e-9 for d in row["share_diffs"].values()) and row["shares_ok"]
    assert fig["value"] == pytest.approx(1.0, abs=0.002)
    assert fig["goal_spec"] == {"kind": "ratio_within", "target": 0.05}
    # the experts as built read 20% low per token; the correction brings them back
    assert row["experts_ms_per_token"] / row["full_experts_ms_per_token"] == pytest.approx(0.8)
    assert any("moe.experts took 150 µs per token as built, 188 µs scaled by the build's correction (1.25), "
               "against 188 µs with all 32 (-20.0% as built)" in n for n in fig["notes"])


def test_without_the_correction_the_reduced_model_reads_fast_and_fails() -> None:
    fig = E.summarise(units(measured=1.0), PLAN)
    (row,) = fig["rows"]
    assert fig["status"] == "fail" and not row["latency_ok"] and not row["shares_ok"]
    # 24 layers x 6 ms of experts, read 20% low, of 24 x 8.2 + 5 ms
    expected = (5 + 24 * (2 + 0.2 + 6 / 1.25)) / (5 + 24 * 8.2)
    assert row["ratio"] == pytest.approx(expected, abs=0.003)
    assert row["shares"]["moe.experts"]["diff"] < -0.04
    assert any(n.startswith(f"{MODEL} with 8 of 32 experts, prefill: latency {expected - 1:+.1%}")
               for n in fig["notes"])


def test_a_correction_measured_too_high_fails_past_five_percent() -> None:
    # measured 1.5 where the truth is 1.25: the experts' time overstated by a fifth
    (row,) = E.summarise(units(measured=1.5), PLAN)["rows"]
    assert row["ratio"] > 1.05 and row["verdict"] == "fail"
    (close,) = E.summarise(units(measured=1.28), PLAN)["rows"]
    assert 1.0 < close["ratio"] < 1.05 and close["latency_ok"]


def test_an_interval_that_reaches_past_the_bound_fails() -> None:
    # 3% off at the point, but each cycle's forwards so noisy that the interval reaches past 5%
    noisy = E.summarise(units(measured=1.32, jitter=0.25, cycles=3, rounds=3), PLAN)["rows"][0]
    assert abs(noisy["ratio"] - 1.0) < 0.05 and max(abs(noisy["ratio_low"] - 1), abs(noisy["ratio_high"] - 1)) > 0.05
    assert noisy["verdict"] == "fail" and not noisy["latency_ok"]
    assert E.summarise(units(measured=1.32), PLAN)["rows"][0]["verdict"] == "pass"


def test_a_share_off_by_more_than_two_points_fails() -> None:
    (row,) = E.summarise(units(share_off=0.03), PLAN)["rows"]
    assert row["latency_ok"] and not row["shares_ok"] and row["verdict"] == "fail"
    assert row["worst_share_category"] in ("moe.experts", "attention.core")
    assert row["shares"]["moe.experts"]["diff"] > 0.02
    (close,) = E.summarise(units(share_off=0.01), PLAN)["rows"]
    assert close["shares_ok"] and close["verdict"] == "pass"


def test_the_router_is_corrected_as_reportgen_corrects_a_reduced_model() -> None:
    # no router correction measured: its time (a quarter, scoring 8 of 32) scaled by 4;
    # measured: each routed layer's router took 0.15 ms more widened, added per layer
    found = units()
    (row,) = E.summarise(found, PLAN)["rows"]
    assert row["ratio"] == pytest.approx(1.0, abs=0.002) and row["router_delta_ms"] is None
    for u in found:
        u["builds"]["8"]["depth"]["experts"]["cost"]["router"] = {
            "delta_ms": 0.15, "delta_low_ms": 0.15, "delta_high_ms": 0.15, "deltas_ms": [0.15, 0.15]}
    (row,) = E.summarise(found, PLAN)["rows"]
    assert row["router_delta_ms"] == pytest.approx(0.15)
    assert row["ratio"] == pytest.approx(1.0, abs=0.002)
    for u in found:
        u["builds"]["8"]["depth"]["experts"]["cost"]["router"]["delta_ms"] = 1.0
    (row,) = E.summarise(found, PLAN)["rows"]
    assert row["ratio"] == pytest.approx(1 + 24 * 0.85 / (5 + 24 * 8.2), abs=0.003)


def test_a_contended_round_is_left_out_where_enough_remain() -> None:
    found = units(contended=(2,))
    for row in found[2]["cycles"]:
        row["8"] *= 1.5  # the reduced build's forwards fell into a busy moment
    fig = E.summarise(found, PLAN)
    (row,) = fig["rows"]
    assert row["rounds"] == 5 and row["verdict"] == "pass" and row["unstable"] is None
    assert f"{MODEL} prefill: rounds 3 left out (contended)" in fig["notes"]
    every = E.summarise(units(rounds=3, contended=(0, 1)), PLAN)
    assert every["rows"][0]["rounds"] == 3 and "2 of 3 rounds contended" in every["rows"][0]["unstable"]


def test_fewer_rounds_than_three_cannot_pass() -> None:
    (row,) = E.summarise(units(rounds=2), PLAN)["rows"]
    assert row["latency_ok"] and row["shares_ok"] and row["verdict"] == "fail"
    assert "2 paired rounds, fewer than 3" in E._row_line(row)


def test_a_count_or_mode_not_measured_fails_the_figure_and_says_why() -> None:
    plan = E.Plan(models=(E.ExpertModel(MODEL, 4, (8, 16), "a constructed model"),), modes=("prefill", "decode"))
    fig = E.summarise(units(), plan)
    assert fig["status"] == "fail"
    assert f"{MODEL} with 16 experts, prefill: not measured beside the model with every expert" in fig["notes"]
    assert f"{MODEL} with 8 experts, decode: not measured beside the model with every expert" in fig["notes"]
    # a round whose build was not timed is left out, and said
    found = units()
    del found[1]["builds"]["8"]
    fig = E.summarise(found, PLAN)
    assert fig["rows"][0]["rounds"] == 5
    assert any(n.startswith(f"{MODEL} prefill: rounds 2 left out") for n in fig["notes"])
    nothing = E.summarise([], PLAN)
    assert nothing["status"] == "not measured" and nothing["rows"] == []


def test_decode_units_are_their_own_rows() -> None:
    plan = E.Plan(models=PLAN.models, modes=("prefill", "decode"))
    fig = E.summarise([*units(), *units(mode="decode", speedup=1.0, seed=2)], plan)
    assert [(r["mode"], r["experts"]) for r in fig["rows"]] == [("prefill", 8), ("decode", 8)]
    assert fig["status"] == "pass", fig["notes"]
    # a decode step routes one token: its experts per token is the forward's
    assert fig["rows"][1]["experts_ms_per_token"] == pytest.approx(LAYERS * 6.0)


def test_each_round_builds_every_expert_and_each_count_at_the_same_depth() -> None:
    m = E.MODELS[1]
    kwargs = E.unit_kwargs(E.Plan(), m, "decode", 3)
    assert kwargs["builds"] == [["whole", 2, None], ["8", 2, 8], ["32", 2, 32]]
    assert (kwargs["model"], kwargs["mode"], kwargs["seq_len"], kwargs["scale"]) == (
        "qwen3-30b-a3b", "decode", 128, "reference")
    assert kwargs["seed"] == "experts:3:qwen3-30b-a3b:decode"
    assert {m.model for m in E.MODELS} == {"granitemoe-1b-a400m", "qwen3-30b-a3b"}
    assert E.Plan().rounds >= E.MIN_ROUNDS


def test_the_bench_runs_the_figure_and_the_page_shows_it() -> None:
    from reportgen.bench.orchestrate import FIGURE_GROUPS

    assert "experts" in FIGURE_GROUPS and E.NAME in B.FIGURES
    assert B.FIGURES.index(E.NAME) == B.FIGURES.index("depth_extrapolation") + 1
    fig = E.summarise(units(measured=1.0), PLAN)
    doc = R.results_document({E.NAME: fig}, environment={"hardware": "h"}, created="2026-01-01T00:00:00Z",
                             quick=False, duration_s=1.0, command="c")
    B.validate(doc)
    page = render_validation(doc)
    assert "Expert-reduced measurement" in page
    assert "| combination | mode | experts | full&#95;experts |" in page
    assert f"| {MODEL}--prefill--4l--8e | prefill | 8 | 32 |" in page
    assert "moe.experts took 150 µs per token as built" in page
    spec = chart_specs(doc)[E.NAME]
    assert [v["ratio"] for v in spec["data"]["values"]] == pytest.approx([fig["rows"][0]["ratio"]])
    assert math.isfinite(fig["rows"][0]["ratio_low"])


@pytest.mark.slow
def test_the_tiny_granite_measured_with_every_expert_and_with_half(tmp_path: Path) -> None:
    """Through the paired rounds: each round a fresh process builds the tiny granitemoe with
    its 4 experts and with 2, times them in cycles, clocks them and measures the reduced
    build's correction; the rows read what the units hold."""
    fig = E.run(E.QUICK, tmp_path / "experts", log=lambda _: None)
    (row,) = fig["rows"]
    assert (row["experts"], row["full_experts"], row["top_k"]) == (2, 4, 2), fig["notes"]
    assert row["rounds"] == 3 and row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    assert row["experts_factor"] > 0 and row["router_delta_ms"] is not None
    assert abs(sum(s["reduced"] for s in row["shares"].values()) - 1.0) < 1e-6
    assert abs(sum(s["full"] for s in row["shares"].values()) - 1.0) < 1e-6
    assert row["experts_ms_per_token"] > 0 and row["full_experts_ms_per_token"] > 0
    assert fig["status"] in ("pass", "fail")
    units = sorted((tmp_path / "experts" / "units").glob("*.json"))
    assert [p.name for p in units] == [f"granitemoe-1b-a400m_prefill--r{r}.json" for r in range(3)]
    # the correction's pairs took a slot of each cycle: one pair a cycle, the rows the builds' alone
    unit = json.loads(units[0].read_text())
    cost = unit["builds"]["2"]["depth"]["experts"]["cost"]
    assert len(cost["experts"]["ratios"]) == len(cost["router"]["deltas_ms"]) == len(unit["cycles"]) >= 3
    assert "one pair in each cycle" in cost["method"]
    assert all(set(row) == {"whole", "2"} for row in unit["cycles"])


@pytest.mark.slow
def test_a_round_keeps_the_widened_copies_through_the_hooks_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit lets the corrections' widened copies go only after the builds' hooks passes:
    gigabytes freed just before them put a one-off stall into one hooked forward, which the
    pass's mean carries into that build's layers. In the process of the call (no fork)."""
    import weakref

    from reportgen.bench import depth_rounds
    from reportgen.profile import measure, regions

    made: list[weakref.ref[Any]] = []
    alive_in_hooks: list[bool] = []
    correction, hooked = measure.expert_correction, regions.HooksPass.hooked

    def tracked(*args: Any, **kwargs: Any) -> Any:
        found = correction(*args, **kwargs)
        if found is not None:
            made.append(weakref.ref(found))
        return found

    def clocked(self: Any) -> float:
        alive_in_hooks.append(bool(made) and all(ref() is not None for ref in made))
        return hooked(self)

    monkeypatch.setattr(measure, "expert_correction", tracked)
    monkeypatch.setattr(regions.HooksPass, "hooked", clocked)
    unit = depth_rounds.builds_unit(**E.unit_kwargs(E.QUICK, E.QUICK.models[0], "prefill", 0))
    assert "cost" in unit["builds"]["2"]["depth"]["experts"]
    assert len(made) == 1 and alive_in_hooks and all(alive_in_hooks)
    assert made[0]() is None  # let go once the unit is done


def test_a_row_missing_by_its_correction_says_so_from_its_rounds() -> None:
    """Half the rounds' corrections read 12% over the truth (the widened copy ran slow in
    their processes): the row fails, and its cause is said from the rounds themselves, the
    corrections against the factor the same rounds' hooks passes read."""
    made = units(rounds=6)
    for unit in made[1::2]:
        unit["builds"]["8"]["depth"]["experts"]["cost"] = experts_cost(1.25 * 1.12)
    fig = E.summarise(made, PLAN)
    (row,) = fig["rows"]
    assert row["verdict"] == "fail"
    assert row["round_factors"] == pytest.approx([1.25, 1.4] * 3)
    assert row["round_hooks_factors"] == pytest.approx([1.25] * 6)
    (why,) = [n for n in fig["notes"] if n.startswith("Why ")]
    assert "its correction read 1.250 to 1.400" in why and "at 1.250 to 1.250 (centre 1.250)" in why
    assert "follow their corrections (correlation 1.00)" in why
    # a passing figure says no cause
    assert not [n for n in E.summarise(units(rounds=6), PLAN)["notes"] if n.startswith("Why ")]


def test_the_plan_a_figure_stored_is_read_back() -> None:
    assert E.plan_of(E.plan_dict(E.QUICK), E.Plan()) == E.QUICK
    assert E.plan_of(None, E.QUICK) == E.QUICK
