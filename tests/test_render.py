"""The report site: golden pages, determinism, ownership of docs/, escaping, strict build,
and the sections other modules write (Findings from claims, Validation from bench results).

Regenerate the golden pages after an intended change with
``REPORTGEN_UPDATE_GOLDEN=1 pytest tests/test_render.py`` and review the diff.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from support import synthetic
from support.site import BENCH, CLAIMS, FIXTURE, HOSTILE, make_project, mkdocs_build, render_fixture

from reportgen import fmt
from reportgen.categories import CATEGORIES
from reportgen.errors import UserError
from reportgen.render import analysis, render
from reportgen.render.charts import Chart
from reportgen.render.site import MANIFEST, MARKER

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("REPORTGEN_UPDATE_GOLDEN") == "1"


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


# --- fixture and golden pages --------------------------------------------------------


def test_committed_fixture_matches_its_generator(tmp_path: Path) -> None:
    synthetic.fixture(tmp_path)
    assert files_under(tmp_path) == files_under(FIXTURE), (
        "tests/data/runs_fixture is stale: python tests/support/synthetic.py tests/data/runs_fixture --fixture")


def test_pages_match_golden(rendered: Path) -> None:
    docs = rendered / "docs"
    manifest = (docs / MANIFEST).read_text(encoding="utf-8").splitlines()
    pages = {p: (docs / p).read_bytes() for p in manifest if p.endswith(".md")}
    pages[MANIFEST] = (docs / MANIFEST).read_bytes()
    if UPDATE:
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for rel, data in pages.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_bytes(data)
    golden = files_under(GOLDEN)
    assert sorted(golden) == sorted(pages), "set of generated pages changed"
    for rel, data in pages.items():
        assert data == golden[rel], f"{rel} differs from tests/golden/{rel}"


def test_render_is_deterministic(rendered: Path, tmp_path: Path) -> None:
    again = make_project(tmp_path / "again")
    render_fixture(again / "docs")
    assert files_under(again / "docs") == files_under(rendered / "docs")


def test_rerender_changes_nothing(rendered: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    render_fixture(project / "docs", svg=False)
    second = render_fixture(project / "docs", svg=False)
    assert second.written == () and second.removed == ()


# --- ownership of docs/ ---------------------------------------------------------------


def test_stale_generated_pages_are_removed_and_nothing_else(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    project = make_project(tmp_path / "p")
    docs = project / "docs"
    (docs / "notes.md").write_text("# Notes\n\nHand-written.\n", encoding="utf-8")
    (docs / "hardware").mkdir()
    (docs / "hardware" / "mine.txt").write_text("keep me\n", encoding="utf-8")
    render(runs, docs, svg=False)
    gpt2 = docs / "hardware" / "cpu-synthetic-epyc-2c" / "gpt2.md"
    assert gpt2.is_file()
    for path in runs.glob("*/*/combinations/gpt2--*.json"):
        path.unlink()
    for path in runs.glob("*/*/traces/gpt2--*"):
        path.unlink()
    result = render(runs, docs, svg=False)
    assert not gpt2.exists()
    assert not (docs / "models" / "gpt2.md").exists()
    assert "hardware/cpu-synthetic-epyc-2c/gpt2.md" in result.removed
    assert (docs / "notes.md").read_text(encoding="utf-8") == "# Notes\n\nHand-written.\n"
    assert (docs / "hardware" / "mine.txt").is_file()
    assert (docs / "methodology.md").is_file()


def test_refuses_to_overwrite_a_hand_written_page(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    (project / "docs" / "index.md").write_text("# My own home page\n", encoding="utf-8")
    with pytest.raises(UserError, match="not written by reportgen render"):
        render(FIXTURE, project / "docs", svg=False)
    assert (project / "docs" / "index.md").read_text(encoding="utf-8") == "# My own home page\n"


def test_generated_pages_carry_the_marker(rendered: Path) -> None:
    for page in (rendered / "docs").rglob("*.md"):
        if page.name != "methodology.md":
            assert MARKER in page.read_text(encoding="utf-8"), page


# --- the built site -------------------------------------------------------------------


def test_mkdocs_build_strict(rendered: Path, tmp_path: Path) -> None:
    result = mkdocs_build(rendered, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    page = site / "hardware" / "cpu-synthetic-epyc-2c" / "script-alert-1-script" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for built in site.rglob("*.html"):
        assert HOSTILE not in built.read_text(encoding="utf-8"), built
    # raw data and traces are reachable from the built site
    data = list((site / "data").rglob("*.json")) + list((site / "data").rglob("*.trace.json.gz"))
    assert len(data) > 40
    assert (site / "assets" / "reportgen" / "vendor" / "vega-bundle.js").is_file()
    # MkDocs does not check image links, so check every SVG fallback resolves
    fallbacks = 0
    for built in site.rglob("*.html"):
        for src in re.findall(r'<img alt="[^"]*" class="rg-fallback" src="([^"]+)"',
                              built.read_text(encoding="utf-8")):
            fallbacks += 1
            assert (built.parent / src).resolve().is_file(), f"{built}: {src}"
    assert fallbacks >= 15
    # pages written by reportgen.claims and reportgen.bench use the site's chart blocks
    for rel in ("validation/index.html", "findings/hostile-text/index.html"):
        html = (site / rel).read_text(encoding="utf-8")
        assert 'class="rg-chart"' in html and "data-spec=" in html and "rg-spec" not in html
        assert 'class="rg-fallback"' in html
    hostile = (site / "findings" / "hostile-text" / "index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile
    assert 'href="javascript' not in hostile and "<iframe" not in hostile


@pytest.fixture(scope="session")
def built(rendered: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("built") / "site"
    result = mkdocs_build(rendered, site)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


class _Text(HTMLParser):
    """The text a reader sees: everything outside <script> and <style>, plus attributes a
    browser shows (alt, title)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        for name, value in attrs:
            if name in ("alt", "title") and value:
                self.parts.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


LEFTOVERS = {
    "undefined": re.compile(r"\bundefined\b"),
    "NaN": re.compile(r"\bNaN\b"),
    "None": re.compile(r"\bNone\b"),
    "a literal backtick": re.compile("`"),
    "an internal reference": re.compile(r"\b(?:issue|tracker|ticket)s?\b(?:\s*#?\d+)?",
                                        re.IGNORECASE),
}


def leftovers(text: str) -> list[str]:
    found = []
    for what, pattern in LEFTOVERS.items():
        m = pattern.search(text)
        if m:
            found.append(f"{what}: ...{text[max(0, m.start() - 60):m.end() + 60]}...")
    return found


def test_leftovers_are_found() -> None:
    assert leftovers("a NaN% cell") and leftovers("axis undefined") and leftovers("x: None")
    assert leftovers("use `reportgen`") and leftovers("see issue 2") and leftovers("our tracker")
    assert not leftovers("Nothing to list: every combination finished; 31.0% [29.8%, 32.1%]")


def test_no_page_shows_undefined_nan_none_backticks_or_internal_references(built: Path) -> None:
    problems: dict[str, list[str]] = {}
    pages = sorted(built.rglob("*.html"))
    assert len(pages) > 15
    for page in pages:
        parser = _Text()
        parser.feed(page.read_text(encoding="utf-8"))
        found = leftovers(" ".join(" ".join(parser.parts).split()))
        rel = page.relative_to(built).as_posix()
        if rel == "findings/hostile-text/index.html":
            # that claim quotes hostile text (Markdown included) on purpose: shown verbatim
            found = [f for f in found if not f.startswith("a literal backtick")]
        if found:
            problems[rel] = found
    svgs = sorted(built.rglob("*.svg"))
    assert len(svgs) > 15
    for svg in svgs:
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg.read_text(encoding="utf-8"))
        found = leftovers(" ".join(html.unescape(t) for t in texts))
        if found:
            problems[svg.relative_to(built).as_posix()] = found
    assert not problems, "\n".join(f"{page}: {found}" for page, found in problems.items())


def test_every_chart_and_table_offers_its_data(built: Path, rendered: Path) -> None:
    docs = rendered / "docs"
    page = (docs / "hardware" / "nvidia-synthetic-h200-1x" / "bert-base.md").read_text(
        encoding="utf-8")
    charts = page.count('<div class="rg-chart"')
    tables = page.count("Download this table:")
    assert charts >= 3 and tables >= 6
    links = re.findall(r"\]\((charts/[^)]+\.(?:csv|json))\)", page)
    assert len(links) == 2 * (charts + tables)
    for link in links:
        target = docs / "hardware" / "nvidia-synthetic-h200-1x" / link
        assert target.is_file(), link
        if link.endswith(".csv"):
            assert len(pd.read_csv(target)) >= 1, link
        else:
            assert isinstance(json.loads(target.read_text(encoding="utf-8")), list), link
    # one table of every combination, for notebooks
    frame = pd.read_parquet(docs / "data" / "combinations.parquet")
    csv = pd.read_csv(docs / "data" / "combinations.csv")
    assert len(frame) == len(csv) > 10
    assert {"hardware", "model", "seq", "median", "ci_low", "ci_high", "share:mlp"} <= set(frame)
    assert "json_rel" not in frame
    home = (docs / "index.md").read_text(encoding="utf-8")
    assert "data/combinations.parquet" in home and "data/combinations.csv" in home
    assert (built / "data" / "combinations.parquet").is_file()


def test_home_shows_the_whole_split_and_what_was_measured(rendered: Path) -> None:
    home = (rendered / "docs" / "index.md").read_text(encoding="utf-8")
    assert "**Measured so far on:**" in home
    for cat in ("embeddings", "mlp", "norm", "head", "overhead"):
        assert f" {cat} |" in home
    # the fixture has a GPU run, so no "no GPU" note
    assert "No GPU measured yet" not in home
    spec = next(json.loads(html.unescape(m)) for m in
                re.findall(r'data-chart="breakdown" data-spec="([^"]+)"', home))
    rows = spec["data"]["values"]
    assert rows and all(r["share"] is not None and r["category"] in CATEGORIES for r in rows)
    assert "datasets" not in spec and all("data" not in layer for layer in spec["layer"])


def test_combination_page_reads_honestly(rendered: Path) -> None:
    page = (rendered / "docs" / "hardware" / "nvidia-synthetic-h200-1x"
            / "bert-base.md").read_text(encoding="utf-8")
    assert "## Cite this" in page and "@misc{reportgen-" in page
    assert "profiled / unprofiled" in page and "run-to-run noise" in page
    assert "score matrix (analytic)" in page
    assert "| what | value |" in page  # the environment as a table, not only raw JSON


def test_intervals_state_the_level_their_records_reach(tmp_path: Path) -> None:
    """gpt2's records on the CPU made of four rounds (87.5%): every page that prints one of
    their latency intervals says 87.5% and never calls it 95%; the downloads carry it."""
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE, runs)
    intervals = []
    for path in sorted(runs.glob("cpu-synthetic-epyc-2c/*/combinations/gpt2--*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        record["timing"]["confidence"] = 0.875
        path.write_text(json.dumps(record), encoding="utf-8")
        intervals.append(fmt.markdown_cell(fmt.ci(record["timing"]["ci_low"], record["timing"]["ci_high"])))
    project = make_project(tmp_path / "p")
    render(runs, project / "docs", svg=False)
    docs = project / "docs"
    combination = (docs / "hardware" / "cpu-synthetic-epyc-2c" / "gpt2.md").read_text(encoding="utf-8")
    assert "| 87.5% CI (ms) |" in combination  # the headline table's heading
    assert "(median; 87.5%\nCI" in combination
    pages = [combination, (docs / "hardware" / "cpu-synthetic-epyc-2c" / "index.md").read_text(encoding="utf-8"),
             (docs / "models" / "gpt2.md").read_text(encoding="utf-8")]
    shown = 0
    for page in pages:
        for line in page.splitlines():
            if any(iv in line for iv in intervals):
                shown += 1
                assert "95%" not in line, line
    assert shown >= len(intervals)
    # where rows differ (bert-base at 95% beside gpt2 at 87.5%) each interval says its own
    hardware = pages[1]
    assert "| CI (ms) |" in hardware and "87.5% CI" in hardware and "95% CI" in hardware
    # the significance verdicts between gpt2's implementations rest on 87.5% intervals
    assert "no significant difference (87.5% intervals)" in combination or \
        "significantly slower (87.5% intervals)" in combination
    headline = (docs / "hardware" / "cpu-synthetic-epyc-2c" / "charts" / "gpt2--headline.csv").read_text()
    header, *rows = headline.splitlines()
    at = header.split(",").index("confidence")
    assert rows and all(r.split(",")[at] == "0.875" for r in rows)


def test_empty_runs_tree_builds(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    project = make_project(tmp_path / "p")
    render(tmp_path / "runs", project / "docs", svg=False)
    assert "No runs yet" in (project / "docs" / "index.md").read_text(encoding="utf-8")
    result = mkdocs_build(project, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_never_imports_torch(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # any import of torch now raises ImportError
        from pathlib import Path
        import reportgen.render
        from reportgen.cli import main
        rc = main(["render", "--runs", {str(FIXTURE)!r}, "--docs", {str(tmp_path / 'docs')!r},
                   "--claims", {str(CLAIMS)!r}, "--bench", {str(BENCH)!r}, "--no-svg"])
        assert rc == 0
        assert sys.modules["torch"] is None
        assert Path({str(tmp_path / 'docs' / 'findings' / 'index.md')!r}).is_file()
        assert Path({str(tmp_path / 'docs' / 'validation.md')!r}).is_file()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_cli_missing_runs_is_a_user_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "reportgen", "render", "--runs",
                             str(tmp_path / "nope"), "--docs", str(tmp_path / "docs")],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 2
    assert "does not exist" in result.stderr
    assert not (tmp_path / "docs").exists()


# --- escaping ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [HOSTILE, "a|b", "**bold**", "[x](javascript:alert(1))",
                                   "`code`", "{: onclick=alert(1) }", "line\nbreak", "_u_"])
def test_escape_makes_run_data_inert(value: str) -> None:
    out = fmt.markdown_cell(value)
    for ch in "<>|*[]`{}\n_":
        assert ch not in out


def test_chart_json_cannot_close_an_element() -> None:
    chart = Chart("c", "t", {"data": {"values": [{"model": "</script><script>alert(1)"}]}})
    text = chart.json()
    assert "</" not in text and "<" not in text
    assert json.loads(text)["data"]["values"][0]["model"] == "</script><script>alert(1)"


def test_code_block_fence_outlasts_backticks_in_the_value() -> None:
    block = fmt.code_block("a ```` b", "sh")
    assert block.startswith("````` sh\n") and block.endswith("\n`````")


def test_hostile_name_in_front_matter_title_is_escaped() -> None:
    assert fmt.front_matter_title("</title><script>") == '"&lt;/title&gt;&lt;script&gt;"'


# --- analysis ---------------------------------------------------------------------------


def _rows(seqs: list[int], att: list[float], mlp: list[float]) -> pd.DataFrame:
    rows = []
    for s, a, m in zip(seqs, att, mlp):
        row = {f"ms:{c}": 0.0 for c in analysis.CATEGORIES}
        row.update({"seq": s, "ms:attention.core": a, "ms:mlp": m})
        rows.append(row)
    return pd.DataFrame(rows)


def test_scaling_exponent_of_an_exact_power_law() -> None:
    fits = analysis.scaling_fits(_rows([128, 256, 512], [1.0, 4.0, 16.0], [1.0, 2.0, 4.0]))
    by_cat = dict(zip(fits["category"], fits["exponent"]))
    assert by_cat["attention.core"] == pytest.approx(2.0)
    assert by_cat["mlp"] == pytest.approx(1.0)


def test_no_exponent_from_two_lengths_and_an_interval_from_three() -> None:
    two = analysis.scaling_fits(_rows([128, 256], [1.0, 4.0], [1.0, 2.0]))
    assert two.empty
    noisy = analysis.scaling_fits(_rows([128, 256, 512, 1024], [1.0, 4.4, 15.0, 66.0],
                                        [1.0, 2.0, 4.0, 8.0]))
    core = noisy[noisy["category"] == "attention.core"].iloc[0]
    assert core["ci_low"] < core["exponent"] < core["ci_high"]
    assert core["ci_low"] < 2.0 < core["ci_high"] and core["r2"] < 1.0


def test_one_loglog_fit_implementation() -> None:
    from reportgen import stats

    fit = stats.loglog_fit_stats([1.0, 2.0, 4.0], [3.0, 12.0, 48.0])
    assert fit["exponent"] == pytest.approx(2.0) and fit["r2"] == pytest.approx(1.0)
    assert fit["ci_low"] == pytest.approx(2.0) and fit["ci_high"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="three|3"):
        stats.loglog_fit_stats([1.0, 2.0], [1.0, 4.0])
    src = (ROOT / "reportgen" / "render" / "analysis.py").read_text(encoding="utf-8")
    assert "polyfit" not in src and "lstsq" not in src


def test_environment_facts_are_sentences_and_flag_a_dirty_tree() -> None:
    from reportgen.render.machine import environment_facts

    env = {"host": {"cpu_model": "AMD EPYC", "physical_cores": 2, "logical_cores": 2,
                    "ram_total_bytes": 2 ** 34},
           "driver": {"nvml_error": "pynvml (nvidia-ml-py) is not installed",
                      "driver_version": None},
           "libraries": {"torch": "2.13.0", "flash-attn": None},
           "torch": {"cuda_runtime": None},
           "git": {"commit": "abc123", "dirty": True}}
    facts = {f["label"]: f for f in environment_facts(env)}
    assert facts["GPU"]["value"].startswith("none")
    assert facts["CPU"]["value"].startswith("AMD EPYC (")
    assert facts["Libraries"]["value"] == "torch 2.13.0"  # uninstalled ones left out
    assert facts["Project commit"]["warn"] and "modified" in facts["Project commit"]["value"]
    assert not any(f["value"] in ("None", "null") for f in facts.values())
    gpu = environment_facts({**env, "device": {"type": "cuda"}, "gpus": [{"name": "H200"}]})
    note = next(f["value"] for f in gpu if f["label"] == "GPU details")
    assert "nvidia-ml-py" in note and "not installed" in note


def test_citation_names_run_commit_and_date() -> None:
    from reportgen.render.cite import citation, cite_block

    c = citation("bert-base on CPU · AMD EPYC · 2 cores", date="2026-12-02T13:58:52Z",
                 run_ids=["cpu/cpu-default-1a2b3c4d"], commits=["1c8bf876382e10d39a3d"])
    assert c.bibtex.startswith("@misc{reportgen-bert-base-on-cpu-amd-epyc-2-cores-2026-12-02,")
    assert c.bibtex.count("{") == c.bibtex.count("}")
    for text in (c.bibtex, c.text):
        assert "2026-12-02" in text and "cpu/cpu-default-1a2b3c4d" in text
        assert "1c8bf876382e" in text
    hostile = citation("50% of {time} & more_", date="", run_ids=[], commits=[])
    assert "\\%" in hostile.bibtex and "\\&" in hostile.bibtex
    assert hostile.bibtex.count("{") == hostile.bibtex.count("}")
    block = cite_block("t", date="2026-01-01", run_ids=["r"], commits=["c"])
    assert block.startswith("## Cite this") and "``` bibtex" in block


def test_citation_cff_is_valid_cff_1_2() -> None:
    import yaml

    doc = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert doc["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):
        assert doc[key], key
    assert all(isinstance(a, dict) and (a.get("name") or a.get("family-names"))
               for a in doc["authors"])
    assert doc.get("type", "software") in ("software", "dataset")


def test_attention_significance_uses_non_overlapping_intervals() -> None:
    base = {"scale": "r", "mode": "forward", "dtype": "fp32", "batch": 1, "seq": 128,
            "status": "ok"}
    frame = pd.DataFrame([
        {**base, "attn": "sdpa", "median": 10.0, "ci_low": 9.5, "ci_high": 10.5},
        {**base, "attn": "eager", "median": 10.4, "ci_low": 10.2, "ci_high": 10.8},
        {**base, "attn": "flash", "median": 12.0, "ci_low": 11.0, "ci_high": 13.0},
    ])
    out = analysis.attention_comparison(frame).set_index("attn")
    assert bool(out.loc["sdpa", "fastest"])
    assert not out.loc["eager", "significant"]
    assert out.loc["flash", "significant"]


@pytest.mark.parametrize(("value", "text"), [(12.345, "12.3"), (0.01234, "0.0123"),
                                             (1234.6, "1235"), (None, "–"),
                                             (float("nan"), "–")])
def test_number_formatting_is_stable(value: float | None, text: str) -> None:
    assert fmt.num(value) == text


# --- findings and validation ----------------------------------------------------------


def test_findings_section_and_claims_on_combination_pages(rendered: Path) -> None:
    docs = rendered / "docs"
    findings = sorted(p.name for p in (docs / "findings").glob("*.md"))
    # the claims, and the findings read from the runs alone
    from_runs = ["memory-traffic-and-roofline.md", "payoff.md", "speedups.md", "time-vs-flops.md"]
    assert findings == sorted(["index.md", *from_runs] + [f"{p.stem}.md" for p in CLAIMS.glob("*.yaml")])
    index = (docs / "findings" / "index.md").read_text(encoding="utf-8")
    assert "(gpt2-sdpa-not-slower-than-eager.md)" in index
    bert = (docs / "hardware" / "cpu-synthetic-epyc-2c" / "bert-base.md").read_text(encoding="utf-8")
    assert "## Claims that bear on this page" in bert
    assert "(../../findings/bert-base-attention-over-60-percent.md)" in bert
    assert "gpt2-sdpa-not-slower-than-eager" not in bert
    # the evidence links back to the combination pages
    claim = (docs / "findings" / "gpt2-sdpa-not-slower-than-eager.md").read_text(encoding="utf-8")
    assert "(../hardware/cpu-synthetic-epyc-2c/gpt2.md)" in claim
    assert (docs / "findings" / "charts" / "gpt2-sdpa-not-slower-than-eager--evidence.svg").is_file()
    # a claim about a GPU the runs lack: a page, a verdict, no chart
    gpu = (docs / "findings" / "sdpa-flash-fastest-backend.md").read_text(encoding="utf-8")
    assert "not tested" in gpu and "rg-chart" not in gpu


def test_validation_page_from_the_bench_results(rendered: Path) -> None:
    page = (rendered / "docs" / "validation.md").read_text(encoding="utf-8")
    assert page.startswith("---\ntitle: \"Validation\"\n---\n# Validation\n" + MARKER)
    assert page.count('<div class="rg-chart"') == 8
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert (rendered / "docs" / "charts" / "validation--latency-agreement.svg").is_file()
    home = (rendered / "docs" / "index.md").read_text(encoding="utf-8")
    assert "[Validation](validation.md)" in home and "[Findings](findings/index.md)" in home


def test_without_claims_or_bench_results_there_is_no_section(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "notes.json").write_text('{"kind": "something else"}', encoding="utf-8")
    render(FIXTURE, project / "docs", svg=False, claims=tmp_path / "no-claims",
           bench=tmp_path / "bench")
    docs = project / "docs"
    # no claims section: only the findings read from the runs alone
    assert sorted(p.name for p in (docs / "findings").glob("*.md")) == [
        "memory-traffic-and-roofline.md", "payoff.md", "speedups.md", "time-vs-flops.md"]
    assert not (docs / "validation.md").exists()
    bert = (docs / "hardware" / "cpu-synthetic-epyc-2c" / "bert-base.md").read_text(encoding="utf-8")
    assert "Claims that bear" not in bert
    assert "findings" not in (docs / "index.md").read_text(encoding="utf-8")


def test_sections_removed_when_their_inputs_go(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    render_fixture(project / "docs", svg=False)
    result = render(FIXTURE, project / "docs", svg=False)
    assert "validation.md" in result.removed and "findings/index.md" in result.removed
    assert not list((project / "docs" / "findings").glob("*-*-percent.md"))
    assert not (project / "docs" / "findings" / "index.md").exists()


def test_newest_bench_results_file_is_shown(tmp_path: Path) -> None:
    doc = json.loads((BENCH / "results.json").read_text(encoding="utf-8"))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "a.json").write_text(json.dumps(doc), encoding="utf-8")
    newer = {**doc, "created": "2026-12-24T00:00:00Z"}
    (tmp_path / "bench" / "0-newer.json").write_text(json.dumps(newer), encoding="utf-8")
    project = make_project(tmp_path / "p")
    render(FIXTURE, project / "docs", svg=False, bench=tmp_path / "bench")
    assert "Measured 2026-12-24T00:00:00Z" in (project / "docs" / "validation.md").read_text(
        encoding="utf-8")


def test_bench_results_from_a_newer_reportgen_are_refused(tmp_path: Path) -> None:
    doc = json.loads((BENCH / "results.json").read_text(encoding="utf-8"))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "r.json").write_text(json.dumps({**doc, "schema_version": 99}),
                                               encoding="utf-8")
    with pytest.raises(UserError, match="newer than this reportgen reads"):
        render(FIXTURE, make_project(tmp_path / "p") / "docs", svg=False, bench=tmp_path / "bench")


def test_a_bad_claim_is_a_user_error_and_nothing_is_written(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    shutil.copy(CLAIMS.parent / "claims" / "bad" / "unknown-metric.yaml", claims)
    docs = make_project(tmp_path / "p") / "docs"
    with pytest.raises(UserError, match="unknown-metric.yaml"):
        render(FIXTURE, docs, svg=False, claims=claims)
    assert sorted(p.name for p in docs.iterdir()) == ["methodology.md"]


def test_claims_index_agrees_with_claims_for_combination() -> None:
    from reportgen.claims import check
    from reportgen.records.load import load_runs
    from reportgen.render.findings import claims_for_combination, claims_index

    report = check(FIXTURE, CLAIMS)
    index = claims_index(report)
    combos = [(run.run_id, str(c.record["id"])) for run in load_runs(FIXTURE)
              for c in run.combinations]
    assert any(index.get(k) for k in combos)
    for run_id, combo_id in combos:
        assert index.get((run_id, combo_id), []) == claims_for_combination(report, run_id,
                                                                           combo_id)


def test_a_raw_exception_in_a_record_reads_as_a_sentence() -> None:
    note = "flop_counter failed: AttributeError: 'NoneType' object has no attribute 'next_functions'"
    text = analysis.reader_note(note)
    assert "next_functions" not in text and "NoneType" not in text
    assert text.startswith("PyTorch's FLOP counter could not count") and "in the record" in text
    assert analysis.reader_note("embedding gathers are not counted") == "embedding gathers are not counted"


def test_the_method_paragraphs_are_said_once_a_page(rendered: Path) -> None:
    docs = rendered / "docs"
    for page in docs.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert text.count("A change is significant when a two-sided Mann") <= 1, page
        # the attribution method's reason is folded into one line per method
        assert not re.search(r"^Category shares.*attribution method: ", text, re.M), page


def test_every_interval_is_drawn_by_the_one_encoder() -> None:
    """A point with its interval is drawn by ``charts.point_interval`` alone (no module
    of the pages encodes an interval's rule, ``x2``/``y2``, of its own), at its widths."""
    import ast

    from reportgen.render import charts

    for path in sorted((ROOT / "reportgen" / "render").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg in ("x2", "y2"):
                raise AssertionError(f"{path.name}:{node.value.lineno}: an interval encoded outside the encoder")
    frame = pd.DataFrame([{"seq": 128, "attn": "sdpa", "median": 1.0, "ci_low": 0.9, "ci_high": 1.1,
                           "ratio": 1.0, "confidence": 0.95}])
    attention = charts.attention_chart(frame)
    gain = charts.gain_chart([{"label": "a", "series": "s", "gain": 1.2, "gain_low": 1.1, "gain_high": 1.3,
                               "href": "x"}], series_title="t", x_title="x")
    assert attention["spec"]["width"] == gain["width"] == charts.INTERVAL_WIDTH
    for spec in (attention["spec"], gain):
        rule, point = (layer for layer in spec["layer"] if layer["mark"]["type"] in ("rule", "point")
                       and "datum" not in str(layer["encoding"].get("x", "")))
        assert rule["mark"]["strokeWidth"] == charts.INTERVAL_STROKE
        assert point["mark"]["size"] == charts.INTERVAL_POINT_SIZE
