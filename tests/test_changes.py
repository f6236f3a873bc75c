"""The Changes pages: each run against the previous run of its suite on its hardware,
and the rest of the site reading only the latest complete run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.runs import RUN, coverage_bench, scaled_copy

from reportgen.records.load import load_runs
from reportgen.records.schema import current_runs
from reportgen.render.pages import site_model
from reportgen.render.site import render_page
from reportgen.render.templating import environment

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree


def _tree(tmp: Path) -> Path:
    root = tmp / "runs"
    shutil.copytree(RUN, root / "cpu-amd-epyc-2c" / RUN.name, ignore=shutil.ignore_patterns("traces", "logs"))
    scaled_copy(root, 1.5, name=f"{RUN.name}-20990101T000000", transformers="5.99.0", only="bert-base")
    return root


def test_changes_page_compares_each_run_with_the_previous(tmp_path: Path) -> None:
    runs = load_runs(_tree(tmp_path))
    (current,) = current_runs(runs)
    assert current.run_id.endswith("-20990101T000000")
    model = site_model(runs)
    pages = {p.path: p for p in model.pages}
    page = pages["changes/cpu-amd-epyc-2c-cpu-default.md"]
    text = render_page(environment(), page)
    newest, _, oldest = text.partition(f"## cpu-amd-epyc-2c/{RUN.name}\n")
    assert "(current)" in newest and "(current)" not in oldest
    assert "| transformers | 5.24.0 | 5.99.0 |" in newest
    # significant changes are listed first, the unchanged ones folded away
    changed, _, unchanged = newest.partition('??? note "No significant difference')
    assert "bert-base--forward--fp32--eager--b1--s128" in changed and "slower" in changed
    assert "gpt2--decode--fp32--eager--b1--s128" in unchanged
    assert "nothing to compare with" in oldest
    index = render_page(environment(), pages["changes/index.md"])
    assert "| [cpu-default](cpu-amd-epyc-2c-cpu-default.md) | cpu-amd-epyc-2c | 2 |" in index
    for p in ("None", "nan", "undefined"):
        assert p not in text


def test_older_runs_stay_reachable_and_pages_read_the_current_run(tmp_path: Path) -> None:
    model = site_model(load_runs(_tree(tmp_path)))
    data = {target for target, _ in model.data_files}
    assert f"data/cpu-amd-epyc-2c/{RUN.name}/run.json" in data
    assert f"data/cpu-amd-epyc-2c/{RUN.name}-20990101T000000/run.json" in data
    runs_page = next(p for p in model.pages if p.path == "runs.md")
    assert len(runs_page.context["runs"]) == 2
    combo = next(p for p in model.pages if p.path.endswith("/bert-base.md"))
    text = render_page(environment(), combo)
    assert "20990101T000000" in text and f"{RUN.name}/" not in text.replace(f"{RUN.name}-2099", "")


def test_host_drift_is_the_bench_re_measurement_shift() -> None:
    from reportgen.render.changes import host_drift

    drift = host_drift(coverage_bench([0.10, -0.02, 0.04, -0.30]))
    assert drift["cpu-amd-epyc-2c"]["median"] == pytest.approx(0.07)  # |shift|: 0.02, 0.04, 0.10, 0.30
    assert drift["cpu-amd-epyc-2c"]["max"] == pytest.approx(0.30) and drift["cpu-amd-epyc-2c"]["combinations"] == 4
    assert host_drift(None) == {} and host_drift(coverage_bench([])) == {}


def test_changes_page_states_the_hosts_drift_beside_the_comparison(tmp_path: Path) -> None:
    runs = load_runs(_tree(tmp_path))
    pages = {p.path: p for p in site_model(runs, bench=coverage_bench([0.05, 0.15, -0.25])).pages}
    text = render_page(environment(), pages["changes/cpu-amd-epyc-2c-cpu-default.md"])
    assert "its medians moved by 15.0%" in text and "largest 25.0%" in text
    assert "(../validation.md)" in text
    assert "measured 2026-12-03T08:20:00Z" in text  # when the re-measurement ran, not the file
    plain = render_page(environment(), {p.path: p for p in site_model(runs).pages}[
        "changes/cpu-amd-epyc-2c-cpu-default.md"])
    assert "the machine's own drift" not in plain
