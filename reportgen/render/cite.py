""""Cite this" blocks, the site's one citation builder: BibTeX and plain text naming what a
figure rests on (the page, the date of the measurements, the run ids and the project
commit), so a citation identifies the exact measurements behind it, and the page's
address on the published site (``SITE_URL``) or, where none was configured when the page
was rendered, a note saying so.

Used by the combination pages and by the Findings pages (``render.findings.cite``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from reportgen import fmt

AUTHOR = "reportgen developers"  # as in CITATION.cff
NO_URL = "no public site address (SITE_URL) was set when this page was rendered"
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


@dataclass(frozen=True)
class Citation:
    key: str
    bibtex: str
    text: str


def page_url(site_url: str | None, page: str) -> str | None:
    """The published address of a docs/ page (``hardware/x/y.md`` ->
    ``<site>/hardware/x/y/``), or None without a site address."""
    if not site_url:
        return None
    path = page.removesuffix(".md")
    if posixpath.basename(path) == "index":
        path = posixpath.dirname(path)
    return site_url.rstrip("/") + "/" + (f"{path}/" if path else "")


def _key(title: str, day: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48].strip("-")
    return f"reportgen-{slug or 'result'}-{day}"


def _bibtex_text(value: str) -> str:
    """BibTeX field text: braces dropped, the characters TeX treats specially escaped, and
    no backtick (the block is shown in a code fence)."""
    out = " ".join(value.replace("`", "'").replace("~", "-").replace("^", "").split())
    for ch in "\\{}":
        out = out.replace(ch, "")
    return re.sub(r"([&%$#_])", r"\\\1", out)


def _plain(value: str) -> str:
    return " ".join(value.replace("`", "'").split())


def citation(title: str, *, date: str | None, run_ids: Sequence[str], commits: Sequence[str],
             url: str | None = None, key: str | None = None,
             details: Sequence[str] = (), measured: bool = True) -> Citation:
    """The citation of one page of results. ``date``: when the figures were measured (ISO
    8601; only the day is kept); ``details``: sentences that precede the runs in the note
    (a claim's verdict and source); ``measured=False``: a result computed with no run (the
    note names no runs and no measuring date)."""
    day = (date or "")[:10] or "undated"
    runs = ", ".join(sorted(set(run_ids))) or "none yet"
    commit_list = sorted({c for c in commits if c})
    commit = ", ".join(c[:12] for c in commit_list) or "not recorded"
    note = " ".join([*(d.rstrip(".") + "." for d in details),
                     f"Measured {day}; runs {runs}; project commit {commit}." if measured else ""]).strip()
    fields = [("title", "{" + _bibtex_text(title) + "}"), ("author", "{{" + AUTHOR + "}}")]
    if day[:4].isdigit():
        fields.append(("year", "{" + day[:4] + "}"))
        if day[5:7].isdigit():
            fields.append(("month", _MONTHS[int(day[5:7]) - 1]))
    if url:
        fields += [("note", "{" + _bibtex_text(note) + "}"),
                   ("url", "{" + url.replace("{", "").replace("}", "") + "}")]
    else:
        fields.append(("note", "{" + _bibtex_text(f"{note} URL: {NO_URL}.") + "}"))
    width = max(len(name) for name, _ in fields)
    body = ",\n".join(f"  {name.ljust(width)} = {value}" for name, value in fields)
    bibtex = f"@misc{{{key or _key(title, day)},\n{body}\n}}"
    text = _plain(f"{AUTHOR} ({day}). {title}. {note} " + (url or f"URL: {NO_URL}."))
    return Citation(key or _key(title, day), bibtex, text)


def cite_block(title: str, *, date: str | None, run_ids: Sequence[str], commits: Sequence[str],
               url: str | None = None, heading: str = "## Cite this") -> fmt.Raw:
    """A Markdown section with the citation as BibTeX and as plain text (fenced, so a
    reader can copy either with the code block's copy button)."""
    c = citation(title, date=date, run_ids=run_ids, commits=commits, url=url)
    return fmt.Raw(f"{heading}\n\n"
                   "The run id and the project commit below identify exactly which "
                   "measurements the figures on this page come from.\n\n"
                   f"{fmt.code_block(c.bibtex, 'bibtex')}\n\n"
                   f"{fmt.code_block(c.text, 'text')}\n")


__all__ = ["AUTHOR", "NO_URL", "Citation", "citation", "cite_block", "page_url"]
