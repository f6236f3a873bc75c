"""The README's figures are written from runs/ and bench/, never typed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from reportgen import readme

REPO = Path(__file__).resolve().parents[1]


def test_readme_figures_match_the_committed_runs_and_bench() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    expected = readme.update(text, readme.blocks(REPO / "runs", REPO / "bench"))
    assert text == expected, "README figures are stale: run `python -m reportgen.readme`"


def test_readme_states_the_cpu_default_run() -> None:
    block = readme.blocks(REPO / "runs", REPO / "bench")["runs"]
    assert "No `cpu-default` run" not in block
    assert "bert-base--forward--fp32--sdpa--b1--s128" in block


def test_update_replaces_only_the_marked_block() -> None:
    start, end = readme._markers("runs")
    text = f"before\n{start}\nold figure\n{end}\nafter\n"
    assert readme.update(text, {"runs": "new figure"}) == f"before\n{start}\nnew figure\n{end}\nafter\n"


def test_update_refuses_a_readme_without_the_block() -> None:
    with pytest.raises(ValueError, match="figures:bench"):
        readme.update("no markers here\n", {"bench": "x"})
