"""--layers N: the suite key and flag, the refusals before anything is written, a model
measured at full width with fewer layers end to end, and the whole-model extrapolation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from support.refusals import config_file, one_line, refused_line

from reportgen import cli, depth
from reportgen.errors import UserError
from reportgen.records.schema import COMBINATION_KIND, json_schema
from reportgen.suite import load_suite, parse_overrides

# a llama at tiny widths with four layers: the "whole model" of these tests
LLAMA_4 = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
           "max_position_embeddings": 64}
# gemma-style: five sliding-window layers to one global, twelve layers
GEMMA_12 = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 12,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
            "sliding_window": 8, "max_position_embeddings": 64}


# --- the suite key and the flag ----------------------------------------------------------


def test_layers_names_the_combination_only_when_set(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[[matrix]]\nmodels = ["gpt2"]\nseq_lens = [16]\n')
    plain = load_suite(path)
    (combo,) = plain.combinations()
    assert combo.layers is None and combo.id == "gpt2--forward--fp32--sdpa--b1--s16"
    assert "layers" not in combo.as_dict() and "layers" not in plain.settings.as_dict()
    reduced = load_suite(path, parse_overrides({"layers": "3"}))
    (combo,) = reduced.combinations()
    assert combo.layers == 3 and combo.id == "gpt2--forward--fp32--sdpa--b1--s16--3l"
    assert combo.as_dict()["layers"] == 3 and reduced.hash != plain.hash
    path.write_text('[settings]\nlayers = 2\n[[matrix]]\nmodels = ["gpt2"]\nseq_lens = [16]\n'
                    '[[matrix]]\nmodels = ["bert"]\nseq_lens = [16]\nlayers = 4\n')
    assert [c.layers for c in load_suite(path).combinations()] == [2, 4]


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_layers_flag_that_is_no_count(value: str) -> None:
    with pytest.raises(UserError) as err:
        parse_overrides({"layers": value})
    assert str(err.value).startswith("--layers: ")


@pytest.mark.parametrize(("data", "flag", "expected"), [
    (LLAMA_4, "0", "--layers 0: no layers to measure; choose between 1 and 4"),
    (LLAMA_4, "5", "has 4 layers; choose between 1 and 4"),
    (GEMMA_12, "1", "has 2 kinds of layer (sliding attention + mlp, attention + mlp), one of each is "
                    "measured; choose between 2 and 12"),
])
def test_a_count_the_model_cannot_take_exits_2_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], flag: str,
        expected: str) -> None:
    assert refused_line(tmp_path, capsys, data, "--layers", flag).endswith(expected)


def test_encoder_decoder_and_micro_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert cli.main(["profile", "--models", "t5", "--layers", "2", "--seq-lens", "8", "--device", "cpu",
                     "--out", str(out)]) == 2
    assert "encoder-decoder" in one_line(capsys.readouterr().err)
    assert cli.main(["profile", "--suite", "attention-micro", "--layers", "2", "--device", "cpu",
                     "--out", str(out)]) == 2
    assert "not a stack of layers" in one_line(capsys.readouterr().err)
    assert not out.exists()


# --- end to end ----------------------------------------------------------------------------


def test_measured_with_fewer_layers_end_to_end(tmp_path: Path) -> None:
    """A four-layer llama measured with two: the record names the layers measured and the
    whole model's, and its extrapolated latency exceeds the measured one."""
    from reportgen.execute.rounds import single_round
    from reportgen.profile.measure import measure

    model = config_file(tmp_path, LLAMA_4)
    combo = SimpleNamespace(model=model, scale="reference", mode="forward", dtype="fp32",
                            attn_implementation="sdpa", batch_size=1, seq_len=16, device="cpu", layers=2)
    sections = single_round(measure(combo, run_dir=tmp_path, combo_id="c", budget_s=0.3, profile_iterations=2))
    assert sections["model"]["num_layers"] == 2
    section = sections["depth"]
    assert section["layers"] == 2 and section["full_layers"] == 4
    assert section["measured"] == {"attention + mlp": 2} and section["full"] == {"attention + mlp": 4}
    assert [(m["index"], m["layer"]) for m in section["measured_layers"]] == [(0, "model.layers.0"),
                                                                               (2, "model.layers.1")]
    assert section["parameters"] == sections["model"]["parameters"] < section["full_parameters"]
    assert section["full_weight_bytes"] == 4 * section["full_parameters"]
    assert section["flops_analytic"] > sections["flops"]["total_analytic"]
    whole = section["whole"]
    # on a CPU the headline is the module-boundary clocks, which time each layer
    assert whole["attribution_method"] == sections["attribution"]["headline_method"] == "hooks"
    assert [r["layer"] for r in sections["attribution"]["methods"]["hooks"]["per_layer"]] == [
        m["layer"] for m in section["measured_layers"]]
    assert whole["median_ms"] > sections["timing"]["median"]
    assert whole["ci_low_ms"] <= whole["median_ms"] <= whole["ci_high_ms"]
    assert 1 < whole["factor_low"] <= whole["factor"] <= whole["factor_high"]
    assert sum(c["ms"] for c in whole["categories"].values()) == pytest.approx(whole["median_ms"])
    record = {"kind": COMBINATION_KIND, "schema_version": 1, "id": "c", "run_id": "h/s-1", "status": "ok",
              "combination": {k: v for k, v in vars(combo).items() if k != "model"} | {"model": "m"},
              "reason": None, "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:00:01Z",
              "duration_s": 1.0, "git": {"commit": None, "dirty": None}, "ops": None, **sections}
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(json.loads(json.dumps(record)))


# --- the extrapolation's arithmetic --------------------------------------------------------


def _sections(per_layer: list[tuple[str, dict[str, float]]], kinds: dict[str, str],
              full: dict[str, int]) -> dict[str, Any]:
    cats = {"embeddings": 1.0, "attention.core": 0.0, "mlp": 0.0, "head": 1.0, "overhead": 2.0}
    for _, row in per_layer:
        for c, v in row.items():
            cats[c] = cats.get(c, 0.0) + v
    measured: dict[str, int] = {}
    for kind in kinds.values():
        measured[kind] = measured.get(kind, 0) + 1
    return {
        "timing": {"median": 2 * sum(cats.values()), "ci_low": 1.8 * sum(cats.values()),
                   "ci_high": 2.2 * sum(cats.values())},
        "attribution": {"forward_ms": 99.0, "categories": {},  # the headline's: not what per_layer is part of
                        "per_layer": [{"layer": fqn, "categories": row} for fqn, row in per_layer],
                        "methods": {"profiler": {"forward_ms": sum(cats.values()),
                                                 "categories": {c: {"ms": v} for c, v in cats.items()}}}},
        "memory": {"peak_allocated_bytes": 1000},
        "depth": {"layers": len(per_layer), "full_layers": sum(full.values()), "measured": measured, "full": full,
                  "measured_layers": [{"index": i, "kind": kinds[fqn], "layer": fqn}
                                      for i, (fqn, _) in enumerate(per_layer)],
                  "weight_bytes": 400, "full_weight_bytes": 1000},
    }


def test_extrapolation_adds_each_missing_layer_at_its_kinds_mean() -> None:
    # two kinds: "a" layers of 3 and 5 ms (mean 4) of 10 in the model, one "b" of 2 ms of 2
    sections = _sections([("l.0", {"attention.core": 1.0, "mlp": 2.0}), ("l.1", {"attention.core": 1.0, "mlp": 4.0}),
                          ("l.2", {"mlp": 2.0})], {"l.0": "a", "l.1": "a", "l.2": "b"}, {"a": 10, "b": 2})
    whole = depth.finish(sections)["depth"]["whole"]
    busy = 1 + 1 + 3 + 5 + 2  # embeddings, head, the three layers
    extra = 8 * 4 + 1 * 2
    g = (busy + extra) / busy
    assert whole["factor"] == pytest.approx(g)
    measured = sections["timing"]["median"]
    assert whole["median_ms"] == pytest.approx(measured * g)
    # the timed forward is twice the profiled one: every category doubles
    assert whole["categories"]["mlp"]["ms"] == pytest.approx(2 * (8 + 8 * 3 + 1 * 2))
    assert whole["categories"]["attention.core"]["ms"] == pytest.approx(2 * (2 + 8 * 1))
    assert whole["categories"]["head"]["ms"] == pytest.approx(2 * 1)  # once, as measured
    assert whole["categories"]["overhead"]["ms"] == pytest.approx(2 * 2 * g)
    assert sum(c["share"] for c in whole["categories"].values()) == pytest.approx(1.0)
    # the layer-to-layer spread of "a" (3 vs 5 ms) widens the interval beyond the timing's
    assert whole["factor_low"] < g < whole["factor_high"]
    assert whole["ci_low_ms"] < 0.9 * measured * g and whole["ci_high_ms"] > 1.1 * measured * g
    assert whole["notes"] == ["b: one layer measured, so its layer-to-layer spread is not in the intervals"]
    assert whole["memory"] == {"weight_bytes": 1000, "peak_allocated_bytes": 1600}
    slowed = depth.finish({**sections, "profile": {"overhead_ratio": 3.0}})["depth"]["whole"]
    assert slowed["notes"][-1].startswith("the profiled pass took 3.0x the unprofiled forward")


def _with_hooks(sections: dict[str, Any], per_layer: list[tuple[str, dict[str, float]]] | None,
                forward: float) -> dict[str, Any]:
    """``sections`` whose headline is the hooks method, with ``forward`` ms and (where
    given) its own per-layer times; its categories are the layers' plus 1 ms of embeddings."""
    cats: dict[str, float] = {"embeddings": 1.0}
    for _, row in per_layer or []:
        for c, v in row.items():
            cats[c] = cats.get(c, 0.0) + v
    hooks: dict[str, Any] = {"forward_ms": forward, "categories": {c: {"ms": v} for c, v in cats.items()}}
    if per_layer is not None:
        hooks["per_layer"] = [{"layer": fqn, "categories": row} for fqn, row in per_layer]
    attribution = sections["attribution"]
    return {**sections, "attribution": {**attribution, "headline_method": "hooks",
                                        "methods": {**attribution["methods"], "hooks": hooks}}}


def test_extrapolation_scales_the_headline_methods_layers_where_it_times_them() -> None:
    # the profiler's layers: its mixer twice as slow in the second (a pass that slowed it);
    # the hooks method's: both alike
    profiled = [("l.0", {"mixer": 2.0, "mlp": 2.0}), ("l.1", {"mixer": 4.0, "mlp": 2.0})]
    clocked = [("l.0", {"mixer": 2.0, "mlp": 2.0}), ("l.1", {"mixer": 2.0, "mlp": 2.0})]
    sections = _sections(profiled, {"l.0": "a", "l.1": "a"}, {"a": 6})
    sections["profile"] = {"overhead_ratio": 3.0}
    whole = depth.finish(_with_hooks(sections, clocked, forward=9.0))["depth"]["whole"]
    assert whole["attribution_method"] == "hooks"
    # busy 1 + 8 ms, four more layers of 4 ms: g = 25 / 9; the shares are the hooks method's
    assert whole["factor"] == pytest.approx(25 / 9)
    assert whole["categories"]["mixer"]["share"] == pytest.approx(12 / 25)
    assert whole["categories"]["mlp"]["share"] == pytest.approx(12 / 25)
    assert whole["layer_ms"]["a"] == pytest.approx(4.0 * sections["timing"]["median"] / 9.0)
    # the layers' proportions are not the profiled pass's: nothing to say of its slowdown
    assert not any("profiled pass" in n for n in whole["notes"])
    # without per-layer times of its own (an older record, or a GPU's profiler headline)
    # the profiler's layers and categories are scaled, as before
    older = depth.finish(_with_hooks(sections, None, forward=9.0))["depth"]["whole"]
    assert older["attribution_method"] == "profiler"
    # busy: embeddings, head, the layers' 12 ms, and four more layers at their mean of 5 ms
    g = (1 + 1 + 10 + 4 * 5) / (1 + 1 + 10)
    assert older["categories"]["mixer"]["share"] == pytest.approx((6 + 4 * 3) / (32 + 2 * g))
    assert older["notes"][-1].startswith("the profiled pass took 3.0x the unprofiled forward")


def test_no_whole_figures_without_every_measured_layers_time() -> None:
    sections = _sections([("l.0", {"mlp": 2.0})], {"l.0": "a"}, {"a": 4})
    sections["depth"]["measured_layers"].append({"index": 3, "kind": "a", "layer": "l.9"})
    sections["depth"]["measured"] = {"a": 2}
    assert depth.finish(sections)["depth"]["whole"] is None
    assert depth.finish({"timing": {}})  == {"timing": {}}


def test_label_says_what_was_measured() -> None:
    assert depth.label(4, 48) == "measured 4 of 48 layers; whole-model figures extrapolated"
    assert depth.label(4, 24, extrapolated=False) == "reduced depth: 4 of 24 layers"


# --- what the pages, the summary and compare say -------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
REDUCED = {"granitemoe-1b-a400m-4l": "reduced depth: 4 of 24 layers",
           "falcon-h1-0.5b-4l": "reduced depth: 4 of 36 layers"}


def test_setting_label_never_calls_a_reduced_model_full_size() -> None:
    from reportgen.render.pages import setting_label

    base = {"mode": "forward", "dtype": "fp32", "attn": "sdpa", "batch": 1}
    assert setting_label({**base, "scale": "reference", "depth": ""}).endswith("full-size model")
    label = setting_label({**base, "scale": "reference", "depth": depth.label(4, 48)})
    assert label.endswith("full-width model, measured 4 of 48 layers; whole-model figures extrapolated")
    assert "full-size" not in label
    assert setting_label({**base, "scale": "tiny", "depth": depth.label(2, 32)}).endswith(
        "tiny test-size model, measured 2 of 32 layers; whole-model figures extrapolated")


def test_committed_reduced_presets_read_as_reduced_depth() -> None:
    """The committed records of the presets that keep 4 of their checkpoint's layers were
    made before the depth section: the preset's own layer counts label them."""
    from reportgen.records.load import load_runs
    from reportgen.render import analysis
    from reportgen.render.pages import setting_label

    frame = analysis.combinations_frame(load_runs(ROOT / "runs"))
    reduced = frame[frame["model"].isin(list(REDUCED))]
    assert not reduced.empty
    for _, row in reduced.iterrows():
        assert row["depth"] == REDUCED[row["model"]]
        assert "full-size" not in setting_label(row.to_dict())
    # every other model is whole, or was measured with --layers (its id ends in --Nl, or
    # --Nl--Me with --experts) or reduced by the pre-flight (its reason kept), and says how
    # many of its layers
    others = frame[~frame["model"].isin(list(REDUCED))]
    for _, row in others.iterrows():
        cut = re.search(r"--(\d+)l(?:--\d+e)?$", str(row["combo_id"]))
        experts = re.search(r"--\d+e$", str(row["combo_id"]))
        assert (row["depth"] == "") == (cut is None and experts is None and not row["depth_reason"])
        if cut:
            assert f"measured {cut.group(1)} of " in row["depth"]


@pytest.mark.slow
def test_no_rendered_page_calls_a_reduced_model_full_size(committed_project: Path) -> None:
    import html

    from reportgen.records.load import load_runs
    from reportgen.records.schema import current_runs
    from reportgen.render import analysis

    docs = committed_project / "docs"  # the committed runs, claims and bench results, rendered
    # as a reader sees them: a label's apostrophe ("the experts' time") is escaped in the Markdown
    pages = {p: html.unescape(p.read_text(encoding="utf-8")) for p in docs.rglob("*.md")}
    frame = analysis.combinations_frame(current_runs(load_runs(ROOT / "runs")))
    # the models the pages show measured with fewer layers than they have, with the words
    # their records give (the presets of 4 layers, every --layers measurement)
    reduced = {str(m): {str(d) for d in part["depth"] if d}
               for m, part in frame.groupby("model") if (part["depth"] != "").all()}
    assert reduced
    for model, labels in reduced.items():
        own = [text for p, text in pages.items() if p.stem == model]
        assert len(own) >= 2  # the model's page and its page on each hardware
        for text in own:
            settings = [line for line in text.splitlines() if "batch 1," in line and "data-spec" not in line]
            assert settings and all("full-size model" not in line for line in settings)
            assert any(label in text for label in labels)
        rows = [line for text in pages.values() for line in text.splitlines()
                if line.startswith(f"| [{model}]") and "batch" in line]
        assert rows and all(any(label in line for label in labels) for line in rows)


def _depth_record(tmp_path: Path) -> dict[str, Any]:
    sections = _sections([("l.0", {"mlp": 2.0}), ("l.1", {"mlp": 3.0})], {"l.0": "a", "l.1": "a"}, {"a": 8})
    sections["timing"].update(n=3, samples=[1.0, 2.0, 3.0])
    return {"id": "m--forward--fp32--sdpa--b1--s8--2l", "status": "ok",
            "combination": {"model": "m", "scale": "reference", "mode": "forward", "layers": 2},
            **depth.finish(sections)}


def test_summary_row_carries_the_label_and_the_whole_model() -> None:
    from reportgen.commands.summary import csv_columns, depth_text
    from reportgen.render.runtable import combination_row

    row = combination_row(_depth_record(Path(".")))
    assert row["depth"] == "measured 2 of 8 layers; whole-model figures extrapolated"
    assert row["whole_ms"]["median"] > row["latency_ms"]["median"]
    assert depth_text(row).startswith("measured 2 of 8 layers; whole-model figures extrapolated: whole model ")
    columns = csv_columns([row])
    assert "depth" in columns and "whole_ms.median" in columns
    plain = combination_row({"id": "x", "status": "ok", "combination": {"model": "gpt2", "scale": "reference"}})
    assert "depth" not in plain and "depth" not in csv_columns([plain])


def test_compare_row_names_the_depth() -> None:
    from reportgen.render.compare import compare_records

    record = _depth_record(Path("."))
    row = compare_records(record, record)
    assert row["depth"] == "measured 2 of 8 layers; whole-model figures extrapolated"


def test_check_against_the_whole_model_measured() -> None:
    reduced = _depth_record(Path("."))
    whole_section = reduced["depth"]["whole"]
    inside = {"timing": {"median": whole_section["median_ms"] * 1.02}}
    found = depth.check(inside, reduced)
    assert found is not None and found["within"] and found["ratio"] == pytest.approx(1 / 1.02)
    assert found["layers"] == 2 and found["full_layers"] == 8
    outside = {"timing": {"median": whole_section["ci_high_ms"] * 2}}
    assert depth.check(outside, reduced)["within"] is False  # type: ignore[index]
    assert depth.check(inside, {"depth": {"whole": None}}) is None


def test_an_expert_reduced_step_that_reaches_more_experts_than_built_says_its_experts_read_low() -> None:
    """A prefill of 128 tokens, each routed to 8 of 256 experts, reaches nearly all 256 in
    the whole model; a build with 8 runs them all on the same 8, so its experts' time reads
    low and its figures say so. A decode step of one token reaches 8, which the build has:
    no words, unless it measured a correction its figures carry. A build with every
    expert: no words."""
    from reportgen import depth

    def record(mode: str, seq: int, built: int, batch: int = 1) -> dict[str, object]:
        return {"combination": {"model": "m", "mode": mode, "seq_len": seq, "batch_size": batch},
                "depth": {"layers": 2, "full_layers": 61, "whole": {"median_ms": 1.0},
                          "experts": {"measured": built, "full": 256, "top_k": 8}}}

    prefill = record("prefill", 128, 8)
    assert depth.experts_reached(prefill) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 128))
    assert "experts' time is understated" in depth.record_label(prefill)
    assert "about 252 of its experts a layer, this build has 8" in depth.record_label(prefill)
    assert depth.experts_understated(record("decode", 128, 8)) == ""
    assert "understated" in depth.experts_understated(record("decode", 128, 8, batch=64))
    assert depth.experts_understated(record("prefill", 128, 256)) == ""
    assert depth.experts_reached({"combination": {"mode": "prefill"}}) is None
    # a decode step measured its correction too (the module's own work over its experts):
    # its figures say by how much they were scaled
    decode = record("decode", 128, 8)
    decode["depth"]["experts"]["cost"] = {"tokens": 1, "layers": 2, "experts": {  # type: ignore[index]
        "factor": 1.05, "factor_low": 1.03, "factor_high": 1.07, "ratios": [1.03, 1.05, 1.07], "widened_to": 256,
        "calls": 1}}
    assert depth.experts_understated(decode) == ("the experts' time scaled by 1.05, measured widened to all 256 "
                                                 "(a step reaches about 8 of them a layer, this build has 8)")
