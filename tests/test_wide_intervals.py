"""An interval reaching past twice its median is flagged with its reason, on every page
that shows it: the timer's resolution, the variation between rounds, or between samples."""

from __future__ import annotations

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
    # flagged wherever that interval is shown, and nowhere else
    high = f"{fmt.num(timing['ci_high'])}&#93;"
    shown = [line for line in combination.splitlines() if high in line]
    assert len(shown) >= 3
    assert [line for line in combination.splitlines() if flag in line] == shown


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
