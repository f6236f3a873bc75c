""""Cite this" blocks: BibTeX and plain text naming what a figure rests on (the page, the
date of the measurements, the run ids and the project commit), so a citation identifies
the exact measurements behind it.

Used by the combination pages and by the Findings pages (``reportgen.claims``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from reportgen.render import fmt

AUTHOR = "reportgen developers"  # as in CITATION.cff


def _key(title: str, date: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48].strip("-")
    return f"reportgen-{slug or 'result'}-{date[:10]}"


def _bibtex_text(value: str) -> str:
    """BibTeX field text: braces balanced and the characters TeX treats specially escaped."""
    out = re.sub(r"\s+", " ", value)
    for ch in "\\{}":
        out = out.replace(ch, "")
    return re.sub(r"([&%$#_])", r"\\\1", out)


def citation(title: str, *, date: str, run_ids: Sequence[str], commits: Sequence[str],
             url: str | None = None) -> dict[str, str]:
    """``{"bibtex": ..., "text": ...}`` for one page of results. ``date`` is when the
    figures were measured (ISO 8601; only the day is kept)."""
    day = (date or "")[:10] or "undated"
    runs = ", ".join(sorted(set(run_ids))) or "none"
    commit_list = sorted({c for c in commits if c})
    commit = ", ".join(c[:12] for c in commit_list) or "unknown"
    year = day[:4] if day[:4].isdigit() else "n.d."
    note = f"Measured {day}; run {runs}; project commit {commit}"
    fields = [("title", _bibtex_text(title)), ("author", "{" + AUTHOR + "}"),
              ("year", year), ("note", _bibtex_text(note))]
    if url:
        fields.append(("howpublished", "\\url{" + url.replace("}", "") + "}"))
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    bibtex = f"@misc{{{_key(title, day)},\n{body}\n}}"
    text = f"{AUTHOR}. {title}. {note}." + (f" {url}" if url else "")
    return {"bibtex": bibtex, "text": re.sub(r"\s+", " ", text)}


def cite_block(title: str, *, date: str, run_ids: Sequence[str], commits: Sequence[str],
               url: str | None = None, heading: str = "## Cite this") -> fmt.Raw:
    """A Markdown section with the citation as BibTeX and as plain text (fenced, so a
    reader can copy either with the code block's copy button)."""
    c = citation(title, date=date, run_ids=run_ids, commits=commits, url=url)
    return fmt.Raw(f"{heading}\n\n"
                   "The run id and the project commit below identify exactly which "
                   "measurements the figures on this page come from.\n\n"
                   f"{fmt.code_block(c['bibtex'], 'bibtex')}\n\n"
                   f"{fmt.code_block(c['text'], 'text')}\n")


__all__ = ["AUTHOR", "citation", "cite_block"]
