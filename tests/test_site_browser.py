"""The built site in a real browser: Debian's chromium, headless, over the DevTools protocol.

Needs ``chromium`` on PATH (or /usr/bin/chromium) and ``websocket-client``. Skipped when
either is missing, except under CI (``CI=true``), where their absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import CDP, SLOW_TIMEOUT_S, TIMEOUT_S, chromium, free_port, serve
from support.site import HOSTILE, mkdocs_build

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists()
                                        else None)


def _require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (required under CI)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def site(rendered: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    _require(CHROMIUM is not None, "chromium is not installed")
    try:
        import websocket  # noqa: F401
    except ImportError:
        _require(False, "websocket-client is not installed")
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    root = tmp_path_factory.mktemp("browser")
    result = mkdocs_build(rendered, root / "site", site_url=base)
    assert result.returncode == 0, result.stdout + result.stderr
    with serve(root / "site", port):
        yield base, root / "site"


@pytest.fixture(scope="module")
def browser(site: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[CDP]:
    assert CHROMIUM is not None
    profile = tmp_path_factory.mktemp("chromium-profile")
    with chromium(CHROMIUM, profile) as cdp:
        for domain in ("Runtime", "Log", "Page"):
            cdp.send(f"{domain}.enable")
        # Any alert() in a page is a script that got through escaping.
        cdp.send("Page.addScriptToEvaluateOnNewDocument", {"source":
                 "window.alert = function () { window.__rgAlerted = true; };"})
        yield cdp


def _pages(site_dir: Path) -> list[str]:
    pages = []
    for html in sorted(site_dir.rglob("index.html")):
        rel = html.parent.relative_to(site_dir).as_posix()
        pages.append("" if rel == "." else f"{rel}/")
    return pages


CHARTS_DRAWN = """(() => {
  const charts = [...document.querySelectorAll('div.rg-chart')];
  return charts.every(c => c.querySelector('.rg-view svg, .rg-view canvas')
                           && c.classList.contains('rg-drawn')) ? charts.length + 1 : 0;
})()"""


def _open(cdp: CDP, url: str, timeout_s: float = TIMEOUT_S) -> int:
    cdp.send("Page.navigate", {"url": url})
    cdp.wait_for("document.readyState === 'complete' && location.href === "
                 + json.dumps(url), f"{url} to load", timeout_s)
    charts = int(cdp.wait_for(CHARTS_DRAWN, f"charts on {url}", timeout_s)) - 1
    specs = int(cdp.evaluate("document.querySelectorAll('div.rg-chart[data-spec]').length"))
    assert charts == specs
    return charts


def test_every_page_draws_its_charts_without_errors(site: tuple[str, Path], browser: CDP) -> None:
    base, site_dir = site
    pages = _pages(site_dir)
    assert len(pages) >= 10
    # the sections other modules write are walked like every other page
    assert {"findings/", "findings/hostile-text/", "validation/"} <= set(pages)
    total = 0
    for page in pages:
        browser.events.clear()
        total += _open(browser, base + page)
        assert browser.errors() == [], f"{page}: {browser.errors()}"
        assert not browser.evaluate("window.__rgAlerted === true"), f"alert() ran on {page}"
    assert total >= 15


def test_hostile_model_name_renders_as_text(site: tuple[str, Path], browser: CDP) -> None:
    base, _ = site
    _open(browser, base + "hardware/cpu-synthetic-epyc-2c/script-alert-1-script/")
    h1 = browser.evaluate("document.querySelector('article h1').textContent")
    assert HOSTILE in h1
    assert browser.evaluate("document.title").startswith(HOSTILE)
    assert not browser.evaluate("window.__rgAlerted === true")


def test_hostile_claim_renders_as_text(site: tuple[str, Path], browser: CDP) -> None:
    base, _ = site
    charts = _open(browser, base + "findings/hostile-text/")
    assert charts == 1
    h1 = browser.evaluate("document.querySelector('article h1').textContent")
    assert HOSTILE in h1
    links = browser.evaluate("[...document.querySelectorAll('article a')].map(a => a.href)")
    assert not [href for href in links if href.lower().startswith("javascript")]
    assert not browser.evaluate("window.__rgAlerted === true")


def test_findings_are_in_the_navigation(site: tuple[str, Path], browser: CDP) -> None:
    base, _ = site
    _open(browser, base)
    hrefs = browser.evaluate("[...document.querySelectorAll('a.md-nav__link')].map(a => a.href)")
    assert base + "findings/" in hrefs and base + "validation/" in hrefs


def test_instant_navigation_loads_the_next_page_and_draws_it(site: tuple[str, Path],
                                                             browser: CDP) -> None:
    base, _ = site
    _open(browser, base)
    browser.events.clear()
    browser.evaluate("window.__rgSamePage = true")
    target = browser.evaluate("""(() => {
      const a = [...document.querySelectorAll('a.md-nav__link')]
        .find(a => /hardware\\/cpu-synthetic-epyc-2c\\/bert-base\\/$/.test(a.href));
      a.click();
      return a.href;
    })()""")
    browser.wait_for(f"location.href === {json.dumps(target)}", "the address to change")
    browser.wait_for("document.querySelector('article h1') && "
                     "document.querySelector('article h1').textContent.includes('bert-base on')",
                     "the next page's content")
    charts = int(browser.wait_for(CHARTS_DRAWN, "charts after navigation")) - 1
    assert charts >= 2
    # Material's instant navigation swaps the content without reloading the document.
    assert browser.evaluate("window.__rgSamePage === true")
    assert browser.errors() == []


def test_charts_follow_the_dark_palette(site: tuple[str, Path], browser: CDP) -> None:
    base, _ = site
    _open(browser, base + "hardware/nvidia-synthetic-h200-1x/bert-base/")
    scheme = browser.evaluate("document.body.getAttribute('data-md-color-scheme')")
    browser.evaluate("document.querySelector('form[data-md-component=palette] label:not([hidden])')"
                     ".click()")
    other = "slate" if scheme != "slate" else "default"
    browser.wait_for(f"document.body.getAttribute('data-md-color-scheme') === '{other}'",
                     "the palette to switch")
    want = "dark" if other == "slate" else "light"
    browser.wait_for(f"[...document.querySelectorAll('div.rg-chart')].every(c => "
                     f"c.getAttribute('data-rg-scheme') === '{want}' && c.querySelector('.rg-view svg'))",
                     "charts redrawn in the new palette")
    assert browser.errors() == []


def _viewport(cdp: CDP, width: int, *, dark: bool | None = None) -> None:
    cdp.send("Emulation.setDeviceMetricsOverride",
             {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
    features = [] if dark is None else [{"name": "prefers-color-scheme",
                                         "value": "dark" if dark else "light"}]
    cdp.send("Emulation.setEmulatedMedia", {"features": features})


LAYOUT = """(() => {
  const vw = document.documentElement.clientWidth;
  const page = document.documentElement.scrollWidth;
  const charts = [...document.querySelectorAll('div.rg-chart .rg-view svg')].map(svg => {
    const r = svg.getBoundingClientRect();
    const box = svg.closest('div.rg-chart');
    const cue = box.previousElementSibling;
    return {chart: box.getAttribute('data-chart'),
            width: r.width, height: r.height, right: r.right,
            drawn: parseFloat(svg.getAttribute('width')),
            box_right: box.getBoundingClientRect().right,
            scrolls: box.scrollWidth > box.clientWidth + 1,
            cue: !!cue && cue.classList.contains('rg-scroll-cue') && cue.getBoundingClientRect().height > 0};
  });
  const tables = [...document.querySelectorAll('article table')].map(t => {
    const wrap = t.closest('.md-typeset__scrollwrap') || t.parentElement;
    return {right: wrap.getBoundingClientRect().right};
  });
  return {vw, page, charts, tables};
})()"""


@pytest.mark.parametrize("width", [1400, 420])
def test_pages_fit_the_screen_and_draw_their_charts(site: tuple[str, Path], browser: CDP,
                                                    width: int) -> None:
    base, site_dir = site
    _viewport(browser, width)
    try:
        problems = []
        for page in _pages(site_dir):
            browser.events.clear()
            _open(browser, base + page)
            layout = browser.evaluate(LAYOUT)
            vw = layout["vw"]
            if layout["page"] > vw + 1:
                problems.append(f"{page}: page is {layout['page']} px wide in a {vw} px window")
            for c in layout["charts"]:
                if c["width"] <= 0 or c["height"] <= 0:
                    problems.append(f"{page}: chart {c['chart']} has no size")
                elif c["box_right"] > vw + 1:
                    problems.append(f"{page}: chart {c['chart']} runs off the right edge")
                elif c["right"] > vw + 1 and not (c["scrolls"] and c["cue"]):
                    # wider than the column: it scrolls inside its box, and says so
                    problems.append(f"{page}: chart {c['chart']} is cut off without a scroll cue")
                if c["width"] < 0.8 * c["drawn"] - 1:
                    problems.append(f"{page}: chart {c['chart']} shrunk to "
                                    f"{c['width'] / c['drawn']:.0%} of its size: its text is unreadable")
            for t in layout["tables"]:
                if t["right"] > vw + 1:
                    problems.append(f"{page}: a table runs off the right edge")
            if browser.errors():
                problems.append(f"{page}: {browser.errors()}")
        assert not problems, "\n".join(problems)
    finally:
        _viewport(browser, 1400)


def test_dark_mode_from_the_system_setting(site: tuple[str, Path], browser: CDP) -> None:
    base, _ = site
    url = base + "hardware/nvidia-synthetic-h200-1x/bert-base/"
    # every step waits for its condition, each as long as a loaded host may need
    # (a fresh load draws every chart of the page): none is a fixed pause
    slow = SLOW_TIMEOUT_S
    _open(browser, url, slow)
    _viewport(browser, 1400, dark=True)
    try:
        # the system setting in effect before the page is loaded again, and no palette
        # chosen by hand (an earlier test's toggle, or the palette the open page switched
        # to, stored): a fresh load must take the dark palette from the system alone
        browser.wait_for("matchMedia('(prefers-color-scheme: dark)').matches",
                         "the emulated dark system setting", slow)
        # the stored palette is cleared with no page of the site open, so no page can
        # store one again (on leaving) before the fresh load reads it
        browser.send("Page.navigate", {"url": "about:blank"})
        browser.wait_for("location.href === 'about:blank' && document.readyState === 'complete'",
                         "a blank page", slow)
        origin = base.rstrip("/")
        browser.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage"})
        browser.events.clear()
        _open(browser, url + "?system-dark", slow)
        browser.wait_for("document.body.getAttribute('data-md-color-scheme') === 'slate'",
                         "the dark palette from prefers-color-scheme", slow)
        browser.wait_for("document.querySelectorAll('div.rg-chart').length >= 2",
                         "the page's charts", slow)
        charts = int(browser.wait_for(CHARTS_DRAWN, "charts in dark mode", slow)) - 1
        assert charts >= 2
        browser.wait_for("[...document.querySelectorAll('div.rg-chart')].every(c => "
                         "c.getAttribute('data-rg-scheme') === 'dark')", "charts themed dark", slow)
        assert browser.errors() == []
    finally:
        _viewport(browser, 1400, dark=None)
