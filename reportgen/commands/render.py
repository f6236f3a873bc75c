"""``reportgen render``: write the report site's Markdown pages from runs/."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "render", help="write the site's pages from runs/ (then: mkdocs build --strict)",
        description="Read runs/ (and claims/, bench/) and write Markdown pages, chart specs, SVG "
                    "fallbacks and copies of the run files under docs/. Deterministic; never "
                    "imports torch.")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="runs tree (default: runs/)")
    parser.add_argument("--docs", type=Path, default=Path("docs"),
                        help="MkDocs docs_dir to write into (default: docs/)")
    parser.add_argument("--claims", type=Path, default=Path("claims"),
                        help="claims registry for the Findings section (default: claims/; "
                             "missing: no Findings section)")
    parser.add_argument("--bench", type=Path, default=Path("bench"),
                        help="bench results directory; the newest file becomes the Validation "
                             "page (default: bench/; none: no page)")
    parser.add_argument("--site-url", default=os.environ.get("SITE_URL"),
                        help="the published site's public address, named as each citation's "
                             "URL (default: $SITE_URL; unset or local: the citations say none "
                             "was set)")
    parser.add_argument("--no-svg", dest="svg", action="store_false",
                        help="skip the static SVG chart fallbacks (faster previews)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from reportgen.render import render
    from reportgen.render.publish import public_site_url

    start = time.perf_counter()
    result = render(args.runs, args.docs, svg=args.svg, claims=args.claims,
                    bench=args.bench, site_url=public_site_url(args.site_url))
    elapsed = time.perf_counter() - start
    print(f"reportgen render: {result.pages} pages, {result.charts} charts, "
          f"{len(result.written)} files changed, {len(result.removed)} stale removed "
          f"in {elapsed:.1f} s -> {args.docs}")
    return 0
