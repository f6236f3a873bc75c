"""The bench's expert-reduction figure (``reportgen.bench.experts_check``): its rows and
verdict on constructed records (rounds paired in time, the router scaled, the shares'
differences), its suite, its place in the bench and on the Validation page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reportgen.bench import experts_check as E
from reportgen.bench import results as R
from reportgen.records import bench as B
from reportgen.render.validation import chart_specs, render_validation
from reportgen.stats import bootstrap_ratio
from reportgen.suite import load_suite

MODEL = "granitemoe-1b-a400m"
PLAN = E.Plan(models=(E.ExpertModel(MODEL, 4, (8,), "a constructed model"),), modes=("prefill",))
# the host's speed in each round: it wanders by tens of percent between rounds
DRIFT = (1.0, 1.3, 0.8, 1.15, 0.9, 1.25)
SHARES = {"attention.qkv": 0.10, "attention.core": 0.05, "moe.router": 0.01, "moe.experts": 0.70,
          "head": 0.14}


def record(ms: float, *, experts: int | None = None, full: int = 32, shares: dict[str, float] | None = None,
           drift: tuple[float, ...] = DRIFT, spread: float = 0.01, excluded: tuple[int, ...] = (),
           status: str = "ok") -> dict[str, Any]:
    """A combination record as the suite writes it, with what the figure reads: its samples by
    round (each round's at the host's speed of that round, ``spread`` apart), the headline
    (hooks) method's per-iteration category times, and for a reduced one its experts."""
    samples: list[float] = []
    excluded_samples: list[float] = []
    rounds = []
    for r, speed in enumerate(drift):
        these = [ms * speed * (1 + spread * k) for k in (-1, 0, 1)]
        (excluded_samples if r in excluded else samples).extend(these)
        rounds.append({"round": r, "n": 3, "median": these[1], **({"excluded": "contended"} if r in excluded else {})})
    shares = shares or SHARES
    iterations = [ms * f for f in (0.99, 1.0, 1.01)]
    categories = {c: {"share": s, "per_iteration_ms": [s * it for it in iterations]} for c, s in shares.items()}
    combination = {"model": MODEL, "mode": "prefill", "seq_len": 128, "batch_size": 1, "layers": 4,
                   **({"experts": experts} if experts else {})}
    rec: dict[str, Any] = {
        "id": f"{MODEL}--prefill--4l" + (f"--{experts}e" if experts else ""), "status": status,
        "reason": None if status == "ok" else "out of memory", "combination": combination,
        "timing": {"median": ms, "samples": samples, "rounds": rounds,
                   **({"excluded_samples": excluded_samples} if excluded else {})},
        "attribution": {"headline_method": "hooks",
                        "methods": {"hooks": {"iteration_ms": iterations, "categories": categories}}},
    }
    if experts:
        rec["depth"] = {"layers": 4, "full_layers": 24, "experts": {"measured": experts, "full": full, "top_k": 8}}
    return rec


def no_router(shares: dict[str, float]) -> dict[str, float]:
    """Shares with the router's time moved to the head: a reduced model whose router scaling
    changes nothing."""
    return {**shares, "moe.router": 0.0, "head": shares["head"] + shares["moe.router"]}


def test_a_reduced_model_as_fast_as_the_whole_passes_though_the_host_drifts() -> None:
    same = no_router(SHARES)
    fig = E.summarise([record(100.0, shares=same), record(100.0, experts=8, shares=same)], PLAN)
    assert fig["status"] == "pass", fig["notes"]
    (row,) = fig["rows"]
    assert row["ratio"] == pytest.approx(1.0) and row["rounds"] == 6
    # paired by round, the drift cancels; the same samples unpaired could not state 5%
    assert 0.97 < row["ratio_low"] <= 1.0 <= row["ratio_high"] < 1.03
    pooled = [r["timing"]["samples"] for r in (record(100.0), record(100.0, experts=8))]
    _, low, high = bootstrap_ratio(*pooled, paired=False)
    assert high - low > 0.1
    assert row["experts"] == 8 and row["full_experts"] == 32 and row["router_factor"] == pytest.approx(1.0)
    assert all(abs(d) < 1e-12 for d in row["share_diffs"].values())
    assert fig["value"] == pytest.approx(1.0) and fig["goal_spec"] == {"kind": "ratio_within", "target": 0.05}


def test_the_rounds_are_paired_by_index_and_a_left_out_round_is_not() -> None:
    full = record(100.0, excluded=(2,))
    assert sorted(E.round_samples(full)) == [0, 1, 3, 4, 5]
    assert E.round_samples(full)[3] == pytest.approx([100 * 1.15 * f for f in (0.99, 1.0, 1.01)])
    # the reduced model is 3% faster in every round but the one left out of the full record
    drift = tuple(d * (0.97 if r != 2 else 2.0) for r, d in enumerate(DRIFT))
    row = E.rows([full, record(100.0, experts=8, drift=drift, shares=no_router(SHARES))])[0]
    assert row["rounds"] == 5 and set(row["round_ratios"]) == {"0", "1", "3", "4", "5"}
    assert row["ratio"] == pytest.approx(0.97)
    assert row["verdict"] == "pass"


def test_a_slower_reduced_model_fails_and_says_what_the_experts_took_per_token() -> None:
    shares = no_router(SHARES)
    fig = E.summarise([record(100.0, shares=shares), record(92.0, experts=8, shares=shares)], PLAN)
    assert fig["status"] == "fail"
    (row,) = fig["rows"]
    assert row["ratio"] == pytest.approx(0.92) and not row["latency_ok"] and row["shares_ok"]
    assert row["experts_ms_per_token"] == pytest.approx(0.92 * 70.0 / 128)
    assert row["full_experts_ms_per_token"] == pytest.approx(70.0 / 128)
    assert any(n.startswith(f"{MODEL} with 8 of 32 experts, prefill: latency -8.0%") for n in fig["notes"])
    assert any("moe.experts took 503 µs per token as built, against 547 µs with all 32 (-8.0% as built)" in n
               for n in fig["notes"])


def test_an_interval_that_reaches_past_the_bound_fails() -> None:
    # 4% faster at the point, but each round's samples spread so wide that the interval
    # reaches past 5%: agreement not shown
    shares = no_router(SHARES)
    row = E.rows([record(100.0, shares=shares), record(96.0, experts=8, shares=shares, spread=0.2)])[0]
    assert abs(row["ratio"] - 0.96) < 0.01 and row["ratio_low"] < 0.95
    assert row["verdict"] == "fail" and not row["latency_ok"]
    assert E.rows([record(100.0, shares=shares), record(96.0, experts=8, shares=shares)])[0]["verdict"] == "pass"


def test_a_share_off_by_more_than_two_points_fails() -> None:
    full = no_router(SHARES)
    off = {**full, "moe.experts": full["moe.experts"] - 0.03, "attention.qkv": full["attention.qkv"] + 0.03}
    fig = E.summarise([record(100.0, shares=full), record(100.0, experts=8, shares=off)], PLAN)
    (row,) = fig["rows"]
    assert row["latency_ok"] and not row["shares_ok"] and fig["status"] == "fail"
    assert row["worst_share_category"] in ("moe.experts", "attention.qkv")
    assert row["share_diffs"]["moe.experts"] == pytest.approx(-0.03)
    assert row["shares"]["moe.experts"]["diff_low"] <= -0.03 <= row["shares"]["moe.experts"]["diff_high"]
    close = {**full, "moe.experts": full["moe.experts"] - 0.01, "attention.qkv": full["attention.qkv"] + 0.01}
    assert E.rows([record(100.0, shares=full), record(100.0, experts=8, shares=close)])[0]["shares_ok"]


def test_the_router_is_scaled_as_reportgen_scales_a_reduced_model() -> None:
    # built with 8 of 32 experts, the router scored a quarter of them: its time counts 4x,
    # in the latency and in the shares
    full = {**SHARES, "moe.router": 0.04, "head": SHARES["head"] - 0.03}
    row = E.rows([record(100.0, shares=full), record(97.0, experts=8, shares=SHARES)])[0]
    assert row["router_factor"] == pytest.approx(1 + 0.01 * 3)
    assert row["ratio"] == pytest.approx(0.97 * 1.03)
    assert row["shares"]["moe.router"]["reduced"] == pytest.approx(0.04 / 1.03)
    assert row["shares"]["moe.experts"]["reduced"] == pytest.approx(0.70 / 1.03)


def test_the_experts_are_scaled_by_the_builds_measured_correction_with_its_spread() -> None:
    # built with 8 of 32 experts, its experts read 70 ms of 100 as built; the build measured
    # that they take 1.2x that with every expert (pairs 1.1 to 1.3): the reduced latency is
    # 100 + 70 x 0.2 = 114, the experts' share 84 / 114, and the interval takes the pairs' spread
    shares = no_router(SHARES)
    reduced = record(100.0, experts=8, shares=shares)
    reduced["depth"]["experts"]["cost"] = {"tokens": 128, "layers": 4, "experts": {
        "factor": 1.2, "factor_low": 1.1, "factor_high": 1.3, "ratios": [1.1, 1.15, 1.2, 1.25, 1.3]}}
    full = {**shares, "moe.experts": 0.84 / 1.14}
    full = {c: (v if c == "moe.experts" else v / 1.14) for c, v in full.items()}
    row = E.rows([record(114.0, shares=full), reduced])[0]
    assert row["experts_factor"] == pytest.approx(1.2) and row["router_factor"] == pytest.approx(1.14)
    assert row["ratio"] == pytest.approx(1.0)
    assert row["shares"]["moe.experts"]["reduced"] == pytest.approx(0.84 / 1.14)
    plain = E.rows([record(114.0, shares=full), {**reduced, "depth": {**reduced["depth"], "experts": {
        k: v for k, v in reduced["depth"]["experts"].items() if k != "cost"}}}])[0]
    assert plain["ratio"] == pytest.approx(100 / 114) and plain["experts_factor"] is None
    assert row["ratio_high"] - row["ratio_low"] > (plain["ratio_high"] - plain["ratio_low"]) * 1.14 + 0.05


def test_a_measured_router_correction_is_added_per_routed_layer_not_scaled() -> None:
    # the router took 1 ms of 100 as built; widened to every expert it took 0.5 ms more in
    # each of the 4 routed layers measured: +2 ms, where scaling by 32 / 8 would have said +3
    shares = SHARES
    reduced = record(100.0, experts=8, shares=shares)
    reduced["depth"]["experts"]["cost"] = {"tokens": 1, "layers": 4, "router": {
        "delta_ms": 0.5, "delta_low_ms": 0.5, "delta_high_ms": 0.5, "deltas_ms": [0.5, 0.5, 0.5]}}
    row = E.rows([record(102.0, shares={c: (v + 0.02 if c == "moe.router" else v) / 1.02
                                        for c, v in shares.items()}), reduced])[0]
    assert row["router_factor"] == pytest.approx(1.02) and row["experts_factor"] is None
    assert row["ratio"] == pytest.approx(1.0)
    assert row["shares"]["moe.router"]["reduced"] == pytest.approx(0.03 / 1.02)
    assert row["verdict"] == "pass"


def test_a_count_not_measured_fails_the_figure_and_says_why() -> None:
    plan = E.Plan(models=(E.ExpertModel(MODEL, 4, (8, 16), "a constructed model"),), modes=("prefill",))
    shares = no_router(SHARES)
    fig = E.summarise([record(100.0, shares=shares), record(100.0, experts=8, shares=shares),
                       record(100.0, experts=16, shares=shares, status="failed")], plan)
    assert fig["status"] == "fail" and len(fig["rows"]) == 1
    assert f"{MODEL} with 16 experts, prefill: not measured beside the model with every expert" in fig["notes"]
    assert any(n.startswith("Failed: ") and "out of memory" in n for n in fig["notes"])
    # the model asked for with every expert but built with fewer (it did not fit): no reference
    squeezed = record(100.0, shares=shares)
    squeezed["depth"] = {"layers": 4, "full_layers": 24, "reason": "did not fit",
                         "experts": {"measured": 16, "full": 32, "top_k": 8}}
    fig = E.summarise([squeezed, record(100.0, experts=8, shares=shares)], plan)
    assert fig["rows"] == [] and fig["status"] == "not measured"
    assert f"{squeezed['id']}: built with 16 of 32 experts by the pre-flight (did not fit), so it is no " \
           "measurement with every expert" in fig["notes"]
    nothing = E.summarise([record(100.0, experts=8)], plan)
    assert nothing["status"] == "not measured" and nothing["rows"] == []


def test_the_suite_measures_each_model_with_every_expert_and_each_count(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(E.suite_text(E.Plan()))
    suite = load_suite(path)
    assert {(c.model, c.layers, c.experts) for c in suite.combinations()} == {
        (m.model, m.layers, n) for m in E.MODELS for n in (None, *m.counts)}
    assert {(c.mode, c.seq_len, c.batch_size, c.dtype, c.attn_implementation, c.scale)
            for c in suite.combinations()} == {(mode, 128, 1, "fp32", "sdpa", "reference")
                                               for mode in ("prefill", "decode")}
    # every combination takes the same rounds, so each reduced round has its partner
    assert suite.settings.rounds == suite.settings.min_rounds == E.Plan().rounds == 10
    assert {m.model for m in E.MODELS} == {"granitemoe-1b-a400m", "qwen3-30b-a3b"}


def test_the_bench_runs_the_figure_and_the_page_shows_it() -> None:
    from reportgen.bench.orchestrate import FIGURE_GROUPS

    assert "experts" in FIGURE_GROUPS and E.NAME in B.FIGURES
    assert B.FIGURES.index(E.NAME) == B.FIGURES.index("depth_extrapolation") + 1
    shares = no_router(SHARES)
    fig = E.summarise([record(100.0, shares=shares), record(92.0, experts=8, shares=shares)], PLAN)
    doc = R.results_document({E.NAME: fig}, environment={"hardware": "h"}, created="2026-01-01T00:00:00Z",
                             quick=False, duration_s=1.0, command="c")
    B.validate(doc)
    page = render_validation(doc)
    assert "Expert-reduced measurement" in page and "0.9200" in page
    assert "| combination | experts | full&#95;experts |" in page
    assert f"| {MODEL}--prefill--4l--8e | 8 | 32 |" in page
    assert "moe.experts took 503 µs per token as built" in page
    spec = chart_specs(doc)[E.NAME]
    assert [v["ratio"] for v in spec["data"]["values"]] == pytest.approx([0.92])


@pytest.mark.slow
def test_the_tiny_granite_measured_with_every_expert_and_with_half(tmp_path: Path) -> None:
    """Through the suite runner: the rows read the records' rounds and attributed iterations
    as the runner writes them."""
    plan = E.Plan(models=E.QUICK.models, modes=("prefill",), seq_len=16, scale="tiny", budget_s=0.4,
                  rounds=2, min_rounds=2)
    fig = E.run(plan, tmp_path / "experts", log=lambda _: None)
    (row,) = fig["rows"]
    assert (row["experts"], row["full_experts"], row["top_k"]) == (2, 4, 2), fig["notes"]
    assert row["rounds"] >= 2 and row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    assert row["router_factor"] > 1.0  # the router scored half the experts: its time counts twice
    assert abs(sum(s["reduced"] for s in row["shares"].values()) - 1.0) < 1e-6
    assert abs(sum(s["full"] for s in row["shares"].values()) - 1.0) < 1e-6
    assert row["experts_ms_per_token"] > 0 and row["full_experts_ms_per_token"] > 0
    assert fig["status"] in ("pass", "fail")
