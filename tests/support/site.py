"""A site project to render into and build: a copy of mkdocs.yml and the hand-written
pages, the test site (the committed runs fixture with its claims and bench results), and
``mkdocs build --strict`` in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from reportgen.render import render
from reportgen.render.site import RenderResult

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "runs_fixture"
CLAIMS = ROOT / "tests" / "data" / "claims_fixture"
BENCH = ROOT / "tests" / "data" / "bench_fixture"
HOSTILE = "<script>alert(1)</script>"  # the fixture's model and claim names that must stay text
SITE_URL = "https://example.org/reportgen/"  # the public address the committed results are rendered for


def make_project(where: Path) -> Path:
    """A copy of the site project (mkdocs.yml and the hand-written docs) to render into."""
    where.mkdir(parents=True, exist_ok=True)
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    hooks = "reportgen/render/mkdocs_hooks.py"
    assert hooks in config
    (where / "mkdocs.yml").write_text(config.replace(hooks, str(ROOT / hooks)), encoding="utf-8")
    (where / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "methodology.md", where / "docs" / "methodology.md")
    return where


def mkdocs_build(project: Path, site: Path, site_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    if site_url:
        env["SITE_URL"] = site_url
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
         str(project / "mkdocs.yml"), "-d", str(site)],
        capture_output=True, text=True, env=env, check=False)


def render_fixture(docs: Path, *, svg: bool = True) -> RenderResult:
    """The test site: the runs fixture with its claims and a bench results file."""
    return render(FIXTURE, docs, svg=svg, claims=CLAIMS, bench=BENCH)


def render_committed(project: Path) -> RenderResult:
    """The committed runs/, claims/ and bench/ rendered into ``project`` for SITE_URL."""
    return render(ROOT / "runs", project / "docs", claims=ROOT / "claims", bench=ROOT / "bench", site_url=SITE_URL)
