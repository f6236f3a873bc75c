"""What a rerun gives: every latency the pages show carries, beside its within-run
interval, the lowest and highest median that the committed runs of the same combination
on the same kind of host measured, under the same torch and transformers releases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.runs import RUN, scaled_copy

from reportgen import fmt
from reportgen.records.load import load_runs
from reportgen.records.schema import current_runs
from reportgen.render import analysis
from reportgen.render.pages import site_model
from reportgen.render.site import render_page
from reportgen.render.templating import environment

pytestmark = pytest.mark.torchfree

BERT = "bert-base--forward--fp32--sdpa--b1--s128"


def _tree(tmp: Path) -> Path:
    root = tmp / "runs"
    shutil.copytree(RUN, root / "cpu-amd-epyc-2c" / RUN.name, ignore=shutil.ignore_patterns("traces", "logs"))
    # the same suite run again a day later, 20% slower: a rerun
    scaled_copy(root, 1.2, name=f"{RUN.name}-20990102T000000", started="2099-01-02T00:00:00Z")
    # and under another transformers release, twice as fast: never pooled with the others
    scaled_copy(root, 0.5, name=f"{RUN.name}-20990101T000000", transformers="5.99.0",
                started="2099-01-01T00:00:00Z")
    return root


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
