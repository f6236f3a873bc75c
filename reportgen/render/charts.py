"""Altair charts built from the analysis frames, and their static SVG fallbacks.

Each builder returns a Vega-Lite spec (a dict). Specs have fixed sizes so the embedded
chart and its SVG fallback look the same; the page script re-themes them for dark mode.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import altair as alt
import pandas as pd

from reportgen.categories import CATEGORIES
from reportgen.render.shown import shown_categories

# The site's one palette. Each category keeps its colour on every chart; series that are
# not categories (models, machines, implementations) draw from a second, darker set that
# shares no colour with the categories, and carry a point shape as well, so a colour never
# means two things on one page.
# In CATEGORIES' order; the indexer (a sparse attention's, before its core) a light
# orange between the query projections' blue and the core's red, the mixer (a token
# mixer, like attention) teal, the experts a lighter green beside the dense MLP's, the
# shared experts an olive beside them, the router a light blue, the residual streams'
# mixing a dark grey beside other's light one.
# (optimizer's, the indexer's, the shared experts' and the residual's colours sit at their
# places in CATEGORIES, so the others keep theirs)
CATEGORY_COLOURS: tuple[str, ...] = ("#9c755f", "#4e79a7", "#ffbe7d", "#e15759", "#f28e2b",
                                     "#499894", "#59a14f", "#a0cbe8", "#8cd17d", "#b6992d",
                                     "#edc948", "#79706e", "#b07aa1", "#d37295", "#ff9da7",
                                     "#bab0ac", "#76b7b2")
assert len(CATEGORY_COLOURS) == len(CATEGORIES), "one colour per category"
# Lines, points and interval whiskers are drawn on the page's own background, white or
# mkdocs-material's dark slate (#1e2129): every series colour and the grey of guide lines
# (roofs, means, the line at 1) keeps a contrast of at least 3:1 against both, so switching
# to the dark palette hides nothing. More saturated than the category colours they sit
# beside, so the two sets still read apart.
SERIES_COLOURS: tuple[str, ...] = ("#3f6ee8", "#e44907", "#008f7d", "#a64ddb", "#6f7f8c",
                                   "#8b7f19", "#e0307c", "#0f88c2")
GUIDE_GREY = "#888888"
_COLOUR_OF = dict(zip(CATEGORIES, CATEGORY_COLOURS))
_SERIES_SCALE = alt.Scale(range=list(SERIES_COLOURS))
WIDTH = 560
# Axis labels such as "attention-micro forward bf16 s128" are never cut short.
_CONFIG = {"axis": {"labelLimit": 400}, "legend": {"labelLimit": 300}}
# Replaced by the real values in _spec; facets need some data at the top level.
_PLACEHOLDER = alt.InlineData(values=[])


@dataclass(frozen=True)
class Chart:
    """A chart on a page: ``name`` is unique within the page and names its SVG file."""

    name: str
    title: str
    spec: Mapping[str, Any]

    def json(self) -> str:
        """The spec as JSON that is safe inside a ``<script>`` element and stable."""
        return spec_json(self.spec)


def spec_json(spec: Mapping[str, Any]) -> str:
    """A spec as JSON that is safe inside a ``<script>`` element (or an attribute) and
    stable byte for byte: nothing from the data can close the element."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def script_block(name: str, spec: Mapping[str, Any], fallback: str | None = None) -> str:
    """The site's chart element with its spec in a ``<script>`` (drawn by rg-charts.js),
    for Markdown written outside the site's render step (which embeds the ``chart`` macro
    of ``_macros.md.j2`` instead); ``name``: the ``data-chart`` text, already escaped;
    ``fallback``: Markdown shown where the script does not run (an image)."""
    lines = [f'<div class="rg-chart" data-chart="{name}" markdown>',
             f'<script type="application/json" class="rg-spec">{spec_json(spec)}</script>', ""]
    if fallback:
        lines += [fallback, ""]
    lines.append("</div>")
    return "\n".join(lines)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in frame.to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else
                        (v.item() if hasattr(v, "item") else v)) for k, v in row.items()})
    return out


def _spec(chart: alt.TopLevelMixin, values: list[dict[str, Any]]) -> dict[str, Any]:
    """The chart as a dict with ``values`` as its top-level inline data.

    Data is attached to the dict rather than the chart: Altair validates inline data on
    construction, which costs more than everything else a page does.
    """
    spec = chart.to_dict(validate=False)
    spec.pop("$schema", None)  # the bundled Vega-Lite version draws it; keep pages stable
    _drop_empty_data(spec)
    spec["data"] = {"values": values}
    return with_config(spec)


def with_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with the site's axis and legend settings (its own settings win)."""
    out = dict(spec)
    config = {k: dict(v) for k, v in _CONFIG.items()}
    for key, value in (out.get("config") or {}).items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, Mapping) else value
    out["config"] = config
    return out


def _drop_empty_data(spec: dict[str, Any]) -> None:
    """Altair gives each layer of an empty ``alt.Chart()`` its own (empty) named dataset,
    which hides the top-level data: every field reads as undefined. Drop those so layers
    inherit the values attached at the top."""
    datasets = spec.pop("datasets", None) or {}
    empty = {name for name, rows in datasets.items() if not any(rows)}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, Mapping) and data.get("name") in empty:
                del node["data"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    kept = {name: rows for name, rows in datasets.items() if name not in empty}
    if kept:
        spec["datasets"] = kept


def category_scale(categories: Sequence[str]) -> alt.Scale:
    """The category colours for a chart that shows ``categories`` (``shown_categories`` of
    its data): a dense model's chart keeps the legend it had before the architecture
    categories existed, and every category keeps its colour on every chart."""
    return alt.Scale(domain=list(categories), range=[_COLOUR_OF[c] for c in categories])


def shares_chart(long: pd.DataFrame, by: str = "seq", by_title: str = "sequence length",
                 by_type: str = "O") -> dict[str, Any]:
    """Stacked shares per category: for each ``by`` value a time bar above a FLOP bar,
    full width, the category legend in columns underneath."""
    sort = (sorted(long[by].unique().tolist()) if by_type in ("O", "Q") and not long.empty
            else None)
    base = alt.Chart(_PLACEHOLDER).mark_bar().encode(
        x=alt.X("share:Q", stack="zero", title="share of the forward", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("measure:N", title=None, sort=["time", "FLOPs"]),
        color=alt.Color("category:N", scale=category_scale(shown_categories(long)),
                        title="category",
                        legend=alt.Legend(orient="bottom", columns=5, symbolType="square")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip(f"{by}:{by_type}", title=by_title),
                 alt.Tooltip("measure:N"), alt.Tooltip("category:N"),
                 alt.Tooltip("share:Q", format=".1%"), alt.Tooltip("ms:Q", format=".3~g")],
    ).properties(width=WIDTH - 120, height=alt.Step(22))
    row_title = by_title if by_type != "N" else None
    facet = base.facet(row=alt.Row(f"{by}:{by_type}", title=row_title, sort=sort,
                                   header=alt.Header(labelAngle=0, labelAlign="left",
                                                     labelFontWeight="bold")))
    return _spec(facet.configure_facet(spacing=8), _records(long))


def scaling_chart(long: pd.DataFrame, unit: str = "tokens") -> dict[str, Any]:
    """Milliseconds per category against sequence length, both axes logarithmic;
    ``unit`` what the length counts (tokens, patches, frames)."""
    chart = alt.Chart().mark_line(point=True).encode(
        x=alt.X("seq:Q", title=f"sequence length ({unit})", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted({int(v) for v in long["seq"]}), format="d")),
        y=alt.Y("ms:Q", title="time per forward (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("category:N", scale=category_scale(shown_categories(long)),
                        title="category"),
        tooltip=[alt.Tooltip("category:N"), alt.Tooltip("seq:Q", title="sequence length"),
                 alt.Tooltip("ms:Q", format=".3~g")],
    ).properties(width=WIDTH, height=320)
    return _spec(chart, _records(long))


# A confidence level in a tooltip as fmt.level writes it: 95%, 87.5%, 93.75%.
LEVEL_FORMAT = ".4~%"

# Every point-with-interval chart: one plot width (a panel of a chart faceted into two
# columns: one panel width), one point size, one rule width.
INTERVAL_WIDTH = WIDTH - 120
INTERVAL_PANEL_WIDTH = 320
INTERVAL_POINT_SIZE = 60
INTERVAL_STROKE = 2


def point_interval(*, value: str, low: str, high: str, along: str = "x", title: Any = alt.Undefined,
                   scale: Any = alt.Undefined, axis: Any = alt.Undefined,
                   both: Mapping[str, Any] | None = None, point: Mapping[str, Any] | None = None,
                   rule: Mapping[str, Any] | None = None, under: Sequence[Any] = (),
                   over: Sequence[Any] = (), width: int = INTERVAL_WIDTH, height: Any = alt.Undefined,
                   data: Any = alt.Undefined, base: Any = None, interval: bool = True) -> alt.LayerChart:
    """The one encoder of a point with its interval: a filled point at field ``value`` and a
    rule from ``low`` to ``high``, along the quantitative axis ``along`` (``"x"``: rows of
    intervals; ``"y"``: columns), titled ``title`` with ``scale`` and ``axis``; ``both``:
    the encodings the point and its rule share (the other axis, colour, an offset),
    ``point`` and ``rule``: each one's own (tooltip, shape, opacity, a link); ``under``
    and ``over``: guide layers drawn below and above (a line at 1, a threshold). The
    layers drawn ``width`` wide: `INTERVAL_WIDTH`, or `INTERVAL_PANEL_WIDTH` for a panel
    of a two-column facet; ``base``: the chart the marks are made from (a filtered one);
    ``interval=False``: the points alone (no row carries an interval)."""
    channel = alt.X if along == "x" else alt.Y
    start = base if base is not None else alt.Chart()
    shared = dict(both or {})
    rules = start.mark_rule(strokeWidth=INTERVAL_STROKE).encode(
        **{along: channel(f"{low}:Q", title=title, scale=scale, axis=axis), f"{along}2": f"{high}:Q"},
        **shared, **(rule or {}))
    points = start.mark_point(filled=True, size=INTERVAL_POINT_SIZE).encode(
        **{along: channel(f"{value}:Q", title=title, scale=scale, axis=axis)}, **shared, **(point or {}))
    marks = [rules, points] if interval else [points]
    sizes = {"width": width} if height is alt.Undefined else {"width": width, "height": height}
    return cast(alt.LayerChart, alt.layer(*under, *marks, *over, data=data, **sizes))  # layers, never a facet


def attention_chart(comparison: pd.DataFrame) -> dict[str, Any]:
    """Median latency with its interval per attention implementation and length (the
    level each states in its tooltip)."""
    data = comparison.assign(label=comparison["seq"].map(lambda s: f"seq {s}"))
    layered = point_interval(
        value="median", low="ci_low", high="ci_high", title="median latency (ms) with its CI",
        scale=alt.Scale(zero=False), both={"y": alt.Y("attn:N", title=None)},
        point={"color": alt.Color("attn:N", legend=None, scale=_SERIES_SCALE),
               "tooltip": [alt.Tooltip("attn:N", title="implementation"), alt.Tooltip("seq:Q"),
                           alt.Tooltip("median:Q", format=".4~g"), alt.Tooltip("ci_low:Q", format=".4~g"),
                           alt.Tooltip("ci_high:Q", format=".4~g"),
                           alt.Tooltip("confidence:Q", format=LEVEL_FORMAT, title="CI level"),
                           alt.Tooltip("ratio:Q", format=".3f")]},
        height=alt.Step(16))
    chart = layered.facet(
        row=alt.Row("label:N", title=None, sort=alt.EncodingSortField("seq")), data=_PLACEHOLDER
    ).resolve_scale(x="independent")
    return _spec(chart, _records(
        data[["seq", "label", "attn", "median", "ci_low", "ci_high", "confidence", "ratio"]]))


def overhead_chart(frame: pd.DataFrame) -> dict[str, Any]:
    """Instrumented / bare forward time per instrument with its interval, one panel per
    combination; the rule at 1 is the bare forward."""
    variant = alt.Y("variant:N", title=None, sort=list(dict.fromkeys(frame["variant"])))
    one = alt.Chart().mark_rule(color=GUIDE_GREY, strokeDash=[4, 3]).encode(x=alt.X("baseline:Q"))
    layered = point_interval(
        value="ratio", low="ci_low", high="ci_high", title="instrumented / bare forward time (95% CI)",
        scale=alt.Scale(zero=False), both={"y": variant}, under=[one], height=alt.Step(16),
        point={"color": alt.value(SERIES_COLOURS[0]),
               "tooltip": [alt.Tooltip("combination:N"), alt.Tooltip("variant:N"),
                           alt.Tooltip("ratio:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".3f"),
                           alt.Tooltip("ci_high:Q", format=".3f"), alt.Tooltip("n_pairs:Q", title="pairs"),
                           alt.Tooltip("bare_ms:Q", format=".4~g", title="bare ms"),
                           alt.Tooltip("instrumented_ms:Q", format=".4~g", title="instrumented ms"),
                           alt.Tooltip("gives:N")]})
    chart = layered.facet(
        row=alt.Row("combination:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left",
                                                                 labelFontWeight="bold")),
        data=_PLACEHOLDER)
    return _spec(chart, _records(frame))


def breakdown_chart(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Share of forward time per category (columns) for each model (rows): the whole
    split at a glance; each cell links to its page."""
    shade = alt.Scale(scheme="greys", domain=[0, 1])
    tooltip = [alt.Tooltip("model:N"), alt.Tooltip("hardware:N"), alt.Tooltip("category:N"),
               alt.Tooltip("share:Q", format=".1%"),
               alt.Tooltip("share_ci_low:Q", format=".1%", title="95% CI low"),
               alt.Tooltip("share_ci_high:Q", format=".1%", title="95% CI high"),
               alt.Tooltip("seq:Q", title="at sequence length")]
    x = alt.X("category:N", title=None, sort=list(shown_categories(cells)),
              axis=alt.Axis(orient="top", labelAngle=-35, labelAlign="left"))
    y = alt.Y("row:N", title=None)
    rect = alt.Chart().mark_rect(stroke="#ffffff", strokeWidth=1).encode(
        x=x, y=y, color=alt.Color("share:Q", scale=shade, legend=None),
        href="href:N", tooltip=tooltip)
    text = alt.Chart().mark_text(baseline="middle", fontSize=12).encode(
        x=x, y=y, text=alt.Text("share:Q", format=".0%"),
        color=alt.condition("datum.share > 0.45", alt.value("#ffffff"), alt.value("#111111")),
        tooltip=tooltip)
    return _spec(alt.layer(rect, text).properties(width=alt.Step(58), height=alt.Step(30)),
                 [dict(c) for c in cells])


def roofline_chart(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Roofline, log-log: each panel's roof (the device's compute roof and its bandwidth
    slope) as a grey line, each category as a point at its arithmetic intensity and
    achieved FLOP/s, with the interval of its attributed time as a vertical bar."""
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOPs per byte, analytic)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~g"))
    y = alt.Y("flops_per_s:Q", title="FLOP/s", scale=alt.Scale(type="log"),
              axis=alt.Axis(format="~s"))
    roof = alt.Chart().mark_line(color=GUIDE_GREY, strokeDash=[6, 3]).encode(
        x=x, y=y, tooltip=[alt.Tooltip("intensity:Q", format=".3~g"),
                           alt.Tooltip("flops_per_s:Q", format=".3~s", title="attainable FLOP/s")],
    ).transform_filter(alt.datum.kind == "roof")
    scale = category_scale(shown_categories([r for r in rows if r.get("kind") == "category"]))
    layered = point_interval(
        value="flops_per_s", low="flops_per_s_low", high="flops_per_s_high", along="y", title="FLOP/s",
        scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"),
        base=alt.Chart().transform_filter(alt.datum.kind == "category"),
        both={"x": x, "color": alt.Color("category:N", scale=scale, title="category")},
        point={"tooltip": [alt.Tooltip("category:N"), alt.Tooltip("intensity:Q", format=".3~g"),
                           alt.Tooltip("flops_per_s:Q", format=".3~s", title="achieved FLOP/s"),
                           alt.Tooltip("bandwidth:Q", format=".3~s", title="achieved bytes/s"),
                           alt.Tooltip("ms:Q", format=".3~g", title="attributed ms")]},
        under=[roof], height=260)
    chart = layered.facet(
        row=alt.Row("panel:N", title=None, header=alt.Header(labelOrient="top", labelAnchor="start",
                                                             labelFontWeight="bold")),
        data=_PLACEHOLDER)
    return _spec(chart, [dict(r) for r in rows])


def gain_chart(rows: Sequence[Mapping[str, Any]], *, series_title: str, x_title: str) -> dict[str, Any]:
    """End-to-end gains (base / new, log axis) with their intervals: one row per
    ``label``, one coloured point and interval per ``series`` within it, and a dashed line
    at 1 (no change). Rows: ``label``, ``series``, ``gain``, ``gain_low``, ``gain_high``,
    ``href`` (the combination page)."""
    base = alt.Chart()
    # log axis over the data alone (not padded out to powers of ten)
    scale = alt.Scale(type="log", nice=False, padding=12)
    y = alt.Y("label:N", title=None, sort=None)
    offset = alt.YOffset("series:N")
    colour = alt.Color("series:N", title=series_title, scale=_SERIES_SCALE,
                       legend=alt.Legend(orient="bottom", columns=2))
    tooltip = [alt.Tooltip("label:N", title="pair"), alt.Tooltip("series:N", title=series_title),
               alt.Tooltip("gain:Q", format=".3f"), alt.Tooltip("gain_low:Q", format=".3f", title="CI low"),
               alt.Tooltip("gain_high:Q", format=".3f", title="CI high"),
               alt.Tooltip("confidence:Q", format=LEVEL_FORMAT, title="CI level")]
    unity = base.mark_rule(strokeDash=[4, 3], color=GUIDE_GREY).encode(x=alt.datum(1.0))
    chart = point_interval(
        value="gain", low="gain_low", high="gain_high", title=x_title, scale=scale, base=base,
        both={"y": y, "yOffset": offset, "color": colour, "tooltip": tooltip},
        point={"shape": alt.Shape("series:N", legend=None), "href": "href:N"},
        under=[unity], height=alt.Step(12))
    return _spec(chart, [dict(r) for r in rows])


def tools_chart(long: pd.DataFrame, tools: Sequence[str]) -> dict[str, Any]:
    """Per category one bar per tool (``ms`` per forward), grouped; ``tools`` in order."""
    chart = alt.Chart().mark_bar().encode(
        y=alt.Y("category:N", title=None, sort=list(shown_categories(long))),
        yOffset=alt.YOffset("tool:N", sort=list(tools)),
        x=alt.X("ms:Q", title="time per forward (ms)"),
        color=alt.Color("tool:N", sort=list(tools), scale=alt.Scale(
            domain=list(tools), range=list(SERIES_COLOURS[:len(tools)])),
            legend=alt.Legend(orient="bottom", title="tool")),
        tooltip=[alt.Tooltip("category:N"), alt.Tooltip("tool:N"),
                 alt.Tooltip("ms:Q", format=".4~g")],
    ).properties(width=WIDTH - 120, height=alt.Step(9))
    return _spec(chart, _records(long))


def expert_load_chart(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Tokens per expert, one bar per expert, one panel per mixture-of-experts layer, with
    the layer's mean load as a dashed rule: the busiest bar against the rule is the
    layer's busiest/mean. Rows: ``module``, ``layer`` (its order), ``expert``, ``tokens``,
    ``mean``, ``over_mean``."""
    base = alt.Chart()
    tooltip = [alt.Tooltip("module:N", title="layer"), alt.Tooltip("expert:O"),
               alt.Tooltip("tokens:Q"), alt.Tooltip("over_mean:Q", format=".2f",
                                                    title="against the mean")]
    bars = base.mark_bar(color=_COLOUR_OF["moe.experts"]).encode(
        x=alt.X("expert:O", title="expert", axis=alt.Axis(labelAngle=0, labelOverlap=True)),
        y=alt.Y("tokens:Q", title="tokens"), tooltip=tooltip)
    mean = base.mark_rule(color=GUIDE_GREY, strokeDash=[4, 3]).encode(
        y=alt.Y("mean:Q"), tooltip=[alt.Tooltip("module:N", title="layer"),
                                    alt.Tooltip("mean:Q", format=".3~g", title="mean tokens")])
    chart = alt.layer(bars, mean).properties(width=WIDTH - 120, height=70).facet(
        row=alt.Row("module:N", title=None, sort=alt.EncodingSortField("layer"),
                    header=alt.Header(labelAngle=0, labelAlign="left", labelOrient="top",
                                      labelAnchor="start", labelFontWeight="bold")),
        data=_PLACEHOLDER).resolve_scale(y="independent")
    return _spec(chart, [dict(r) for r in rows])


def data_rows(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows a chart draws (its top-level inline values), for its CSV and JSON."""
    data = spec.get("data")
    values = data.get("values") if isinstance(data, Mapping) else None
    return [dict(v) for v in values] if isinstance(values, list) else []


def latency_lines(frame: pd.DataFrame, series: str, series_title: str,
                  unit: str = "tokens") -> dict[str, Any]:
    """Median latency against sequence length, one line per ``series`` value, log-log;
    the x axis shows the measured lengths only, ``unit`` what they count (``tokens or
    patches`` where the lines count different things)."""
    chart = alt.Chart().mark_line(point=True).encode(
        x=alt.X("seq:Q", title=f"sequence length ({unit})", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted({int(v) for v in frame["seq"]}), format="d")),
        y=alt.Y("median:Q", title="median latency (ms)", scale=alt.Scale(type="log")),
        color=alt.Color(f"{series}:N", title=series_title, scale=_SERIES_SCALE),
        tooltip=[alt.Tooltip(f"{series}:N", title=series_title), alt.Tooltip("setting:N"),
                 alt.Tooltip("seq:Q"), alt.Tooltip("median:Q", format=".4~g"),
                 alt.Tooltip("attention_share:Q", format=".1%")],
    ).properties(width=WIDTH, height=300)
    return _spec(chart, _records(frame))


def share_lines_chart(rows: Sequence[Mapping[str, Any]], unit: str = "tokens") -> dict[str, Any]:
    """Attention's share of the time against sequence length (log axis), one line per
    series (``kind`` "share" rows), and on each line the length where attention overtakes
    the rest of the layer with its interval along the length (``kind`` "crossover")."""
    seqs = sorted({int(r["seq"]) for r in rows if r["kind"] == "share"})
    x_scale = alt.Scale(type="log", base=2)
    x_axis = alt.Axis(values=seqs, format="d")
    colour = alt.Color("series:N", title="model, mode", scale=_SERIES_SCALE,
                       legend=alt.Legend(orient="bottom", columns=2))
    y = alt.Y("attention_share:Q", title="attention's share of the time", axis=alt.Axis(format="%"),
              scale=alt.Scale(domain=[0, 1]))
    lines = alt.Chart().transform_filter("datum.kind === 'share'").mark_line(point=True).encode(
        x=alt.X("seq:Q", title=f"sequence length ({unit})", scale=x_scale, axis=x_axis), y=y,
        color=colour, shape=alt.Shape("series:N", legend=None),
        tooltip=[alt.Tooltip("series:N", title="model, mode"), alt.Tooltip("hardware:N"),
                 alt.Tooltip("depth:N", title="measured"), alt.Tooltip("seq:Q", title="sequence length"),
                 alt.Tooltip("attention_share:Q", format=".1%")])
    crossings = [r for r in rows if r["kind"] == "crossover"]
    if not crossings:
        return _spec(lines.properties(width=WIDTH, height=300), [dict(r) for r in rows])
    marks = point_interval(
        value="seq", low="seq_low", high="seq_high", along="x", title=f"sequence length ({unit})",
        scale=x_scale, axis=x_axis, both={"y": y, "color": colour},
        point={"shape": alt.value("diamond"), "size": alt.value(140),
               "tooltip": [alt.Tooltip("series:N", title="attention overtakes the rest of the layer"),
                           alt.Tooltip("against:N", title="weighed against"),
                           alt.Tooltip("seq:Q", format=",.0f", title="at about"),
                           alt.Tooltip("seq_low:Q", format=",.0f", title="interval low"),
                           alt.Tooltip("seq_high:Q", format=",.0f", title="interval high"),
                           alt.Tooltip("level:Q", format=LEVEL_FORMAT, title="level"),
                           alt.Tooltip("depth:N", title="measured")]},
        base=alt.Chart().transform_filter("datum.kind === 'crossover'"),
        under=[lines], width=WIDTH, height=300)
    return _spec(marks, [dict(r) for r in rows])


def to_svg(spec: Mapping[str, Any]) -> str:
    import vl_convert

    return stable_svg_ids(str(vl_convert.vegalite_to_svg(dict(spec))))


_SVG_ID = re.compile(r'\bid="([^"]+)"')


def stable_svg_ids(svg: str) -> str:
    """Vega numbers gradient and clip ids with a process-wide counter; renumber them per
    file so the same chart gives the same bytes whatever was drawn before it."""
    ids = list(dict.fromkeys(_SVG_ID.findall(svg)))
    if not ids:
        return svg
    mapping = {old: f"rg{i}" for i, old in enumerate(ids)}
    pattern = re.compile(r'(id="|url\(#|href="#)(' + "|".join(map(re.escape, ids)) + r')(?=[")])')
    return pattern.sub(lambda m: m.group(1) + mapping[m.group(2)], svg)
