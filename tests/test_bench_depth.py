"""The bench's depth figure (``reportgen.bench.depth_check``): its rows, fits and verdict
on synthetic records, its place in the bench and on the Validation page, and one tiny
real run through the suite runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reportgen import stats
from reportgen.bench import depth_check as D
from reportgen.bench import results as R
from reportgen.records import bench as B
from reportgen.render.validation import chart_specs, render_validation
from reportgen.suite import load_suite

PLAN = D.Plan(models=(D.DepthModel("dense", "m", "a synthetic model"),), counts=(2, 4, 8))


def record(model: str, layers: int | None, ms: float, *, full: int = 12,
           shares: dict[str, float] | None = None, whole: dict[str, Any] | None = None,
           status: str = "ok") -> dict[str, Any]:
    """A combination record as the suite writes it, with what the figure reads: the timing,
    the profiler method's shares, and for a depth-reduced one its ``depth`` section."""
    shares = shares or {"attention.core": 0.3, "mlp": 0.6, "head": 0.1}
    categories = {c: {"ms": s * ms, "share": s, "share_low": s - 0.005, "share_high": s + 0.005}
                  for c, s in shares.items()}
    rec: dict[str, Any] = {
        "id": f"{model}--prefill" + (f"--{layers}l" if layers else ""), "status": status,
        "reason": None if status == "ok" else "out of memory",
        "combination": {"model": model, "mode": "prefill", "seq_len": 128,
                        **({"layers": layers} if layers else {})},
        "timing": {"median": ms, "ci_low": ms * 0.98, "ci_high": ms * 1.02, "confidence": 0.95},
        "profile": {"overhead_ratio": 1.1},
        "attribution": {"categories": {}, "methods": {"profiler": {"categories": categories}}},
    }
    if layers:
        rec["depth"] = {"layers": layers, "full_layers": full, "whole": whole}
    return rec


def whole_figures(ms: float, shares: dict[str, float], spread: float = 0.1) -> dict[str, Any]:
    return {"median_ms": ms, "ci_low_ms": ms * (1 - spread), "ci_high_ms": ms * (1 + spread), "notes": [],
            "categories": {c: {"share": s, "share_low": s - 0.01, "share_high": s + 0.01}
                           for c, s in shares.items()}}


def linear_model(a: float = 10.0, b: float = 20.0, full: int = 12, *, off: float = 0.0,
                 whole_off: float = 0.0, share_off: float = 0.0) -> list[dict[str, Any]]:
    """A model whose latency is a + b x layers (its whole measurement ``off`` the line by
    that fraction), each reduced record extrapolating to the line's whole value times
    1 + ``whole_off``, with the attention share ``share_off`` above the measured one."""
    shares = {"attention.core": 0.3, "mlp": 0.6, "head": 0.1}
    full_ms = (a + b * full) * (1 + off)
    out = [record("m", None, full_ms, full=full, shares=shares)]
    for n in (2, 4, 8):
        extrapolated = {**shares, "attention.core": 0.3 + share_off, "mlp": 0.6 - share_off}
        out.append(record("m", n, a + b * n, full=full, shares=shares,
                          whole=whole_figures((a + b * full) * (1 + whole_off), extrapolated)))
    return out


def test_a_model_on_its_line_whose_extrapolation_agrees_passes() -> None:
    fig = D.summarise(linear_model(), PLAN)
    assert fig["status"] == "pass"
    assert [r["layers"] for r in fig["rows"]] == [2, 4, 8]
    assert all(r["verdict"] == "pass" and r["inside"] for r in fig["rows"])
    (line,) = fig["fits"]
    assert line["slope_ms"] == pytest.approx(20.0) and line["intercept_ms"] == pytest.approx(10.0)
    assert line["r2"] == pytest.approx(1.0) and line["on_line"]
    assert line["predicted_full_ms"] == pytest.approx(250.0)
    assert all(abs(r) < 1e-9 for r in line["residuals_ms"].values())
    assert fig["value"] == pytest.approx(0.0, abs=1e-12)
    assert fig["interval"] == pytest.approx([-0.1, 0.1])


@pytest.mark.parametrize(("change", "failing"), [
    ({"whole_off": 0.06}, "latency"),   # extrapolated 6% above the measured whole
    ({"whole_off": -0.06}, "latency"),
    ({"share_off": 0.025}, "shares"),   # 2.5 points of attention share too many
])
def test_a_row_off_by_more_than_its_tolerance_fails(change: dict[str, float], failing: str) -> None:
    fig = D.summarise(linear_model(**change), PLAN)
    assert fig["status"] == "fail"
    assert all(r["verdict"] == "fail" for r in fig["rows"])
    assert all(not r[f"{failing}_ok"] for r in fig["rows"])
    if failing == "shares":
        assert {r["worst_share_category"] for r in fig["rows"]} <= {"attention.core", "mlp"}
        assert fig["rows"][0]["worst_share_diff"] == pytest.approx(0.025)
    else:
        assert fig["value"] == pytest.approx(change["whole_off"])
    assert any("within both tolerances" in n and n.startswith("0 of 3") for n in fig["notes"])


def test_rows_measured_under_contention_say_so() -> None:
    records = linear_model()
    records[2]["timing"]["unstable"] = "another process used 84% of the CPU during 6 of 6 rounds"
    fig = D.summarise(records, PLAN)
    assert [r["unstable"] for r in fig["rows"]] == [None, records[2]["timing"]["unstable"], None]
    assert any(n.startswith("Measured under contention") and "1 of 4 combinations: m--prefill--4l." in n
               for n in fig["notes"])


def test_just_inside_the_tolerances_passes() -> None:
    fig = D.summarise(linear_model(whole_off=0.049, share_off=0.019), PLAN)
    assert fig["status"] == "pass"


def test_a_whole_measurement_off_the_line_fails_though_each_row_agrees() -> None:
    # the reduced records' extrapolation agrees with the whole measurement (both 8% above
    # the line): the rows pass, the line does not
    fig = D.summarise(linear_model(off=0.08, whole_off=0.08), PLAN)
    assert all(r["verdict"] == "pass" for r in fig["rows"])
    (line,) = fig["fits"]
    assert line["line_rel_diff"] == pytest.approx(0.08) and not line["on_line"]
    assert fig["status"] == "fail"
    assert any("off the line" in n for n in fig["notes"])


def test_fit_reports_residuals_and_goodness_of_a_bent_line() -> None:
    rows = [{"model": "m", "layers": n, "full_layers": 12, "reduced_ms": ms, "measured_ms": 250.0}
            for n, ms in ((2, 50.0), (4, 90.0), (8, 190.0))]
    line = D.fit(rows)
    assert line is not None
    direct = stats.linear_fit_stats([2.0, 4.0, 8.0], [50.0, 90.0, 190.0])
    assert line["slope_ms"] == pytest.approx(direct["slope"]) and line["r2"] < 1.0
    assert sum(line["residuals_ms"].values()) == pytest.approx(0.0, abs=1e-9)
    assert line["residuals_ms"]["4"] < 0 < line["residuals_ms"]["2"]
    assert D.fit(rows[:2]) is None  # two counts: a line always fits, so none is reported
    falling = [{**r, "reduced_ms": ms} for r, ms in zip(rows, (300.0, 100.0, 20.0))]
    line = D.fit(falling)
    assert line is not None and line["predicted_full_ms"] < 0
    assert line["line_rel_diff"] is None and not line["on_line"]
    fig = D.summarise([record("m", None, 250.0), *(record("m", r["layers"], r["reduced_ms"],
                                                          whole=whole_figures(250.0, {"mlp": 1.0}))
                                                   for r in falling)], PLAN)
    assert fig["status"] == "fail" and any("the line gives no positive latency at 12 layers" in n
                                           for n in fig["notes"])


def test_a_model_not_measured_fails_the_figure_and_says_why() -> None:
    plan = D.Plan(models=(*PLAN.models, D.DepthModel("moe", "e", "a synthetic mixture")))
    failed = [record("e", None, 900.0, status="failed")]
    fig = D.summarise([*linear_model(), *failed], plan)
    assert fig["status"] == "fail"
    assert any("e: not measured" in n for n in fig["notes"])
    assert any(n.startswith("Failed: e--prefill: failed: out of memory") for n in fig["notes"])
    nothing = D.summarise(failed, plan)
    assert nothing["status"] == "not measured" and nothing["value"] is None


def test_shares_compared_are_the_profiler_methods_and_a_missing_category_counts_as_none() -> None:
    whole = record("m", None, 100.0, shares={"attention.core": 0.3, "mlp": 0.7})
    whole["attribution"]["categories"] = {"attention.core": {"share": 0.9}}  # the headline: not read
    reduced = record("m", 2, 30.0, whole=whole_figures(100.0, {"attention.core": 0.28, "mlp": 0.69,
                                                               "other": 0.03}))
    found = D.share_comparison(whole, reduced)
    assert found["attention.core"]["diff"] == pytest.approx(-0.02)
    assert found["other"]["measured"] == 0.0 and found["other"]["diff"] == pytest.approx(0.03)


def test_shares_compared_are_the_method_the_extrapolation_scaled() -> None:
    whole = record("m", None, 100.0, shares={"mixer": 0.6, "mlp": 0.4})  # the profiler's
    whole["attribution"]["methods"]["hooks"] = {"categories": {"mixer": {"share": 0.5}, "mlp": {"share": 0.5}}}
    extrapolated = whole_figures(100.0, {"mixer": 0.51, "mlp": 0.49})
    reduced = record("m", 4, 30.0, whole={**extrapolated, "attribution_method": "hooks"})
    row = D.comparison_row(whole, reduced)
    assert row is not None and row["share_method"] == "hooks" and row["verdict"] == "pass"
    assert row["shares"]["mixer"]["measured"] == 0.5 and row["worst_share_diff"] == pytest.approx(0.01)
    # a record that does not name its method extrapolated the profiler's shares
    older = D.comparison_row(whole, record("m", 4, 30.0, whole=extrapolated))
    assert older is not None and older["share_method"] == "profiler" and older["verdict"] == "fail"
    assert older["worst_share_category"] in ("mixer", "mlp")
    assert older["worst_share_diff"] == pytest.approx(0.09 if older["worst_share_category"] == "mlp" else -0.09)
    # a whole record without that method has nothing to compare with: every share counts as none
    reduced_only = D.share_comparison(record("m", None, 100.0), reduced)
    assert {s["measured"] for s in reduced_only.values()} == {0.0}


def test_the_profilers_disagreement_is_shown_beside_the_verdict() -> None:
    """A layer the profiled pass slowed (its mixer 4 ms where the module-boundary clocks
    read 2 ms): the verdict is on the clocks' shares, the profiler's are shown."""
    from reportgen import depth

    def method(forward: float, mixer: float, **extra: Any) -> dict[str, Any]:
        return {"forward_ms": forward, **extra,
                "categories": {"mixer": {"ms": mixer}, "mlp": {"ms": 2.0}, "head": {"ms": 2.0}}}

    layer = [{"layer": "l.0", "categories": {"mixer": 2.0, "mlp": 2.0}}]
    sections = depth.finish({
        "timing": {"median": 6.0, "ci_low": 5.9, "ci_high": 6.1},
        "attribution": {"headline_method": "hooks",
                        "per_layer": [{"layer": "l.0", "categories": {"mixer": 4.0, "mlp": 2.0}}],
                        "methods": {"profiler": method(8.0, 4.0), "hooks": method(6.0, 2.0, per_layer=layer)}},
        "depth": {"layers": 1, "full_layers": 4, "measured": {"a": 1}, "full": {"a": 4},
                  "measured_layers": [{"index": 0, "kind": "a", "layer": "l.0"}]}})
    reduced = {**record("m", 1, 6.0, full=4), **sections}
    # measured whole: the clocks' shares as extrapolated (mixer 8, mlp 8, head 2 ms), the
    # profiler's mixer slowed further than in the reduced pass (16 -> 21 ms)
    whole = record("m", None, 18.0, full=4, shares={"mixer": 21 / 31, "mlp": 8 / 31, "head": 2 / 31})
    whole["attribution"]["methods"]["hooks"] = {"categories": {c: {"share": v} for c, v in
                                                               {"mixer": 4 / 9, "mlp": 4 / 9, "head": 1 / 9}.items()}}
    row = D.comparison_row(whole, reduced)
    assert row is not None and row["share_method"] == "hooks" and row["verdict"] == "pass"
    assert row["worst_share_diff"] == pytest.approx(0.0, abs=1e-9)
    # the profiler's extrapolation: mixer 4 + 3 x 4 = 16 of 26 ms, against 21 of 31 measured
    assert row["profiler_worst_share_category"] == "mixer"
    assert row["profiler_worst_share_diff"] == pytest.approx(16 / 26 - 21 / 31)
    fig = D.summarise([whole, reduced], D.Plan(models=PLAN.models, counts=(1,)))
    assert any("by the profiler's shares (not judged: the extrapolation scaled the hooks method's): worst "
               "share mixer -6.2 points" in n for n in fig["notes"])


def test_the_suite_measures_each_model_whole_and_at_each_count(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(D.suite_text(D.Plan()))
    suite = load_suite(path)
    combos = suite.combinations()
    assert {(c.model, c.layers) for c in combos} == {
        (m.model, n) for m in D.MODELS for n in (None, *D.COUNTS)}
    assert {(c.mode, c.seq_len, c.batch_size, c.dtype) for c in combos} == {("prefill", 128, 1, "fp32")}
    assert suite.settings.rounds == D.Plan().rounds and suite.settings.device == "cpu"
    assert {m.group for m in D.MODELS} == {"dense", "moe", "hybrid"}


def test_the_bench_runs_the_figure_and_the_page_and_readme_show_it(tmp_path: Path) -> None:
    from reportgen.bench.orchestrate import FIGURE_GROUPS
    from reportgen.render import readme

    assert "depth" in FIGURE_GROUPS and D.NAME in B.FIGURES
    fig = D.summarise(linear_model(whole_off=0.02), PLAN)
    doc = R.results_document({D.NAME: fig}, environment={"hardware": "h"}, created="2026-01-01T00:00:00Z",
                             quick=False, duration_s=1.0, command="c")
    B.validate(doc)
    page = render_validation(doc)
    assert "Depth-reduced measurement" in page and "2.00%" in page
    assert "per layer" in page and "R²" in page  # the fits' table
    spec = chart_specs(doc)[D.NAME]
    values = spec["data"]["values"]
    assert {v["series"] for v in values} >= {"measured, fewer layers", "measured whole", "fit"}
    assert {v["layers"] for v in values if v["series"] == "measured whole"} == {12}
    R.write_results(tmp_path / "bench" / "h.json", doc)
    table = readme.blocks(tmp_path / "runs", tmp_path / "bench")["bench"]
    assert f"| Depth-reduced measurement | 2.00% | [-8.20%, 12.20%] | {D.GOAL} | pass |" in table


@pytest.mark.slow
def test_a_tiny_model_measured_whole_and_reduced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.bench import orchestrate

    config = tmp_path / "llama8" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
        "max_position_embeddings": 64}))
    plan = D.Plan(models=(D.DepthModel("dense", str(config), "a tiny llama"),), counts=(2, 4, 6),
                  seq_len=16, budget_s=0.3, rounds=1, min_rounds=1)
    fig = D.run(plan, tmp_path / "depth", log=lambda _: None)
    assert [r["layers"] for r in fig["rows"]] == [2, 4, 6], fig["notes"]
    assert all(r["full_layers"] == 8 and r["extrapolated_ms"] > 0 for r in fig["rows"])
    assert all(abs(sum(s["extrapolated"] for s in r["shares"].values()) - 1.0) < 1e-6 for r in fig["rows"])
    assert len(fig["fits"]) == 1 and fig["status"] in ("pass", "fail")
    # the verdict again from the scratch run's records, under the plan the figure stored
    monkeypatch.setattr(orchestrate, "SCRATCH", tmp_path)
    path = R.write_results(tmp_path / "bench.json", R.results_document(
        {D.NAME: {**fig, "status": "info", "measured_at": "then"}}, environment={}, created="c", quick=False,
        duration_s=1.0, command="c"))
    assert orchestrate.resummarise(path) == 0
    again = B.load_results(path)["figures"][D.NAME]
    assert again["status"] == fig["status"] and again["rows"] == fig["rows"] and again["measured_at"] == "then"
    assert D.plan_of(again["plan"], D.Plan()) == plan


@pytest.mark.parametrize(("whole", "reduced"), [("granitemoe-1b-a400m", "granitemoe-1b-a400m-4l"),
                                                ("falcon-h1-0.5b", "falcon-h1-0.5b-4l")])
def test_the_whole_presets_are_the_reduced_ones_at_their_checkpoints_depth(whole: str, reduced: str) -> None:
    from reportgen import catalog
    from reportgen.presets import PRESET_FULL_LAYERS, PRESETS

    if whole in PRESETS:
        whole_type, whole_config = PRESETS[whole]
    else:  # a whole model the catalog holds, with its published config
        config = dict(catalog.entry(whole).config)
        whole_type = config.pop("model_type")
        whole_config = config
    reduced_type, reduced_config = PRESETS[reduced]
    assert whole_type == reduced_type and reduced_config["num_hidden_layers"] == 4
    assert whole_config == {**reduced_config, "num_hidden_layers": PRESET_FULL_LAYERS[reduced]}
    assert whole in {m.model for m in D.MODELS} and whole not in PRESET_FULL_LAYERS
