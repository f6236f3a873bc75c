"""The bench's depth figure (``reportgen.bench.depth_check``): its pairing, intervals and
verdict on constructed units (a model whose latency is a + b x layers, on a host whose
speed wanders), its measuring loop's order (``depth_rounds``), its place in the bench and
on the Validation page, and one tiny real run."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from reportgen import stats
from reportgen.bench import depth_check as D
from reportgen.bench import depth_rounds
from reportgen.bench import results as R
from reportgen.records import bench as B
from reportgen.render.validation import chart_specs, render_validation

PLAN = D.Plan(models=(D.DepthModel("dense", "m", "a synthetic model"),), counts=(2, 4, 8))
SPLIT = {"attention.core": 0.4, "mlp": 0.6}  # each layer's time, by category
HEAD = 10.0  # ms outside the layers (the head), per forward
LAYER = 20.0  # ms per layer
FULL = 12
# the host's speed in each round (a round's forwards take this many times their quiet time)
SPEEDS = (1.0, 1.3, 0.8, 1.25, 0.9, 1.15)


def hooks(layers: int, *, head: float = HEAD, layer: float = LAYER, split: dict[str, float] | None = None,
          names: bool = True) -> dict[str, Any]:
    """A hooks pass over ``layers`` layers: its categories, forward and (``names``) each layer's times."""
    split = split or SPLIT
    categories = {c: layers * layer * s for c, s in split.items()}
    categories["head"] = head
    forward = sum(categories.values())
    out: dict[str, Any] = {"forward_ms": forward,
                           "categories": {c: {"ms": ms, "share": ms / forward} for c, ms in categories.items()}}
    if names:
        out["per_layer"] = [{"layer": f"l.{i}", "categories": {c: layer * s for c, s in split.items()}}
                            for i in range(layers)]
    return out


def depth_section(layers: int, full: int = FULL) -> dict[str, Any]:
    return {"layers": layers, "full_layers": full, "measured": {"a": layers}, "full": {"a": full},
            "measured_layers": [{"index": i, "kind": "a", "layer": f"l.{i}"} for i in range(layers)]}


def units(*, rounds: int = 6, counts: tuple[int, ...] = (2, 4, 8), whole_off: float = 0.0, jitter: float = 0.002,
          cycles: int = 4, share_off: tuple[float, ...] = (0.0,), drift_in_round: bool = False,
          model: str = "m", seed: int = 1) -> list[dict[str, Any]]:
    """A model's units: every forward a + b x layers ms times its round's speed (and, with
    ``drift_in_round``, a speed that moves from cycle to cycle as well) times 1 +- ``jitter``;
    the extrapolation off the whole measured by 1 + ``whole_off`` (the whole build that
    much faster than its line); the whole build's hooks shares with ``share_off[r % len]`` of
    its attention moved to its MLP in round r."""
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        speed = SPEEDS[r % len(SPEEDS)]
        table = []
        for c in range(cycles):
            moment = speed * (1.0 + (0.3 * math.sin(c * 2.1) if drift_in_round else 0.0))
            row = {str(n): moment * (HEAD + LAYER * n) * (1 + rng.uniform(-jitter, jitter)) for n in counts}
            row["whole"] = moment * (HEAD + LAYER * FULL) / (1 + whole_off) * (1 + rng.uniform(-jitter, jitter))
            table.append(row)
        off = share_off[r % len(share_off)]
        whole_split = {"attention.core": SPLIT["attention.core"] - off * (HEAD + LAYER * FULL) / (LAYER * FULL),
                       "mlp": SPLIT["mlp"] + off * (HEAD + LAYER * FULL) / (LAYER * FULL)}
        builds: dict[str, Any] = {str(n): {"layers": n, "depth": depth_section(n), "hooks": hooks(n)} for n in counts}
        builds["whole"] = {"layers": None, "depth": None, "full_layers": FULL,
                           "hooks": hooks(FULL, split=whole_split, names=False)}
        out.append({"model": model, "round": r, "builds": builds, "cycles": table, "contended": False})
    return out


def figure(found: list[dict[str, Any]], plan: D.Plan = PLAN) -> dict[str, Any]:
    return D.summarise(found, plan)


def test_the_rule_reads_the_estimate_and_both_ends_alike() -> None:
    assert D.within(0.01, -0.02, 0.049, 0.05)
    assert not D.within(0.01, -0.02, 0.051, 0.05)  # the interval reaches past: not shown to agree
    assert not D.within(0.06, 0.055, 0.065, 0.05)
    assert not D.within(0.0, None, 0.01, 0.05) and not D.within(math.nan, 0.0, 0.0, 0.05)
    assert not D.within(0.0, -0.01, math.inf, 0.05)


def test_an_agreeing_model_passes_though_the_host_speed_wanders_by_a_third() -> None:
    fig = figure(units())
    assert fig["status"] == "pass", fig["notes"]
    assert [r["layers"] for r in fig["rows"]] == [2, 4, 8]
    for row in fig["rows"]:
        assert row["verdict"] == "pass" and row["rounds"] == 6 and row["cycles"] == 24
        assert row["rel_diff"] == pytest.approx(0.0, abs=0.002)
        # paired by cycle: the drift cancels, the interval is the forwards' jitter alone
        assert row["rel_diff_high"] - row["rel_diff_low"] < 0.01
        # each side alone spans the rounds' speeds (0.8 to 1.3 of quiet)
        assert row["measured_high_ms"] / row["measured_low_ms"] > 1.2
        assert abs(row["worst_share_diff"]) < 1e-9 and row["shares_ok"]
        assert row["extrapolated_ms"] == pytest.approx(row["measured_ms"], rel=0.01) and row["inside"]
    (line,) = fig["fits"]
    assert line["on_line"] and line["line_rel_diff"] == pytest.approx(0.0, abs=0.002)
    assert line["slope_ms"] == pytest.approx(LAYER * 1.075, rel=0.1) and line["r2"] > 0.999


def test_drift_from_cycle_to_cycle_within_a_round_cancels_too() -> None:
    fig = figure(units(drift_in_round=True))
    assert fig["status"] == "pass"
    assert all(abs(r["rel_diff"]) < 0.003 and r["rel_diff_high"] - r["rel_diff_low"] < 0.01 for r in fig["rows"])


@pytest.mark.parametrize("off", [0.06, -0.06])
def test_an_extrapolation_off_by_more_than_the_tolerance_fails(off: float) -> None:
    fig = figure(units(whole_off=off))
    assert fig["status"] == "fail"
    assert all(not r["latency_ok"] and r["verdict"] == "fail" for r in fig["rows"])
    assert fig["value"] == pytest.approx(off, abs=0.003)
    assert any(n.startswith("0 of 3 depth-reduced combinations") for n in fig["notes"])
    # the whole build is off its line by as much: the line fails as well
    assert not fig["fits"][0]["on_line"]


def test_just_inside_the_tolerance_with_a_tight_interval_passes() -> None:
    fig = figure(units(whole_off=0.045, jitter=0.001))
    assert all(r["latency_ok"] for r in fig["rows"])
    assert all(0.04 < r["rel_diff_low"] <= r["rel_diff"] <= r["rel_diff_high"] < 0.05 for r in fig["rows"])


def test_a_point_inside_with_an_interval_reaching_past_fails() -> None:
    """Forwards scattered +-15% each: the estimate lies within 5%, its interval does not."""
    fig = figure(units(whole_off=0.02, jitter=0.15, cycles=2, seed=3))
    row = fig["rows"][0]
    assert abs(row["rel_diff"]) < 0.05
    assert max(abs(row["rel_diff_low"]), abs(row["rel_diff_high"])) > 0.05
    assert not row["latency_ok"] and row["verdict"] == "fail" and fig["status"] == "fail"


@pytest.mark.parametrize(("offs", "ok"), [
    ((0.025,), False),            # 2.5 points too few in attention, every round
    ((0.01,), True),              # 1 point, steadily: within
    ((0.035, -0.015), False),     # 1 point on average, rounds 5 points apart: the interval reaches past 2
])
def test_shares_are_judged_by_their_paired_difference_and_its_interval(offs: tuple[float, ...], ok: bool) -> None:
    fig = figure(units(share_off=offs))
    for row in fig["rows"]:
        assert row["latency_ok"] and row["shares_ok"] is ok
        assert row["worst_share_category"] in ("attention.core", "mlp")
        share = row["shares"]["attention.core"]
        # the whole build's attention share lowered by the offsets: extrapolated less measured
        assert share["diff"] == pytest.approx(sum(offs) / len(offs), abs=0.006)
        assert share["diff_low"] <= share["diff"] <= share["diff_high"]
    assert fig["status"] == ("pass" if ok else "fail")


def test_rounds_missing_a_build_are_left_out_and_too_few_rounds_fail() -> None:
    found = units()
    del found[1]["builds"]["4"]
    fig = figure(found)
    assert all(r["rounds"] == 5 for r in fig["rows"])
    assert any("m: rounds 2 left out" in n for n in fig["notes"])
    few = figure(units(rounds=D.MIN_ROUNDS - 1))
    assert few["status"] == "fail" and all(r["verdict"] == "fail" and r["latency_ok"] for r in few["rows"])
    assert any(f"fewer than {D.MIN_ROUNDS}" in n for n in few["notes"])


def test_a_model_not_measured_fails_the_figure_and_contention_is_said() -> None:
    plan = D.Plan(models=(*PLAN.models, D.DepthModel("moe", "e", "a synthetic mixture")))
    found = units()
    found[2]["contended"], found[2]["contention"] = True, "another process used 80% of the CPU"
    found[2]["cycles"] = [{k: v * (3.0 if k == "2" else 1.0) for k, v in row.items()} for row in found[2]["cycles"]]
    fig = figure(found, plan)
    assert fig["status"] == "fail" and any("e: not measured" in n for n in fig["notes"])
    # five clean rounds remain: the contended one is left out, its 2-layer forwards with it
    assert any(n == "m: rounds 3 left out (contended)" for n in fig["notes"])
    assert all(r["rounds"] == 5 and r["unstable"] is None and r["latency_ok"] for r in fig["rows"])
    for r in range(3, 6):
        found[r]["contended"], found[r]["contention"] = True, "another process used 80% of the CPU"
    fig = figure(found, plan)
    assert all(r["rounds"] == 6 and r["unstable"] == "4 of 6 rounds contended (another process used 80% of the "
               "CPU, ...)" for r in fig["rows"])
    nothing = figure([], plan)
    assert nothing["status"] == "not measured" and nothing["value"] is None


def test_the_loop_pairs_a_models_builds_cycle_by_cycle_in_shuffled_orders() -> None:
    clock = iter(range(1000))
    seen: list[str] = []

    def forward(name: str) -> float:
        seen.append(name)
        return 1.0

    table = depth_rounds.cycles(["whole", "2", "4"], 5.0, forward, min_cycles=3, seed="s",
                                wall=lambda: float(next(clock)))
    assert len(table) >= 3 and all(set(row) == {"whole", "2", "4"} for row in table)
    # each cycle is one forward of every build, back to back, in its own order
    assert [sorted(seen[i:i + 3]) for i in range(0, len(seen), 3)] == [["2", "4", "whole"]] * len(table)
    assert len({tuple(seen[i:i + 3]) for i in range(0, len(seen), 3)}) > 1
    orders = [depth_rounds.model_order(["a", "b", "c"], r) for r in range(6)]
    assert all(sorted(o) == ["a", "b", "c"] for o in orders) and len({tuple(o) for o in orders}) > 1
    assert depth_rounds.model_order(["a", "b", "c"], 2) == orders[2]  # seeded: a resumed run keeps it
    assert depth_rounds.unit_name("/x/llama 8/config.json", 3) == "x_llama_8_config.json--r3.json"


def test_a_stored_plan_is_read_back_and_an_earlier_design_s_is_not() -> None:
    assert D.plan_of(D.plan_dict(PLAN), D.Plan()) == PLAN
    assert D.plan_of({"budget_s": 12.0, "rounds": 6, "min_rounds": 6}, D.QUICK) == D.QUICK


def test_the_bench_runs_the_figure_and_the_page_and_readme_show_it(tmp_path: Path) -> None:
    from reportgen.bench.orchestrate import FIGURE_GROUPS
    from reportgen.render import readme

    assert "depth" in FIGURE_GROUPS and D.NAME in B.FIGURES
    fig = figure(units(whole_off=0.02))
    doc = R.results_document({D.NAME: fig}, environment={"hardware": "h"}, created="2026-01-01T00:00:00Z",
                             quick=False, duration_s=1.0, command="c")
    B.validate(doc)
    page = render_validation(doc)
    assert "Depth-reduced measurement" in page and "per layer" in page and "R²" in page
    spec = chart_specs(doc)[D.NAME]
    values = spec["data"]["values"]
    assert {v["series"] for v in values} >= {"measured, fewer layers", "measured whole", "fit"}
    assert {v["layers"] for v in values if v["series"] == "measured whole"} == {FULL}
    R.write_results(tmp_path / "bench" / "h.json", doc)
    table = readme.blocks(tmp_path / "runs", tmp_path / "bench")["bench"]
    row = next(line for line in table.splitlines() if line.startswith("| Depth-reduced measurement |"))
    assert row.endswith(f"| {D.GOAL} | pass |") and "2.0" in row


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
                  seq_len=16, rounds=D.MIN_ROUNDS, budget_s=0.3, hooks_budget_s=0.1)
    fig = D.run(plan, tmp_path / "depth", log=lambda _: None)
    assert [r["layers"] for r in fig["rows"]] == [2, 4, 6], fig["notes"]
    assert all(r["full_layers"] == 8 and r["rounds"] == D.MIN_ROUNDS and r["extrapolated_ms"] > 0
               for r in fig["rows"])
    assert all(abs(sum(s["extrapolated"] for s in r["shares"].values()) - 1.0) < 1e-6 for r in fig["rows"])
    assert len(fig["fits"]) == 1 and fig["status"] in ("pass", "fail")
    # the verdict again from the scratch run's units, under the plan the figure stored
    monkeypatch.setattr(orchestrate, "SCRATCH", tmp_path)
    stored = R.results_document({D.NAME: {**fig, "status": "info", "measured_at": "then"}}, environment={},
                                created="c", quick=False, duration_s=1.0, command="c")
    path = R.write_results(tmp_path / f"{orchestrate._hardware_guess()}.json", stored)
    assert orchestrate.resummarise(path) == 0
    again = B.load_results(path)["figures"][D.NAME]
    assert again["status"] == fig["status"] and again["rows"] == fig["rows"] and again["measured_at"] == "then"
    assert D.plan_of(again["plan"], D.Plan()) == plan
    # another host's file was measured there, not in this host's scratch: left as it was
    elsewhere = R.write_results(tmp_path / "cpu-another-host.json", stored)
    assert orchestrate.resummarise(elsewhere) == 0
    assert B.load_results(elsewhere)["figures"][D.NAME]["status"] == "info"


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


def test_what_does_not_scale_with_depth_is_read_and_said() -> None:
    """The layers a reduced build keeps, timed in the whole build's own pass (there its
    first layer ran slow), and a mixture's routing balance in each build."""
    whole = {"hooks": {"per_layer": [{"layer": f"l.{i}", "categories": {"mlp": 30.0 if i == 0 else 20.0}}
                                     for i in range(12)]}}
    first_and_middle = {"depth": {"measured_layers": [{"index": 0, "kind": "a"}, {"index": 6, "kind": "a"}]}}
    assert D.kept_layers(first_and_middle, whole) == pytest.approx(25.0 / (250.0 / 12) - 1.0)
    assert D.kept_layers({"depth": {"measured_layers": [{"index": 12}]}}, whole) is None  # not in the pass
    found = units()
    for u in found:
        u["builds"]["whole"]["hooks"]["per_layer"] = whole["hooks"]["per_layer"]
        u["builds"]["whole"]["routing"] = {"mean_max_over_mean": 2.03}
        for n in (2, 4, 8):
            u["builds"][str(n)]["depth"]["measured_layers"][0]["index"] = 0
            u["builds"][str(n)]["routing"] = {"mean_max_over_mean": 1.4 + n / 100}
    fig = figure(found)
    assert fig["rows"][0]["routing_max_over_mean"] == {"reduced": pytest.approx(1.42), "whole": 2.03}
    assert fig["rows"][0]["kept_layers_rel_diff"] > 0
    assert any(n.startswith("m: the busiest expert's tokens over the mean, averaged over the layers: 2.03 whole, "
                            "2 layers 1.42, 4 layers 1.44, 8 layers 1.48") for n in fig["notes"])
    # each reduced build's layers ran at 20 ms, the whole build's mean layer at 250/12
    assert fig["rows"][0]["layer_rel_diff"] == pytest.approx(20.0 / (250.0 / 12) - 1.0)
    assert any("a reduced build's mean layer against the whole build's: 2 layers -4.0%" in n for n in fig["notes"])


def test_a_recorded_unit_is_read_as_the_figure_expects() -> None:
    """One round of granite-3.0-1b-a400m at 2 of its 24 layers and whole, as ``depth_rounds.builds_unit``
    returned it (on a busy host: its times are no measurement of the model, its shape is
    the contract between the measuring loop and the figure)."""
    unit = json.loads((Path(__file__).parent / "data" / "depth_unit_granite.json").read_text())
    reduced, whole = unit["builds"]["2"], unit["builds"]["whole"]
    assert [m["index"] for m in reduced["depth"]["measured_layers"]] == [0, 12]  # spread over the depth
    found = D.extrapolation(reduced, 100.0)
    assert found is not None and found["attribution_method"] == "hooks"
    busy = sum(v["ms"] for c, v in reduced["hooks"]["categories"].items() if c != "overhead")
    layer = sum(sum(r["categories"].values()) for r in reduced["hooks"]["per_layer"]) / 2
    assert found["factor"] == pytest.approx((busy + 22 * layer) / busy)
    per_layer = [sum(r["categories"].values()) for r in whole["hooks"]["per_layer"]]
    assert len(per_layer) == 24
    mean = sum(per_layer) / 24
    assert D.kept_layers(reduced, whole) == pytest.approx((per_layer[0] + per_layer[12]) / 2 / mean - 1)
    rounds = [{**unit, "round": r} for r in range(D.MIN_ROUNDS)]
    plan = D.Plan(models=(D.DepthModel("moe", unit["model"], "recorded"),), counts=(2,))
    fig = D.summarise(rounds, plan)
    (row,) = fig["rows"]
    logs = [math.log(found["factor"] * c["2"] / c["whole"]) for c in unit["cycles"]]
    assert row["rel_diff"] == pytest.approx(math.exp(stats.hodges_lehmann(logs * D.MIN_ROUNDS)) - 1)
    assert row["routing_max_over_mean"] == {"reduced": pytest.approx(1.42, abs=0.01),
                                            "whole": pytest.approx(2.03, abs=0.01)}
    assert fig["fits"] == []  # one count: no line
