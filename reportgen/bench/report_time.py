"""The report's time: what ``nox -s report -- --force`` does with the default CPU suite,
profile, render, check and site build, end to end.

The profile part is the suite step's own run (``efficiency.run_suite``), so the suite is
not measured a third time. The rest runs as the report session runs it, each step a
command of its own, on a copy of the committed runs with that run added and a copy of the
docs: ``reportgen render``, ``reportgen check`` and ``mkdocs build --strict``. Nothing is
written into the project's runs/, docs/ or site/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reportgen.bench.results import figure, not_measured

TITLE = "Report time"
QUESTION = ("How long does `nox -s report -- --force` take with the default CPU suite on this host: "
            "profiling the suite, rendering every committed run's pages, checking the runs and "
            "building the site?")
# `nox -s report -- --force` (cpu-default) within 6 minutes on 2 cores
GOAL_S = 360.0
GOAL = f"profile, render, check and site build within {GOAL_S:.0f} s on 2 cores"
STEPS: tuple[str, ...] = ("render", "check", "build")


def _commands(runs: Path, docs: Path, config: Path) -> dict[str, list[str]]:
    """The report session's commands after ``reportgen profile`` (noxfile.py), pointed at
    the copies."""
    return {
        "render": [sys.executable, "-m", "reportgen", "render", "--runs", str(runs), "--docs", str(docs)],
        "check": [sys.executable, "-m", "reportgen", "check", "--runs", str(runs)],
        "build": [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(config)],
    }


def prepare(project: Path, run_dir: Path, tree: Path) -> tuple[Path, Path, Path]:
    """A copy of the project's runs (with ``run_dir`` added under its hardware), docs and
    site configuration under ``tree``: (runs, docs, mkdocs.yml)."""
    if tree.exists():
        shutil.rmtree(tree)
    runs, docs = tree / "runs", tree / "docs"
    shutil.copytree(project / "runs", runs)
    shutil.copytree(run_dir, runs / run_dir.parent.name / run_dir.name, dirs_exist_ok=True)
    shutil.copytree(project / "docs", docs)
    # the site configuration names its hooks by a path relative to itself
    for rel in ("mkdocs.yml", "reportgen/render/mkdocs_hooks.py"):
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project / rel, target)
    return runs, docs, tree / "mkdocs.yml"


def run(project: Path, run_dir: Path, profile_s: float, scratch: Path,
        log: Callable[[str], None] = print,
        runner: Callable[[Sequence[str]], int] | None = None) -> dict[str, Any]:
    """The figure: ``profile_s`` (the suite step's wall time) plus the three publishing
    commands' wall time on copies under ``scratch``. ``runner`` runs one command and
    returns its exit code (default: a subprocess with its output discarded)."""
    try:
        import mkdocs  # noqa: F401 - the site build needs it; a bare GPU host may lack it
    except ImportError:
        return not_measured(TITLE, QUESTION, GOAL, "mkdocs is not installed here: the site build cannot run",
                            unit="s")
    tree = scratch / "report"
    runs, docs, config = prepare(project, run_dir, tree)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}

    def default_runner(command: Sequence[str]) -> int:
        done = subprocess.run(list(command), cwd=project, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode:
            log(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        return done.returncode

    execute = runner or default_runner
    seconds: dict[str, float] = {}
    for name, command in _commands(runs, docs, config).items():
        t0 = time.perf_counter()
        code = execute(command)
        seconds[name] = time.perf_counter() - t0
        log(f"report time: {name} {seconds[name]:.1f} s")
        if code:
            return not_measured(TITLE, QUESTION, GOAL, f"`{' '.join(command[1:4])}` exited with {code}", unit="s")
    total = profile_s + sum(seconds.values())
    return figure(
        TITLE, QUESTION, value=total, unit="s", goal=GOAL,
        goal_spec={"kind": "below", "target": GOAL_S},
        notes=[f"profile: the suite step's run ({profile_s:.0f} s, through the runner in the bench's "
               "process: a fresh `reportgen profile` adds its interpreter start, a few seconds)",
               "render, check and `mkdocs build --strict` as the report session runs them, on a copy of "
               "the committed runs with that run added",
               "nox's own step (pip checking the installed package) is not included"],
        rows=[{"step": "profile", "wall_s": profile_s},
              *({"step": name, "wall_s": seconds[name]} for name in STEPS)],
        duration_s=sum(seconds.values()),
    )
