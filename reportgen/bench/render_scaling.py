"""Figure 7: render plus strict site build for synthetic runs trees of growing size.

Uses the source checkout's synthetic runs generator (``tests/support/synthetic.py``, ``generate``)
for the trees and only public entry points besides: the ``reportgen render`` command and
``mkdocs build --strict`` as subprocesses, in a scratch copy of the site (mkdocs.yml and
docs/), so the repository's docs/ are never touched.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from reportgen.bench.results import figure
from reportgen.records.bench import FAIL, INFO, NOT_MEASURED

QUESTION = (
    "Does the site scale? Synthetic runs trees (the record format, plausible numbers) of "
    "growing size are rendered with `reportgen render` and built with `mkdocs build "
    "--strict`; the cost per added combination should stay flat (linear growth)."
)
GOAL_RATIO = 1.5
SIZES: tuple[int, ...] = (50, 500, 2000)


_SYNTHETIC = "_reportgen_bench_synthetic"  # a name no installed module has


def _synthetic(repo: Path) -> ModuleType:
    """The checkout's synthetic runs generator, ``tests/support/synthetic.py`` (not installed)."""
    path = repo / "tests" / "support" / "synthetic.py"
    spec = importlib.util.spec_from_file_location(_SYNTHETIC, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_SYNTHETIC] = module  # its dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


def _unavailable(repo: Path) -> str | None:
    if not (repo / "tests" / "support" / "synthetic.py").is_file():
        return "the synthetic runs generator (tests/support/synthetic.py, in a source checkout) is not there"
    if not (repo / "mkdocs.yml").is_file():
        return "the repository has no mkdocs.yml yet"
    try:
        from reportgen.commands import render  # noqa: F401
    except ImportError as exc:
        return f"the `reportgen render` command is not available ({exc})"
    if shutil.which("mkdocs") is None:
        return "mkdocs is not installed"
    return None


def _absolute_hooks(config: str, repo: Path) -> str:
    """``mkdocs.yml`` with its ``hooks:`` paths made absolute: mkdocs resolves them against
    the config file's folder, which for the copy is the scratch site, not the repository."""
    out, in_hooks = [], False
    for line in config.splitlines(keepends=True):
        stripped = line.strip()
        if not line.startswith((" ", "-")) and stripped:
            in_hooks = stripped == "hooks:"
        elif in_hooks and stripped.startswith("- ") and not Path(stripped[2:]).is_absolute():
            line = line.replace(stripped[2:], str((repo / stripped[2:]).resolve()), 1)
        out.append(line)
    return "".join(out)


def measure_size(n: int, repo: Path, scratch: Path, *, timeout_s: float = 900.0) -> dict[str, Any]:
    synthetic = _synthetic(repo)
    work = scratch / f"site-{n}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "mkdocs.yml").write_text(_absolute_hooks((repo / "mkdocs.yml").read_text(), repo))
    if (repo / "docs").is_dir():
        shutil.copytree(repo / "docs", work / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (work / "docs").mkdir()
    runs = work / "runs"
    t0 = time.perf_counter()
    synthetic.generate(runs, n)
    gen_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    _run([sys.executable, "-m", "reportgen", "render", "--runs", str(runs), "--docs", str(work / "docs")],
         cwd=work, timeout_s=timeout_s)
    render_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(["mkdocs", "build", "--strict", "--quiet", "-f", str(work / "mkdocs.yml"), "-d", str(work / "site")],
         cwd=work, timeout_s=timeout_s)
    build_s = time.perf_counter() - t0
    pages = sum(1 for _ in (work / "site").rglob("*.html"))
    md_pages = sum(1 for _ in (work / "docs").rglob("*.md"))
    total = render_s + build_s
    row = {"combinations": n, "pages": pages, "markdown_pages": md_pages,
           "generate_s": gen_s, "render_s": render_s, "build_s": build_s, "total_s": total,
           "pages_per_s": pages / total if total else None,
           "combinations_per_s": n / total if total else None}
    shutil.rmtree(work, ignore_errors=True)
    return row


def _run(cmd: list[str], *, cwd: Path, timeout_s: float) -> None:
    import os

    import reportgen

    # the scratch directory is outside the repository: make this checkout importable there
    package_root = str(Path(reportgen.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}: " + " | ".join(tail))


def run(repo: Path, scratch: Path, *, sizes: Sequence[int] = SIZES,
        log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    goal = (f"cost per added combination at the largest step at most {GOAL_RATIO}x that of "
            "the first step (linear growth)")
    reason = _unavailable(repo)
    if reason:
        return figure("Render scaling", QUESTION, value=None, unit="ratio", goal=goal,
                      goal_spec=None, status=NOT_MEASURED, notes=[reason])
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    t_start = time.perf_counter()
    for n in sizes:
        if stop():
            notes.append(f"time limit reached before the {n}-combination tree")
            break
        try:
            row = measure_size(n, repo, scratch)
        except Exception as exc:  # noqa: BLE001 - a failed build is the finding
            notes.append(f"{n} combinations: {type(exc).__name__}: {exc}")
            log(f"  render {n}: FAILED {exc}")
            break
        rows.append(row)
        log(f"  render {n}: {row['pages']} pages, render {row['render_s']:.1f} s + build "
            f"{row['build_s']:.1f} s = {row['pages_per_s']:.1f} pages/s")
    duration = time.perf_counter() - t_start
    if len(rows) < 3:
        return figure("Render scaling", QUESTION, value=None, unit="ratio", goal=goal,
                      goal_spec=None, status=NOT_MEASURED if not rows else FAIL,
                      notes=notes or ["fewer than three sizes measured"], rows=rows,
                      duration_s=duration)
    marg = [(b["total_s"] - a["total_s"]) / (b["combinations"] - a["combinations"])
            for a, b in zip(rows, rows[1:])]
    if marg[0] <= 0:
        return figure("Render scaling", QUESTION, value=None, unit="ratio", goal=goal,
                      goal_spec=None, status=INFO, rows=rows, duration_s=duration,
                      notes=["the first step added no measurable time (fixed costs dominate at "
                             "these sizes): linearity not judged", *notes])
    ratio = marg[-1] / marg[0]
    from reportgen.stats import loglog_fit

    exponent, _ = loglog_fit([r["combinations"] for r in rows[1:]], [r["total_s"] for r in rows[1:]])
    notes = [
        "Marginal cost per combination: " + ", ".join(
            f"{a['combinations']}→{b['combinations']}: {m * 1000:.1f} ms"
            for a, b, m in zip(rows, rows[1:], marg)) + ".",
        f"Log-log exponent of total time over the two largest trees: {exponent:.2f} "
        "(1 = linear; fixed costs pull it below 1).",
        "Pages = HTML files in the built site; times are one run each (no interval).",
        *notes,
    ]
    return figure("Render scaling", QUESTION, value=ratio, unit="ratio", goal=goal,
                  goal_spec={"kind": "below", "target": GOAL_RATIO}, notes=notes, rows=rows,
                  duration_s=duration, extra={"loglog_exponent": exponent})
