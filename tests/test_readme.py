"""The README's figures are written from runs/ and bench/, never typed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from reportgen.render import readme

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


def test_an_unreadable_bench_file_is_one_line_and_exit_2(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    start, end = readme._markers("bench")
    text = f"top\n{start}\nold\n{end}\n"
    (tmp_path / "README.md").write_text(text, encoding="utf-8")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "cpu-x.json").write_text("{not json", encoding="utf-8")
    assert readme.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cpu-x.json" in err and "cannot read bench results" in err
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == text
