"""Time render + ``mkdocs build --strict`` on synthetic runs trees (``nox -s bench``).

    python scripts/bench_render.py [--sizes 50 500] [--keep DIR]

Prints one row per size; makes no assertions (the target, 500 combinations within 60 s on
2 cores, is read off the table and quoted in the README).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reportgen.render import render
from reportgen.render.site import VENDOR_BUNDLE

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic runs generator lives with the tests
from support import synthetic  # noqa: E402


def bench(size: int, work: Path) -> dict[str, float]:
    runs, project = work / "runs", work / "project"
    synthetic.generate(runs, size)
    (project / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copy(ROOT / "docs" / "methodology.md", project / "docs" / "methodology.md")
    # The vega bundle is built once per vl-convert version and then reused; time it apart.
    start = time.perf_counter()
    render(runs, project / "docs")
    first = time.perf_counter() - start
    bundle = project / "docs" / VENDOR_BUNDLE
    kept = work / "vega-bundle.js"
    shutil.copy(bundle, kept)
    shutil.rmtree(project / "docs")
    (project / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "methodology.md", project / "docs" / "methodology.md")
    bundle.parent.mkdir(parents=True)
    shutil.copy(kept, bundle)
    start = time.perf_counter()
    result = render(runs, project / "docs")
    render_s = time.perf_counter() - start
    start = time.perf_counter()
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
         str(project / "mkdocs.yml"), "-d", str(work / "site")],
        capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False)
    build_s = time.perf_counter() - start
    if build.returncode != 0:
        print(build.stdout + build.stderr, file=sys.stderr)
    return {"combinations": size, "pages": result.pages, "charts": result.charts,
            "first_render_s": first, "render_s": render_s, "build_s": build_s,
            "total_s": render_s + build_s, "pages_per_s": result.pages / (render_s + build_s),
            "ok": float(build.returncode == 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--keep", type=Path, help="keep the trees and sites under DIR")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        if args.keep:
            work = args.keep / f"n{size}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            rows.append(bench(size, work))
        else:
            with tempfile.TemporaryDirectory(prefix=f"rg-bench-{size}-") as tmp:
                rows.append(bench(size, Path(tmp)))
    cols = ("combinations", "pages", "charts", "first_render_s", "render_s", "build_s",
            "total_s", "pages_per_s", "ok")
    print(f"cpus: {os.cpu_count()}  (first_render_s includes building the vega bundle once)")
    print(" | ".join(f"{c:>14}" for c in cols))
    for row in rows:
        print(" | ".join(f"{row[c]:>14.2f}" if isinstance(row[c], float) else f"{row[c]:>14}"
                         for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
