"""Findings pages: page models from a CheckReport, Altair chart specs, Jinja2 templates.

Everything that comes from data (claim text, run ids, reasons) is escaped for Markdown and
HTML by the environment's ``finalize``: a claim quoting ``<script>`` renders as text, and
``[x](javascript:...)`` in a quote is not a link. Only values wrapped in ``Markup`` (built
here from escaped parts) pass through unchanged.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from reportgen.claims.evaluate import CheckReport, ClaimResult, check
from reportgen.claims.registry import Comparison, Ordering

FINDINGS = "findings"
CombinationPage = Callable[[str, str], "str | None"]  # (run_id, combination id) -> docs path
ChartEmbed = Callable[[str, dict[str, Any]], str]  # (chart name, Vega-Lite spec) -> Markdown

# HTML's specials, and Markdown's that could start emphasis, code, a link or image (`[`),
# a heading, a table cell or math: each becomes a numeric entity, rendered as itself.
_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
    | {c: f"&#{ord(c)};" for c in "\\`*_{}[]#|~$"}
)


def md(value: Any) -> str:
    """Text for Markdown and HTML on one line (table cells): entities for HTML and for
    Markdown's own syntax."""
    if isinstance(value, Markup):
        return str(value)
    return " ".join(("" if value is None else str(value)).split()).translate(_ESCAPES)


def _url(value: str) -> Markup:
    # Parentheses, quotes, spaces and angle brackets would end a Markdown link destination
    # (or an HTML attribute) early; registry URLs are already checked to be http(s).
    return Markup(quote(str(value), safe=":/?#[]@!$&*+,;=%-._~"))


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reportgen.claims", "templates"),
        autoescape=False,  # Markdown, not HTML: escaping is done by finalize (md)
        finalize=md,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["url"] = _url
    return env


# -- formatting ----------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "share":
        return f"{value * 100:.1f}%"
    if unit == "ratio":
        return f"{value:.3g}x"
    if unit == "kernels":
        return f"{value:g}"
    if unit == "ms":
        return f"{value * 1000:.1f} us" if value < 1 else f"{value:.4g} ms"
    if unit == "bytes":
        for step, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= step:
                return f"{value / step:.3g} {name}"
        return f"{value:g} B"
    return f"{value:.4g}"


def _with_interval(item: dict[str, Any], unit: str) -> str:
    if item.get("value") is None:
        return "-"
    value, low, high = item["value"], item.get("ci_low"), item.get("ci_high")
    if low is None or high is None or low == high == value:
        return _fmt(value, unit)
    return f"{_fmt(value, unit)} [{_fmt(low, unit)}, {_fmt(high, unit)}]"


def _unit(check: Comparison | Ordering) -> str:
    return check.metric.unit


def _measured_cells(result: ClaimResult, row: dict[str, Any]) -> list[str]:
    cells: list[str] = []
    checks = result.claim.predicate.checks
    for spec, item in zip(checks, row["checks"]):
        unit = _unit(spec)
        if isinstance(spec, Ordering):
            ranked = item.get("variants") or []
            text = "; ".join(f"{v['attn']} {_with_interval(v, unit)}" for v in ranked)
        else:
            text = _with_interval(item, unit)
        label = spec.metric.text if len(checks) > 1 else ""
        if item.get("value") is None and not item.get("variants"):
            text = "-"
        cells.append(f"{label}: {text} ({item['verdict']})" if label else text)
    return cells


# -- charts --------------------------------------------------------------------------------


def _points(result: ClaimResult) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    checks = result.claim.predicate.checks
    for row in result.evidence:
        combo = row["combination"]
        base = {
            "hardware": row["gpu_name"] or row["hardware"],
            "seq_len": combo.get("seq_len"),
            "dtype": combo.get("dtype"),
            "batch_size": combo.get("batch_size"),
            "conditions": "within" if row["within_conditions"] else "outside (context)",
        }
        for spec, item in zip(checks, row["checks"]):
            if isinstance(spec, Ordering):
                for variant in item.get("variants") or []:
                    points.append({**base, "series": f"{variant['attn']} {combo.get('dtype')}", "value": variant["value"],
                                   "ci_low": variant["ci_low"], "ci_high": variant["ci_high"],
                                   "verdict": item["verdict"]})
            elif item.get("value") is not None:
                series = " ".join(str(p) for p in (
                    spec.metric.text if len(checks) > 1 else combo.get("attn_implementation"),
                    combo.get("dtype"), f"b{combo.get('batch_size')}") if p)
                points.append({**base, "series": series, "value": item["value"], "ci_low": item["ci_low"],
                               "ci_high": item["ci_high"], "verdict": item["verdict"]})
    return points


def chart_spec(result: ClaimResult) -> dict[str, Any] | None:
    """A Vega-Lite spec (dict) of the evidence across hardware and sequence lengths, or None."""
    points = _points(result)
    if not points:
        return None
    import altair as alt

    checks = result.claim.predicate.checks
    unit = _unit(checks[0])
    y_title = f"{checks[0].metric.text} ({unit})" if len(checks) == 1 else "value"
    base = alt.Chart().encode(
        x=alt.X("seq_len:O", title="sequence length"),
        color=alt.Color("series:N", title="series"),
    )
    tooltip = [alt.Tooltip(f) for f in ("hardware:N", "series:N", "dtype:N", "batch_size:O", "seq_len:O",
                                         "value:Q", "ci_low:Q", "ci_high:Q", "verdict:N", "conditions:N")]
    layers: list[Any] = [
        base.mark_rule().encode(y=alt.Y("ci_low:Q", title=y_title), y2="ci_high:Q"),
        base.mark_point(filled=True, size=60).encode(
            y="value:Q", shape=alt.Shape("verdict:N", title="verdict"),
            opacity=alt.Opacity("conditions:N", title="conditions", scale=alt.Scale(range=[1.0, 0.4])),
            tooltip=tooltip,
        ),
    ]
    if len(checks) == 1 and isinstance(checks[0], Comparison):
        spec = checks[0]
        lines = spec.band if spec.op in ("==", "approx") and spec.tolerance else (spec.value,)
        for line in dict.fromkeys(lines):
            layers.append(alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(line)))
    data = alt.Data(values=points)  # type: ignore[no-untyped-call]
    chart = alt.layer(*layers, data=data).facet(
        column=alt.Column("hardware:N", title="hardware")
    ).properties(title=result.claim.title)
    return dict(chart.to_dict())


def spec_json(spec: dict[str, Any]) -> str:
    """The spec as stable JSON that nothing from data can break out of (a ``<script>``)."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
    for char in "<>&":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def rg_chart(name: str, spec: dict[str, Any]) -> str:
    """Default chart embedding: the site's ``rg-chart`` block, drawn by rg-charts.js.

    The site renderer may pass its own ``chart_embed`` (e.g. one that also writes the
    static SVG fallback).
    """
    return (f'<div class="rg-chart" data-chart="{md(name)}" markdown>\n'
            f'<script type="application/json" class="rg-spec">{spec_json(spec)}</script>\n'
            "</div>")


# -- page models ---------------------------------------------------------------------------


def _rel(target: str, page: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def claim_page_path(claim_id: str) -> str:
    return f"{FINDINGS}/{claim_id}.md"


def _evidence_rows(result: ClaimResult, page: str, combination_page: CombinationPage | None) -> list[dict[str, Any]]:
    rows = []
    for row in result.evidence:
        combo = row["combination"]
        links = []
        for combo_id in row["combinations"]:
            target = combination_page(row["run_id"], combo_id) if combination_page else None
            links.append({"text": combo_id, "href": _rel(target, page) if target else None})
        notes = list(row["outside"])
        if row.get("hardware_note"):
            notes.append(row["hardware_note"])
        if row.get("reason"):
            notes.append(row["reason"])
        rows.append({
            "hardware": row["gpu_name"] or row["hardware"],
            "run_id": row["run_id"],
            "dtype": combo.get("dtype"),
            "batch_size": combo.get("batch_size"),
            "seq_len": combo.get("seq_len"),
            "attn": combo.get("attn_implementation") or "variants",
            "measured": _measured_cells(result, row),
            "verdict": row["verdict"],
            "within": row["within_conditions"],
            "notes": notes,
            "links": links,
        })
    return rows


def page_model(result: ClaimResult, combination_page: CombinationPage | None = None,
               chart_embed: ChartEmbed = rg_chart) -> dict[str, Any]:
    claim = result.claim
    page = claim_page_path(claim.id)
    spec = chart_spec(result)
    evidence = _evidence_rows(result, page, combination_page)
    return {
        "claim": claim,
        "result": result,
        "verdict": result.verdict,
        "verdict_class": result.verdict.replace(" ", "-"),
        "counts": {k: v for k, v in result.counts.items() if v},
        "conditions": [(k, _condition_text(v)) for k, v in claim.conditions.items()],
        "predicate": claim.predicate.describe(),
        "within": [r for r in evidence if r["within"]],
        "outside": [r for r in evidence if not r["within"]],
        "chart": Markup(chart_embed(claim.id, spec)) if spec else None,
        "chart_spec": spec,
    }


def _condition_text(value: Any) -> str:
    if isinstance(value, dict):
        if "values" in value:
            return ", ".join(str(v) for v in value["values"])
        return f"{value.get('min') or ''} to {value.get('max') or ''}".strip()
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def pages(runs_root: Path | str, claims_dir: Path | str, *, report: CheckReport | None = None,
          combination_page: CombinationPage | None = None,
          chart_embed: ChartEmbed = rg_chart) -> dict[str, str]:
    """The Findings section: ``{"findings/index.md": ..., "findings/<id>.md": ...}``.

    ``combination_page(run_id, combination_id)`` gives the docs path of a combination's
    page (for links from the evidence table); ``chart_embed`` turns a Vega-Lite spec into
    Markdown (default: the site's ``rg-chart`` block).
    """
    report = report or check(runs_root, claims_dir)
    env = _environment()
    out: dict[str, str] = {}
    models = [page_model(r, combination_page, chart_embed) for r in report.claims]
    for model in models:
        out[claim_page_path(model["claim"].id)] = env.get_template("claim.md.j2").render(**model)
    out[f"{FINDINGS}/index.md"] = env.get_template("index.md.j2").render(
        claims=models, runs=report.runs_root, combinations=report.observations)
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
        item["href"] = _rel(item["page"], page)
        item["verdict_class"] = item["verdict"].replace(" ", "-")
    return _environment().get_template("combination.md.j2").render(claims=items)
