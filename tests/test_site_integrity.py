"""The site built from the committed runs/, claims/ and bench/, checked as a reader gets it.

Renders the committed results into a temporary docs/ and builds them with ``mkdocs build
--strict`` (once with a public site address and a repository address, once with
neither), then checks: every chart's downloads are non-empty and hold the rows the chart
draws; every share interval a record holds reaches the combinations table and, for the
combination a page is about, that page and its table download; no local path is
published; every BibTeX block parses and names its page's address; at 420 px every
table's deciding column (a verdict, an interval, a share) is on screen or announced by a
visible scroll cue, in a real browser.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from support.browser import chromium, free_port, serve
from support.site import SITE_URL, mkdocs_build

from reportgen.render import payoff
from reportgen.render.cite import AUTHOR, NO_URL, page_url

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = [pytest.mark.slow, pytest.mark.torchfree]

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = "https://example.org/source/reportgen"
# A home, a work tree or a temporary directory, after no word character or dot: a POSIX
# path, or a Windows one as JSON writes it (C:\\Users\\). Each pattern opens with a literal
# and looks behind from there, so the engine jumps between the literal's occurrences in the
# site's gigabytes of traces instead of trying the look-behind at every character.
LOCAL_PATHS = (re.compile(r"/(?<![\w.]/)(?:home|root|tmp|work|Users)/"),
               re.compile(r"\\\\Users\\\\(?<=(?<![\w.])[A-Za-z]:\\\\Users\\\\)"))


@pytest.fixture(scope="module")
def built(committed_project: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(docs, site) for the committed results, built for a public address."""
    import os

    site = tmp_path_factory.mktemp("integrity") / "site"
    os.environ["REPO_URL"] = REPO_URL
    try:
        result = mkdocs_build(committed_project, site, site_url=SITE_URL)
    finally:
        del os.environ["REPO_URL"]
    assert result.returncode == 0, result.stdout + result.stderr
    return committed_project / "docs", site


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


class _Links(HTMLParser):
    """Each chart block's spec and the download links that follow it."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and "rg-chart" in (a.get("class") or "").split() and a.get("data-spec"):
            self.charts.append({"spec": json.loads(a["data-spec"] or "{}"), "links": {}})
        if tag == "a" and a.get("href"):
            self.hrefs.append(str(a["href"]))
            if self.charts and "rg-download" in (a.get("class") or "").split():
                href = str(a["href"])
                kind = href.rsplit(".", 1)[-1]
                self.charts[-1]["links"].setdefault(kind, href)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return bool(a == b)


def test_every_chart_offers_the_rows_it_draws(built: tuple[Path, Path]) -> None:
    _, site = built
    checked = 0
    for html in _pages(site):
        parser = _Links()
        parser.feed(html.read_text(encoding="utf-8"))
        for chart in parser.charts:
            values = chart["spec"].get("data", {}).get("values")
            where = f"{html.relative_to(site)}: {chart['spec'].get('title') or chart['links']}"
            assert isinstance(values, list) and values, f"{where}: the chart draws no top-level rows"
            assert {"csv", "json"} <= set(chart["links"]), where
            target = {k: (html.parent / v).resolve() for k, v in chart["links"].items()}
            rows = json.loads(target["json"].read_text(encoding="utf-8"))
            assert len(rows) == len(values), where
            for got, drawn in zip(rows, values):
                assert set(got) == set(drawn), where
                assert all(_same(got[k], drawn[k]) for k in drawn), where
            table = list(csv.DictReader(io.StringIO(target["csv"].read_text(encoding="utf-8"))))
            assert len(table) == len(values), where
            assert set(table[0]) == set().union(*(r.keys() for r in values)), where
            checked += 1
    assert checked > 50  # the site's charts, the Validation page's among them


_WHOLE_AS_FLOAT = re.compile(r"^-?\d+\.0$")


def test_no_download_is_empty_or_writes_counts_as_floats(built: tuple[Path, Path]) -> None:
    """Every CSV the site offers holds rows, and a column of whole numbers (a count, a
    length, bytes) reads 29, not 29.0."""
    _, site = built
    files = sorted(site.rglob("*.csv"))
    assert len(files) > 100
    for path in files:
        where = str(path.relative_to(site))
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
        assert rows, f"{where}: an empty download"
        for column in rows[0]:
            cells = [r[column] for r in rows if r[column] != ""]
            assert not cells or not all(_WHOLE_AS_FLOAT.match(c) for c in cells), \
                f"{where}: column {column} writes whole numbers as floats ({cells[0]})"
    for path in sorted(site.rglob("*.json")):
        if path.parent.name == "charts" and path.stat().st_size < 8:
            raise AssertionError(f"{path.relative_to(site)}: an empty download")


def _tooltip_fields(spec: Any) -> Iterator[str]:
    """The fields every tooltip of a Vega-Lite spec (and its layers, facets) reads."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "tooltip" and isinstance(value, list):
                yield from (t["field"] for t in value if isinstance(t, dict) and "field" in t)
            else:
                yield from _tooltip_fields(value)
    elif isinstance(spec, list):
        for item in spec:
            yield from _tooltip_fields(item)


def _derived_fields(spec: Any) -> set[str]:
    """The fields a spec's transforms make (``as``), which its rows need not hold."""
    found: set[str] = set()
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "as":
                found.update([value] if isinstance(value, str) else [v for v in value if isinstance(v, str)])
            else:
                found |= _derived_fields(value)
    elif isinstance(spec, list):
        for item in spec:
            found |= _derived_fields(item)
    return found


def test_every_tooltip_reads_a_field_its_rows_hold(built: tuple[Path, Path]) -> None:
    """A tooltip naming a field the chart's rows lack shows the reader nothing (the interval's
    level on the attention charts was one)."""
    _, site = built
    missing = []
    for html in _pages(site):
        parser = _Links()
        parser.feed(html.read_text(encoding="utf-8"))
        for chart in parser.charts:
            rows = chart["spec"].get("data", {}).get("values") or []
            held = set().union(*(r.keys() for r in rows)) | _derived_fields(chart["spec"])
            lacking = sorted(set(_tooltip_fields(chart["spec"])) - held)
            if rows and lacking:
                missing.append(f"{html.relative_to(site)}: {chart['spec'].get('title') or chart['links']}: {lacking}")
    assert not missing, "\n".join(missing[:10])


def test_every_latency_download_states_its_level(built: tuple[Path, Path]) -> None:
    """A download of medians with their intervals says at what level each interval is
    (records of fewer than six rounds state less than 95%)."""
    _, site = built
    lacking = []
    for path in sorted(site.rglob("*.csv")):
        header = next(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))), [])
        if "median" in header and "ci_low" in header and "confidence" not in header:
            lacking.append(f"{path.relative_to(site)}: {header}")
    assert not lacking, "\n".join(lacking[:10])


def test_home_and_findings_count_the_same_combinations(built: tuple[Path, Path]) -> None:
    docs, _ = built
    home = (docs / "index.md").read_text(encoding="utf-8")
    findings = (docs / "findings" / "index.md").read_text(encoding="utf-8")
    shown = re.search(r"The (\d+) combinations the pages show", home)
    per_host = [int(n) for n in re.findall(r"\d+ models?, (\d+) combinations? measured\)", home)]
    counted = re.search(r"\((\d+) combinations, (\d+) of them measured\)", findings)
    assert shown and per_host and counted, "the home page or the findings index no longer counts its combinations"
    assert (int(counted.group(1)), int(counted.group(2))) == (int(shown.group(1)), sum(per_host))


_SOURCE = re.compile(r"(?:From|Rows from) run ([\w./-]+), measured (\d{4}-\d\d-\d\d \d\d:\d\d UTC), load: ")


def test_every_headline_table_names_its_run_date_and_load(built: tuple[Path, Path]) -> None:
    """A model's figures on each machine, and a machine's figures for each model, say which
    run they come from, when it was measured and under what load: the same combination
    read from two runs (the Tools page's, a model page's) can then be told apart."""
    docs, _ = built
    pages = [*sorted((docs / "models").glob("*.md")), *sorted((docs / "hardware").glob("*/index.md"))]
    checked = 0
    for page in pages:
        for section in page.read_text(encoding="utf-8").split("\n## "):
            if not re.search(r"^\| (?:sequence length|model) .*\| median \|", section, re.M):
                continue
            named = _SOURCE.findall(section)
            assert named, f"{page.relative_to(docs)}: a headline table without its run"
            for run_id, _when in named:
                assert (ROOT / "runs" / run_id / "run.json").is_file(), (page, run_id)
            checked += 1
    assert checked > 15


def test_an_extrapolated_whole_model_states_its_latency_level(built: tuple[Path, Path]) -> None:
    """The whole model's interval is the measured median's, widened: it is quoted at that
    median's level (87.5% for a record of fewer rounds), never as a 95% one."""
    docs, _ = built
    checked = 0
    for page in sorted(docs.glob("hardware/*/*.md")):
        text = page.read_text(encoding="utf-8")
        whole = re.search(r"the whole model's forward takes \*\*[^*]+\*\* \(([\d.]+%) interval", text)
        if whole is None:
            continue
        headline = re.search(r"a forward pass takes \*\*[^*]+\*\* \(median; ([\d.]+%)\s+CI", text)
        assert headline, page
        assert whole.group(1) == headline.group(1), f"{page.relative_to(docs)}: {whole.group(0)}"
        checked += 1
    assert checked > 5


_ONE_PLURAL = re.compile(r"(?<![\d.,])1 (layers|samples|rounds|passes|tokens|combinations|runs|experts)\b")
_ZERO_SHARE = re.compile(r"^\| ([\w.<>]+) \| (?:0 ms|0\.0+ ms|–) \| 0\.0% <small>\[0\.0%, 0\.0%\]</small>", re.M)


def test_a_count_of_one_is_singular_and_a_missing_category_a_dash(built: tuple[Path, Path]) -> None:
    """"1 layer", never "1 layers"; a category the model does not have reads "–" in the
    category table, never a measured "0.0% [0.0%, 0.0%]" beside no time."""
    docs, _ = built
    pages = sorted(docs.rglob("*.md"))
    plural = [f"{p.relative_to(docs)}: {m.group(0)}" for p in pages
              for m in _ONE_PLURAL.finditer(p.read_text(encoding="utf-8"))]
    assert not plural, plural[:10]
    zero = [f"{p.relative_to(docs)}: {m.group(1)}" for p in pages
            for m in _ZERO_SHARE.finditer(p.read_text(encoding="utf-8"))]
    assert not zero, zero[:10]
    # the committed hybrid and mixture-of-experts models lack a dense MLP: a dash
    dashes = [p for p in pages if "| mlp | – | – | – | – |" in p.read_text(encoding="utf-8")]
    assert dashes
    # and their downloads leave it blank rather than writing a measured 0 [0, 0]
    zeros, blanks = [], 0
    for path in sorted(docs.glob("hardware/*/charts/*--categories.csv")):
        for row in csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))):
            cells = [row["ms"], row["share"], row["share_ci_low"], row["share_ci_high"]]
            blanks += all(c == "" for c in cells)
            if all(c != "" and float(c) == 0.0 for c in cells):
                zeros.append(f"{path.relative_to(docs)}: {row['category']}")
    assert not zeros, zeros[:10]
    assert blanks


def test_a_table_download_follows_its_table(built: tuple[Path, Path]) -> None:
    """"Download this table" sits right below a table; a download that spans several
    tables says what it holds."""
    _, site = built
    checked = 0
    for html in _pages(site):
        text = html.read_text(encoding="utf-8")
        for m in re.finditer(r"Download this table", text):
            before = text[:m.start()]
            last_table = before.rfind("</table>")
            between = re.sub(r"<[^>]+>|\s", "", before[last_table:]) if last_table >= 0 else "x"
            assert last_table >= 0 and between == "", \
                f"{html.relative_to(site)}: 'Download this table' with no table above it"
            checked += 1
    assert checked > 20


def _records() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path in sorted((ROOT / "runs").glob("*/*/combinations/*.json")):
        run = path.parent.parent
        yield f"{run.parent.name}/{run.name}", path.stem, json.loads(path.read_text(encoding="utf-8"))


def _intervals(record: dict[str, Any], trace: Path | None = None) -> dict[str, tuple[float, float]]:
    """The share intervals a record holds; for a record stored without them, those of its
    attributed iterations (its trace), which the pages show in their place."""
    cats = (record.get("attribution") or {}).get("categories")
    if not isinstance(cats, dict):
        return {}
    held = {c: (float(v["share_low"]), float(v["share_high"])) for c, v in cats.items()
            if isinstance(v, dict) and v.get("share_low") is not None}
    if held or trace is None or not trace.exists():
        return held
    return {c: iv for c, iv in payoff.share_intervals(record, trace).items()
            if isinstance(cats.get(c), dict) and cats[c].get("share") is not None}


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def test_every_share_interval_reaches_the_reader(built: tuple[Path, Path]) -> None:
    docs, site = built
    table = list(csv.DictReader(io.StringIO(
        (docs / "data" / "combinations.csv").read_text(encoding="utf-8"))))
    by_key = {(r["run_id"], r["combo_id"]): r for r in table}
    held = {(run, combo): _intervals(rec, ROOT / "runs" / run / "traces" / f"{combo}.trace.json.gz")
            for run, combo, rec in _records()}
    held = {k: v for k, v in held.items() if v}
    assert held, "the committed records hold share intervals"
    shown = 0
    for key, intervals in held.items():
        row = by_key.get((key[0].split("/", 1)[1], key[1])) or by_key.get(key)
        if row is None:
            continue  # an earlier run of its suite: listed under Runs, not tabulated
        shown += 1
        for cat, (low, high) in intervals.items():
            if f"share_ci_low:{cat}" not in row and high == 0.0:
                continue  # a category the model has none of (the optimizer of a forward): no column
            assert math.isclose(float(row[f"share_ci_low:{cat}"]), low), (key, cat)
            assert math.isclose(float(row[f"share_ci_high:{cat}"]), high), (key, cat)
    assert shown > 20
    # each combination page's category table: a record's intervals, on the page and in its CSV
    pages = 0
    for categories in sorted(docs.glob("hardware/*/charts/*--categories.csv")):
        rows = list(csv.DictReader(io.StringIO(categories.read_text(encoding="utf-8"))))
        have = {r["category"]: (r["share_ci_low"], r["share_ci_high"]) for r in rows
                if r["share_ci_low"]}
        timed = {r["category"] for r in rows if r["ms"] and float(r["ms"]) > 0}  # rows the page lists
        if not have:
            continue
        matches = [iv for iv in held.values()
                   if all(c in iv and math.isclose(float(lo), iv[c][0]) and math.isclose(float(hi), iv[c][1])
                          for c, (lo, hi) in have.items())]
        assert matches, f"{categories}: intervals that no record holds"
        model = categories.name.removesuffix("--categories.csv")
        html = (site / categories.parent.parent.relative_to(docs) / model / "index.html").read_text(encoding="utf-8")
        for cat, (lo, hi) in matches[0].items():
            if cat in have and cat in timed:
                assert f"[{_pct(lo)}, {_pct(hi)}]" in html, (categories, cat)
        pages += 1
    assert pages > 5


def test_no_local_path_is_published(built: tuple[Path, Path]) -> None:
    _, site = built
    found = []
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        if path.suffix in (".png", ".ico", ".woff", ".woff2", ".parquet"):
            continue
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        text = data.decode("utf-8", errors="replace")
        where = path.as_posix()
        if "vendor/vega-bundle.js" in where or path.suffix == ".js" and "assets/javascripts" in where:
            continue  # third-party bundles, not data
        for m in (m for pattern in LOCAL_PATHS for m in pattern.finditer(text)):
            found.append(f"{path.relative_to(site)}: ...{text[max(0, m.start() - 40):m.end() + 40]}...")
    assert not found, "\n".join(found[:20])


_ENTRY = re.compile(r"@(\w+)\{([^,\s]+),\n(.*)\n\}\Z", re.DOTALL)


def parse_bibtex(text: str) -> tuple[str, str, dict[str, str]]:
    """(type, key, fields) of one BibTeX entry; raises ValueError where it does not parse."""
    m = _ENTRY.match(text.strip())
    if not m:
        raise ValueError(f"not one BibTeX entry: {text[:80]!r}")
    kind, key, body = m.groups()
    fields: dict[str, str] = {}
    i = 0
    while i < len(body):
        fm = re.compile(r"\s*(\w+)\s*=\s*").match(body, i)
        if not fm:
            raise ValueError(f"{key}: no field at {body[i:i + 40]!r}")
        name, i = fm.group(1).lower(), fm.end()
        if body[i] == "{":
            depth, start = 0, i
            while True:
                if body[i] == "\\":
                    i += 2
                    continue
                depth += {"{": 1, "}": -1}.get(body[i], 0)
                i += 1
                if depth == 0:
                    break
                if i >= len(body):
                    raise ValueError(f"{key}.{name}: unbalanced braces")
            value = body[start + 1:i - 1]
        else:
            vm = re.compile(r"[\w-]+").match(body, i)
            if not vm:
                raise ValueError(f"{key}.{name}: no value")
            value, i = vm.group(0), vm.end()
        if name in fields:
            raise ValueError(f"{key}: {name} twice")
        fields[name] = value
        sep = re.compile(r"\s*(,|\Z)").match(body, i)
        if not sep or (sep.group(1) != "," and sep.end() < len(body)):
            raise ValueError(f"{key}.{name}: no comma after the value")
        i = sep.end()
    return kind, key, fields


def test_bibtex_parses_and_names_its_address(built: tuple[Path, Path]) -> None:
    docs, _ = built
    authors = set()
    entries = 0
    for md in sorted(docs.rglob("*.md")):
        for _, block in re.findall(r"(`{3,}) ?bibtex\n(.*?)\n\1", md.read_text(encoding="utf-8"), re.DOTALL):
            _, _, fields = parse_bibtex(block)
            page = md.relative_to(docs).as_posix()
            assert fields.get("url") == page_url(SITE_URL, page), page
            authors.add(fields["author"])
            entries += 1
    assert entries > 10
    assert authors == {"{" + AUTHOR + "}"}


def test_bibtex_without_a_site_address_says_so(tmp_path: Path) -> None:
    from reportgen.render.cite import citation

    _, _, fields = parse_bibtex(citation("t", date="2026-01-02", run_ids=["r"], commits=["c"]).bibtex)
    assert "url" not in fields and NO_URL.replace("_", "\\_") in fields["note"]
    with pytest.raises(ValueError):
        parse_bibtex("@misc{k,\n  title = {open\n}")


def test_addresses_are_the_public_ones(built: tuple[Path, Path], tmp_path: Path) -> None:
    docs, site = built
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f'<link rel="canonical" href="{SITE_URL}">' in index
    assert f'href="{REPO_URL}"' in index  # the source repository, linked from every page
    sitemap = (site / "sitemap.xml").read_text(encoding="utf-8")
    locs = re.findall(r"<loc>([^<]*)</loc>", sitemap)
    assert locs and all(u.startswith(SITE_URL) for u in locs)
    # the 404 page is served at any depth: its assets by the site's own absolute path
    notfound = (site / "404.html").read_text(encoding="utf-8")
    refs = re.findall(r'(?:href|src)="([^"#]+)"', notfound)
    local = [r for r in refs if not re.match(r"[a-z]+:", r)]
    assert local and all(r.startswith("/reportgen/") for r in local), local
    # no page links by a path from the host's root outside the site's own (a project's
    # Pages site lives under /<repository>/, where "/assets/..." finds nothing)
    base = "/" + SITE_URL.split("://", 1)[1].split("/", 1)[1]
    rooted = [f"{html.relative_to(site)}: {r}" for html in _pages(site)
              for r in re.findall(r'(?:href|src)="(/[^"]*)"', html.read_text(encoding="utf-8"))
              if not r.startswith(base) and not r.startswith("//")]
    assert not rooted, rooted[:10]
    # built without an address: no canonical link, no sitemap entry, nothing on this machine
    bare = mkdocs_build(docs.parent, tmp_path / "bare")
    assert bare.returncode == 0, bare.stdout + bare.stderr
    for html in _pages(tmp_path / "bare"):
        text = html.read_text(encoding="utf-8")
        assert "127.0.0.1" not in text and 'rel="canonical"' not in text, html
    assert "<loc>" not in (tmp_path / "bare" / "sitemap.xml").read_text(encoding="utf-8")


def test_lists_render_as_lists(built: tuple[Path, Path]) -> None:
    _, site = built
    run_on = []
    for html in _pages(site):
        for para in re.findall(r"<p>(.*?)</p>", html.read_text(encoding="utf-8"), re.DOTALL):
            if re.search(r"\n[-*] \S", para):
                run_on.append(f"{html.relative_to(site)}: {para[:120]!r}")
        # two items fused into one: the next item's "- " glued to the end of the last
        for item in re.findall(r"<li>(.*?)</li>", html.read_text(encoding="utf-8"), re.DOTALL):
            fused = re.search(r"[A-Za-z0-9)]- [A-Za-z]", re.sub(r"<[^>]+>", "", item))
            if fused:
                run_on.append(f"{html.relative_to(site)}: {item[:160]!r}")
    assert not run_on, "\n".join(run_on[:10])


# A Markdown table's separator row (| --- |, |---:|, |:---|) left as text: the table above
# it was not parsed (a line of text right before it, with no blank line between).
_TABLE_SEPARATOR = re.compile(r"\|\s*:?-{3,}:?\s*\|")


class _Text(HTMLParser):
    """The text nodes a reader sees: none inside code, scripts or styles."""

    SKIP = {"code", "pre", "script", "style", "textarea"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.nodes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.depth += tag in self.SKIP

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in self.SKIP and self.depth > 0

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.nodes.append(data)


def unparsed_tables(html: str) -> list[str]:
    """The text nodes of ``html`` that hold a Markdown table separator."""
    parser = _Text()
    parser.feed(html)
    return [node for node in parser.nodes if _TABLE_SEPARATOR.search(node)]


def test_unparsed_tables_are_found() -> None:
    assert unparsed_tables("<p>6 of 6 agree.\n| a | b |\n| --- | ---: |\n| 1 | 2 |</p>")
    assert unparsed_tables("<p>|---|---|</p>")
    assert not unparsed_tables("<table><tr><td>a</td></tr></table><pre><code>|---|</code></pre>")


def test_every_table_is_a_table(built: tuple[Path, Path]) -> None:
    _, site = built
    found = [f"{html.relative_to(site)}: {node.strip()[:120]!r}" for html in _pages(site)
             for node in unparsed_tables(html.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found[:10])


# --- in a browser, at a phone's width -----------------------------------------------

DECIDING = re.compile(r"verdict|\bci\b|\binterval\b|\bshare\b|measured", re.IGNORECASE)
NARROW = 420

TABLES = """(() => {
  const vw = document.documentElement.clientWidth;
  const visible = el => { if (!el) return false; const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= vw
           && s.visibility !== 'hidden' && s.display !== 'none'; };
  return [...document.querySelectorAll('article table')].map(t => {
    const wrap = t.closest('.md-typeset__scrollwrap');
    const cue = wrap && wrap.previousElementSibling && wrap.previousElementSibling.classList.contains('rg-scroll-cue')
      ? wrap.previousElementSibling : null;
    const open = !t.closest('details') || t.closest('details').open;
    return {heads: [...t.querySelectorAll('thead th')].map(th => {
              const r = th.getBoundingClientRect();
              return [th.textContent.trim(), r.left >= 0 && r.right <= vw + 0.5]; }),
            cue: visible(cue), shown: open};
  });
})()"""


def _chromium() -> str | None:
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def served(built: tuple[Path, Path]) -> Iterator[str]:
    """The built site over HTTP at its own path (/reportgen/), as it is published."""
    _, site = built
    root = site.parent / "served"
    root.mkdir(exist_ok=True)
    link = root / "reportgen"
    if not link.exists():
        link.symlink_to(site, target_is_directory=True)
    port = free_port()
    with serve(root, port):
        yield f"http://127.0.0.1:{port}/reportgen/"


@pytest.mark.browser
def test_deciding_columns_are_in_view_at_420_px(built: tuple[Path, Path], served: str,
                                                tmp_path: Path) -> None:
    import os

    executable = _chromium()
    try:
        import websocket  # noqa: F401
    except ImportError:
        executable = None
    if executable is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium and websocket-client are required under CI")
        pytest.skip("chromium or websocket-client is not installed")
    _, site = built
    problems: list[str] = []
    tables = 0
    with chromium(executable, tmp_path / "profile") as cdp:
        cdp.send("Runtime.enable")
        cdp.send("Page.enable")
        cdp.send("Emulation.setDeviceMetricsOverride",
                 {"width": NARROW, "height": 900, "deviceScaleFactor": 1, "mobile": True})
        for html in _pages(site):
            rel = html.relative_to(site).as_posix()
            if rel == "404.html" or "<table" not in html.read_text(encoding="utf-8"):
                continue
            url = served + rel.removesuffix("index.html")
            cdp.send("Page.navigate", {"url": url})
            cdp.wait_for("document.readyState === 'complete' && location.href === " + json.dumps(url)
                         + " && document.querySelectorAll('div.rg-chart:not(.rg-drawn)').length === 0",
                         f"{url} to load")
            for i, t in enumerate(cdp.evaluate(TABLES)):
                deciding = [(h, inside) for h, inside in t["heads"] if DECIDING.search(h)]
                if not t["shown"] or not deciding:
                    continue
                tables += 1
                if not deciding[0][1] and not t["cue"]:
                    problems.append(f"{rel} table {i}: {deciding[0][0]!r} off screen, no scroll cue")
    assert tables > 20
    assert not problems, "\n".join(problems)
