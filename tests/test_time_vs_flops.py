"""The findings page "Time share against FLOP share": its rows read from the records, a
category with no FLOPs shown without a ratio, and the page linked from the findings index."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from reportgen.render.flop_shares import PATH, category_rows, exceeding

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "runs_fixture"


def _record(shares: dict[str, float], flops: dict[str, float]) -> dict[str, Any]:
    return {"attribution": {"categories": {c: {"share": s, "share_low": s * 0.9, "share_high": s * 1.1}
                                           for c, s in shares.items()}},
            "flops": {"analytic": flops}}


def test_shares_and_ratio_come_from_the_record() -> None:
    rec = _record({"mlp": 0.6, "norm": 0.1, "attention.core": 0.3},
                  {"mlp": 300.0, "norm": 0.0, "attention.core": 100.0})
    rows = {r["category"]: r for r in category_rows(rec, ("mlp", "norm", "attention.core", "head"))}
    assert rows["mlp"]["flop_share"] == pytest.approx(0.75)
    assert rows["mlp"]["ratio"] == pytest.approx(0.6 / 0.75)
    assert (rows["mlp"]["time_low"], rows["mlp"]["time_high"]) == pytest.approx((0.54, 0.66))
    assert rows["attention.core"]["ratio"] == pytest.approx(0.3 / 0.25)
    # no FLOPs: a FLOP share of 0 and no ratio, never 0 or infinity
    assert rows["norm"]["flop_share"] == 0.0 and rows["norm"]["ratio"] is None
    # not in the record at all: nothing known
    assert rows["head"]["time_share"] is None and rows["head"]["flop_share"] is None
    assert rows["head"]["ratio"] is None
    # the excess is in points of share; a category under its FLOP share is never named
    assert [g["category"] for g in exceeding(list(rows.values()))] == ["norm", "attention.core"]
    assert category_rows({"attribution": {"categories": {"mlp": {"share": 1.0}}}}, ("mlp",))[0]["flop_share"] is None


def test_a_category_the_analytic_count_misses_has_no_flop_share() -> None:
    """Analytic 0 where the FLOP counter counts some (a tied output head in a training
    step): the FLOP share is unknown, not 0, and the category is never named as exceeding."""
    rec = _record({"mlp": 0.6, "head": 0.3}, {"mlp": 300.0, "head": 0.0})
    rec["flops"]["counted"] = {"mlp": 300.0, "head": 120.0}
    rows = {r["category"]: r for r in category_rows(rec, ("mlp", "head"))}
    assert rows["head"]["flop_share"] is None and rows["head"]["ratio"] is None
    assert rows["head"]["missed"] == 120.0 and rows["mlp"]["missed"] is None
    assert rows["mlp"]["flop_share"] == 1.0
    assert exceeding(list(rows.values())) == []


@pytest.fixture(scope="module")
def site(rendered: Path) -> Path:
    """The test site (the runs fixture with its claims), rendered once per session."""
    return rendered / "docs"


def test_page_rows_match_the_records_they_read(site: Path) -> None:
    rows = json.loads((site / "findings" / "charts" / "time-vs-flops--shares.json").read_text())
    assert {r["hardware"] for r in rows} == {"cpu-synthetic-epyc-2c", "nvidia-synthetic-h200-1x"}
    row = next(r for r in rows if r["hardware"] == "cpu-synthetic-epyc-2c" and r["model"] == "bert-base"
               and r["category"] == "mlp")
    run = next(p for p in (FIXTURE / row["hardware"]).iterdir() if row["run_id"].endswith(p.name))
    record = json.loads((run / "combinations" / f"{row['combo_id']}.json").read_text())
    cat = record["attribution"]["categories"]["mlp"]
    analytic = record["flops"]["analytic"]
    total = sum(v for v in analytic.values() if v > 0)
    assert row["time_share"] == pytest.approx(cat["share"])
    assert row["flops"] == pytest.approx(analytic["mlp"])
    assert row["flop_share"] == pytest.approx(analytic["mlp"] / total)
    assert row["ratio"] == pytest.approx(cat["share"] / (analytic["mlp"] / total))
    text = (site / PATH).read_text(encoding="utf-8")
    assert f"| `mlp` | {100 * cat['share']:.1f}%" in text
    assert f"| {100 * analytic['mlp'] / total:.2f}% | {row['ratio']:.2f}x |" in text


def test_a_category_with_no_flops_shows_a_dash(site: Path) -> None:
    rows = json.loads((site / "findings" / "charts" / "time-vs-flops--shares.json").read_text())
    zero = [r for r in rows if r["flop_share"] == 0 and r["time_share"]]
    assert zero, "the fixture has a category with time and no FLOPs"
    assert all(r["ratio"] is None for r in zero)
    text = (site / PATH).read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith(f"| `{zero[0]['category']}` |"):
            assert line.rstrip().endswith("| – |") and "inf" not in line
    assert not re.search(r"\| (inf|0\.00x)", text)


def test_page_cites_the_paper_as_unchecked_context_and_is_linked(site: Path) -> None:
    text = (site / PATH).read_text(encoding="utf-8")
    assert text.startswith('---\ntitle: "Time share against FLOP share"')
    assert "(https://arxiv.org/abs/2007.00072)" in text
    assert "as secondary sources give its Table 1 (not checked\nagainst the paper here)" in text
    assert "our `norm` is the layer\nand RMS norms only" in text
    assert "## CPU" in text and "whose time share most exceeds their FLOP share" in text
    index = (site / "findings" / "index.md").read_text(encoding="utf-8")
    assert "](time-vs-flops.md)" in index
