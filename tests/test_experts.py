"""A mixture of experts too big for its device: measured depth-reduced, then with fewer
routed experts per layer (the pre-flight's own choice, or ``--experts N``), the record
saying what and why, and the whole model's figures scaled back to every expert."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from support.refusals import config_file, refused_line

from reportgen import cli, depth, fmt
from reportgen.errors import UserError
from reportgen.profile import experts, fitting, preflight
from reportgen.records.schema import COMBINATION_KIND, json_schema
from reportgen.suite import load_suite, parse_overrides

# DeepSeek-V3's layout at tiny widths: one dense layer, five of 16 routed experts (2 per
# token, in 4 groups of which a token's experts come from 2) and a shared expert
DEEPSEEK_6 = {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
              "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 16,
              "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 4,
              "topk_group": 2, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
              "v_head_dim": 16, "head_dim": 8, "vocab_size": 256, "max_position_embeddings": 64}
LLAMA_2 = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
           "max_position_embeddings": 64}


def combo_of(model: str, **kw: Any) -> SimpleNamespace:
    fields = {"model": model, "scale": "reference", "mode": "forward", "dtype": "fp32", "attn_implementation": "sdpa",
              "batch_size": 1, "seq_len": 16, "device": "cpu", "layers": None, "experts": None}
    return SimpleNamespace(**{**fields, **kw})


def needed(combo: SimpleNamespace, layers: int | None, count: int | None) -> int:
    return int(preflight.estimate(SimpleNamespace(**{**vars(combo), "layers": layers,
                                                     "experts": count}))["estimate_bytes"])


def host_between(tmp_path: Path, low: int, high: int) -> dict[str, Any]:
    """`check`'s paths for a host whose usable memory (at the margin) lies between two
    estimates: it fits ``low`` and not ``high``. Nothing is allocated."""
    assert low < high
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemAvailable: {int((low + high) / 2 / preflight.SAFETY_MARGIN) // 1024} kB\n")
    return {"meminfo_path": meminfo, "cgroup_root": tmp_path / "none", "self_cgroup_path": tmp_path / "none"}


# --- the pre-flight's choice ---------------------------------------------------------------


def test_too_big_whole_is_measured_with_the_most_layers_that_fit(tmp_path: Path) -> None:
    combo = combo_of(config_file(tmp_path, DEEPSEEK_6))
    host = host_between(tmp_path, needed(combo, 4, None), needed(combo, 5, None))
    section = preflight.check(combo, **host)
    assert section["reduced"]["layers"] == 4 and section["reduced"]["experts"] is None
    assert section["reduced"]["reason"].startswith("measured 4 of 6 layers: the whole model needs ~")
    assert section["requested_estimate_bytes"] == needed(combo, None, None)
    assert section["estimate_bytes"] == needed(combo, 4, None)


def test_too_big_even_at_the_fewest_layers_is_built_with_fewer_experts(tmp_path: Path) -> None:
    """Two layers (one dense, one of experts: every kind) do not fit with 16 experts; with 8,
    the largest power of two that does, they fit, and so do no more layers."""
    combo = combo_of(config_file(tmp_path, DEEPSEEK_6))
    assert needed(combo, 3, 8) > needed(combo, 2, 16) > needed(combo, 2, 8)  # (the layers dominate)
    host = host_between(tmp_path, needed(combo, 2, 8), needed(combo, 2, 16))
    section = preflight.check(combo, **host)
    assert section["reduced"]["layers"] == 2 and section["reduced"]["experts"] == 8
    assert section["reduced"]["reason"].startswith(
        "measured 2 of 6 layers with 8 of 16 experts: the whole model needs ~")
    # asked for two layers: the words name what was asked
    two = preflight.check(combo_of(combo.model, layers=2), **host)
    assert (two["reduced"]["layers"], two["reduced"]["experts"]) == (2, 8)
    assert two["reduced"]["reason"].startswith("measured 2 of 6 layers with 8 of 16 experts: 2 layers need ~")
    # named experts are kept as asked: nothing fits, so it is skipped with one line
    from reportgen.errors import Skip

    with pytest.raises(Skip, match=r"^needs ~.*; not even its fewest layers fit$"):
        preflight.check(combo_of(combo.model, experts=16), **host)


def test_candidates_are_largest_first_down_to_top_k() -> None:
    assert experts.candidates(experts.Routing(256, 8)) == [128, 64, 32, 16, 8]
    assert experts.candidates(experts.Routing(60, 6)) == [32, 16, 12, 8, 6]
    assert experts.candidates(experts.Routing(8, 2)) == [4, 2]
    assert experts.candidates(experts.Routing(2, 2)) == []


def test_the_search_takes_the_largest_expert_count_that_fits() -> None:
    """With a fits() that allows 3 layers at 32 experts or fewer: 32 experts, 3 layers."""
    asked: list[tuple[int, int | None]] = []

    def fits(layers: int, count: int | None) -> bool | None:
        asked.append((layers, count))
        if layers < 2:
            return None  # fewer layers than kinds
        return count is not None and count <= 32 and layers <= 3

    found = fitting.reduce(fits, total=61, layers=None, experts=None, route=experts.Routing(256, 8))
    assert found == fitting.Reduction(3, 32, 61, 256)
    assert found.words() == "measured 3 of 61 layers with 32 of 256 experts"
    assert (2, 128) in asked and (2, 64) in asked and not any(c == 16 for _, c in asked)
    assert fitting.reduce(lambda n, c: False, total=61, layers=None, experts=None,
                          route=experts.Routing(256, 8)) is None


def test_groups_kept_where_the_fewer_experts_still_fill_them() -> None:
    from reportgen.profile.modelspec import ModelSpec

    spec = ModelSpec(name="m", model_type="deepseek_v3", source="config_file",
                     overrides={k: v for k, v in DEEPSEEK_6.items() if k != "model_type"})
    config, plan = spec.depth_config(experts=8)
    assert plan is not None and plan.experts == {"measured": 8, "full": 16, "top_k": 2}
    assert (config.n_routed_experts, config.n_group, config.topk_group) == (8, 4, 2)
    assert plan.full_config.n_routed_experts == 16
    config, plan = spec.depth_config(experts=4)  # one expert per group cannot rank two
    assert plan is not None and plan.experts["groups"] == "4 groups (top 2) -> 1"
    assert (config.n_routed_experts, config.n_group, config.topk_group) == (4, 1, 1)


# --- measured end to end --------------------------------------------------------------------


def test_the_record_says_so_and_the_whole_model_counts_every_expert(tmp_path: Path) -> None:
    """The worker's own path: the pre-flight (its memory figure injected) reduces the
    combination, the model is built and measured reduced, and the record carries the
    reason, the experts measured of the model's, and the whole model's exact counts."""
    from reportgen.execute.record import combination_record
    from reportgen.execute.rounds import single_round
    from reportgen.execute.worker import WorkerSpec, run_task
    from reportgen.profile.census import build_meta
    from reportgen.profile.measure import measure
    from reportgen.profile.modelspec import resolve

    combo = combo_of(config_file(tmp_path, DEEPSEEK_6))
    host = host_between(tmp_path, needed(combo, 2, 8), needed(combo, 2, 16))
    result = run_task({"combo": combo, "run_dir": tmp_path, "combo_id": "c", "budget_s": 0.3, "seed": 0,
                       "profile_iterations": 2},
                      WorkerSpec(device="cpu", slot="cpu", measure="unused"), measure,
                      functools.partial(preflight.check, **host))
    assert result["status"] == "ok", result["reason"]
    reduced = result["preflight"]["reduced"]
    assert (reduced["layers"], reduced["experts"]) == (2, 8)
    sections = depth.finish(single_round(result["sections"]))
    record = combination_record(
        SimpleNamespace(id="c", as_dict=lambda: {k: v for k, v in vars(combo).items()
                                                 if v is not None and k != "model"} | {"model": "m"}),
        run_id="h/s-1", status="ok", reason=None, started="2026-01-01T00:00:00Z", finished="2026-01-01T00:00:01Z",
        duration_s=1.0, git={"commit": None, "dirty": None}, sections=sections,
        extra={"preflight": result["preflight"]})
    section = record["depth"]
    assert section["reason"] == reduced["reason"]
    measured = section["experts"].pop("cost")  # what the build's experts and router take with every expert
    assert section["experts"] == {"measured": 8, "full": 16, "top_k": 2}
    cost, scoring = measured["experts"], measured["router"]
    assert cost["factor_low"] <= cost["factor"] <= cost["factor_high"] and len(cost["ratios"]) >= 7
    assert cost["tokens_per_expert"] == {"whole": pytest.approx(measured["tokens"] * 2 / 16),
                                         "build": pytest.approx(measured["tokens"] * 2 / 8)}
    assert cost["widened_to"] == 16 and cost["calls"] == 1  # a tiny model: every expert fits
    assert scoring["delta_low_ms"] <= scoring["delta_ms"] <= scoring["delta_high_ms"]
    assert measured["layers"] == 1 and measured["built"] == 8 and measured["full"] == 16
    section["experts"]["cost"] = measured
    assert section["layers"] == 2 and section["full_layers"] == 6
    assert sections["model"]["num_layers"] == 2
    assert record["moe"]["experts"] == 8  # the routing read from the model measured
    # parameters and weights: the whole model's, every expert resident, exactly as built on meta
    full = build_meta(resolve(combo.model).make_config())
    assert section["full_parameters"] == sum(p.numel() for p in full.parameters())
    assert section["full_weight_bytes"] == 4 * section["full_parameters"]
    assert section["whole"]["memory"]["weight_bytes"] == section["full_weight_bytes"]
    tokens = record["combination"]["batch_size"] * record["combination"]["seq_len"]
    reached = 16 * (1 - (1 - 2 / 16) ** tokens)  # the whole model's experts a step reaches
    assert depth.record_label(record) == ("measured 2 of 6 layers; measured with 8 of 16 experts; "
                                          f"whole-model figures extrapolated; the experts' time scaled by "
                                          f"{cost['factor']:.2f}, measured widened to all 16 (a step reaches "
                                          f"about {reached:.0f} of them a layer, this build has 8)")
    # the router: what it took more widened to every expert, in each of the model's 5 routed layers
    assert any(note.startswith(f"moe.router: {scoring['delta_ms']:.3g} ms") and "the whole model's 5 routed" in note
               for note in section["whole"]["notes"])
    assert any(note.startswith(f"moe.experts scaled by {cost['factor']:.3g}") for note in section["whole"]["notes"])
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(json.loads(json.dumps(record)))


def test_per_token_work_is_the_same_but_the_routers() -> None:
    """Analytic FLOPs of the same two layers with 16 and with 4 experts: the experts' work
    per token is equal (top-k experts of the same size, the shared expert), the router's
    is a quarter (one score per expert), nothing else moves."""
    from reportgen.profile import flops
    from reportgen.profile.autoclass import meta_model
    from reportgen.profile.building import model_info
    from reportgen.profile.modelspec import ModelSpec
    from reportgen.profile.structure import classify

    spec = ModelSpec(name="m", model_type="deepseek_v3", source="config_file",
                     overrides={k: v for k, v in DEEPSEEK_6.items() if k != "model_type"})
    combo = combo_of("m", seq_len=16)

    def by_category(count: int | None) -> dict[str, float]:
        model = meta_model(spec.depth_config(layers=2, experts=count)[0])
        return flops.analytic(model_info("m", model, "decoder"), combo, flops.analytic_hints(model, classify(model)))

    whole, reduced = by_category(None), by_category(4)
    assert whole["moe.experts"] == reduced["moe.experts"] > 0
    assert whole["moe.router"] == pytest.approx(4 * reduced["moe.router"]) and reduced["moe.router"] > 0
    assert {c: v for c, v in whole.items() if c != "moe.router"} == {
        c: v for c, v in reduced.items() if c != "moe.router"}


def test_extrapolation_scales_the_router_alone() -> None:
    """The same measured layers read with and without fewer experts, no experts'
    correction measured: only moe.router's whole-model time differs, by the experts' ratio."""
    cats = {"embeddings": 1.0, "attention.core": 2.0, "moe.router": 1.0, "moe.experts": 4.0, "head": 1.0,
            "overhead": 1.0}
    layer = {"attention.core": 2.0, "moe.router": 1.0, "moe.experts": 4.0}
    base = {"layers": 1, "full_layers": 3, "measured": {"moe": 1}, "full": {"moe": 3},
            "measured_layers": [{"index": 0, "kind": "moe", "layer": "l0"}]}
    timing = {"median": 20.0, "ci_low": 19.0, "ci_high": 21.0}
    attribution = {"per_layer": [{"layer": "l0", "categories": layer}],
                   "methods": {"profiler": {"forward_ms": sum(cats.values()),
                                            "categories": {c: {"ms": v} for c, v in cats.items()}}}}
    plain = depth.extrapolate(base, timing, attribution)
    fewer = depth.extrapolate({**base, "experts": {"measured": 4, "full": 16, "top_k": 2}}, timing, attribution)
    assert plain is not None and fewer is not None
    scale = timing["median"] / sum(cats.values())
    assert plain["categories"]["moe.router"]["ms"] == pytest.approx(3 * 1.0 * scale)
    assert fewer["categories"]["moe.router"]["ms"] == pytest.approx(4 * 3 * 1.0 * scale)
    for cat in ("embeddings", "attention.core", "moe.experts", "head"):
        assert fewer["categories"][cat]["ms"] == pytest.approx(plain["categories"][cat]["ms"])


def test_a_measured_experts_correction_scales_the_experts_with_its_interval() -> None:
    """With the build's experts' correction (2.5, from pairs 2, 2.5 and 3), moe.experts of
    every layer, measured and missing, is that many times its measured time; the other
    categories stand; the whole median's interval widens by the correction's spread."""
    cats = {"embeddings": 1.0, "attention.core": 2.0, "moe.router": 1.0, "moe.experts": 4.0, "head": 1.0,
            "overhead": 1.0}
    layer = {"attention.core": 2.0, "moe.router": 1.0, "moe.experts": 4.0}
    base = {"layers": 1, "full_layers": 3, "measured": {"moe": 1}, "full": {"moe": 3},
            "measured_layers": [{"index": 0, "kind": "moe", "layer": "l0"}],
            "experts": {"measured": 4, "full": 16, "top_k": 2}}
    timing = {"median": 20.0, "ci_low": 19.0, "ci_high": 21.0}
    attribution = {"per_layer": [{"layer": "l0", "categories": layer}],
                   "methods": {"profiler": {"forward_ms": sum(cats.values()),
                                            "categories": {c: {"ms": v} for c, v in cats.items()}}}}
    cost = {"tokens": 64, "layers": 1, "experts": {"factor": 2.5, "factor_low": 2.0, "factor_high": 3.0,
                                                   "ratios": [2.0, 2.5, 3.0],
                                                   "tokens_per_expert": {"whole": 8.0, "build": 32.0}}}
    plain = depth.extrapolate(base, timing, attribution)
    scaled = depth.extrapolate({**base, "experts": {**base["experts"], "cost": cost}}, timing, attribution)
    assert plain is not None and scaled is not None
    for cat in ("embeddings", "attention.core", "moe.router", "head"):
        assert scaled["categories"][cat]["ms"] == pytest.approx(plain["categories"][cat]["ms"])
    assert scaled["categories"]["moe.experts"]["ms"] == pytest.approx(2.5 * plain["categories"]["moe.experts"]["ms"])
    # a measured router correction replaces the scaling by 16 / 4: 0.5 ms more in each of the 3 layers
    timed = {**cost, "router": {"delta_ms": 0.5, "delta_low_ms": 0.4, "delta_high_ms": 0.6,
                                "deltas_ms": [0.4, 0.5, 0.6]}}
    both = depth.extrapolate({**base, "experts": {**base["experts"], "cost": timed}}, timing, attribution)
    assert both is not None
    per_ms = timing["median"] / sum(cats.values())
    assert both["categories"]["moe.router"]["ms"] == pytest.approx((3 * 1.0 + 3 * 0.5) * per_ms)
    assert any(n.startswith("moe.router: 0.5 ms [0.4, 0.6] added to each of the whole model's 3 routed")
               for n in both["notes"])
    experts = scaled["categories"]["moe.experts"]
    assert experts["ms_low"] < 2.5 * plain["categories"]["moe.experts"]["ms_low"]
    assert experts["ms_high"] > 2.5 * plain["categories"]["moe.experts"]["ms_high"]
    assert scaled["median_ms"] > plain["median_ms"]
    assert any(n.startswith("moe.experts scaled by 2.5 [2, 3]") for n in scaled["notes"])
    assert not any("moe.experts" in n for n in plain["notes"])


def test_the_probe_widens_a_copy_of_the_experts_and_routes_the_steps_tokens_over_it() -> None:
    """The widened copy holds the model's experts in memory of its own (the build's
    weights repeated), counts them everywhere it counts experts, and runs as the original
    would with that many: its output for a routing over the first experts equals the
    original's; the original keeps its own weights. Where the copy cannot hold every
    expert the tokens split over calls of as many as fit."""
    import torch
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    from reportgen.profile import expertcost

    config = Qwen3MoeConfig(hidden_size=8, moe_intermediate_size=4, num_experts=4, num_experts_per_tok=2)
    module = Qwen3MoeExperts(config).eval()
    module.config = config
    for p in module.parameters():
        torch.nn.init.normal_(p)
    wide = expertcost.widened(module, 4, 10)
    assert wide.num_experts == 10 and module.num_experts == 4
    assert wide.gate_up_proj.shape[0] == 10 and module.gate_up_proj.shape[0] == 4
    assert wide.gate_up_proj.data_ptr() != module.gate_up_proj.data_ptr()
    assert torch.equal(wide.down_proj[7], module.down_proj[3])
    assert expertcost.expert_bytes(module, 4) == 4 * (8 * 8 + 8 * 4)
    hidden, index, weights = torch.randn(3, 8), torch.tensor([[0, 1], [1, 2], [2, 3]]), torch.rand(3, 2)
    call = expertcost._Call((hidden, index, weights), {}, experts=4)
    with torch.no_grad():
        assert torch.allclose(call.routed(wide.forward, index)(), module(hidden, index, weights))
        assert call.routed(wide.forward, torch.tensor([[8, 9]]))().shape == (1, 8)
    with pytest.raises(LookupError):  # no expert index among the arguments: nothing to probe
        expertcost._Call((hidden,), {}, experts=4)
    assert expertcost.plan(full=128, built=8, tokens=128, top_k=8, fits=1000) == (128, 1)
    assert expertcost.plan(full=256, built=8, tokens=128, top_k=8, fits=45) == (43, 6)
    assert expertcost.plan(full=256, built=8, tokens=1, top_k=8, fits=45) == (45, 1)  # one token: one call
    assert expertcost.plan(full=256, built=8, tokens=128, top_k=8, fits=2) == (8, 32)  # never below the build


# --- the flag and the suite field -------------------------------------------------------------


@pytest.mark.parametrize(("data", "flag", "expected"), [
    (DEEPSEEK_6, "0", "--experts 0: no experts to build; choose between 2 and 16"),
    (DEEPSEEK_6, "1", "routes each token to 2 experts, so it needs at least 2; choose between 2 and 16"),
    (DEEPSEEK_6, "17", "has 16 routed experts per layer; choose between 2 and 16"),
    (LLAMA_2, "4", "has no routed experts; --experts applies to mixture-of-experts models"),
])
def test_an_expert_count_the_model_cannot_take_exits_2_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], flag: str, expected: str) -> None:
    assert refused_line(tmp_path, capsys, data, "--experts", flag).endswith(expected)


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_experts_flag_that_is_no_count(value: str) -> None:
    with pytest.raises(UserError) as err:
        parse_overrides({"experts": value})
    assert str(err.value).startswith("--experts: ")


def test_experts_names_the_combination_only_when_set(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    model = config_file(tmp_path, DEEPSEEK_6)
    path.write_text(f'[[matrix]]\nmodels = ["{model}"]\nseq_lens = [16]\n')
    plain = load_suite(path)
    (combo,) = plain.combinations()
    assert combo.experts is None and "experts" not in combo.as_dict() and "experts" not in plain.settings.as_dict()
    path.write_text(f'[settings]\nexperts = 8\n[[matrix]]\nmodels = ["{model}"]\nseq_lens = [16]\n'
                    f'[[matrix]]\nmodels = ["{model}"]\nseq_lens = [8]\nexperts = 4\nlayers = 2\n')
    suite = load_suite(path)
    assert [(c.experts, c.layers) for c in suite.combinations()] == [(8, None), (4, 2)]
    assert suite.combinations()[1].id.endswith("--2l--4e") and suite.hash != plain.hash
    path.write_text(f'[[matrix]]\nmodels = ["{model}"]\nseq_lens = [16]\nexperts = "eight"\n')
    with pytest.raises(UserError, match=r"matrix.*experts: expected a number of experts"):
        load_suite(path)


# --- planning on this host ---------------------------------------------------------------------


def test_dry_run_prints_what_each_combination_would_measure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    model = config_file(tmp_path, DEEPSEEK_6)
    combo = combo_of(model)
    room = int((needed(combo, 2, 8) + needed(combo, 2, 16)) / 2 / preflight.SAFETY_MARGIN)
    monkeypatch.setattr(preflight, "available", lambda device, **_: (room, "a test's figure"))
    out = tmp_path / "runs"
    assert cli.main(["profile", "--models", model, "--seq-lens", "16", "--attn", "sdpa", "--modes", "forward",
                     "--dtypes", "fp32", "--batch-sizes", "1", "--device", "cpu", "--dry-run", "--out", str(out)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert "--forward--fp32--sdpa--b1--s16: " in line
    assert line.split(": ", 1)[1].startswith("measured 2 of 6 layers with 8 of 16 experts: the whole model needs ~")
    assert not out.exists()


@pytest.mark.slow
def test_deepseek_v3_is_planned_on_a_22_gib_host(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The catalog's DeepSeek-V3 at two layers (one dense, one of 256 experts: about 45 GB
    in fp32 for the experts alone) is planned with fewer experts on a host with 22 GiB
    free, not skipped: 32 (the embeddings and head, 7.4 GB, and the dense layer take much
    of it; 64 experts' 11 GB more do not fit); counted on the meta device, nothing allocated."""
    monkeypatch.setattr(preflight, "available", lambda device, **_: (22 * 2**30, "a test's figure"))
    assert cli.main(["profile", "--models", "deepseek-v3", "--layers", "2", "--device", "cpu", "--modes", "forward",
                     "--attn", "sdpa", "--dtypes", "fp32", "--seq-lens", "128", "--batch-sizes", "1", "--dry-run",
                     "--out", str(tmp_path / "runs")]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("deepseek-v3--forward--fp32--sdpa--b1--s128--2l: measured 2 of 61 layers with 32 of 256 "
                           "experts: 2 layers need ~"), line
    assert line.endswith(", 22.0 GiB available (host memory)")


def test_the_progress_line_says_what_was_measured_instead(capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen.execute.console import Progress

    reason = "measured 2 of 61 layers with 32 of 256 experts: 2 layers need ~52.7 GiB, 22.0 GiB available (host memory)"
    record = {"status": "ok", "duration_s": 1.0, "timing": {"median": 12.5},
              "preflight": {"fits": True, "reduced": {"layers": 2, "experts": 32, "reason": reason}}}
    with Progress(1, 1, 0, enabled=True) as progress:
        progress.finish(SimpleNamespace(id="deepseek-v3--forward--fp32--sdpa--b1--s128--2l"), "cpu", record)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[1/1] deepseek-v3--forward--fp32--sdpa--b1--s128--2l: ok 12.5 ms (1.0 s)", f"  {reason}"]


@pytest.mark.slow
def test_pages_say_the_experts_measured_beside_the_layers(tmp_path: Path) -> None:
    """A committed depth-reduced mixture-of-experts record given fewer experts and a reason:
    its pages, tables and downloads carry "measured with 8 of 32 experts" beside the layers."""
    import shutil

    run = Path(__file__).resolve().parents[1] / "runs" / "cpu-amd-epyc-2c" / "cpu-today-540001c6"
    runs = tmp_path / "runs" / "cpu-amd-epyc-2c"
    shutil.copytree(run, runs / run.name, ignore=shutil.ignore_patterns("traces", "logs"))
    path = runs / run.name / "combinations" / "gpt-oss-20b--prefill--fp32--eager--b1--s128--2l.json"
    record = json.loads(path.read_text())
    reason = "measured 2 of 24 layers with 8 of 32 experts: the whole model needs ~80.1 GiB, 21.9 GiB available"
    record["depth"].update(experts={"measured": 8, "full": 32, "top_k": 4}, reason=reason)
    path.write_text(json.dumps(record))
    docs = tmp_path / "docs"
    assert cli.main(["render", "--runs", str(tmp_path / "runs"), "--docs", str(docs)]) == 0
    # a prefill of 128 tokens, each to 4 of 32 experts, reaches all 32 in the whole model
    label = ("measured 2 of 24 layers; measured with 8 of 32 experts; whole-model figures extrapolated; "
             "the experts' time is understated: a step of the whole model reaches about 32 of its experts "
             "a layer, this build has 8")
    written = fmt.markdown_text(label)  # its apostrophe is written as an entity
    page = (docs / "hardware" / "cpu-amd-epyc-2c" / "gpt-oss-20b.md").read_text()
    shown = fmt.markdown_text(reason)  # its "~" is written as an entity, shown as "~"
    assert f"**{written[:1].upper()}{written[1:]}.** It did not fit the device as asked ({shown})" in page
    assert "8 of the 32 routed experts of each mixture-of-experts layer" in page
    assert written in (docs / "models" / "gpt-oss-20b.md").read_text()
    assert label in (docs / "data" / "combinations.csv").read_text()


def _catalog_with_experts() -> list[str]:
    from reportgen import catalog
    from reportgen.profile.modelspec import resolve

    return [name for name in catalog.names() if experts.routing(resolve(name).make_config()) is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name", _catalog_with_experts())
def test_every_catalog_mixture_of_experts_builds_with_fewer_experts_of_the_same_size(name: str) -> None:
    """Each family's own names for the expert count (num_experts, num_local_experts,
    n_routed_experts, a text_config's) are reduced: fewer experts, each of the same size."""
    from reportgen.profile.autoclass import meta_model
    from reportgen.profile.modelspec import resolve

    spec = resolve(name)
    route = experts.routing(spec.make_config())
    assert route is not None
    fewer = experts.candidates(route)[-1]

    def per_expert(count: int | None) -> tuple[float, int]:
        model = meta_model(spec.depth_config(layers=4, experts=count)[0])
        held = [m for fqn, m in model.named_modules() if fqn.rpartition(".")[2] == "experts"]
        routed = sum(p.numel() for m in held for p in m.parameters())
        return routed / ((count or route.experts) * len(held)), len(held)

    assert per_expert(fewer) == per_expert(None) and per_expert(None)[1] > 0


def test_rounds_measured_with_another_reduction_are_never_pooled() -> None:
    from reportgen.execute.rounds import combination_outcome, same_reduction

    def payload(i: int, reduced: dict[str, Any] | None, median: float, profiled: bool = False) -> dict[str, Any]:
        sections: dict[str, Any] = {"timing": {"method": "perf_counter", "unit": "ms", "samples": [median] * 5,
                                               "median": median}}
        if profiled:
            sections["profile"] = {"events": 1}
        return {"id": "m", "round": i, "rounds": 4, "status": "ok", "started": f"2026-12-06T00:0{i}:00Z",
                "finished": "x", "duration_s": 2.0, "sections": sections, "execution": {},
                "preflight": {"reduced": reduced} if reduced else {}, "device": None}

    two = {"layers": 2, "experts": 32}
    eight = {"layers": 2, "experts": 8}  # memory was short when round 2 started
    rounds = {0: payload(0, two, 10.0, profiled=True), 1: payload(1, two, 10.5),
              2: payload(2, eight, 3.0), 3: payload(3, two, 9.5)}
    kept, aside = same_reduction(rounds)
    assert sorted(kept) == [0, 1, 3] and aside == [2]
    outcome, started, seconds = combination_outcome(rounds)
    samples = outcome.sections["timing"]["samples"]
    assert 3.0 not in samples and len(samples) == 15
    assert outcome.execution["rounds"] == 3 and outcome.execution["rounds_set_aside"]["rounds"] == [2]
    assert started == "2026-12-06T00:00:00Z" and seconds == 8.0  # every round's time counts
    # all rounds alike: nothing set aside
    same = {i: payload(i, two, 10.0, profiled=i == 0) for i in range(3)}
    assert same_reduction(same)[1] == [] and "rounds_set_aside" not in combination_outcome(same)[0].execution


@pytest.mark.slow
def test_every_page_showing_a_model_built_with_fewer_experts_says_how_many(committed_project: Path) -> None:
    """The committed runs' models built with fewer routed experts (their id ends in --Ne):
    every line of the home page's table and of the time-against-FLOPs finding that shows one
    of their figures says "N of M experts", as their own pages do."""
    from reportgen.records.load import load_runs
    from reportgen.records.schema import current_runs
    from reportgen.render import analysis
    from reportgen.render.flop_shares import PATH

    frame = analysis.combinations_frame(current_runs(load_runs(Path(__file__).resolve().parents[1] / "runs")))
    fewer = frame[frame["combo_id"].str.contains(r"--\d+e$", regex=True)]
    assert not fewer.empty
    docs = committed_project / "docs"
    home = (docs / "index.md").read_text(encoding="utf-8").splitlines()
    findings = (docs / PATH).read_text(encoding="utf-8").splitlines()
    for model, part in fewer.groupby("model"):
        words = {m.group(0) for d in part["depth"] for m in [re.search(r"\d+ of \d+ experts", str(d))] if m}
        assert words, part["depth"].tolist()
        rows = [line for line in home if line.startswith(f"| [{model}]")]
        settings = [line for line in findings if line.startswith(("prefill,", "decode,", "forward,"))
                    and f"All combinations of {model} " in line]
        assert rows and settings
        assert all(any(w in line for w in words) for line in rows + settings), (model, words)


def test_a_correction_measured_on_fewer_experts_than_the_model_says_how_many_and_in_how_many_calls() -> None:
    """Where the model's experts do not fit beside the build, the copy holds as many as fit
    and the step's tokens go over several calls: the words say so, not "all 256"."""
    cost = {"tokens": 128, "layers": 2, "experts": {"factor": 9.36, "factor_low": 8.98, "factor_high": 9.5,
                                                    "ratios": [9.36], "widened_to": 24, "calls": 11}}
    record = {"combination": {"mode": "prefill", "batch_size": 1, "seq_len": 128},
              "depth": {"experts": {"measured": 8, "full": 256, "top_k": 8, "cost": cost}, "whole": {}}}
    assert depth.experts_understated(record) == (
        "the experts' time scaled by 9.36, measured widened to 24 of its 256, the step's tokens over 11 calls "
        "(a step reaches about 252 of them a layer, this build has 8)")
    # a decode step's few tokens go in one call, said as one
    cost["experts"] |= {"calls": 1}
    assert "measured widened to 24 of its 256, the step's tokens in one call (" in depth.experts_understated(record)
    cost["experts"] |= {"widened_to": 256, "calls": 1}
    assert "measured widened to all 256 (" in depth.experts_understated(record)


def _round_cost(factor: float, delta: float) -> dict[str, Any]:
    ratios = [factor * k for k in (0.98, 1.0, 1.02)]
    return {"tokens": 64, "reached": 15.9, "built": 4, "full": 16, "layers": 1, "method": "m",
            "experts": {"factor": factor, "factor_low": min(ratios), "factor_high": max(ratios), "ratios": ratios,
                        "whole_ms": 2.0 * factor, "build_ms": 2.0, "widened_to": 16, "calls": 1,
                        "tokens_per_expert": {"whole": 8.0, "build": 32.0}},
            "router": {"delta_ms": delta, "delta_low_ms": delta, "delta_high_ms": delta,
                       "deltas_ms": [delta, delta], "whole_ms": 1.0 + delta, "build_ms": 1.0}}


def test_a_correction_measured_in_every_round_is_their_median_with_the_rounds_spread() -> None:
    """Each round measured the correction beside its timing: the record's is the median over
    the rounds of each round's own, its interval a bootstrap over the rounds (then the pairs
    within each), so one round measured at a bad moment (1.52 where the others read about
    1.3) neither sets the figure nor hides in a narrow interval."""
    costs = [(r, _round_cost(f, d)) for r, (f, d) in enumerate([(1.52, 0.3), (1.28, 0.2), (1.30, 0.2),
                                                                 (1.31, 0.25), (1.29, 0.2), (1.27, 0.2)])]
    pooled = depth.pool_costs(costs)
    assert pooled is not None
    experts = pooled["experts"]
    assert experts["factor"] == pytest.approx(1.295) and experts["rounds"] == 6
    assert experts["factor_low"] < 1.29 and 1.30 < experts["factor_high"] < 1.52
    assert len(experts["ratios"]) == 18 and experts["widened_to"] == 16
    assert experts["whole_ms"] == pytest.approx(2.0 * 1.295) and experts["build_ms"] == 2.0
    assert pooled["router"]["delta_ms"] == pytest.approx(0.2) and pooled["router"]["rounds"] == 6
    assert [e["round"] for e in pooled["rounds"]] == list(range(6))
    assert pooled["rounds"][0]["experts"]["factor"] == 1.52 and len(pooled["rounds"][0]["experts"]["ratios"]) == 3
    assert depth.round_costs(pooled, "experts", "factor") == [1.52, 1.28, 1.30, 1.31, 1.29, 1.27]
    assert depth.round_costs(costs[0][1], "experts", "factor") == []  # one measurement: no rounds
    assert depth.pool_costs(costs[:1]) == costs[0][1] and depth.pool_costs([]) is None
    # a round whose step reached no more experts than the build has measured its router only
    router_only = {k: v for k, v in _round_cost(1.0, 0.4).items() if k != "experts"}
    mixed = depth.pool_costs([costs[1], (7, router_only)])
    assert mixed is not None and mixed["experts"]["rounds"] == 1 and mixed["router"]["rounds"] == 2
    assert mixed["router"]["delta_ms"] == pytest.approx(0.3)
    jsonschema.validate({"measured": 4, "full": 16, "top_k": 2, "cost": pooled},
                        json_schema(COMBINATION_KIND)["properties"]["depth"]["properties"]["experts"])


def test_the_extrapolation_resamples_the_rounds_corrections() -> None:
    base = {"layers": 1, "full_layers": 3, "measured": {"moe": 1}, "full": {"moe": 3},
            "measured_layers": [{"index": 0, "kind": "moe", "layer": "l0"}],
            "experts": {"measured": 4, "full": 16, "top_k": 2}}
    cats = {"attention.core": 2.0, "moe.router": 1.0, "moe.experts": 4.0, "head": 1.0}
    attribution = {"per_layer": [{"layer": "l0", "categories": {c: v for c, v in cats.items() if c != "head"}}],
                   "methods": {"profiler": {"forward_ms": sum(cats.values()),
                                            "categories": {c: {"ms": v} for c, v in cats.items()}}}}
    timing = {"median": 8.0, "ci_low": 8.0, "ci_high": 8.0}
    steady = depth.pool_costs([(r, _round_cost(1.3, 0.2)) for r in range(6)])
    wander = depth.pool_costs([(r, _round_cost(f, 0.2)) for r, f in enumerate((1.1, 1.5, 1.2, 1.4, 1.3, 1.3))])
    a = depth.extrapolate({**base, "experts": {**base["experts"], "cost": steady}}, timing, attribution)
    b = depth.extrapolate({**base, "experts": {**base["experts"], "cost": wander}}, timing, attribution)
    assert a is not None and b is not None
    assert a["median_ms"] == pytest.approx(b["median_ms"])  # both medians 1.3
    # the rounds' spread is in the interval: resampled by round, not by the pairs of one
    assert b["factor_high"] - b["factor_low"] > 3 * (a["factor_high"] - a["factor_low"])
    assert any(n.endswith("the median of 6 rounds' measurements") for n in b["notes"])


def test_the_record_pools_the_correction_each_clean_round_measured() -> None:
    from reportgen.execute import rounds

    def payload(i: int, factor: float, *, contended: bool = False) -> dict[str, Any]:
        timing = {"method": "perf_counter", "unit": "ms", "samples": [10.0 + i * 0.01] * 5, "median": 10.0,
                  **({"contention": {"contended": True, "reason": "busy"}} if contended else {})}
        sections: dict[str, Any] = {"timing": timing}
        if i == 0:
            sections["depth"] = {"layers": 1, "full_layers": 3, "measured": {"moe": 1}, "full": {"moe": 3},
                                 "measured_layers": [{"index": 0, "kind": "moe", "layer": "l0"}],
                                 "experts": {"measured": 4, "full": 16, "top_k": 2, "cost": _round_cost(factor, 0.2)}}
            sections["profile"] = {"events": 1}
        else:
            sections["expert_cost"] = _round_cost(factor, 0.2)
        return {"id": "m", "round": i, "rounds": 4, "status": "ok", "started": "s", "finished": "f",
                "duration_s": 1.0, "sections": sections, "execution": {}, "preflight": {}, "device": None}

    found = {0: payload(0, 1.5), 1: payload(1, 1.3), 2: payload(2, 9.0, contended=True), 3: payload(3, 1.2),
             4: payload(4, 1.25)}
    sections = rounds.merged_sections(found, rounds.Policy(rounds=5, min_rounds=4))
    cost = sections["depth"]["experts"]["cost"]
    assert [e["round"] for e in cost["rounds"]] == [0, 1, 3, 4]  # the contended round left out here too
    assert cost["experts"]["factor"] == pytest.approx(1.275)
    assert "expert_cost" not in sections
    # one round: the profiled round's own correction, as measured
    alone = rounds.merged_sections({0: payload(0, 1.5)}, rounds.Policy(rounds=1))
    assert alone["depth"]["experts"]["cost"] == _round_cost(1.5, 0.2)
