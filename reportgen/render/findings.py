"""The Findings section: a page per claim and their index, from a ``CheckReport`` (the
claims checked against the runs, ``reportgen.claims``), with Altair chart specs, Jinja2
templates (``templates/findings``) and each page's "Cite this" block; and the claims that
bear on each combination, for its page.

The pages' Markdown is written here and joined to the site as generated pages
(``sections``): each chart calls back to the builder, which draws, themes and gives it a
fallback like every other chart on the site.

Everything that comes from data (claim text, run ids, reasons) is escaped for Markdown and
HTML by the environment's ``finalize`` (``fmt.markdown_text``): a claim quoting ``<script>`` renders as text, and
``[x](javascript:...)`` in a quote is not a link. Only values wrapped in ``Markup`` (built
here from escaped parts) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment
from markupsafe import Markup

from reportgen import fmt
from reportgen.claims.evaluate import CONTEXT_OUTCOME, CheckReport, ClaimResult, check, releases_summary
from reportgen.claims.metrics import format_value
from reportgen.claims.registry import Comparison, Hardware, Ordering
from reportgen.render import sections
from reportgen.render.builder import Builder, Page, rel
from reportgen.render.charts import INTERVAL_PANEL_WIDTH, LEVEL_FORMAT, point_interval, script_block
from reportgen.render.cite import Citation, citation, page_url
from reportgen.render.templating import make_environment

FINDINGS = "findings"
FINDINGS_INDEX = f"{FINDINGS}/index.md"
CombinationPage = Callable[[str, str], "str | None"]  # (run_id, combination id) -> docs path
ChartEmbed = Callable[[str, dict[str, Any]], str]  # (chart name, Vega-Lite spec) -> Markdown

def _url(value: str) -> Markup:
    # Parentheses, quotes, spaces and angle brackets would end a Markdown link destination
    # (or an HTML attribute) early; registry URLs are already checked to be http(s).
    return Markup(quote(str(value), safe=":/?#[]@!$&*+,;=%-._~"))


def _environment() -> Environment:
    # Markdown, not HTML: escaping is done by finalize (fmt.markdown_text)
    return make_environment("reportgen.render", folder="templates/findings", finalize=fmt.markdown_text,
                            filters={"url": _url, "ci_heading": fmt.ci_heading, "count": fmt.count})


# -- formatting ----------------------------------------------------------------------------


def _with_interval(item: dict[str, Any], unit: str, shared: float | None) -> str:
    """The value and its interval, with the interval's level where it is not the ``shared``
    one the table's heading states."""
    if item.get("value") is None:
        return "-"
    value, low, high = item["value"], item.get("ci_low"), item.get("ci_high")
    if low is None or high is None or low == high == value:
        return format_value(value, unit)
    return (f"{format_value(value, unit)} "
            + fmt.ci_level(low, high, item.get("confidence"), shared, lambda x: format_value(x, unit)))


def evidence_level(result: ClaimResult) -> float | None:
    """The one level every interval among the claim's evidence states (None where they
    differ): what the evidence tables' heading says."""
    items = [item for row in result.evidence for item in row["checks"]]
    return fmt.shared_level([*items, *(v for item in items for v in item.get("variants") or [])])


def _unit(check: Comparison | Ordering) -> str:
    return check.metric.unit


_OPS = {">=": "\u2265", "<=": "\u2264", ">": ">", "<": "<", "==": "=", "approx": "\u2248"}


def _measured_cells(result: ClaimResult, row: dict[str, Any], shared: float | None) -> list[str]:
    cells: list[str] = []
    checks = result.claim.predicate.checks
    if len(checks) > 1 and _one_metric(checks) and row["checks"]:
        # a range (">= a" and "<= b" of one metric): the value once, each bound's verdict named
        item = row["checks"][0]
        text = "-" if item.get("value") is None else _with_interval(item, _unit(checks[0]), shared)
        unit = _unit(checks[0])
        bounds = ", ".join(f"{_OPS.get(spec.op, spec.op)} {format_value(spec.value, unit)} {c['verdict']}"
                           for spec, c in zip(checks, row["checks"]) if isinstance(spec, Comparison))
        return [f"{checks[0].metric.text}: {text}", f"bounds: {bounds}"]
    for spec, item in zip(checks, row["checks"]):
        unit = _unit(spec)
        if isinstance(spec, Ordering):
            ranked = item.get("variants") or []
            text = "; ".join(f"{v['attn']} {_with_interval(v, unit, shared)}" for v in ranked)
        else:
            text = _with_interval(item, unit, shared)
        label = spec.metric.text if len(checks) > 1 else ""
        if item.get("value") is None and not item.get("variants"):
            text = "-"
        cells.append(f"{label}: {text} ({item['verdict']})" if label else text)
    return cells


# -- charts --------------------------------------------------------------------------------


ROLE_DECIDES = "decides the verdict (the claim's hardware and conditions)"
ROLE_OTHER_HARDWARE = "context only: not the claim's hardware"
ROLE_OTHER_CONDITIONS = "context only: outside the claim's other conditions"
ROLES = (ROLE_DECIDES, ROLE_OTHER_HARDWARE, ROLE_OTHER_CONDITIONS)
CHART_HEIGHT = 240  # per panel, two panels side by side (charts.INTERVAL_PANEL_WIDTH wide)


def _role(row: dict[str, Any]) -> str:
    if row["within_conditions"]:
        return ROLE_DECIDES
    return ROLE_OTHER_HARDWARE if not row["on_claim_hardware"] else ROLE_OTHER_CONDITIONS


def _series_title(result: ClaimResult) -> str:
    checks = result.claim.predicate.checks
    if _one_metric(checks):
        checks = checks[:1]
    if isinstance(checks[0], Ordering):
        return "attention, dtype"
    if len(checks) > 1:
        return "check, dtype, batch"
    if result.claim.predicate.compares_variants:
        return "dtype, batch"
    return "attention, dtype, batch"


def _one_metric(checks: tuple[Any, ...]) -> bool:
    """Every check compares the same metric (a range: ``>= a`` and ``<= b``)."""
    return all(isinstance(c, Comparison) for c in checks) and len({c.metric.text for c in checks}) == 1


def _points(result: ClaimResult) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    checks = result.claim.predicate.checks
    if _one_metric(checks):
        checks = checks[:1]  # one point per row: the checks share its value
    for row in result.evidence:
        combo = row["combination"]
        name = row["hardware_label"]
        base = {
            # the claim's hardware first; other hardware says so in its panel's title
            "hardware": name if row["on_claim_hardware"] else f"{name} (context)",
            "panel": 0 if row["on_claim_hardware"] else 1,
            "model": combo.get("model"),
            "seq_len": combo.get("seq_len"),
            "dtype": combo.get("dtype"),
            "batch_size": combo.get("batch_size"),
            "role": _role(row),
            "run": row["run_id"],
        }
        for spec, item in zip(checks, row["checks"]):
            if isinstance(spec, Ordering):
                for variant in item.get("variants") or []:
                    points.append({**base, "series": f"{variant['attn']} {combo.get('dtype')}",
                                   "value": variant["value"],
                                   "ci_low": variant["ci_low"], "ci_high": variant["ci_high"],
                                   "confidence": variant.get("confidence"), "outcome": row["outcome"]})
            elif item.get("value") is not None:
                series = " ".join(str(p) for p in (
                    spec.metric.text if len(checks) > 1 else combo.get("attn_implementation"),
                    combo.get("dtype"), f"b{combo.get('batch_size')}") if p)
                points.append({**base, "series": series, "value": item["value"], "ci_low": item["ci_low"],
                               "ci_high": item["ci_high"], "confidence": item.get("confidence"),
                               "outcome": row["outcome"]})
    return points


def threshold_label(check: Comparison) -> str:
    """The claim's threshold as the chart labels it: "claim: > 60.0%", "claim: 3.7x ± 15%"."""
    unit = check.metric.unit
    if check.op in ("==", "approx") and check.tolerance:
        tol = fmt.pct(check.tolerance, 0) if check.relative else format_value(check.tolerance, unit)
        return f"claim: {format_value(check.value, unit)} \u00b1 {tol}"
    return f"claim: {check.op} {format_value(check.value, unit)}"


def chart_spec(result: ClaimResult) -> dict[str, Any] | None:
    """A Vega-Lite spec (dict) of the evidence: one panel per hardware, sequence length
    across, the 95% interval as a rule; the mark's shape and opacity say whether it decides
    the verdict or is context; the claim's threshold is a labelled dashed line."""
    points = _points(result)
    if not points:
        return None
    import altair as alt

    all_checks = result.claim.predicate.checks
    checks = all_checks[:1] if _one_metric(all_checks) else all_checks
    unit = _unit(checks[0])
    if len(checks) > 1:
        y_title = "value"
    elif checks[0].metric.numerator.kind == "nongemm":
        y_title = "non-GEMM share of operator time"
    elif unit == "share":
        y_title = f"{checks[0].metric.text}: share of forward time"
    else:
        y_title = f"{checks[0].metric.text} ({unit})"
    y_axis = alt.Axis(format="%") if unit == "share" and len(checks) == 1 else alt.Axis()
    roles = [r for r in ROLES if any(p["role"] == r for p in points)]
    role_scale: dict[str, Any] = {"domain": list(ROLES), "range": ["circle", "diamond", "triangle-up"]}
    deciding = alt.datum.role == ROLE_DECIDES
    series_title = _series_title(result)
    if len({p["model"] for p in points}) > 1:  # a claim about several models: name each
        for p in points:
            p["series"] = f"{p['model']} {p['series']}"
        series_title = "model, " + series_title
    base = alt.Chart().encode(
        x=alt.X("seq_len:O", title="sequence length", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("series:N"),  # series side by side at each length, not stacked
        color=alt.Color("series:N", title=series_title,
                        legend=alt.Legend(titleLimit=320, labelLimit=320)),
    )
    tooltip = [alt.Tooltip(f) for f in ("hardware:N", "run:N", "series:N", "dtype:N", "batch_size:O",
                                         "seq_len:O", "value:Q", "ci_low:Q", "ci_high:Q")]
    tooltip += [alt.Tooltip("confidence:Q", format=LEVEL_FORMAT, title="CI level"),
                alt.Tooltip("outcome:N"), alt.Tooltip("role:N")]
    over: list[Any] = []
    if len(checks) == 1 and isinstance(checks[0], Comparison):
        lines: list[float] = []
        for spec in all_checks:
            assert isinstance(spec, Comparison)
            lines += list(spec.band) if spec.op in ("==", "approx") and spec.tolerance else [spec.value]
        label = "claim: " + " and ".join(threshold_label(c).removeprefix("claim: ")
                                         for c in all_checks if isinstance(c, Comparison))
        one = alt.Chart().transform_aggregate(n="count()")  # one mark per panel, not per point
        for line in dict.fromkeys(lines):
            over.append(one.mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(line)))
        over.append(one.mark_text(align="left", baseline="bottom", dx=4, dy=-2, color="gray").encode(
            x=alt.value(0), y=alt.datum(max(lines)), text=alt.datum(label)))
    layered = point_interval(
        value="value", low="ci_low", high="ci_high", along="y", title=y_title, axis=y_axis, base=base,
        rule={"opacity": alt.condition(deciding, alt.value(0.9), alt.value(0.35))},
        point={"shape": alt.Shape("role:N", title="marks", scale=alt.Scale(**role_scale),
                                  legend=alt.Legend(values=roles, labelLimit=360, orient="bottom",
                                                    direction="vertical")),
               "opacity": alt.condition(deciding, alt.value(1.0), alt.value(0.45)),
               "tooltip": tooltip},
        over=over, width=INTERVAL_PANEL_WIDTH, height=CHART_HEIGHT,
        data=alt.Data(values=points))  # type: ignore[no-untyped-call]
    chart = layered.facet(
        facet=alt.Facet("hardware:N", title="measured on",
                        sort=alt.EncodingSortField("panel", op="min")),
        columns=2,
    ).properties(title=result.claim.title)
    return dict(chart.to_dict())


def rg_chart(name: str, spec: dict[str, Any]) -> str:
    """Default chart embedding: the site's ``rg-chart`` block, drawn by rg-charts.js.

    The site renderer may pass its own ``chart_embed`` (e.g. one that also writes the
    static SVG fallback).
    """
    return script_block(fmt.html_text(name), spec)


# -- page models ---------------------------------------------------------------------------


def cite(result: ClaimResult, page: str, site_url: str | None = None) -> Citation:
    """The citation of one claim's page (``page``: its path in the site, e.g.
    ``findings/<id>``; ``site_url``: the published site's address, if one is set): the
    claim, its verdict, the runs that decided it (or, untested, those shown as context),
    when they were measured and the project commit that measured them."""
    claim = result.claim
    runs, date, commits = result.evidence_basis()
    return citation(f"Claim check: {claim.title}", date=date, run_ids=runs, commits=commits,
                    url=page_url(site_url, page + ".md"), key="reportgen-" + claim.id,
                    details=[f"Verdict: {result.verdict}",
                             f"Quote from: {claim.source.title}, {claim.source.url}",
                             *(["Computed from the models' published configs, with no run"]
                               if claim.predicate.from_catalog else [])],
                    measured=not claim.predicate.from_catalog)


def claim_page_path(claim_id: str) -> str:
    return f"{FINDINGS}/{claim_id}.md"


def _setting(combo: dict[str, Any], variants: bool) -> str:
    parts = [combo.get("model"), combo.get("mode"), combo.get("dtype"), f"batch {combo.get('batch_size')}",
             f"seq {combo.get('seq_len')}"]
    if not variants and combo.get("attn_implementation"):
        parts.append(combo["attn_implementation"])
    return ", ".join(str(p) for p in parts if p is not None)


def _evidence_rows(result: ClaimResult, page: str, combination_page: CombinationPage | None) -> list[dict[str, Any]]:
    """Five columns: hardware (and run), combination, measured, verdict, notes; the
    combination's links are named by what differs between them."""
    variants = result.claim.predicate.compares_variants
    shared = evidence_level(result)
    rows = []
    for row in result.evidence:
        combo = row["combination"]
        links = []
        for combo_id in row["combinations"]:
            target = combination_page(row["run_id"], combo_id) if combination_page else None
            attn = combo_id.split("--")[3] if variants and combo_id.count("--") >= 5 else None
            links.append({"text": attn or "combination page", "title": combo_id,
                          "href": rel(page, target) if target else None})
        notes = list(row["outside"])
        if row.get("reason"):
            notes.append(row["reason"])
        if row.get("also_measured_in"):
            notes.append("also measured by run " + ", ".join(row["also_measured_in"])
                         + "; counted once, from this latest record")
        rows.append({
            "hardware": row["hardware_label"],
            "run_id": row["run_id"],
            "setting": _setting(combo, variants),
            "measured": _measured_cells(result, row, shared),
            "verdict": row["verdict"],
            "outcome": row["outcome"],
            "within": row["within_conditions"],
            "notes": notes,
            "links": links,
        })
    return rows


def _catalog_sections(result: ClaimResult) -> list[dict[str, Any]]:
    """A structural claim's evidence: per row (the verdict's comparison, then any context
    one), each check's figure, its verdict and each term's working with its config's address."""
    sections = []
    for row in result.evidence:
        checks = [{"check": c["check"], "metric": c["metric"], "value": c.get("text") or "-",
                   "verdict": c["verdict"], "outcome": c["verdict"] if row["within_conditions"]
                   else CONTEXT_OUTCOME[c["verdict"]], "reason": c.get("reason"),
                   "terms": c.get("terms") or []} for c in row["checks"]]
        sources = list(dict.fromkeys((t["model"], t["config_source"]) for c in checks for t in c["terms"]))
        sections.append({"decides": row["within_conditions"], "verdict": row["verdict"],
                         "outcome": row["outcome"], "outside": row["outside"], "checks": checks,
                         "sources": sources})
    return sections


def page_model(result: ClaimResult, combination_page: CombinationPage | None = None,
               chart_embed: ChartEmbed = rg_chart, site_url: str | None = None) -> dict[str, Any]:
    claim = result.claim
    page = claim_page_path(claim.id)
    structural = claim.predicate.from_catalog
    spec = None if structural else chart_spec(result)
    evidence = _evidence_rows(result, page, combination_page)
    citation = cite(result, page.removesuffix(".md"), site_url)
    return {
        "claim": claim,
        "result": result,
        "verdict": result.verdict,
        "verdict_class": result.verdict.replace(" ", "-"),
        "counts": {k: v for k, v in result.counts.items() if v},
        "conditions": [(k, _condition_text(v)) for k, v in claim.conditions.items()],
        "hardware": claim.hardware.describe(),
        "context": result.context,
        "releases": result.releases,
        "releases_summary": releases_summary(result.releases),
        "quote_in_primary": QUOTE_STATUS[claim.source.quote_in_primary],
        "cite": {"bibtex": Markup(citation.bibtex), "text": Markup(citation.text), "key": citation.key},
        "predicate": claim.predicate.describe(),
        "ci_shared": evidence_level(result),
        "within": [r for r in evidence if r["within"]],
        "outside": [r for r in evidence if not r["within"]],
        "chart": Markup(chart_embed(claim.id, spec)) if spec else None,
        "chart_spec": spec,
        "catalog": _catalog_sections(result) if structural else None,
    }


QUOTE_STATUS = {
    "found": "found in the source itself",
    "not found": "not found in the source itself; attributed to it by the secondary source named here",
    "not checked": "not yet checked against the source itself",
}


def _condition_text(value: Any) -> str:
    if isinstance(value, Hardware):
        return value.describe()
    if isinstance(value, dict):
        if "values" in value:
            return ", ".join(str(v) for v in value["values"])
        return f"{value.get('min') or ''} to {value.get('max') or ''}".strip()
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def pages(runs_root: Path | str, claims_dir: Path | str, *, report: CheckReport | None = None,
          combination_page: CombinationPage | None = None,
          chart_embed: ChartEmbed = rg_chart, site_url: str | None = None) -> dict[str, str]:
    """The Findings section: ``{"findings/index.md": ..., "findings/<id>.md": ...}``.

    ``combination_page(run_id, combination_id)`` gives the docs path of a combination's
    page (for links from the evidence table); ``chart_embed`` turns a Vega-Lite spec into
    Markdown (default: the site's ``rg-chart`` block); ``site_url``, the published site's
    address, gives each citation its ``url``.
    """
    report = report or check(runs_root, claims_dir)
    env = _environment()
    out: dict[str, str] = {}
    models = [page_model(r, combination_page, chart_embed, site_url) for r in report.claims]
    for model in models:
        out[claim_page_path(model["claim"].id)] = env.get_template("claim.md.j2").render(**model)
    out[FINDINGS_INDEX] = env.get_template("index.md.j2").render(
        claims=models, runs=report.runs_root, combinations=report.observations,
        measured=report.measured,
        structural=sum(1 for m in models if m["catalog"] is not None))
    return out


def claims_for_combination(report: CheckReport, run_id: str, combination_id: str) -> list[dict[str, Any]]:
    """The claims whose evidence uses this combination, with the verdict of that evidence."""
    found: list[dict[str, Any]] = []
    for result in report.claims:
        for row in result.evidence:
            if row["run_id"] == run_id and combination_id in row["combinations"]:
                found.append({
                    "claim_id": result.claim.id,
                    "title": result.claim.title,
                    "page": claim_page_path(result.claim.id),
                    "verdict": row["verdict"],
                    "claim_verdict": result.verdict,
                    "within_conditions": row["within_conditions"],
                    "check": result.claim.predicate.describe(),
                })
                break
    return found


def combination_section(report: CheckReport, run_id: str, combination_id: str, page: str) -> str:
    """Markdown listing the claims that bear on a combination; ``page`` is that page's docs path."""
    items = claims_for_combination(report, run_id, combination_id)
    if not items:
        return ""
    for item in items:
        item["href"] = rel(page, item["page"])
        item["verdict_class"] = item["verdict"].replace(" ", "-")
        item["claim_verdict_class"] = item["claim_verdict"].replace(" ", "-")
        item["outcome"] = CONTEXT_OUTCOME[item["verdict"]]
    return _environment().get_template("combination.md.j2").render(claims=items)


# -- the site's pages ---------------------------------------------------------------------


def generated_pages(report: CheckReport, embed_for: sections.EmbedFor, combination_page: CombinationPage,
                    site_url: str | None = None) -> list[sections.Generated]:
    """The Findings section: an index and one page per claim (none without claims)."""
    if not report.claims:
        return []
    by_page = {claim_page_path(r.claim.id): r.claim.title for r in report.claims}

    def embed(name: str, spec: Mapping[str, Any]) -> str:
        # a claim's chart is named by the claim's id
        page = claim_page_path(name)
        if page not in by_page:
            raise ValueError(f"chart {name!r} belongs to no claim page")
        return embed_for(page)("evidence", spec)

    # with a report given, pages() reads neither the runs nor the claims directory
    texts = pages(report.runs_root, "", report=report, combination_page=combination_page,
                  chart_embed=embed, site_url=site_url)
    out = [sections.generated(path, by_page.get(path, "Findings"), text)
           for path, text in sorted(texts.items())]
    return sorted(out, key=lambda g: (g.path != FINDINGS_INDEX, g.path))


def findings_pages(b: Builder) -> list[Page]:
    """The Findings section's pages (none without a report with claims)."""
    if b.report is None:
        return []
    return sections.pages(b, generated_pages(b.report, b.embed_for, b.combo_page_of, b.site_url))


def claims_index(report: CheckReport) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``claims_for_combination`` for every combination at once: (run id, combination id)
    -> the claims whose evidence uses it. One pass over the evidence, so a large runs tree
    costs linear time rather than claims x evidence per combination."""
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
