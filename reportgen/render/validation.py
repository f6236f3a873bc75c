"""The Validation page: Markdown from a bench results file (read through
``records.bench``), with a chart per figure; its template is ``templates/validation``.

Render side: no torch. ``render_validation(results)`` returns the page's Markdown;
``chart_specs(results)`` returns the Vega-Lite spec (a dict, built with Altair) of each
figure that has a chart. The site's render step decides how a chart is embedded by passing
``chart_block`` (name, spec -> Markdown); the default writes the site's own chart element
(``<div class="rg-chart">`` holding the spec in a ``<script class="rg-spec">``, which the
site's script embeds), with an SVG fallback image when ``svg_url`` maps a chart name to one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from markupsafe import Markup

from reportgen import fmt, reruns
from reportgen.intervals import interval_wide_reason
from reportgen.records.bench import FIGURES, validate
from reportgen.render import analysis, sections
from reportgen.render.builder import Builder, Page
from reportgen.render.charts import INTERVAL_PANEL_WIDTH, INTERVAL_WIDTH, point_interval, script_block
from reportgen.render.templating import make_environment

ChartBlock = Callable[[str, Mapping[str, Any]], str]


def site_chart_block(svg_url: Mapping[str, str] | None = None) -> ChartBlock:
    """The site's chart element (see reportgen/render/templates/_macros.md.j2)."""
    def block(name: str, spec: Mapping[str, Any]) -> str:
        title = str(spec.get("title") or name)
        fallback = (f"![{title}]({svg_url[name]}){{ .rg-fallback }}"
                    if svg_url and name in svg_url else None)
        return script_block(f"validation-{name}", spec, fallback)
    return block


def validation_page(b: Builder) -> list[Page]:
    """The site's Validation page from the builder's bench results (none without them)."""
    if b.bench is None:
        return []
    across = reruns.across_days_summary(reruns.across_days(analysis.reruns_measured(b.every)))
    markdown = render_validation(b.bench, chart_block=b.embed_for(sections.VALIDATION),
                                 others=b.other_benches, reruns=across)
    return sections.pages(b, [sections.generated(sections.VALIDATION, "Validation", markdown)])


def render_validation(results: Mapping[str, Any], *, chart_block: ChartBlock | None = None,
                      title: str = "Validation", others: Sequence[Mapping[str, Any]] = (),
                      reruns: Sequence[Mapping[str, Any]] = ()) -> str:
    """The Validation page's Markdown from a results document (validated first), with a
    summary of ``others`` (other hosts' results documents, newest first): each figure's
    verdict, value and interval on that host; and ``reruns``
    (``bench.coverage.across_days_summary`` of the committed runs): how often a median
    measured again on another day agreed with the earlier run's interval, per hardware."""
    doc = validate(results)
    other_docs = [validate(o) for o in others]
    charts = chart_specs(doc)
    block = chart_block or site_chart_block()
    env = make_environment("reportgen.render", folder="templates/validation", finalize=inert, filters={
        "num": fmt.sig, "pct": fmt.pct, "value": figure_value,
        "interval": lambda fig: Markup(figure_interval(fig)),  # numbers and brackets
        "cell": table_cell})
    figures = doc["figures"]
    order = _display_order(figures)
    return env.get_template("validation.md.j2").render(
        title=title,
        doc=doc,
        order=order,
        figures=figures,
        others=[(o, _display_order(o["figures"])) for o in other_docs],
        reruns=list(reruns),
        charts={name: Markup(block(name, spec)) for name, spec in charts.items()},
        status_badge=STATUS_BADGE,
        columns=row_columns,
        interval_name=interval_name,
        is_ci=is_confidence_interval,
        row_value=row_value,
        extra_table=extra_table,
        earlier_method=earlier_method,
    )


def earlier_method(name: str, fig: Mapping[str, Any]) -> str | None:
    """Why a figure's verdict may not describe the method the code uses now, read from its
    rows: a figure measured before the method changed says how it was measured then and
    what changed, so a miss is read with its cause. None where the rows show today's method
    (or a figure without rows)."""
    rows = fig.get("rows") or []
    if not rows:
        return None
    if name == "instrumentation_overhead" and not any("labelled" in r for r in rows):
        most = max(int(r.get("modules") or 0) for r in rows)
        return ("measured with a clock at every module of the model"
                + (f" (up to {most} a forward)" if most else "")
                + ", before the hooks moved to the boundaries where a category starts or ends"
                + ("; its miss is the cost of those per-module clocks in short decode steps, "
                   "a cost today's hooks no longer place" if fig.get("status") == "fail" else "")
                + ". Not measured again on this host since.")
    if name in ("attribution_ablation", "training_ablation") and not all(
            r.get("own_process") for r in rows):
        return ("measured when each round's combinations shared one process (a model "
                "measured earlier in the same process changed what the stand-in saved); "
                "each combination now runs in a process of its own.")
    return None


def _display_order(figures: Mapping[str, Any]) -> list[str]:
    """The figures' names in the bench's display order, any it does not know last."""
    return [k for k in FIGURES if k in figures] + [k for k in figures if k not in FIGURES]


# Text badges coloured by CSS (rg-charts.css): no emoji, which render as empty boxes on
# hosts without an emoji font.
STATUS_BADGE = {status: Markup(f'<span class="rg-badge rg-badge-{cls}">{text}</span>')
                for status, cls, text in (("pass", "pass", "pass"), ("fail", "fail", "miss"),
                                          ("info", "info", "info"),
                                          ("not measured", "none", "not measured"))}


# ---------------------------------------------------------------- formatting (display only)

_CODE_SPAN = re.compile(r"&#96;([^&\n]+?(?:&(?!#96;)[^&\n]*?)*)&#96;")


def _code_spans(escaped: str) -> str:
    """A `code` span in the stored prose (escaped) becomes a code element, not literal
    backticks."""
    return _CODE_SPAN.sub(r"<code>\1</code>", escaped)


def inert(value: Any) -> str:
    """Applied to every printed value: data renders as text (``fmt.markdown_text``), its
    `code` spans as code; chart blocks pass (Markup)."""
    if isinstance(value, Markup):
        return str(value)
    return _code_spans(fmt.markdown_text(value))


def _figure_number(unit: Any) -> Callable[[Any], str]:
    """How a figure's numbers are written by its unit: shares as percentages, ratios to
    four decimals, anything else to three significant digits."""
    if unit in ("share", "fraction"):
        return lambda x: fmt.pct(x, 2)
    if unit == "ratio":
        return lambda x: fmt.fixed(x, 4)
    return fmt.sig


def figure_value(fig: Mapping[str, Any]) -> str:
    """A figure's value with its unit (a percentage or a ratio says its own)."""
    v = fig.get("value")
    unit = fig.get("unit") or ""
    if v is None:
        return fmt.DASH
    if unit in ("share", "fraction", "ratio"):
        return _figure_number(unit)(v)
    return fmt.with_unit(v, unit)


def figure_interval(fig: Mapping[str, Any]) -> str:
    """A figure's interval in brackets, its ends written as its value is."""
    iv = fig.get("interval")
    if not iv:
        return fmt.DASH
    return fmt.interval(iv[0], iv[1], _figure_number(fig.get("unit")))


def is_confidence_interval(fig: Mapping[str, Any]) -> bool:
    """Whether a figure's interval is a 95% confidence interval (a bootstrap or order
    statistic) rather than a range its kind says is none."""
    return "not a confidence interval" not in str(fig.get("interval_kind") or "")


def interval_name(fig: Mapping[str, Any]) -> str:
    """What a figure's interval is, in a few words: ``95% CI``, or its kind without the
    parenthesis (``range over combinations``)."""
    if is_confidence_interval(fig):
        return "95% CI"
    return str(fig.get("interval_kind")).split("(")[0].strip() or "range"


def _cell_text(x: Any) -> str:
    if isinstance(x, (list, tuple)):
        return ", ".join(_cell_text(v) for v in x) or fmt.DASH
    if isinstance(x, dict):
        return ", ".join(f"{k}: {_cell_text(v)}" for k, v in x.items()) or fmt.DASH
    return fmt.sig(x)


def table_cell(x: Any) -> Markup:
    """A row value for a Markdown table: lists and mappings joined, numbers written as
    figures are, escaped for a cell (``fmt.markdown_cell``), its `code` spans as code."""
    return Markup(_code_spans(fmt.markdown_cell(_cell_text(x))))


# ---------------------------------------------------------------- charts (data -> spec)

ROW_COLUMNS: dict[str, tuple[str, ...]] = {
    "latency_agreement": ("combination", "reportgen_ms", "timer_ms", "ratio", "ratio_low",
                          "ratio_high", "rounds"),
    "profiler_overhead": ("combination", "unprofiled_ms", "profiled_ms", "ratio"),
    "instrumentation_overhead": ("combination", "bare_ms", "instrumented_ms", "ratio",
                                 "ratio_low", "ratio_high"),
    "attribution_architectures": ("model_type", "architecture", "class", "share_sum",
                                  "attention_core_share", "residual_share", "other_share",
                                  "overhead_share",
                                  "ok", "error"),
    "attribution_ablation": ("combination", "category", "forward_ms", "drop_ms", "drop_low_ms",
                             "drop_high_ms", "headline_method", "attributed_share",
                             "removable_ms", "rel_diff", "rel_diff_low", "rel_diff_high",
                             "verdict", "hooks_share", "hooks_neighbours_ms",
                             "hooks_unexplained_ms", "hooks_rel_diff", "hooks_verdict",
                             "profiler_share", "profiler_rel_diff", "profiler_verdict",
                             "rounds", "pairs", "hooked_pairs", "pair_drop_sd", "measured_at"),
    "attribution_remainder": ("combination", "mode", "method", "share", "share_low",
                              "share_high", "largest_source", "largest_source_ms"),
    "flops_agreement": ("combination", "category", "analytic", "counted", "rel_diff",
                        "explanation"),
    "trace_agreement": ("combination", "basis", "weighted_rel_diff", "total_rel_diff",
                        "reader_total_ms", "reportgen_total_ms", "ops"),
    "harness_efficiency": ("combination", "timed_s", "wall_s", "share"),
    "interval_coverage": ("combination", "median_ms", "ci_low_ms", "ci_high_ms", "confidence",
                          "remeasured_ms", "inside"),
    "suite_time": ("suite", "combinations", "wall_s"),
    "report_time": ("step", "wall_s"),
    "tiny_effort": ("combination", "status", "rounds", "median_ms", "duration_s"),
    "reference_effort": ("run", "combination", "status", "rounds", "median_ms", "optimum_benchmark_p50_ms",
                         "duration_s"),
    "contention": ("combination", "quiet_ms", "busy_ms", "ratio", "interval_width_medians",
                   "contended_rounds", "rounds", "unstable", "ok"),
    "isolation_cost": ("combination", "workers_s", "inline_s", "ratio"),
    "memory_estimate": ("combination", "estimate_gib", "baseline_rss_gib", "peak_rss_gib", "grew_gib", "ratio"),
    "render_scaling": ("combinations", "pages", "render_s", "build_s", "total_s",
                       "pages_per_s", "combinations_per_s"),
    "depth_extrapolation": ("model", "layers", "full_layers", "rounds", "cycles", "reduced_ms", "extrapolated_ms",
                            "extrapolated_low_ms", "extrapolated_high_ms", "measured_ms", "measured_low_ms",
                            "measured_high_ms", "rel_diff", "rel_diff_low", "rel_diff_high", "unpaired_rel_diff",
                            "inside", "worst_share_category", "worst_share_diff", "worst_share_low",
                            "worst_share_high", "share_diffs", "share_method", "layer_rel_diff", "kept_layers_rel_diff",
                            "profiler_worst_share_category", "profiler_worst_share_diff", "profiled_ratio", "unstable",
                            "verdict"),
    "expert_reduction": ("combination", "mode", "experts", "full_experts", "rounds", "cycles", "reduced_ms",
                         "full_ms", "experts_factor", "router_delta_ms", "whole_model_factor", "ratio", "ratio_low",
                         "ratio_high", "worst_share_category", "worst_share_diff", "worst_share_low",
                         "worst_share_high", "share_diffs", "share_method", "experts_ms_per_token",
                         "full_experts_ms_per_token", "unstable", "verdict"),
}

# A second table some figures carry beside their rows: (its key in the figure, its
# caption, its columns).
EXTRA_TABLES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "depth_extrapolation": (
        "fits", "Latency = intercept + slope x layers through each model's medians at fewer layers "
        "(slope in ms per layer, with its 95% interval; R²; each count's residual in ms), and the "
        "whole model against the line at full depth (paired by round, with its 95% interval)",
        ("model", "layers", "slope_ms", "slope_low_ms", "slope_high_ms", "intercept_ms", "r2",
         "residuals_ms", "full_layers", "predicted_full_ms", "measured_full_ms", "line_rel_diff", "line_rel_low",
         "line_rel_high", "on_line")),
}


# What a column holds in rows written before it existed: every ablation row measured
# before rows named their category was of the attention core.
ROW_DEFAULTS: dict[str, dict[str, Any]] = {
    "attribution_ablation": {"category": "attention.core"},
    # depth rows measured before the shares compared were named: the profiler's
    "depth_extrapolation": {"share_method": "profiler"},
}


# The latencies with an interval a figure's rows hold: (median, low, high columns, what
# the interval spans). A row whose interval reaches past twice its median says why in a
# ``wide`` column (intervals.interval_wide_reason), as every page flags such an interval.
WIDE_INTERVALS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "interval_coverage": (("median_ms", "ci_low_ms", "ci_high_ms", "rounds and samples"),),
    "attribution_ablation": (("drop_ms", "drop_low_ms", "drop_high_ms", "rounds"),),
    "depth_extrapolation": (
        ("extrapolated_ms", "extrapolated_low_ms", "extrapolated_high_ms",
         "the measured layers and rounds"),
        ("measured_ms", "measured_low_ms", "measured_high_ms", "rounds and samples")),
}
WIDE = "wide"


def wide_text(name: str, row: Mapping[str, Any]) -> str | None:
    """Why each of a row's latency intervals past twice its median is wide, or None."""
    reasons = []
    for median, low, high, between in WIDE_INTERVALS.get(name, ()):
        reason = interval_wide_reason(row.get(median), row.get(low), row.get(high), between=between)
        if reason:
            reasons.append(f"{median}: {reason}")
    return "; ".join(reasons) or None


def row_columns(name: str, rows: list[Mapping[str, Any]]) -> list[str]:
    """Columns shown for a figure's rows: the known ones present (or with a default), in
    order; ``wide`` after them where a row's latency interval is wide."""
    known = ROW_COLUMNS.get(name)
    if not rows:
        return []
    present = set().union(*(r.keys() for r in rows)) | set(ROW_DEFAULTS.get(name, {}))
    wide = [WIDE] if any(wide_text(name, r) for r in rows) else []
    if known:
        return [c for c in known if c in present] + wide
    return sorted(present) + wide


def extra_table(name: str, fig: Mapping[str, Any]) -> tuple[str, list[str], list[Mapping[str, Any]]] | None:
    """A figure's second table: (caption, the columns present, rows), or None."""
    if name not in EXTRA_TABLES:
        return None
    key, caption, known = EXTRA_TABLES[name]
    table = [r for r in fig.get(key) or [] if isinstance(r, Mapping)]
    if not table:
        return None
    present = set().union(*(r.keys() for r in table))
    return caption, [c for c in known if c in present], table


def row_value(name: str, row: Mapping[str, Any], column: str) -> Any:
    """A row's value in a column, or the column's default for rows written before it."""
    if column == WIDE and name in WIDE_INTERVALS:
        return wide_text(name, row)
    if column in row:
        return row[column]
    return ROW_DEFAULTS.get(name, {}).get(column)


def short_labels(ids: list[str]) -> dict[str, str]:
    """A label per combination id without the ``--`` parts every id shares, so rows that
    differ only at the end (``...--s128`` and ``...--s256``) never read alike when an axis
    has to cut a long id short."""
    split = {i: i.split("--") for i in ids}
    lengths = {len(parts) for parts in split.values()}
    if len(ids) < 2 or len(lengths) != 1:
        return {i: i for i in ids}
    n = lengths.pop()
    keep = [k for k in range(n) if len({parts[k] for parts in split.values()}) > 1]
    if not keep:
        return {i: i for i in ids}
    return {i: "--".join(parts[k] for k in keep) for i, parts in split.items()}


# Axis numbers: three significant digits, exponent notation for the very small (a relative
# difference of 4e-16 rather than 0.0000000000000004).
AXIS_FORMAT = ".3~g"
CHART_WIDTH = INTERVAL_WIDTH


def chart_specs(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A Vega-Lite spec per figure with rows to plot; empty when Altair is absent. Each
    spec holds the rows it draws as its top-level inline data, which the site offers as
    the chart's CSV and JSON."""
    try:
        import altair as alt
    except ImportError:
        return {}
    figures = doc["figures"]
    specs: dict[str, dict[str, Any]] = {}
    builders: dict[str, Callable[[Any, list[dict[str, Any]], Mapping[str, Any]], Any]] = {
        "latency_agreement": _ratio_chart("ratio", "reportgen / torch.utils.benchmark"),
        "profiler_overhead": _ratio_chart("ratio", "profiled / unprofiled"),
        "instrumentation_overhead": _ratio_chart("ratio", "instrumented / bare"),
        "attribution_ablation": _ablation_chart,
        "training_latency_agreement": _ratio_chart("ratio", "reportgen / torch.utils.benchmark"),
        "training_ablation": _ablation_chart,
        "flops_agreement": _flops_chart,
        "trace_agreement": _bar_chart("weighted_rel_diff", "weighted |reader - reportgen| / reportgen"),
        "harness_efficiency": _bar_chart("share", "share of wall time in timed iterations"),
        "isolation_cost": _ratio_chart("ratio", "in a worker / in one process"),
        "contention": _ratio_chart("ratio", "beside a busy process / quiet"),
        "tiny_effort": _bar_chart("duration_s", "seconds per combination"),
        "memory_estimate": _ratio_chart("ratio", "estimate / measured growth"),
        "render_scaling": _scaling_chart,
        "attribution_architectures": _bar_chart("attention_core_share", "attention.core share",
                                                category="model_type"),
        "depth_extrapolation": _depth_chart,
        "expert_reduction": _ratio_chart("ratio", "fewer experts / every expert (paired by cycle)"),
    }
    for name, build in builders.items():
        fig = figures.get(name)
        if not fig or not fig.get("rows"):
            continue
        rows: list[dict[str, Any]] = [dict(r) for r in fig["rows"]]
        labels = short_labels([str(r["combination"]) for r in rows if "combination" in r])
        for r in rows:
            if "combination" in r:
                r["label"] = labels[str(r["combination"])]
        chart = build(alt, rows, fig)
        if chart is not None:
            specs[name] = chart.to_dict()
    return specs


def _with_data(alt: Any, chart: Any, values: list[dict[str, Any]]) -> Any:
    return chart.properties(data=alt.Data(values=[_plain_row(v) for v in values]))


def _plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as chart data: nested values (per-round lists, share maps) stay in the
    figure's table and the results file, not in the chart's CSV."""
    return {k: v for k, v in row.items() if not isinstance(v, (list, dict, tuple))}


def _ratio_chart(field: str, title: str) -> Callable[[Any, list[dict[str, Any]], Mapping[str, Any]], Any]:
    def build(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
        values = [r for r in rows if r.get(field) is not None]
        tooltip = [alt.Tooltip("combination:N"), alt.Tooltip(f"{field}:Q", format=".4f")]
        interval = any(r.get(f"{field}_low") is not None for r in values)
        if interval:
            tooltip += [alt.Tooltip(f"{field}_low:Q", format=".4f", title="95% CI low"),
                        alt.Tooltip(f"{field}_high:Q", format=".4f", title="95% CI high")]
        spec = fig.get("goal_spec") or {}
        bands = []
        if spec.get("kind") == "ratio_within":
            bands = [1 - float(spec["target"]), 1 + float(spec["target"])]
        elif spec.get("kind") == "below":
            bands = [float(spec["target"])]
        chart = point_interval(
            value=field, low=f"{field}_low", high=f"{field}_high", title=title, scale=alt.Scale(zero=False),
            axis=alt.Axis(format=AXIS_FORMAT), both={"y": alt.Y("label:N", sort=None, title=None)},
            point={"tooltip": tooltip}, interval=interval,
            over=[alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(x=alt.datum(b)) for b in bands]
        ).properties(title=fig["title"])
        return _with_data(alt, chart, values)
    return build


def _bar_chart(field: str, title: str, category: str = "label"
               ) -> Callable[[Any, list[dict[str, Any]], Mapping[str, Any]], Any]:
    def build(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
        values = [r for r in rows if r.get(field) is not None]
        who = "combination" if category == "label" else category
        chart = (alt.Chart().mark_bar()
                 .encode(x=alt.X(f"{field}:Q", title=title, axis=alt.Axis(format=AXIS_FORMAT)),
                         y=alt.Y(f"{category}:N", sort=None, title=None),
                         tooltip=[f"{who}:N", alt.Tooltip(f"{field}:Q", format=".4~g")])
                 .properties(width=CHART_WIDTH, title=fig["title"]))
        return _with_data(alt, chart, values)
    return build


def _ablation_chart(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
    values = []
    categories = []
    for r in rows:
        category = row_value("attribution_ablation", r, "category")
        if category not in categories:
            categories.append(category)
        # a combination ablated for two categories has a row for each
        label_ = r["label"] if category == "attention.core" else f"{r['label']} [{category}]"
        for key, label in (("drop_ms", "ablation drop"),
                           ("hooks_removable_ms", "attributed, hooks method"),
                           ("profiler_removable_ms", "attributed, profiler method"),
                           ("attributed_ms", f"attributed {category}")):
            if key == "attributed_ms" and "hooks_removable_ms" in r:
                continue  # rows with both methods show each method's removable time
            if r.get(key) is not None:
                values.append({"combination": r["combination"], "category": category,
                               "label": label_, "estimate": label, "ms": r[key]})
    what = "attention core" if categories == ["attention.core"] else "the row's category"
    chart = (alt.Chart().mark_bar()
             .encode(x=alt.X("ms:Q", title=f"{what}, ms per forward", axis=alt.Axis(format=AXIS_FORMAT)),
                     y=alt.Y("label:N", title=None, sort=None),
                     yOffset=alt.YOffset("estimate:N"),
                     color=alt.Color("estimate:N", title=None,
                                     legend=alt.Legend(orient="bottom", columns=1)),
                     tooltip=["combination:N", "category:N", "estimate:N",
                              alt.Tooltip("ms:Q", format=".4~g")])
             .properties(width=CHART_WIDTH, height=alt.Step(9), title=fig["title"]))
    return _with_data(alt, chart, values)


def _flops_chart(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
    values = [r for r in rows if r.get("rel_diff") is not None]
    chart = (alt.Chart().mark_point(filled=True)
             .encode(x=alt.X("rel_diff:Q", title="(counted - analytic) / analytic",
                             axis=alt.Axis(format=AXIS_FORMAT)),
                     y=alt.Y("category:N", title=None), color=alt.Color("label:N", title="combination"),
                     tooltip=["combination:N", "category:N", "analytic:Q", "counted:Q",
                              alt.Tooltip("rel_diff:Q", format=".4~g")])
             .properties(width=CHART_WIDTH, title=fig["title"]))
    return _with_data(alt, chart, values)


DEPTH_SERIES_COLOURS: dict[str, str] = {"measured, fewer layers": "#4c78a8", "measured whole": "#222222"}
EXTRAPOLATED_COLOURS: tuple[str, ...] = ("#f58518", "#e45756", "#b279a2", "#9d755d")


def depth_chart_rows(fig: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The depth figure's chart data: per model, the medians measured at fewer layers and
    whole (with their intervals), each extrapolated whole-model median (at the full depth,
    beside the one measured whole), and the line through the reduced medians from no
    layers to the full depth."""
    out: list[dict[str, Any]] = []
    rows = [r for r in fig.get("rows") or [] if isinstance(r, Mapping)]
    for r in rows:
        out.append({"model": r["model"], "series": "measured, fewer layers", "layers": r["layers"],
                    "ms": r.get("reduced_ms"), "low": r.get("reduced_low_ms"), "high": r.get("reduced_high_ms")})
        out.append({"model": r["model"], "series": f"extrapolated from {r['layers']} layers",
                    "layers": r["full_layers"],
                    "ms": r.get("extrapolated_ms"), "low": r.get("extrapolated_low_ms"),
                    "high": r.get("extrapolated_high_ms")})
    for model in dict.fromkeys(r["model"] for r in rows):
        first = next(r for r in rows if r["model"] == model)
        out.append({"model": model, "series": "measured whole", "layers": first["full_layers"],
                    "ms": first.get("measured_ms"), "low": first.get("measured_low_ms"),
                    "high": first.get("measured_high_ms")})
    for line in fig.get("fits") or []:
        for x in (0, line["full_layers"]):
            out.append({"model": line["model"], "series": "fit", "layers": x,
                        "ms": line["intercept_ms"] + line["slope_ms"] * x, "low": None, "high": None})
    return [v for v in out if v["ms"] is not None]


def _depth_chart(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
    values = depth_chart_rows(fig)
    names = list(dict.fromkeys(v["series"] for v in values if v["series"] != "fit"))
    extrapolated = [n for n in names if n not in DEPTH_SERIES_COLOURS]
    colours = {**DEPTH_SERIES_COLOURS, **dict(zip(extrapolated, EXTRAPOLATED_COLOURS * len(extrapolated)))}
    x = alt.X("layers:Q", title="layers measured")
    y = alt.Y("ms:Q", title="median latency, ms", axis=alt.Axis(format=AXIS_FORMAT))
    series = alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom", columns=2),
                       scale=alt.Scale(domain=names, range=[colours[n] for n in names]))
    line = alt.Chart().mark_line(strokeDash=[4, 3], color="gray").encode(x=x, y=y).transform_filter(
        alt.datum.series == "fit")
    return (point_interval(
        value="ms", low="low", high="high", along="y", title="median latency, ms",
        axis=alt.Axis(format=AXIS_FORMAT), base=alt.Chart().transform_filter(alt.datum.series != "fit"),
        both={"x": x, "color": series}, under=[line],
        point={"tooltip": ["model:N", "series:N", "layers:Q", alt.Tooltip("ms:Q", format=".4~g"),
                           alt.Tooltip("low:Q", format=".4~g"), alt.Tooltip("high:Q", format=".4~g")]},
        width=INTERVAL_PANEL_WIDTH, height=180, data=alt.Data(values=values))
            .facet(facet=alt.Facet("model:N", title=None), columns=2)
            .resolve_scale(y="independent", x="independent")
            .properties(title=fig["title"]))


def _scaling_chart(alt: Any, rows: list[dict[str, Any]], fig: Mapping[str, Any]) -> Any:
    values = [r for r in rows if r.get("total_s") is not None]
    chart = (alt.Chart().mark_line(point=True)
             .encode(x=alt.X("combinations:Q", title="combinations in the runs tree"),
                     y=alt.Y("total_s:Q", title="render + strict build, s", axis=alt.Axis(format=AXIS_FORMAT)),
                     tooltip=["combinations:Q", "pages:Q", "total_s:Q", "pages_per_s:Q"])
             .properties(width=CHART_WIDTH, title=fig["title"]))
    return _with_data(alt, chart, values)


# a training step's figures (the bench's training_check) read like the forward's
ROW_COLUMNS["training_latency_agreement"] = ROW_COLUMNS["latency_agreement"]
ROW_COLUMNS["training_ablation"] = ROW_COLUMNS["attribution_ablation"]
WIDE_INTERVALS["training_ablation"] = WIDE_INTERVALS["attribution_ablation"]
