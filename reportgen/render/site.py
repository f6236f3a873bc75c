"""Write the generated part of docs/: pages, chart SVGs, run data copies, chart scripts.

What render wrote is listed in ``docs/.reportgen-manifest``; the next render deletes what
it wrote before and no longer writes, and never touches anything else. Files are rewritten
only when their bytes change, so ``mkdocs serve`` reloads only what changed.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

import jinja2

from reportgen.errors import UserError
from reportgen.render import charts
from reportgen.render.pages import Page, SiteModel
from reportgen.render.templating import MARKER, environment

MANIFEST = ".reportgen-manifest"
ASSET_DIR = "assets/reportgen"
VENDOR_BUNDLE = f"{ASSET_DIR}/vendor/vega-bundle.js"
_STATIC_ASSETS = ("rg-charts.js", "rg-charts.css")


@dataclass(frozen=True)
class RenderResult:
    written: tuple[str, ...]  # paths under docs/ whose bytes changed
    removed: tuple[str, ...]  # stale generated paths deleted
    pages: int
    charts: int
    files: int  # everything render owns now


def render_page(env: jinja2.Environment, page: Page) -> str:
    text = env.get_template(page.template).render(**page.context)
    return text.rstrip("\n") + "\n"


def vendor_bundle() -> str:
    """vega, vega-lite and vega-embed from vl-convert, with their versions on top."""
    import vl_convert

    header = (f"/* vega {vl_convert.get_vega_version()}, "
              f"vega-lite {vl_convert.get_vegalite_versions()[-1]}, "
              f"vega-embed {vl_convert.get_vega_embed_version()}: bundled by vl-convert "
              f"for reportgen; generated, do not edit */\n")
    return header


def _safe_rel(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"refusing to write outside docs/: {path}")
    return p.as_posix()


class _Writer:
    def __init__(self, docs: Path, previous: set[str]) -> None:
        self.docs = docs
        self.previous = previous
        self.owned: set[str] = set()
        self.written: list[str] = []

    def _claim(self, rel: str) -> Path:
        rel = _safe_rel(rel)
        target = self.docs / rel
        if (rel.endswith(".md") and rel not in self.previous and target.exists()
                and MARKER not in target.read_text(encoding="utf-8", errors="replace")[:4096]):
            raise UserError(f"{target} was not written by reportgen render; "
                            "move it away or delete it, then render again")
        self.owned.add(rel)
        return target

    def bytes(self, rel: str, data: bytes) -> None:
        target = self._claim(rel)
        if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        self.written.append(rel)

    def text(self, rel: str, text: str) -> None:
        self.bytes(rel, text.encode("utf-8"))

    def copy(self, rel: str, source: Path) -> None:
        target = self._claim(rel)
        if target.is_file() and target.stat().st_size == source.stat().st_size \
                and target.read_bytes() == source.read_bytes():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        self.written.append(rel)

    def keep(self, rel: str) -> None:
        """Own a file that is already up to date (the cached vendor bundle)."""
        self.owned.add(_safe_rel(rel))


def _read_manifest(docs: Path) -> set[str]:
    path = docs / MANIFEST
    if not path.is_file():
        return set()
    return {line for line in path.read_text(encoding="utf-8").splitlines() if line}


def _remove_stale(docs: Path, stale: Iterable[str]) -> list[str]:
    removed: list[str] = []
    for rel in sorted(stale):
        try:
            target = docs / _safe_rel(rel)
        except ValueError:
            continue  # a manifest edited by hand: ignore what it cannot own
        if target.is_file():
            target.unlink()
            removed.append(rel)
        parent = target.parent
        while parent != docs and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return removed


def _svgs(specs: Mapping[str, Mapping[str, object]], workers: int) -> dict[str, str]:
    """SVG fallbacks; vl-convert draws one chart at a time per process, so large sites
    are spread over processes (each pays ~0.5 s to start its JavaScript runtime)."""
    items = sorted(specs.items())
    if workers <= 1 or len(items) < 32:
        return {path: charts.to_svg(spec) for path, spec in items}
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding V8 threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        svgs = list(pool.map(charts.to_svg, [dict(spec) for _, spec in items],
                             chunksize=max(1, len(items) // (workers * 4))))
    return {path: svg for (path, _), svg in zip(items, svgs)}


def write_site(model: SiteModel, docs: Path, *, svg: bool = True,
               workers: int | None = None) -> RenderResult:
    """Write every page, chart fallback, data copy and asset of ``model`` under ``docs``."""
    docs.mkdir(parents=True, exist_ok=True)
    previous = _read_manifest(docs)
    writer = _Writer(docs, previous)
    env = environment()
    specs: dict[str, Mapping[str, object]] = {}
    for page in model.pages:
        writer.text(page.path, render_page(env, page))
        for chart, ctx_path in zip(page.charts, _chart_paths(page)):
            specs[ctx_path] = chart.spec
    if svg:
        for path, text in _svgs(specs, workers or min(4, _cpus())).items():
            writer.text(path, text)
    for rel, source in model.data_files:
        writer.copy(rel, Path(source))
    for rel, data in sorted(model.files.items()):
        writer.bytes(rel, data)
    assets = resources.files("reportgen.render") / "assets"
    for name in _STATIC_ASSETS:
        writer.bytes(f"{ASSET_DIR}/{name}", (assets / name).read_bytes())
    _write_vendor(writer)
    manifest = "".join(f"{p}\n" for p in sorted(writer.owned))
    removed = _remove_stale(docs, previous - writer.owned - {MANIFEST})
    (docs / MANIFEST).write_text(manifest, encoding="utf-8")
    return RenderResult(written=tuple(writer.written), removed=tuple(removed),
                        pages=len(model.pages), charts=len(specs), files=len(writer.owned))


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _chart_paths(page: Page) -> list[str]:
    """SVG paths of a page's charts, in the order of ``page.charts`` (see pages._chart)."""
    stem = PurePosixPath(page.path).stem
    parent = PurePosixPath(page.path).parent.as_posix()
    prefix = "" if parent == "." else f"{parent}/"
    return [f"{prefix}charts/{stem}--{c.name}.svg" for c in page.charts]


def _write_vendor(writer: _Writer) -> None:
    """The vega bundle takes seconds to build, so it is rebuilt only for new versions."""
    import vl_convert

    header = vendor_bundle()
    target = writer.docs / VENDOR_BUNDLE
    if target.is_file():
        with target.open("r", encoding="utf-8") as fh:
            if fh.readline() == header:
                writer.keep(VENDOR_BUNDLE)
                return
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # stub lacks the default
    writer.text(VENDOR_BUNDLE, header + bundle)
