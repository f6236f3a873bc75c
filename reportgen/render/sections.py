"""Pages whose Markdown other parts of reportgen write: the Findings section
(``reportgen.claims``) and the Validation page (``reportgen.bench.page``).

Those modules escape their own data and call back for each chart; the renderer turns the
callback into its own chart block (``div.rg-chart[data-spec]`` with an SVG fallback), so
their charts are drawn, themed and given fallbacks like every other chart on the site.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reportgen import fmt
from reportgen.render.builder import Builder, ChartEmbed, Page

if TYPE_CHECKING:  # claims and bench are imported only when their section exists
    from reportgen.claims import CheckReport

EmbedFor = Callable[[str], ChartEmbed]  # page path -> chart callback for that page
VALIDATION = "validation.md"
FINDINGS_INDEX = "findings/index.md"


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


def findings(report: CheckReport, embed_for: EmbedFor,
             combination_page: Callable[[str, str], str | None],
             site_url: str | None = None) -> list[Generated]:
    """The Findings section: an index and one page per claim (none without claims)."""
    from reportgen.claims import pages as claim_pages
    from reportgen.claims.pages import claim_page_path

    if not report.claims:
        return []
    by_page = {claim_page_path(r.claim.id): r.claim.title for r in report.claims}

    def embed(name: str, spec: Mapping[str, Any]) -> str:
        # reportgen.claims names a claim's chart by the claim's id
        page = claim_page_path(name)
        if page not in by_page:
            raise ValueError(f"chart {name!r} belongs to no claim page")
        return embed_for(page)("evidence", spec)

    # with a report given, pages() reads neither the runs nor the claims directory
    texts = claim_pages(report.runs_root, "", report=report, combination_page=combination_page,
                        chart_embed=embed, site_url=site_url)
    out = [generated(path, by_page.get(path, "Findings"), text)
           for path, text in sorted(texts.items())]
    return sorted(out, key=lambda g: (g.path != FINDINGS_INDEX, g.path))


def pages(b: Builder, written: list[Generated]) -> list[Page]:
    """The site's pages for Markdown written elsewhere, each with the charts it embedded."""
    return [Page(g.path, "generated.md.j2", g.context(), tuple(b.embedded.get(g.path, ())))
            for g in written]


def findings_pages(b: Builder) -> list[Page]:
    """The Findings section's pages (none without a report with claims)."""
    if b.report is None:
        return []
    return pages(b, findings(b.report, b.embed_for, b.combo_page_of, b.site_url))


def claims_index(report: CheckReport) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``claims_for_combination`` for every combination at once: (run id, combination id)
    -> the claims whose evidence uses it. One pass over the evidence, so a large runs tree
    costs linear time rather than claims x evidence per combination."""
    from reportgen.claims.pages import claim_page_path

    index: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for result in report.claims:
        seen: set[tuple[str, str]] = set()
        for row in result.evidence:
            for combo_id in row["combinations"]:
                key = (str(row["run_id"]), str(combo_id))
                if key in seen:
                    continue  # as claims_for_combination: the first row that uses it
                seen.add(key)
                index.setdefault(key, []).append({
                    "claim_id": result.claim.id, "title": result.claim.title,
                    "page": claim_page_path(result.claim.id), "verdict": row["verdict"],
                    "claim_verdict": result.verdict,
                    "within_conditions": row["within_conditions"],
                    "check": result.claim.predicate.describe()})
    return index


def combination_claims(index: Mapping[tuple[str, str], list[dict[str, Any]]],
                       combos: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The claims whose evidence uses any of ``combos`` (run id, combination id), with
    how many of those combinations gave each verdict, within and outside the conditions."""
    found: dict[str, dict[str, Any]] = {}
    for key in combos:
        for item in index.get(key, ()):
            entry = found.setdefault(item["claim_id"], {
                "title": item["title"], "page": item["page"], "check": item["check"],
                "claim_verdict": item["claim_verdict"],
                "claim_verdict_class": item["claim_verdict"].replace(" ", "-"),
                "within": {}, "outside": {}})
            counts = entry["within" if item["within_conditions"] else "outside"]
            counts[item["verdict"]] = counts.get(item["verdict"], 0) + 1
    for entry in found.values():
        for side in ("within", "outside"):
            entry[side] = sorted(entry[side].items())
    return [found[k] for k in sorted(found)]
