"""The Changes pages: each run against the previous run of its suite on its hardware,
and the rest of the site reading only the latest complete run."""

from __future__ import annotations

import shutil
from pathlib import Path

from run_copies import RUN, scaled_copy

from reportgen.render.load import load_runs
from reportgen.render.pages import site_model
from reportgen.render.site import render_page
from reportgen.render.templating import environment
from reportgen.schema import current_runs


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
