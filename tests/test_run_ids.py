"""Run ids: a finished run is never modified, --force makes a new run beside it, an
unfinished run resumes into its own id, and flags that replace the matrix name the run
for what it measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.runner import InProcessMeasure

from reportgen.execute import runner
from reportgen.records.schema import iter_runs
from reportgen.records.store import RunStore, run_names
from reportgen.suite import load_suite, parse_overrides

ROOT = Path(__file__).resolve().parents[1]


def _suite() -> Any:
    return load_suite("tiny", parse_overrides({"models": "gpt2", "attn": "eager", "modes": "forward",
                                               "device": "cpu"}))


def _run(out: Path, measure: InProcessMeasure, **kw: Any) -> runner.RunResult:
    return runner.run_suite(_suite(), out=out, measure=measure, environment={"git": None},
                            hardware="host", show_progress=False, **kw)


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_force_makes_a_new_run_and_leaves_the_finished_one(tmp_path: Path) -> None:
    first = _run(tmp_path, InProcessMeasure())
    assert first.store.name == first.store.base  # the first run keeps the short id
    before = _snapshot(first.store.run_dir)
    again = InProcessMeasure()
    assert _run(tmp_path, again).records == [] and again.calls == []  # plain rerun: nothing
    second = _run(tmp_path, InProcessMeasure(), force=True)
    assert second.store.run_dir != first.store.run_dir
    assert second.store.name.startswith(first.store.base + "-")
    assert _snapshot(first.store.run_dir) == before
    third = _run(tmp_path, InProcessMeasure(), force=True)  # same second: still a new id
    names = run_names(tmp_path / "host", first.store.base)
    assert names == [first.store.name, second.store.name, third.store.name]
    for run in iter_runs(tmp_path):
        assert run.record["run_id"] == f"host/{run.path.name}"
        assert all(rec["run_id"] == run.record["run_id"] for rec in run.combination_records())


def test_an_interrupted_run_resumes_into_its_own_id(tmp_path: Path) -> None:
    _run(tmp_path, InProcessMeasure())
    base_dir = RunStore(tmp_path, "host", _suite()).run_dir
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, InProcessMeasure(interrupt_at=2), force=True)
    (interrupted,) = [r for r in iter_runs(tmp_path) if r.path != base_dir]
    assert interrupted.record["status"] == "interrupted"
    resumed = InProcessMeasure()
    result = _run(tmp_path, resumed)
    assert result.store.run_dir == interrupted.path
    assert len(resumed.calls) == len(_suite().combinations()) - 1
    assert json.loads((interrupted.path / "run.json").read_text())["status"] == "complete"
    assert len(list(iter_runs(tmp_path))) == 2


def test_new_run_names_sort_after_the_first() -> None:
    suite = _suite()
    store = RunStore(ROOT / "no-such-root", "host", suite)
    assert store.name == f"custom-{suite.hash[:8]}"
    assert store.new_run(now=0).name == store.base  # nothing there yet: the short id


def test_matrix_flags_name_the_suite_for_what_it_measured() -> None:
    suite = load_suite("cpu-default", parse_overrides({"models": "gpt2", "seq_lens": "64"}))
    assert suite.name == "custom"
    assert suite.description == "cpu-default with --models gpt2 --seq-lens 64"
    plain = load_suite("cpu-default", parse_overrides({"budget_s": "1"}))
    assert plain.name == "cpu-default"


def test_committed_run_ids_still_resolve() -> None:
    runs = list(iter_runs(ROOT / "runs"))
    assert "cpu-default-c11f32ec" in {r.path.name for r in runs}
    for run in runs:
        # each committed run resolves in its own hardware directory to itself first
        assert run_names(run.path.parent, run.path.name)[0] == run.path.name


def test_slurm_tasks_of_one_forced_submission_share_a_new_run(tmp_path: Path) -> None:
    from reportgen.execute.slurm import run_dirs

    first = _run(tmp_path, InProcessMeasure())
    submitted = "2026-12-02T13:00:05.123456Z"
    a = RunStore(tmp_path, "host", _suite()).forced_run(submitted)
    b = RunStore(tmp_path, "host", _suite()).forced_run(submitted)
    assert a.name == b.name == f"{first.store.base}-20261202T130005"
    assert run_dirs(tmp_path, first.store.base) == [first.store.run_dir]
    a.write_run(json.loads((first.store.run_dir / "run.json").read_text()))
    assert run_dirs(tmp_path, first.store.base) == [a.run_dir]  # the watcher follows the new run
