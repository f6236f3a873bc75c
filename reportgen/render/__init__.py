"""The render side: runs/ -> page models -> Altair charts -> Markdown pages for MkDocs.

Never imports torch. Public API::

    render(runs: Path, docs: Path, *, claims: Path | None, bench: Path | None,
           site_url: str | None) -> RenderResult

Stages, one module each: ``load`` (records), ``analysis`` (frames), ``charts`` (Vega-Lite
specs, SVG), ``builder`` (page models and what every producer of pages shares), ``pages``
(the site's own pages and the order of every producer's), ``sections`` (pages written by
``reportgen.claims`` and ``reportgen.bench``), ``site`` (templates and files under docs/).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reportgen.render.site import RenderResult

__all__ = ["render"]


def render(runs: Path, docs: Path, *, svg: bool = True, claims: Path | None = None,
           bench: Path | None = None, site_url: str | None = None) -> RenderResult:
    """Write the generated pages for every run under ``runs`` into ``docs``.

    ``claims``: a claims registry directory; its claims, checked against ``runs``, become
    the Findings section (a missing or empty directory: no section). ``bench``: a directory
    of bench results files; the newest becomes the Validation page, which lists
    the other hosts' verdicts too (none: no page). ``runs/causes.yaml``, where it exists,
    names the causes of steps between releases on the History pages.

    Deterministic: the same inputs give the same bytes. ``svg=False`` skips the static
    chart fallbacks (quicker, for previews); the site build then reports the missing images.
    ``site_url``: the published site's public address, which each citation names as its
    URL (None: the citations say that none was set).
    """
    from reportgen.records.bench import load_benches
    from reportgen.records.causes import load_causes
    from reportgen.records.load import load_runs
    from reportgen.render.pages import site_model
    from reportgen.render.site import write_site

    loaded = load_runs(runs)
    report = None
    if claims is not None and claims.is_dir():
        from reportgen.claims import check

        report = check(runs, claims)
    results = load_benches(bench) if bench is not None else []
    return write_site(site_model(loaded, report=report, bench=results[0] if results else None,
                                 other_benches=results[1:], site_url=site_url, causes=load_causes(runs)),
                      docs, svg=svg)
