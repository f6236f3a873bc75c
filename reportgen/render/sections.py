"""Pages whose Markdown is written outside the site's templates: the Findings section
(``render.findings``) and the Validation page (``render.validation``).

Those producers escape their own data and call back for each chart; the builder turns the
callback into its own chart block (``div.rg-chart[data-spec]`` with an SVG fallback), so
their charts are drawn, themed and given fallbacks like every other chart on the site.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reportgen import fmt
from reportgen.render.builder import Builder, ChartEmbed, Page

EmbedFor = Callable[[str], ChartEmbed]  # page path -> chart callback for that page
VALIDATION = "validation.md"


@dataclass(frozen=True)
class Generated:
    """Markdown for one page, written elsewhere; split so the marker goes under the title."""

    path: str
    title: str
    heading: str
    body: str

    def context(self) -> dict[str, Any]:
        return {"title": self.title, "heading": fmt.Raw(self.heading), "body": fmt.Raw(self.body)}


def generated(path: str, title: str, markdown: str) -> Generated:
    """The page at ``path`` from Markdown that starts with its title heading."""
    heading, _, body = markdown.lstrip("\n").partition("\n")
    if not heading.startswith("# "):
        raise ValueError(f"{path}: generated Markdown must start with its title heading")
    return Generated(path, title, heading, body)


def pages(b: Builder, written: list[Generated]) -> list[Page]:
    """The site's pages for Markdown written elsewhere, each with the charts it embedded."""
    return [Page(g.path, "generated.md.j2", g.context(), tuple(b.embedded.get(g.path, ())))
            for g in written]
