""""Cite this" for a finding: BibTeX and plain text naming the claim, its verdict, the
runs that decided it (or, untested, those shown as context), when they were measured and
the project commit that measured them.

Kept apart from the page templates so a site-wide citation helper can replace it by
changing one call in ``pages.page_model``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reportgen.claims.evaluate import ClaimResult

_BIBTEX_SPECIAL = re.compile(r"([%&$#_{}])")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


@dataclass(frozen=True)
class Citation:
    key: str
    bibtex: str
    text: str


def _bib(value: str) -> str:
    value = " ".join(value.replace("\\", "/").replace("~", "-").replace("^", "").split())
    return _BIBTEX_SPECIAL.sub(r"\\\1", value)


def _plain(value: str) -> str:
    # the blocks are shown as code: a backtick could close the fence
    return " ".join(value.replace("`", "'").split())


def evidence_basis(result: ClaimResult) -> tuple[list[str], str | None, list[str]]:
    """(run ids, latest finish date YYYY-MM-DD, commits) of the rows a reader relies on:
    those that decide the verdict, or every row when none does."""
    rows: list[dict[str, Any]] = [r for r in result.evidence if r["within_conditions"]] or result.evidence
    runs = sorted({str(r["run_id"]) for r in rows})
    dates = sorted(str(r["finished"])[:10] for r in rows if r.get("finished"))
    commits = sorted({c for r in rows for c in r.get("commits") or []})
    return runs, (dates[-1] if dates else None), commits


def cite(result: ClaimResult, page: str) -> Citation:
    """The citation of one claim's page (``page``: its path in the site, e.g.
    ``findings/<id>``)."""
    claim = result.claim
    runs, date, commits = evidence_basis(result)
    key = "reportgen-" + claim.id
    runs_text = ", ".join(runs) if runs else "none yet"
    commit_text = ", ".join(c[:12] for c in commits) if commits else "not recorded"
    year, month = (date[:4], date[5:7]) if date else (None, None)
    fields = [
        ("title", f"{{Claim check: {_bib(claim.title)}}}"),
        ("author", "{reportgen}"),
        ("howpublished", f"{{reportgen findings page {_bib(page)}}}"),
        ("note", "{" + _bib(f"Verdict: {result.verdict}. Quote from: {claim.source.title}, "
                            f"{claim.source.url}. Runs: {runs_text}. Project commit: {commit_text}.")
         + "}"),
    ]
    if year:
        fields.append(("year", year))
        fields.append(("month", _MONTHS[int(month or "1") - 1]))
    width = max(len(name) for name, _ in fields)
    body = ",\n".join(f"  {name.ljust(width)} = {value}" for name, value in fields)
    bibtex = _plain_lines(f"@misc{{{key},\n{body}\n}}")
    text = _plain(
        f"reportgen ({date or 'undated'}). Claim check: {claim.title}. Verdict: {result.verdict}. "
        f"Findings page {page}. Runs: {runs_text}. Project commit: {commit_text}."
    )
    return Citation(key, bibtex, text)


def _plain_lines(text: str) -> str:
    return "\n".join(line.replace("`", "'") for line in text.splitlines())
