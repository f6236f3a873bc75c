"""Mixture-of-experts routing and what a sequence length counts, on the site and in
``reportgen summary``: a record with a ``moe`` section gets "Where the router sent the
tokens" (a sentence, a table per layer, a chart with its downloads); a dense record gets
none; a vision or speech record's pages say patches or frames where they state a length.
Records are built as for the architecture categories: the synthetic tree, edited (support.records)."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support import synthetic
from support.records import HW, MOE, synthetic_tree

from reportgen import fmt
from reportgen.commands.summary import csv_columns, render_table
from reportgen.render import render
from reportgen.render.runtable import MOE_LOAD, combination_row

# Per layer, tokens per expert of the s256 forward (256 tokens, top-2: 512 per layer) and
# of the s128 one; the figures below are worked out by hand from them.
S256 = [[100, 100, 100, 212], [128, 0, 192, 192]]  # busiest/mean 212/128, 192/128; 1 idle
S128 = [[64, 64, 64, 64], [60, 68, 64, 64]]  # 1.00, 68/64
DECODE = [[1, 0, 1, 0], [0, 1, 1, 0]]  # one token, top-2: 2 per layer, 2 idle in each


def moe_section(rows: list[list[int]], tokens: int) -> dict[str, Any]:
    """A record's ``moe`` section as reportgen.profile.routing.summarise writes it."""
    per_layer = []
    for i, row in enumerate(rows):
        mean = sum(row) / len(row)
        cv = (sum((c - mean) ** 2 for c in row) / len(row)) ** 0.5 / mean
        per_layer.append({"module": f"model.layers.{i}.mlp.experts", "tokens_per_expert": row,
                          "max_over_mean": max(row) / mean, "cv": cv,
                          "idle_experts": sum(1 for c in row if c == 0)})
    ratios = [p["max_over_mean"] for p in per_layer]
    return {"layers": len(rows), "experts": len(rows[0]), "tokens": tokens,
            "top_k": round(sum(map(sum, rows)) / len(rows) / tokens, 3),
            "max_over_mean": max(ratios), "mean_max_over_mean": sum(ratios) / len(ratios),
            "idle_experts": sum(p["idle_experts"] for p in per_layer), "per_layer": per_layer}


def _routed(record: dict[str, Any]) -> None:
    MOE(record)
    seq = record["combination"]["seq_len"]
    record["moe"] = moe_section(S256 if seq == 256 else S128, seq)


def _inputs(main: str, sequence: str) -> Any:
    def edit(record: dict[str, Any]) -> None:
        record["inputs"].update(input=main, sequence=sequence)
    return edit


def _add_decode(root: Path) -> None:
    """A decode step of the MoE model beside its forwards: one token routed."""
    run_dir = next(root.rglob("run.json")).parent
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    record = synthetic.combination_record(synthetic.HARDWARE[0], synthetic.MODELS[2], "sdpa",
                                          256, run_id, mode="decode")
    MOE(record)
    record["inputs"].update(input_shape=[1, 1], tokens=1, kv_len=256)
    record["moe"] = moe_section(DECODE, 1)
    record["profile"]["trace"] = None
    (run_dir / "combinations" / f"{record['id']}.json").write_text(json.dumps(record, indent=2))


def _render(tmp_path: Path, edits: dict[str, Any], decode: bool = False) -> Path:
    runs = synthetic_tree(tmp_path / "runs", edits)
    if decode:
        _add_decode(runs)
    docs = tmp_path / "docs"
    render(runs, docs, svg=False)
    return docs


def _read(docs: Path, rel: str) -> str:
    return (docs / rel).read_text(encoding="utf-8")


def _csv(docs: Path, rel: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(_read(docs, rel)))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def _spec(page: str, name: str) -> dict[str, Any]:
    found = re.search(rf'data-chart="{re.escape(name)}" data-spec="([^"]*)"', page)
    assert found is not None, f"no chart {name}"
    return json.loads(html.unescape(found.group(1)))


def _section(page: str) -> str:
    start = page.index("## Where the router sent the tokens")
    return page[start:page.index("\n## ", start + 1)]


# --- the routing section -----------------------------------------------------------


def test_a_mixture_of_experts_shows_where_the_router_sent_the_tokens(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"llama-tiny": _routed})
    page = _read(docs, f"hardware/{HW}/llama-tiny.md")
    section = _section(page)
    # the headline combination (s256): 256 tokens, top-2 of 4 experts, 2 layers; busiest
    # 212/128 = 1.66x, the layers' busiest average (1.65625 + 1.5) / 2 = 1.58x; 1 idle
    assert ("In one forward of the headline combination (forward, fp32, sdpa, batch 1, "
            "full-size model, 256 tokens), the router sent 256 tokens each to 2 of the 4 "
            "experts per layer (2 layers): the busiest expert took **1.66x** the mean load "
            "(1.58x averaged over the layers) and on average **0.5** of the 4 experts in a "
            "layer got no token (1 over the 2 layers).") in section
    assert "Decode routes one token" not in section  # no decode combination here
    assert ("| model.<wbr>layers.<wbr>0.<wbr>mlp.<wbr>experts | 100, 100, 100, 212 | 1.66x | 0 |"
            in section)
    assert "| model.<wbr>layers.<wbr>1.<wbr>mlp.<wbr>experts | 128, 0, 192, 192 | 1.50x | 1 |" in section
    # the record it reads is linked
    assert "llama-tiny--forward--fp32--sdpa--b1--s256.json" in section
    # both forwards in the combinations table, each with its own figures
    assert "b1--<wbr>s128 | 128 | 2 | 1.06x | 1.03x | 0 of 4 |" in section
    assert "b1--<wbr>s256 | 256 | 2 | 1.66x | 1.58x | 0.5 of 4 |" in section

    # the chart: one bar per (layer, expert) with the layer's mean, in the page and its downloads
    spec = _spec(section, "routing")
    values = spec["data"]["values"]
    assert [(v["layer"], v["expert"], v["tokens"]) for v in values] == [
        (layer, expert, tokens) for layer, row in enumerate(S256) for expert, tokens in enumerate(row)]
    assert {v["mean"] for v in values} == {128.0}
    assert "charts/llama-tiny--routing-chart.csv" in section
    assert "charts/llama-tiny--routing.svg" in section
    fields, rows = _csv(docs, f"hardware/{HW}/charts/llama-tiny--routing-chart.csv")
    assert fields == ["module", "layer", "expert", "tokens", "mean", "over_mean"]
    assert [int(r["tokens"]) for r in rows] == [c for row in S256 for c in row]
    assert float(rows[3]["over_mean"]) == pytest.approx(212 / 128)
    assert rows[5]["module"] == "model.layers.1.mlp.experts" and rows[5]["tokens"] == "0"
    chart_json = json.loads(_read(docs, f"hardware/{HW}/charts/llama-tiny--routing-chart.json"))
    assert chart_json == [{k: v for k, v in value.items()} for value in values]
    _, layers = _csv(docs, f"hardware/{HW}/charts/llama-tiny--routing-layers.csv")
    assert [r["tokens_per_expert"] for r in layers] == ["100 100 100 212", "128 0 192 192"]
    assert [float(r["max_over_mean"]) for r in layers] == pytest.approx([212 / 128, 1.5])
    assert [r["routed"] for r in layers] == ["512", "512"]

    # the site's table of every combination carries the figure, for the MoE rows only
    fields, rows = _csv(docs, "data/combinations.csv")
    assert MOE_LOAD in fields
    loads = {r["combo_id"]: r[MOE_LOAD] for r in rows}
    assert float(loads["llama-tiny--forward--fp32--sdpa--b1--s256"]) == pytest.approx(212 / 128)
    assert loads["gpt2--forward--fp32--sdpa--b1--s256"] == ""


def test_dense_models_have_no_routing_section(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"llama-tiny": _routed})
    for model in ("bert-base", "gpt2"):
        page = _read(docs, f"hardware/{HW}/{model}.md")
        assert "Where the router sent the tokens" not in page
        assert 'data-chart="routing"' not in page
        assert not list((docs / "hardware" / HW / "charts").glob(f"{model}--routing*"))
    # a tree of dense models alone: no routing anywhere, no MoE or sequence columns
    dense = _render(tmp_path / "dense", {})
    assert not list(dense.rglob("*routing*"))
    assert not any("Where the router sent" in p.read_text() for p in dense.rglob("*.md"))
    fields, _ = _csv(dense, "data/combinations.csv")
    assert MOE_LOAD not in fields and "sequence" not in fields and "input" not in fields


def test_decode_figures_are_one_step(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"llama-tiny": _routed}, decode=True)
    section = _section(_read(docs, f"hardware/{HW}/llama-tiny.md"))
    assert "Decode routes one token per sequence, so a decode combination's figures describe one step" in section
    # the headline stays the s256 forward; the decode step is listed with its one token
    assert "In one forward of the headline combination" in section
    # idle experts per layer, not summed over the layers (4 over 2 layers of 4 experts)
    assert "decode--<wbr>fp32--<wbr>sdpa--<wbr>b1--<wbr>s256 | 1 | 2 | 2.00x | 2.00x | 2 of 4 |" in section


# --- what a length counts -----------------------------------------------------------


def test_vision_and_speech_pages_say_patches_and_frames(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"bert-base": _inputs("pixel_values", "patches"),
                              "gpt2": _inputs("input_features", "frames")})
    vision = _read(docs, f"hardware/{HW}/bert-base.md")
    assert "At 256 patches a forward pass takes **" in vision
    assert "budget is spent; at 256 patches it" in vision
    assert "| sequence length (patches) | median |" in vision
    assert "(128 to 256 patches)" in vision
    assert "tokens" not in vision
    assert _spec(vision, "scaling")["encoding"]["x"]["title"] == "sequence length (patches)"
    assert "forward, fp32, sdpa, batch 1, 256 patches" in vision  # the roofline's panels
    speech = _read(docs, f"hardware/{HW}/gpt2.md")
    assert ("At 256 frames (spectrogram frames after the encoder&#39;s stride-2 convolution) "
            "a forward pass takes") in speech
    assert "tokens" not in speech
    # a text model beside them still counts tokens
    assert "At 256 tokens a forward pass takes" in _read(docs, f"hardware/{HW}/llama-tiny.md")
    home = _read(docs, "index.md")
    assert "<small>(256 patches)</small>" in home and "<small>(256 frames)</small>" in home
    assert "<small>(256)</small>" in home  # llama-tiny, as before
    hardware = _read(docs, f"hardware/{HW}/index.md")
    assert "| 256 patches |" in hardware and "| 256 frames |" in hardware
    assert (_spec(hardware, "latency")["encoding"]["x"]["title"]
            == "sequence length (tokens, frames or patches)")
    model = _read(docs, "models/bert-base.md")
    assert "| sequence length (patches) |" in model and "tokens" not in model
    fields, rows = _csv(docs, "data/combinations.csv")
    assert {"input", "sequence"} <= set(fields)
    by_model = {r["model"]: (r["input"], r["sequence"]) for r in rows}
    assert by_model == {"bert-base": ("pixel_values", "patches"),
                        "gpt2": ("input_features", "frames"), "llama-tiny": ("", "tokens")}


def test_length_labels() -> None:
    assert fmt.length(512) == "512 tokens" and fmt.length(1500, "frames") == "1,500 frames"
    assert fmt.length_short(512) == fmt.length_short(512, "tokens") == "s512"
    assert fmt.length_short(196, "patches") == "196 patches"
    assert fmt.sequence_note("input_features", "frames") is not None
    assert fmt.sequence_note("pixel_values", "patches") is None
    assert fmt.sequence_note(None, None) is None


# --- reportgen summary ----------------------------------------------------------------


def _record(edit: Any | None = None) -> dict[str, Any]:
    record = synthetic.combination_record(synthetic.HARDWARE[0], synthetic.MODELS[2], "sdpa",
                                          256, "cpu/run")
    if edit is not None:
        edit(record)
    return record


def _table_text(rows: list[dict[str, Any]]) -> str:
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(render_table(rows))
    return console.export_text()


def test_summary_gives_the_moe_load_only_where_a_row_has_it() -> None:
    dense = combination_row(_record())
    assert MOE_LOAD not in dense
    assert MOE_LOAD not in csv_columns([dense])
    assert "MoE" not in _table_text([dense])
    routed = combination_row(_record(_routed))
    assert routed[MOE_LOAD] == pytest.approx(212 / 128)
    assert list(routed).index(MOE_LOAD) == list(routed).index("shares") - 1
    columns = csv_columns([dense, routed])
    assert columns.index(MOE_LOAD) == columns.index("compile_s") + 1
    text = _table_text([dense, routed])
    assert "MoE busiest/mean" in text and "1.66x" in text
