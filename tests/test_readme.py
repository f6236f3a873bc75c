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


def test_the_long_context_block_gives_each_lines_shares_and_crossover(tmp_path: Path) -> None:
    """A run with three lengths of each model: one line per model and mode, its share at
    each length and its crossover in the hardware table's words."""
    from support import synthetic

    from reportgen.records.schema import iter_runs

    synthetic.generate(tmp_path, 9, models=synthetic.MODELS[:3], hardware=synthetic.HARDWARE[:1],
                       attns=("sdpa",), seqs=(128, 256, 512), skipped=0, failed=0, traces=False)
    (run,) = list(iter_runs(tmp_path))
    figures = readme.long_figures(run)
    assert [line["model"] for line in figures["lines"]] == sorted(m.name for m in synthetic.MODELS[:3])
    block = readme._TEMPLATE.get_template("readme_long.md.j2").render(run=figures)
    for line in figures["lines"]:
        shares = "; ".join(f"{p['seq']}: {100 * p['attention_share']:.1f}%" for p in line["points"])
        assert f"| {line['model']}, forward | whole model | {shares} | {line['crossover_text']} |" in block
    assert any("extrapolated" in line["crossover_text"] or "[" in line["crossover_text"]
               for line in figures["lines"])
    assert "No `cpu-long` run" in readme.blocks(tmp_path / "none", tmp_path / "bench")["long"]
