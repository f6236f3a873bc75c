""""Cite this" for a finding: the claim, its verdict, the runs that decided it (or,
untested, those shown as context), when they were measured and the project commit that
measured them, through the site's one citation builder (``reportgen.render.cite``).
"""

from __future__ import annotations

from typing import Any

from reportgen.claims.evaluate import ClaimResult
from reportgen.render.cite import Citation, citation, page_url


def evidence_basis(result: ClaimResult) -> tuple[list[str], str | None, list[str]]:
    """(run ids, latest finish date YYYY-MM-DD, commits) of the rows a reader relies on:
    those that decide the verdict, or every row when none does."""
    rows: list[dict[str, Any]] = [r for r in result.evidence if r["within_conditions"]] or result.evidence
    runs = sorted({str(r["run_id"]) for r in rows})
    dates = sorted(str(r["finished"])[:10] for r in rows if r.get("finished"))
    commits = sorted({c for r in rows for c in r.get("commits") or []})
    return runs, (dates[-1] if dates else None), commits


def cite(result: ClaimResult, page: str, site_url: str | None = None) -> Citation:
    """The citation of one claim's page (``page``: its path in the site, e.g.
    ``findings/<id>``; ``site_url``: the published site's address, if one is set)."""
    claim = result.claim
    runs, date, commits = evidence_basis(result)
    return citation(f"Claim check: {claim.title}", date=date, run_ids=runs, commits=commits,
                    url=page_url(site_url, page + ".md"), key="reportgen-" + claim.id,
                    details=[f"Verdict: {result.verdict}",
                             f"Quote from: {claim.source.title}, {claim.source.url}"])
