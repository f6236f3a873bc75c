"""The architecture categories (mixer, moe.router, moe.experts) on the site, in downloads
and in the read-side commands: shown only where a row has them (``shown_categories``), so
dense models' tables keep their columns and records written before these categories
existed (without their keys) still render."""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support import synthetic
from support.records import HW, MIXER, MOE, dense_zeros, synthetic_tree

from reportgen.categories import CATEGORIES, OPTIONAL_CATEGORIES
from reportgen.commands.summary import csv_columns
from reportgen.render import analysis, render, roofline
from reportgen.render.compare import compare_records
from reportgen.render.runtable import combination_row
from reportgen.render.shown import shown_categories

DENSE = tuple(c for c in CATEGORIES if c not in OPTIONAL_CATEGORIES)
# The home table's header row for dense models, as it was before these categories existed.
DENSE_HEADER = ("| model (tokens) | embeddings | attention.<wbr>qkv | attention.<wbr>core | "
                "attention.<wbr>out | mlp | norm | head | compiled | other | overhead | "
                "attention, all |")


# --- the rule ---------------------------------------------------------------------------


def test_shown_categories_reads_every_row_form() -> None:
    assert shown_categories([]) == DENSE
    # an older record's attribution: no key at all; a newer dense one: zeros; missing values
    assert shown_categories([{"mlp": {"share": 0.5}}]) == DENSE
    assert shown_categories([{"mixer": {"ms": 0.0, "share": 0.0}, "moe.router": 0,
                              "moe.experts": None}]) == DENSE
    assert shown_categories([{"share:mixer": math.nan, "ms:mixer": math.nan}]) == DENSE
    # one non-zero value in any row, in any form, shows that category (and only that one)
    assert shown_categories([{}, {"moe.experts": {"share": 0.3}}]) == (
        *DENSE[:5], "moe.experts", *DENSE[5:])
    assert "mixer" in shown_categories([{"category": "mixer", "share": 0.1, "ms": 2.0}])
    assert "mixer" not in shown_categories([{"category": "mlp", "share": 0.1}])
    assert "moe.router" in shown_categories([{"share:moe.router": math.nan, "ms:moe.router": 0.4}])
    frame = pd.DataFrame([{"share:mixer": 0.0}, {"share:mixer": 0.2}])
    assert shown_categories(frame) == (*DENSE[:4], "mixer", *DENSE[4:])
    # display order always
    everything = [{c: 0.1 for c in OPTIONAL_CATEGORIES}]
    assert shown_categories(everything) == CATEGORIES


# --- a runs tree: an older dense record, a newer dense one, a mixture of experts -------


def _render(tmp_path: Path, edits: dict[str, Any]) -> Path:
    docs = tmp_path / "docs"
    render(synthetic_tree(tmp_path / "runs", edits), docs, svg=False)
    return docs


def _read(docs: Path, rel: str) -> str:
    return (docs / rel).read_text(encoding="utf-8")


def _header(page: str) -> str:
    return next(line for line in page.splitlines() if line.startswith("| model (tokens) |"))


def _csv(docs: Path, rel: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(_read(docs, rel)))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def _category_domains(page: str) -> dict[str, list[tuple[str, ...]]]:
    """The colour domains of a page's category charts, by chart name."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for name, spec in re.findall(r'data-chart="([^"]*)" data-spec="([^"]*)"', page):
        text = json.dumps(json.loads(html.unescape(spec)))
        for m in re.finditer(r'"domain": (\[[^\]]*\])', text):
            domain = json.loads(m.group(1))
            if "mlp" in domain:
                out.setdefault(name, []).append(tuple(domain))
    return out


def test_dense_models_keep_their_columns(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"gpt2": dense_zeros})  # bert-base, llama-tiny: older records
    home = _read(docs, "index.md")
    assert _header(home) == DENSE_HEADER
    for model in ("bert-base", "gpt2"):
        page = _read(docs, f"hardware/{HW}/{model}.md")
        assert "| mixer |" not in page and "| moe.<wbr>" not in page
        assert "MoE share" not in page and "mixture-of-experts" not in page
        assert "mixer share" not in page
        domains = _category_domains(page)
        assert {"shares", "scaling"} <= set(domains)
        assert all(d == DENSE for found in domains.values() for d in found)
        fields, rows = _csv(docs, f"hardware/{HW}/charts/{model}--categories.csv")
        assert [r["category"] for r in rows] == list(DENSE)
        fields, _ = _csv(docs, f"hardware/{HW}/charts/{model}--headline.csv")
        assert "moe_share" not in fields and "mixer_share" not in fields
    fields, rows = _csv(docs, "data/combinations.csv")
    assert len(rows) == 6
    assert not [f for f in fields if any(c in f for c in ("mixer", "moe"))]
    assert "share:mlp" in fields and "share:compiled" in fields
    assert "MoE share" not in _read(docs, f"hardware/{HW}/index.md")


def test_a_mixture_of_experts_gets_its_columns(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"gpt2": dense_zeros, "llama-tiny": MOE})
    home = _read(docs, "index.md")
    assert _header(home) == DENSE_HEADER.replace(
        "| mlp |", "| mlp | moe.<wbr>router | moe.<wbr>experts |")
    # the older bert-base records have no moe keys: "–"; gpt2's zeros show as 0.0%
    names = [c.strip() for c in _header(home).split("|")[1:-1]]
    rows = {line.split("]")[0].lstrip("| ["):
            dict(zip(names, (c.strip() for c in line.split("|")[1:-1])))
            for line in home.splitlines() if line.startswith("| [")}
    assert rows["bert-base"]["moe.<wbr>router"] == rows["bert-base"]["moe.<wbr>experts"] == "–"
    assert rows["gpt2"]["moe.<wbr>router"] == rows["gpt2"]["moe.<wbr>experts"] == "0.0% <small>[0.0%, 0.0%]</small>"
    assert rows["llama-tiny"]["mlp"].startswith("0.0%") and rows["llama-tiny"]["moe.<wbr>experts"] != "–"
    moe = _read(docs, f"hardware/{HW}/llama-tiny.md")
    longest = json.loads(next((docs / "data").rglob("llama-tiny--*--s256.json")).read_text())
    cats = longest["attribution"]["categories"]
    share = cats["moe.router"]["share"] + cats["moe.experts"]["share"]
    assert f"mixture-of-experts layers (router and experts) **{100 * share:.1f}%**" in moe
    assert "| attention share | MoE share | profiled / unprofiled |" in moe
    assert "| moe.<wbr>router |" in moe and "| moe.<wbr>experts |" in moe
    assert "| mixer |" not in moe and "token mixers" not in moe
    domains = _category_domains(moe)
    assert domains["shares"] == domains["scaling"] == [
        (*DENSE[:5], "moe.router", "moe.experts", *DENSE[5:])]
    fields, rows = _csv(docs, f"hardware/{HW}/charts/llama-tiny--headline.csv")
    assert fields[fields.index("attention_share") + 1] == "moe_share"
    assert float(rows[-1]["moe_share"]) == pytest.approx(share)
    # the dense pages beside it are unchanged
    for model in ("bert-base", "gpt2"):
        page = _read(docs, f"hardware/{HW}/{model}.md")
        assert "MoE share" not in page and "| moe.<wbr>" not in page
    hardware = _read(docs, f"hardware/{HW}/index.md")
    assert "| attention share | MoE share | attention core exponent |" in hardware
    model_page = _read(docs, "models/llama-tiny.md")
    assert "| attention share | MoE share | profiler overhead |" in model_page
    fields, _ = _csv(docs, "data/combinations.csv")
    assert {"share:moe.router", "share:moe.experts", "ms:moe.experts", "moe_share"} <= set(fields)
    assert not [f for f in fields if "mixer" in f]


def test_a_token_mixer_is_stated_beside_attention(tmp_path: Path) -> None:
    docs = _render(tmp_path, {"llama-tiny": MIXER})
    page = _read(docs, f"hardware/{HW}/llama-tiny.md")
    assert "of it and the token mixers **" in page
    assert "| attention share | mixer share | profiled / unprofiled |" in page
    assert "| mixer |" in page and "| moe.<wbr>" not in page
    assert _header(_read(docs, "index.md")) == DENSE_HEADER.replace(
        "| attention.<wbr>out |", "| attention.<wbr>out | mixer |")


# --- compare and summary -------------------------------------------------------------


def _record(edit: Any | None = None) -> dict[str, Any]:
    record = synthetic.combination_record(synthetic.HARDWARE[0], synthetic.MODELS[2], "sdpa",
                                          128, "cpu/run")
    if edit is not None:
        edit(record)
    return record


def test_compare_lists_architecture_categories_only_where_a_side_has_them() -> None:
    old, new = _record(), _record(dense_zeros)
    assert set(compare_records(old, new)["shares"]) == set(DENSE) - {"compiled"}
    assert set(compare_records(new, new)["shares"]) == set(DENSE) - {"compiled"}
    shares = compare_records(_record(MOE), _record(MOE))["shares"]
    assert {"moe.router", "moe.experts"} <= set(shares) and "mixer" not in shares
    assert shares["moe.experts"]["diff"] == 0.0


def test_summary_of_older_and_newer_records() -> None:
    rows = [combination_row(_record()), combination_row(_record(dense_zeros))]
    assert not [c for c in csv_columns(rows) if "mixer" in c or "moe" in c]
    rows.append(combination_row(_record(MOE)))
    columns = csv_columns(rows)
    assert "shares.moe.experts" in columns and "shares.mixer" not in columns


# --- intervals and the two-method table of records made before the categories ---------


def _with_methods(edit: Any | None = None) -> dict[str, Any]:
    """A record whose methods hold per-iteration series, as records made before the
    architecture categories did: none for mixer and moe.*."""
    record = _record(edit)
    cats = record["attribution"]["categories"]
    walls = [record["attribution"]["forward_ms"] * f for f in (0.98, 1.0, 1.03, 0.99, 1.01)]
    section = {"iteration_ms": walls, "categories": {
        c: {**v, "per_iteration_ms": [v["ms"] * w / walls[1] for w in walls],
            "share_low": v["share"] * 0.95, "share_high": v["share"] * 1.05}
        for c, v in cats.items()}}
    record["attribution"].update(headline_method="hooks",
                                 methods={"hooks": section, "profiler": section})
    return record


def test_older_records_keep_their_share_intervals() -> None:
    record = _with_methods()
    rest = [c for c in roofline.ROOFLINE_CATEGORIES if not c.startswith("attention.")]
    assert {"mixer", "moe.router"} <= set(rest)
    time = roofline.category_time(record, rest)
    assert time is not None and time[3] == "share interval x latency 95% CI"


def test_two_methods_table_lists_the_categories_a_record_has() -> None:
    rows = analysis.attribution_methods(_with_methods())["rows"]  # type: ignore[index]
    assert [r["category"] for r in rows] == list(DENSE)
    rows = analysis.attribution_methods(_with_methods(MOE))["rows"]  # type: ignore[index]
    assert {"moe.router", "moe.experts"} <= {r["category"] for r in rows}
    assert "mixer" not in {r["category"] for r in rows}


# --- one time base ----------------------------------------------------------------------


def test_a_category_reads_the_same_time_everywhere_on_its_page(tmp_path: Path) -> None:
    """"Where the time goes" and the roofline give a category the same time: its share
    times the unprofiled median latency. The attributed pass's own ms (its forward slower
    by the profiler's or the clocks' cost) once gave a second figure for the same
    category on the same page."""
    import shutil

    from support.runs import RUN

    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / RUN.parent.name / RUN.name, ignore=shutil.ignore_patterns("traces", "logs"))
    docs = tmp_path / "docs"
    render(runs, docs, svg=False)
    page = (docs / "hardware" / RUN.parent.name / "gpt2.md").read_text(encoding="utf-8")
    setting = re.search(r"reference setting \*\*([^*]+?), full-size model\*\*", page)
    length = re.search(r"Exclusive time per category at (\d+) tokens", page)
    assert setting and length
    where = page[length.end():page.index("## ", length.end())]
    categories = dict(re.findall(r"^\| ([\w.<>]+) \| ([\d.,]+ ms) \|", where, re.M))
    panel = f"{setting.group(1)}, {length.group(1)} tokens"
    roof = dict(re.findall(rf"^\| {re.escape(panel)} \| ([\w.<>]+) \| [^|]+ \| [^|]+ \| ([\d.,]+ ms) ",
                           page, re.M))
    assert len(roof) >= 5 and set(roof) <= set(categories)
    assert {c: categories[c] for c in roof} == roof
    # the per-op table is the profiled pass's own and says so
    assert "per forward of the profiled pass" in page
