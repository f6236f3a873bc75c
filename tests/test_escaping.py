"""Escaping run data placed into a page: one function per place it goes, all in
``reportgen.fmt`` (a Markdown table cell, Markdown text, HTML text or an attribute's
value), read back through Python-Markdown with the site's extensions: what a reader sees is
the data as it was, and nothing of it becomes markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest

from reportgen import fmt

pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
EXTENSIONS = ["tables", "attr_list", "md_in_html", "admonition", "toc"]  # mkdocs.yml's own

TRICKY = [
    "a|b", "**bold** and *em*", "snake_case_name", "<script>alert(1)</script>", "AT&T &amp; co",
    "`code`", "``double``", "line\nbreak | in a cell", "[x](javascript:alert(1))", "![i](x.png)",
    "{: onclick=alert(1) }", "# not a heading", "~~struck~~", "$x^2$", "back\\slash\\|pipe",
    "it's \"quoted\"", "> not a quote", "1. not a list", "2) nor this", "- nor this", "+ or this", "---", "===",
    "<!-- comment -->",
]


class _Tree(HTMLParser):
    """The text of each element of interest, and every tag that appears."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.cells: list[str] = []
        self.items: list[str] = []
        self.attrs: list[dict[str, str | None]] = []
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.append(dict(attrs))
        if tag in ("td", "li", "p", "h2"):
            target = self.cells if tag == "td" else self.items
            target.append("")
            self._into = target

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "li", "p", "h2"):
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._into[-1] += data


def _read(text: str) -> _Tree:
    tree = _Tree()
    tree.feed(markdown.markdown(text, extensions=EXTENSIONS))
    return tree


def _as_read(value: str) -> str:
    return " ".join(value.split())


@pytest.mark.parametrize("value", TRICKY)
def test_a_table_cell_reads_as_the_data_and_keeps_its_row(value: str) -> None:
    page = f"| name | value | after |\n|---|---|---|\n| x | {fmt.markdown_cell(value)} | y |\n"
    tree = _read(page)
    assert tree.cells == ["x", _as_read(value), "y"]  # not split, not ended, no markup
    assert set(tree.tags) == {"table", "thead", "tbody", "tr", "th", "td"}


@pytest.mark.parametrize("value", TRICKY)
def test_markdown_text_reads_as_the_data_in_a_list_item_a_paragraph_and_a_heading(value: str) -> None:
    text = fmt.markdown_text(value)
    for page, block in ((f"- {text}\n", "li"), (f"Measured {text} here.\n", "p"), (f"## {text}\n", "h2")):
        tree = _read(page)
        expected = {"li": _as_read(value), "p": f"Measured {_as_read(value)} here.", "h2": _as_read(value)}[block]
        assert tree.items == [expected], page
        assert set(tree.tags) == ({"ul", "li"} if block == "li" else {block}), page


@pytest.mark.parametrize("value", [*TRICKY, "a\"b'c<d>&e"])
def test_html_text_reads_as_the_data_in_an_attribute_and_an_element(value: str) -> None:
    tree = _Tree()
    tree.feed(f'<div title="{fmt.html_text(value)}"><p>{fmt.html_text(value)}</p></div>')
    assert tree.attrs[0] == {"title": value}
    assert tree.items == [value] and tree.tags == ["div", "p"]


def test_a_missing_cell_is_a_dash_and_markup_built_here_passes() -> None:
    assert fmt.markdown_cell(None) == fmt.DASH and fmt.markdown_cell("") == ""
    assert fmt.markdown_text(None) == ""
    built = fmt.Raw("<code>x</code>")
    assert fmt.markdown_text(built) == fmt.markdown_cell(built) == "<code>x</code>"


def test_every_page_escapes_through_fmt() -> None:
    """The site's, the Findings section's and the Validation page's values, a table cell of
    the Validation page and the README's reasons all escape as ``fmt`` does; no module of
    the pages or the facts keeps an escaping table of its own."""
    from reportgen.render.findings import _environment
    from reportgen.render.validation import inert, table_cell

    for value in TRICKY:
        if "`" not in value:  # the Validation page shows a `code` span as code
            assert inert(value) == fmt.markdown_text(value)
            assert str(table_cell(value)) == fmt.markdown_cell(value)
        assert str(fmt.finalize(value)) == fmt.markdown_cell(value)
    assert _environment().finalize is fmt.markdown_text
    assert inert("run `reportgen check`") == "run <code>reportgen check</code>"
    own_table = re.compile(r"maketrans|&amp;|&lt;|&#\{|\.replace\(\"\|\"")
    for package in ("render", "claims"):
        for path in sorted((ROOT / "reportgen" / package).rglob("*.py")):
            assert not own_table.search(path.read_text(encoding="utf-8")), path
