"""What a rerun gives: every latency the pages show carries, beside its within-run
interval, the lowest and highest median that the committed runs of the same combination
on the same kind of host measured, under the same torch and transformers releases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.runs import RUN, scaled_copy

from reportgen import fmt
from reportgen.records.load import load_runs
from reportgen.records.schema import current_runs
from reportgen.render import analysis
from reportgen.render.builder import Builder
from reportgen.render.pages import site_model
from reportgen.render.site import render_page
from reportgen.render.templating import environment
from reportgen.render.validation import validation_page
from reportgen.reruns import across_days, across_days_summary

pytestmark = pytest.mark.torchfree

BERT = "bert-base--forward--fp32--sdpa--b1--s128"


def _tree(tmp: Path) -> Path:
    root = tmp / "runs"
    shutil.copytree(RUN, root / "cpu-amd-epyc-2c" / RUN.name, ignore=shutil.ignore_patterns("traces", "logs"))
    # the same suite run again on a later day, 20% slower: a rerun
    _finished(scaled_copy(root, 1.2, name=f"{RUN.name}-20990102T000000", started="2099-01-02T00:00:00Z"))
    # and under another transformers release, twice as fast: never pooled with the others
    _finished(scaled_copy(root, 0.5, name=f"{RUN.name}-20990101T000000", transformers="5.99.0",
                          started="2099-01-01T00:00:00Z"))
    return root


def _finished(run_dir: Path) -> None:
    """The copy's records finish when the copy ran, not when the original did."""
    started = json.loads((run_dir / "run.json").read_text())["started"]
    for path in (run_dir / "combinations").glob("*.json"):
        record = json.loads(path.read_text())
        record["finished"] = started
        path.write_text(json.dumps(record))


def test_rows_carry_the_spread_of_reruns_under_the_same_releases(tmp_path: Path) -> None:
    runs = load_runs(_tree(tmp_path))
    (current,) = current_runs(runs)
    assert current.run_id.endswith("-20990102T000000")
    frame = analysis.with_reruns(analysis.combinations_frame([current]),
                                 analysis.combinations_frame(runs, latest_only=False))
    every = analysis.combinations_frame(runs, latest_only=False)
    original = every[(every["combo_id"] == BERT) & (every["run_id"].str.endswith(RUN.name))]
    row = frame[frame["combo_id"] == BERT].iloc[0]
    assert row["rerun_runs"] == 2  # the original and the rerun, not the other release's run
    assert row["rerun_low"] == pytest.approx(float(original["median"].iloc[0]))
    assert row["rerun_high"] == pytest.approx(row["median"])
    assert row["rerun_first"] and row["rerun_last"] >= row["rerun_first"]
    assert fmt.rerun(row["median"], row["rerun_low"], row["rerun_high"], row["rerun_runs"]) == "\u221217% to 0%, 2 runs"


def test_a_measurement_no_other_run_repeated_says_so() -> None:
    assert fmt.rerun(10.0, 10.0, 10.0, 1) == "one run"
    assert fmt.rerun(10.0, None, None, None) == "–"
    assert fmt.rerun(10.0, 9.0, 12.5, 3) == "\u221210% to +25%, 3 runs"


def test_pages_show_the_rerun_spread_beside_the_interval(tmp_path: Path) -> None:
    runs = load_runs(_tree(tmp_path))
    pages = {p.path: p for p in site_model(runs).pages}
    env = environment()
    combination = render_page(env, pages["hardware/cpu-amd-epyc-2c/bert-base.md"])
    assert "| reruns |" in combination
    assert "reruns of it on this kind of host gave \u221217% to 0%, 2 runs" in combination
    assert "The interval is of this run alone" in combination
    hardware = render_page(env, pages["hardware/cpu-amd-epyc-2c/index.md"])
    assert "| reruns |" in hardware and "2 runs" in hardware
    model = render_page(env, pages["models/bert-base.md"])
    assert "| reruns |" in model and "2 runs" in model


def _m(run: str, day: str, median: float, low: float, high: float, key: str = "bert") -> dict[str, object]:
    return {"hardware": "cpu-x", "key": (key, "2.13", "5.25"), "run_id": run, "day": day,
            "median": median, "ci_low": low, "ci_high": high}


def test_a_rerun_on_a_later_day_is_set_against_the_latest_earlier_day() -> None:
    pairs = across_days([
        _m("a", "2026-12-01", 100, 95, 105),
        _m("b", "2026-12-01", 300, 290, 310),  # the same day as a: never a rerun of it
        _m("c", "2026-12-03", 104, 101, 107),  # inside b's? no: set against b, the latest of 12-01
        _m("d", "2026-12-04", 103, 100, 106),  # against c: inside and agreeing
        _m("e", "2026-12-04", 50, 49, 51, key="other"),  # alone: no pair
    ])
    assert [(p["first_run"], p["run"]) for p in pairs] == [("b", "c"), ("c", "d")]
    assert [p["inside"] for p in pairs] == [False, True]
    assert [p["agree"] for p in pairs] == [False, True]
    (summary,) = across_days_summary(pairs)
    assert summary["pairs"] == 2 and summary["agree"] == 1 and summary["inside"] == 1
    assert summary["runs"] == 3 and summary["first_day"] == "2026-12-01" and summary["last_day"] == "2026-12-04"


def test_the_validation_page_counts_reruns_on_other_days(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    bench = json.loads(next((Path(__file__).resolve().parents[1] / "bench").glob("*.json")).read_text())
    b = Builder(load_runs(root), bench=bench)
    (page,) = validation_page(b)
    text = render_page(environment(), page)
    assert "**Reruns on other days.**" in text
    # the rerun (a later day, the same releases) against the original: one pair per combination
    row = next(line for line in text.splitlines() if line.startswith("| cpu-amd-epyc-2c |"))
    ok = [r for r in analysis.combinations_frame(load_runs(root)).to_dict(orient="records")
          if r["status"] == "ok" and r["run_id"].endswith("-20990102T000000")]
    assert row.split(" | ")[1] == str(len(ok))
