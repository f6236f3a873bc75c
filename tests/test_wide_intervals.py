"""An interval reaching past twice its median is flagged with its reason, on every page
that shows it: the timer's resolution, the variation between rounds, or between samples."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

from support.runs import RUN

from reportgen import fmt
from reportgen.intervals import is_wide, wide_reason
from reportgen.render import render

ROOT = Path(__file__).resolve().parents[1]


def _record(median: float, low: float, high: float, *, method: str = "host-clock",
            rounds: list[float] | None = None) -> dict[str, Any]:
    timing: dict[str, Any] = {"method": method, "median": median, "ci_low": low, "ci_high": high,
                              "p5": low, "p95": high}
    if rounds is not None:
        timing["rounds"] = [{"round": i, "n": 5, "median": m} for i, m in enumerate(rounds)]
    return {"status": "ok", "timing": timing}


def test_only_an_interval_past_twice_its_median_is_wide() -> None:
    assert is_wide(0.68, 0.55, 1.45)
    assert is_wide(10.0, 4.0, 12.0)
    assert not is_wide(0.68, 0.55, 1.30)
    assert not is_wide(float("nan"), 0.5, 1.5)
    assert wide_reason(_record(100.0, 90.0, 110.0)) is None


def test_the_reason_names_what_made_the_interval_wide() -> None:
    ticks = wide_reason(_record(0.002, 0.0015, 0.0045, method="cuda-events"))
    assert ticks is not None and ticks.startswith("the timer's resolution")
    rounds = wide_reason(_record(0.68, 0.55, 1.45, rounds=[0.6, 0.62, 1.45]))
    assert rounds is not None and rounds.startswith("the variation between rounds")
    assert "0.6 to 1.45 ms" in rounds
    samples = wide_reason(_record(0.68, 0.55, 1.45, rounds=[0.66, 0.7]))
    assert samples is not None and samples.startswith("the variation between samples")


def test_every_page_showing_the_interval_flags_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    dest = runs / "cpu-amd-epyc-2c" / RUN.name
    shutil.copytree(RUN, dest, ignore=shutil.ignore_patterns("traces", "logs"))
    path = dest / "combinations" / "gpt2--prefill--fp32--sdpa--b1--s256.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    timing = record["timing"]
    median = timing["median"]
    timing["ci_high"] = 2.2 * median
    timing["rounds"] = [{"round": i, "n": 5, "median": m}
                        for i, m in enumerate((median, 0.98 * median, 2.2 * median))]
    path.write_text(json.dumps(record), encoding="utf-8")
    docs = tmp_path / "docs"
    render(runs, docs, svg=False)
    flag = "wide: the variation between rounds"
    combination = (docs / "hardware" / "cpu-amd-epyc-2c" / "gpt2.md").read_text(encoding="utf-8")
    assert flag in combination
    assert (docs / "models" / "gpt2.md").read_text(encoding="utf-8").count(flag) >= 1
    # flagged wherever that interval is shown, and the category times carried through
    # from it where they reach as far; no other interval
    high = f"{fmt.num(timing['ci_high'])}&#93;"
    shown = [line for line in combination.splitlines() if high in line]
    assert len(shown) >= 3
    flagged = [line for line in combination.splitlines() if flag in line]
    assert set(shown) < set(flagged)
    assert all("wide: the latency&#39;s interval is wide: the variation between rounds" in line
               for line in flagged if line not in shown)
    assert unflagged(combination) == [] and flagged_narrow(combination) == []
    # the README's table of the run and ``reportgen summary`` (its table and CSV) flag it too
    from rich.console import Console

    from reportgen.commands.summary import render_table, rows_to_csv
    from reportgen.records.schema import load_run
    from reportgen.render.readme import blocks
    from reportgen.render.runtable import run_rows

    readme = blocks(runs, ROOT / "bench")["runs"]
    (line,) = [x for x in readme.splitlines() if f"`{record['id']}`" in x]
    assert "(wide: the variation between rounds" in line
    assert readme.count("(wide: ") == 1
    rows = run_rows(load_run(dest))
    table = rows_to_csv(rows).splitlines()
    column = table[0].split(",").index("wide")
    flagged = [x for x in table[1:] if "the variation between rounds" in x]
    assert len(flagged) == 1 and flagged[0].startswith(record["id"]) and column
    console = Console(record=True, width=400)
    console.print(render_table(rows))
    assert console.export_text().count("wide interval: the variation between rounds") == 1


_SHOWN = re.compile(r"(-?[\d,.]+)(?: ms)? &#91;(-?[\d,.]+), (-?[\d,.]+)&#93;")


def unflagged(text: str) -> list[str]:
    """Each ``x [low, high]`` of ``text`` past twice ``x`` with no flag right after it."""
    out = []
    for m in _SHOWN.finditer(text):
        x, lo, hi = (float(v.replace(",", "")) for v in m.groups())
        rest = text[m.end():m.end() + 200]
        if is_wide(x, lo, hi) and not re.match(r"( [^|<]*)?\s*<span class=\"rg-warn\">wide: ", rest):
            out.append(m.group(0))
    return out


def flagged_narrow(text: str) -> list[str]:
    """Each ``x [low, high]`` of ``text`` flagged wide that is not past twice ``x``."""
    return [m.group(0) for m in _SHOWN.finditer(text)
            if re.match(r"( [^|<]*)?\s*<span class=\"rg-warn\">wide: ", text[m.end():m.end() + 200])
            and not is_wide(*(float(v.replace(",", "")) for v in m.groups()))]


def test_the_roofline_flags_a_category_time_past_twice_its_median() -> None:
    """A category's time carries its share's interval times the latency's: a few-microsecond
    category, or one whose share moves between the profiled iterations, can reach past twice
    its median where the latency does not, and says why."""
    from reportgen.records.load import load_runs
    from reportgen.render.pages import SiteBuilder
    from reportgen.render.roofline_pages import findings_page
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment

    (roof,) = findings_page(SiteBuilder(load_runs(ROOT / "runs")))
    text = render_page(environment(), roof)
    assert "wide: the variation between profiled iterations (the category&#39;s share of each)" in text
    assert unflagged(text) == [] and flagged_narrow(text) == []


def test_a_category_share_past_twice_its_value_is_flagged() -> None:
    """A category's share interval past twice the share says why: the timer for a
    category of a few clock ticks, else its share's variation between the iterations."""
    from reportgen.intervals import share_wide_reason
    from reportgen.records.load import load_runs
    from reportgen.render.pages import SiteBuilder
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment

    assert share_wide_reason(0.3, 0.25, 0.35, 100.0) is None
    assert share_wide_reason(0.011, 0.002, 0.029, 2.74, "host-clock") == (
        "the variation between profiled iterations (the category's share of each)")
    tick = share_wide_reason(0.001, 0.0004, 0.003, 0.002, "host-clock")
    assert tick is not None and tick.startswith("the timer's resolution")
    builder = SiteBuilder(load_runs(ROOT / "runs"))
    f = builder.frame
    part = f[(f["hardware"] == "cpu-intel-xeon-2c") & (f["model"] == "llama-small")]
    text = render_page(environment(), builder.combination_page("cpu-intel-xeon-2c", "llama-small", part))
    (row,) = [line for line in text.splitlines() if line.startswith("| embeddings | ") and "<small>[" in line]
    assert "[0.2%, 2.9%]</small> <span class=\"rg-warn\">wide: the variation between profiled iterations" in row
    # the category table's rows: category, time, share with its interval
    shares = re.findall(r"^\| [\w.<>]+ \| [\d.]+ ms \| ([\d.]+)% <small>\[([\d.]+)%, ([\d.]+)%\]</small>"
                        r"( <span class=\"rg-warn\">wide)?", text, re.M)
    assert shares and all(bool(flag) == is_wide(float(x), float(lo), float(hi)) for x, lo, hi, flag in shares)


def test_the_tools_page_flags_its_wide_intervals() -> None:
    from reportgen.records.load import load_runs
    from reportgen.render.pages import SiteBuilder
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment
    from reportgen.render.tools import page, wide

    assert wide({"median": 1.0, "low": 0.4, "high": 1.2, "confidence": 0.95}) == "the variation between passes"
    tick = wide({"median": 0.002, "low": 0.001, "high": 0.005, "confidence": 0.95})
    assert tick is not None and tick.startswith("the timer's resolution")
    assert wide({"median": 1.0, "low": 0.4, "high": 1.2, "confidence": 0}) is None  # one pass
    (tools,) = page(SiteBuilder(load_runs(ROOT / "runs")))
    text = render_page(environment(), tools)
    assert "wide: the variation between passes" in text
    assert unflagged(text) == []


def test_the_validation_page_flags_a_wide_latency_interval_in_its_rows() -> None:
    from reportgen.bench import results as B
    from reportgen.render.validation import render_validation, row_columns

    rows = [{"combination": "a", "median_ms": 10.0, "ci_low_ms": 9.0, "ci_high_ms": 11.0,
             "confidence": 0.95, "remeasured_ms": 10.2, "inside": True},
            {"combination": "b", "median_ms": 0.68, "ci_low_ms": 0.55, "ci_high_ms": 1.45,
             "confidence": 0.95, "remeasured_ms": 0.7, "inside": True},
            {"combination": "c", "median_ms": 0.002, "ci_low_ms": 0.001, "ci_high_ms": 0.005,
             "confidence": 0.95, "remeasured_ms": 0.002, "inside": True}]
    fig = B.figure("Interval coverage", "q", value=1.0, unit="share", interval=None,
                   goal="shown", goal_spec=None, rows=rows)
    assert row_columns("interval_coverage", rows)[-1] == "wide"
    assert row_columns("interval_coverage", rows[:1])[-1] == "inside"  # none wide: no column
    doc = B.results_document({"interval_coverage": fig},
                             environment={"hardware": "cpu-test-2c", "cpu": "Test CPU", "threads": 2,
                                          "torch": "x", "transformers": "y"},
                             created="2026-12-02T13:00:00Z", quick=True, duration_s=1.5, command="bench")
    md = render_validation(doc)
    (header,) = [line for line in md.splitlines() if line.startswith("| combination | median")]
    assert header.rstrip(" |").endswith("wide")
    by_row = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| ") and " | 0.95 | " in line}
    assert "median_ms: the variation between rounds and samples" in html.unescape(by_row["| b"])
    assert "median_ms: the timer's resolution" in html.unescape(by_row["| c"])
    assert "variation" not in by_row["| a"] and "resolution" not in by_row["| a"]
