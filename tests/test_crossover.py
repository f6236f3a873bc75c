"""Where attention overtakes the rest of a layer: the crossover length with its interval
(within the measured range, extrapolated from the fits beyond it, below it, not at all),
its words on the pages, and the home page's chart of attention's share against length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support import synthetic
from support.records import HW, edit_records

from reportgen.categories import ATTENTION_CATEGORIES, CATEGORIES
from reportgen.render import crossover, longcontext, render, templating

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree


def _rows(seqs: list[int], att: list[float], mlp: list[float], width: float | None = None) -> pd.DataFrame:
    """One row per length; ``width``: each share's interval, that fraction either side."""
    rows = []
    for s, a, m in zip(seqs, att, mlp):
        row: dict[str, Any] = {f"ms:{c}": 0.0 for c in CATEGORIES}
        row.update({"seq": s, "ms:attention.core": a, "ms:mlp": m})
        if width is not None:
            for cat, ms in (("attention.core", a), ("mlp", m)):
                row[f"share_ci_low:{cat}"] = ms / (a + m) * (1 - width)
                row[f"share_ci_high:{cat}"] = ms / (a + m) * (1 + width)
        rows.append(row)
    return pd.DataFrame(rows)


def _text(c: dict[str, Any], macro: str = "crossover") -> str:
    env = templating.environment()
    return env.from_string(f'{{% from "_macros.md.j2" import {macro} %}}{{{{ {macro}(c) }}}}').render(c=c)


def test_crossover_is_interpolated_on_log_axes() -> None:
    out = crossover.attention_crossover(_rows([100, 400], [1.0, 16.0], [4.0, 4.0]))
    assert out["status"] == "crossover"
    assert out["seq"] == pytest.approx(200.0)
    # without share intervals there is no interval, and the page says why
    assert out["seq_low"] is None and out["seq_high"] is None and not out["per_length"]
    assert "no interval" in _text(out)


SEQS = [256, 512, 1024, 2048]
ATT = [1.0, 4.0, 16.0, 64.0]  # quadratic
MLP = [5.0, 10.0, 20.0, 40.0]  # linear: attention passes it between 1,024 and 2,048


def test_a_crossing_inside_the_range_has_an_interval_that_holds_it_and_narrows_with_its_inputs() -> None:
    wide = crossover.attention_crossover(_rows(SEQS, ATT, MLP, width=0.2))
    tight = crossover.attention_crossover(_rows(SEQS, ATT, MLP, width=0.02))
    for out in (wide, tight):
        assert out["status"] == "crossover" and out["per_length"] and out["level"] == 0.95
        assert out["seq"] == pytest.approx(1280.0)  # where s^2 / 65,536 = s / 51.2
        assert out["seq_low"] < out["seq"] < out["seq_high"]
        assert not out["below"] and not out["beyond"]
    assert tight["seq_high"] - tight["seq_low"] < wide["seq_high"] - wide["seq_low"]
    assert wide["seq_low"] < tight["seq_low"] and tight["seq_high"] < wide["seq_high"]
    text = _text(tight)
    assert f"[{tight['seq_low']:,.0f}, {tight['seq_high']:,.0f}]" in text and "95%" in text
    assert _text(tight, "crossover_short").startswith(f"{tight['seq']:,.0f} [")


def test_an_interval_end_outside_the_range_is_said_to_be_outside() -> None:
    """Intervals so wide that attention's top passes the MLP's bottom at the shortest
    length, and its bottom never passes the MLP's top: open at both ends."""
    out = crossover.attention_crossover(_rows(SEQS, ATT, MLP, width=0.9))
    assert out["status"] == "crossover" and out["below"] and out["beyond"]
    assert out["seq_low"] is None and out["seq_high"] is None
    assert "[below 256, beyond 2,048]" in _text(out, "crossover_short")


def test_beyond_the_range_the_fits_are_extrapolated_and_marked_so() -> None:
    """Attention quadratic, the MLP linear, attention still behind at 1,024: the fits
    cross at 4 x 1,024; the interval widens with the per-length intervals. Fits that cross
    only past ``HORIZON`` times the longest length are not read there."""
    far = crossover.attention_crossover(_rows([256, 512, 1024], [1.0, 4.0, 16.0], [40.0, 80.0, 160.0], width=0.02))
    assert crossover.HORIZON < 10 and far["status"] == "not-within-range" and not far["extrapolated"]
    seqs, att, mlp = [256, 512, 1024], [1.0, 4.0, 16.0], [16.0, 32.0, 64.0]
    tight = crossover.attention_crossover(_rows(seqs, att, mlp, width=0.02))
    wide = crossover.attention_crossover(_rows(seqs, att, mlp, width=0.2))
    for out in (tight, wide):
        assert out["status"] == "not-within-range" and out["extrapolated"] and out["fitted"]
        assert out["seq"] == pytest.approx(4096.0)
        assert 1024 <= out["seq_low"] < out["seq"] < out["seq_high"]
    assert wide["seq_high"] - wide["seq_low"] > tight["seq_high"] - tight["seq_low"]
    text = _text(tight)
    assert "Beyond 1,024: about **4,096 tokens** [" in text and "*extrapolated*" in text
    assert "extrapolated from the fits" in _text(tight, "crossover_short")
    # the fits' uncertainty counts too: scattered ratios give a wider interval than exact ones
    noisy = crossover.attention_crossover(_rows([256, 512, 1024, 2048], [1.0, 5.0, 14.0, 70.0],
                                                [20.0, 40.0, 80.0, 160.0], width=0.02))
    assert noisy["extrapolated"] and (noisy["seq_high"] is None
                                      or noisy["seq_high"] / noisy["seq_low"] > tight["seq_high"] / tight["seq_low"])


def test_fits_that_do_not_cross_say_not_within_range() -> None:
    out = crossover.attention_crossover(_rows([256, 512, 1024], [1.0, 2.0, 4.0], [40.0, 80.0, 160.0], width=0.05))
    assert out["status"] == "not-within-range" and out["fitted"] and not out["extrapolated"]
    assert out["seq"] is None
    assert "do not cross" in _text(out)
    assert _text(out, "crossover_short") == "not within range"
    # two lengths give no fits: nothing is extrapolated
    two = crossover.attention_crossover(_rows([256, 512], [1.0, 2.0], [40.0, 80.0]))
    assert two["status"] == "not-within-range" and not two["fitted"]
    assert _text(two, "crossover_short") == "not within measured range"


@pytest.mark.parametrize(("att", "status"), [([1.0, 2.0], "not-within-range"),
                                             ([9.0, 20.0], "attention-already-larger")])
def test_crossover_outside_the_measured_range(att: list[float], status: str) -> None:
    assert crossover.attention_crossover(_rows([100, 400], att, [4.0, 8.0]))["status"] == status


def test_attention_already_larger_and_too_few_lengths() -> None:
    out = crossover.attention_crossover(_rows(SEQS, [20.0, 40.0, 80.0, 160.0], MLP, width=0.1))
    assert out["status"] == "attention-already-larger" and out["seq"] is None
    assert "already takes more time than the MLP at the shortest measured length (256" in _text(out)
    one = crossover.attention_crossover(_rows([256], [1.0], [4.0]))
    assert one["status"] == "insufficient-data" and "Too few measured lengths" in _text(one)


def test_crossover_weighs_attention_against_the_models_largest_other_part() -> None:
    """A mixture of experts has no MLP: attention is weighed against its experts; a
    hybrid whose token mixers take more time than its MLP, against the mixers."""
    moe = _rows([100, 400], [1.0, 16.0], [0.0, 0.0])
    moe["ms:moe.experts"] = [4.0, 4.0]
    out = crossover.attention_crossover(moe)
    assert out["against"] == "the experts" and out["status"] == "crossover"
    hybrid = _rows([100, 400], [1.0, 2.0], [1.0, 1.0])
    hybrid["ms:mixer"] = [5.0, 10.0]
    out = crossover.attention_crossover(hybrid)
    assert out["against"] == "the token mixers" and out["status"] == "not-within-range"
    assert crossover.attention_crossover(_rows([100, 400], [1.0, 2.0], [0.0, 0.0]))["against"] is None
    text = _text(out)
    assert "overtake the token mixers" in text and "MLP" not in text


# --- the pages ---------------------------------------------------------------------------

LENGTHS = (128, 256, 512)
# gpt2's attention (its core alone) against its MLP: behind at 128, ahead at 512
CROSSING = {128: (0.2, 0.5), 256: (0.35, 0.4), 512: (0.5, 0.3)}


def _crossing(record: dict[str, Any]) -> None:
    seq = record["combination"]["seq_len"]
    median = record["timing"]["median"]
    cats = record["attribution"]["categories"]
    core, mlp = CROSSING[seq]
    for cat in (c for c in ATTENTION_CATEGORIES if c in cats):
        cats[cat] = {**cats[cat], "ms": 0.0, "share": 0.0, "share_low": 0.0, "share_high": 0.0}
    for cat, share in (("attention.core", core), ("mlp", mlp)):
        cats[cat] = {**cats[cat], "ms": share * median, "share": share,
                     "share_low": 0.95 * share, "share_high": 1.05 * share}


def test_the_home_page_charts_attentions_share_and_the_model_page_gives_the_interval(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    synthetic.generate(runs, 9, models=synthetic.MODELS[:3], hardware=synthetic.HARDWARE[:1],
                       attns=("sdpa",), seqs=LENGTHS, skipped=0, failed=0, traces=False)
    edit_records(runs, "gpt2", _crossing)
    docs = tmp_path / "docs"
    render(runs, docs, svg=False)
    home = (docs / "index.md").read_text(encoding="utf-8")
    assert "## Attention's share against context length" in home
    assert 'data-chart="attention-share"' in home
    rows = json.loads((docs / "charts" / "index--attention-share-chart.json").read_text(encoding="utf-8"))
    lines = {r["series"] for r in rows if r["kind"] == "share"}
    assert "gpt2, forward" in lines and len(lines) == 3
    marks = [r for r in rows if r["kind"] == "crossover"]
    assert "gpt2" in {m["model"] for m in marks}
    mark = next(m for m in marks if m["model"] == "gpt2")
    assert 256 < mark["seq_low"] < mark["seq"] < mark["seq_high"] < 512 and mark["level"] == 0.95
    expected = crossover.attention_crossover(_rows(list(LENGTHS), [CROSSING[s][0] for s in LENGTHS],
                                                   [CROSSING[s][1] for s in LENGTHS], width=0.05))
    assert mark["seq"] == pytest.approx(expected["seq"])
    assert mark["seq_low"] == pytest.approx(expected["seq_low"])
    table = (docs / "charts" / "index--crossovers.csv").read_text(encoding="utf-8")
    assert table.splitlines()[0].startswith("hardware,model,mode,depth,against,status,crossover_seq")
    assert ",0.95," in table
    low, point, high = (f"{expected[k]:,.0f}" for k in ("seq_low", "seq", "seq_high"))
    assert "| gpt2 | forward |" in home and f"{point} [{low}, {high}]" in home
    model = (docs / "models" / "gpt2.md").read_text(encoding="utf-8")
    assert f"overtakes the MLP at about **{point} tokens** [{low}, {high}]" in model
    combination = next(p for p in (docs / "hardware").rglob("gpt2.md")).read_text(encoding="utf-8")
    assert f"**{point} tokens** [{low}, {high}]" in combination
    hardware = (docs / "hardware" / HW / "index.md").read_text(encoding="utf-8")
    assert f"| {point} [{low}, {high}] |" in hardware


def test_a_line_needs_three_lengths_and_says_how_deep_it_was_measured() -> None:
    frame = pd.DataFrame([
        {"hardware": "h", "model": m, "status": "ok", "architecture": "decoder", "scale": "reference",
         "depth": depth, "mode": "prefill", "dtype": "fp32", "attn": "sdpa", "batch": 1, "compile": "none",
         "seq": s, "attention_share": 0.3, "sequence": "tokens", "input": "",
         **{f"ms:{c}": 0.0 for c in CATEGORIES}, "ms:attention.core": 1.0, "ms:mlp": 2.0}
        for m, depth, seqs in (("deep", "measured 2 of 48 layers; whole-model figures extrapolated",
                                (512, 1024, 2048)), ("short", "", (512, 1024)))
        for s in seqs])
    lines = longcontext.share_lines(frame, {"h": "CPU"})
    assert [line["model"] for line in lines] == ["deep"]
    assert lines[0]["depth"] == "measured 2 of 48 layers; whole-model figures extrapolated"
    assert longcontext.crossover_table(lines)[0]["depth"] == lines[0]["depth"]
