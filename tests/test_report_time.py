"""The report-time figure: the suite step's run plus the report session's render, check
and site build, on copies (never the project's runs/, docs/ or site/)."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from reportgen.bench import report_time

REPO = Path(__file__).resolve().parent.parent


def _project(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    (project / "runs" / "cpu-x" / "old-run").mkdir(parents=True)
    (project / "runs" / "cpu-x" / "old-run" / "run.json").write_text("{}")
    (project / "docs").mkdir()
    (project / "docs" / "index.md").write_text("# hand-written\n")
    (project / "reportgen" / "render").mkdir(parents=True)
    (project / "reportgen" / "render" / "mkdocs_hooks.py").write_text("")
    (project / "mkdocs.yml").write_text("site_name: x\nhooks:\n  - reportgen/render/mkdocs_hooks.py\n")
    new = tmp_path / "scratch-runs" / "cpu-x" / "new-run"
    new.mkdir(parents=True)
    (new / "run.json").write_text(json.dumps({"run_id": "cpu-x/new-run"}))
    return project, new


def test_the_figure_adds_the_publishing_steps_to_the_suite_run(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    project, new = _project(tmp_path)
    seen: list[list[str]] = []

    def runner(command: Sequence[str]) -> int:
        seen.append(list(command))
        return 0

    fig = report_time.run(project, new, 300.0, tmp_path / "scratch", log=lambda _: None, runner=runner)
    tree = tmp_path / "scratch" / "report"
    assert [c[1:4] for c in seen[:2]] == [["-m", "reportgen", "render"], ["-m", "reportgen", "check"]]
    assert seen[2][1:5] == ["-m", "mkdocs", "build", "--strict"]
    assert str(tree / "runs") in seen[0] and str(tree / "docs") in seen[0]
    assert str(tree / "mkdocs.yml") in seen[2]
    # the copies hold the committed runs, the suite step's run and the hand-written docs
    assert (tree / "runs" / "cpu-x" / "old-run" / "run.json").is_file()
    assert (tree / "runs" / "cpu-x" / "new-run" / "run.json").is_file()
    assert (tree / "docs" / "index.md").read_text() == "# hand-written\n"
    assert (tree / "reportgen" / "render" / "mkdocs_hooks.py").is_file()
    # the project's own tree is untouched
    assert sorted(p.name for p in (project / "runs" / "cpu-x").iterdir()) == ["old-run"]
    steps = {r["step"]: r["wall_s"] for r in fig["rows"]}
    assert list(steps) == ["profile", "render", "check", "build"]
    assert steps["profile"] == 300.0
    assert fig["value"] == pytest.approx(sum(steps.values()))
    assert fig["status"] == "pass"  # well under 360 s with instant steps


def test_a_failing_step_leaves_the_figure_not_measured(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    project, new = _project(tmp_path)
    fig = report_time.run(project, new, 10.0, tmp_path / "scratch", log=lambda _: None,
                          runner=lambda command: 2 if "check" in command else 0)
    assert fig["status"] == "not measured"
    assert "check" in fig["notes"][0] and "exited with 2" in fig["notes"][0]


def test_the_figure_over_the_goal_fails(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    project, new = _project(tmp_path)
    fig = report_time.run(project, new, report_time.GOAL_S + 1, tmp_path / "scratch", log=lambda _: None,
                          runner=lambda command: 0)
    assert fig["status"] == "fail"


def _report_session_commands() -> list[list[str]]:
    """The literal commands of noxfile.py's report session."""
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "report")
    out = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"):
            out.append([a.value if isinstance(a, ast.Constant) else "*" for a in node.args])
    return out


def test_the_steps_are_the_report_sessions_own() -> None:
    session = _report_session_commands()
    assert session[0][:2] == ["reportgen", "profile"]  # the suite step's run stands for it
    mine = report_time._commands(Path("R"), Path("D"), Path("C.yml"))
    # each later session command, with its paths pointed at the copies
    assert [c[:2] for c in session[1:]] == [["reportgen", "render"], ["reportgen", "check"],
                                             ["python", "-m"]]
    assert mine["render"][3:5] == ["render", "--runs"] and "--docs" in mine["render"]
    assert mine["check"][3:5] == ["check", "--runs"]
    assert session[3][2:5] == ["mkdocs", "build", "--strict"] == mine["build"][2:5]
