"""The "Compared with other tools" page: each combination's ``studies.tools`` (the
category breakdown as reportgen computes it beside torch's key_averages,
HolisticTraceAnalysis and Nsight Systems on the same forward). Reads records only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reportgen import fmt
from reportgen.categories import CATEGORIES
from reportgen.intervals import TIMER_RESOLUTION_MS, interval_wide_reason
from reportgen.records import fields
from reportgen.render import charts
from reportgen.render.builder import Builder, Page, rel, slugify
from reportgen.render.charts import Chart

PAGE = "tools.md"
TITLE = "Compared with other tools"
TOOL_NAMES = {"reportgen": "reportgen", "key_averages": "torch key_averages",
              "hta": "HolisticTraceAnalysis", "nsys": "Nsight Systems"}
TOOL_ORDER = tuple(TOOL_NAMES)


def study_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record's tools study, or None where it has none."""
    study = fields.get(record, "studies.tools")
    return study if isinstance(study, Mapping) else None


def trace_path(run_dir: Path, study: Mapping[str, Any] | None) -> Path | None:
    """The study's trace file inside ``run_dir``, where it is there."""
    name = (study or {}).get("trace")
    if not isinstance(name, str) or not name.startswith("traces/") or ".." in name:
        return None
    path = run_dir / name
    return path if path.is_file() else None


def interval_text(interval: Mapping[str, Any] | None) -> str:
    """`` [low, high]`` of a figure's pass interval, with its level where fewer than six
    passes leave it below 95% (`` [low, high] 87.5% CI``); `` (one pass)`` where one pass
    cannot give one; empty where the record has none (a study made before passes)."""
    if not isinstance(interval, Mapping):
        return ""
    if not interval.get("confidence"):
        return " (one pass)"
    return " " + fmt.ci_level(interval.get("low"), interval.get("high"), interval.get("confidence"),
                              fmt.NOMINAL_LEVEL)


def point(value: Any, interval: Mapping[str, Any] | None) -> Any:
    """The figure shown beside ``interval``: the median over the passes that the interval
    is of (never one pass's figure, which can sit at the interval's edge); ``value`` (the
    median pass's) where the record has no interval with its median."""
    if isinstance(interval, Mapping) and isinstance(interval.get("median"), int | float):
        return interval["median"]
    return value


def wide(interval: Mapping[str, Any] | None) -> str | None:
    """Why a pass interval reaches past twice its median (``intervals.interval_wide_reason``
    over passes: trace events carry whole microseconds), None where it does not."""
    if not isinstance(interval, Mapping) or not interval.get("confidence"):
        return None
    return interval_wide_reason(interval.get("median"), interval.get("low"), interval.get("high"),
                                tick_ms=TIMER_RESOLUTION_MS["host-clock"], between="passes")


def cell(value: Any, interval: Mapping[str, Any] | None) -> str:
    """A figure with its pass interval; empty where the tool has none."""
    if value is None:
        return ""
    return fmt.num(point(value, interval)) + interval_text(interval)


def tool_rows(study: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per tool: status, version, basis, forward and idle ms, reason, notes."""
    tools = study.get("tools") or {}
    out = []
    for key in TOOL_ORDER:
        t = tools.get(key)
        if not isinstance(t, Mapping):
            continue
        out.append({"tool": TOOL_NAMES[key], "key": key, "status": t.get("status"),
                    "version": t.get("version"), "basis": t.get("basis"),
                    "forward_ms": point(t.get("forward_ms"), t.get("forward_interval")),
                    "idle_ms": t.get("idle_ms"),
                    "forward_interval": interval_text(t.get("forward_interval")),
                    "forward_wide": wide(t.get("forward_interval")),
                    "reason": t.get("reason"), "notes": list(t.get("notes") or [])})
    return out


def table_rows(study: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per category: each tool's ms per forward and the differences with their reasons."""
    comparison = study.get("comparison") or {}
    ours = (study.get("tools") or {}).get("reportgen") or {}
    forward = point(comparison.get("forward_ms"), ours.get("forward_interval"))
    out = []
    for row in comparison.get("rows") or []:
        differences = []
        for d in row.get("differences") or []:
            interval = d.get("interval") if isinstance(d.get("interval"), Mapping) else None
            ms = point(d.get("ms"), interval)
            differences.append({
                "tool": TOOL_NAMES.get(str(d.get("tool")), str(d.get("tool"))),
                "ms": ms, "share_of_forward": (ms / forward if forward else d.get("share_of_forward")),
                "pass_ms": d.get("ms"), "interval": interval_text(interval),
                "wide": wide(interval),
                "explained": bool(d.get("explained")),
                "reasons": [{"reason": r.get("reason"), "ms": r.get("ms")}
                            for r in d.get("reasons") or []]})
        intervals = row.get("intervals") if isinstance(row.get("intervals"), Mapping) else {}
        out.append({"category": row.get("category"),
                    **{key: (None if row.get(key) is None else point(row.get(key), intervals.get(key)))
                       for key in TOOL_ORDER},
                    "intervals": {key: intervals.get(key) for key in TOOL_ORDER
                                  if isinstance(intervals.get(key), Mapping)},
                    "cells": {key: cell(row.get(key), intervals.get(key)) for key in TOOL_ORDER},
                    "wide": {key: wide(intervals.get(key)) for key in TOOL_ORDER
                             if row.get(key) is not None},
                    "differences": differences})
    return out


def flat_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table as plain columns, for its CSV and JSON: one line per category."""
    flat = []
    for r in rows:
        reasons = "; ".join(
            f"{d['tool']} {d['ms']:+.4g} ms{d.get('interval', '')}"
            + (f", wide: {d['wide']}" if d.get("wide") else "")
            + f" (median pass {d['pass_ms']:+.4g} ms: " + ", ".join(
                f"{x['reason']} ({x['ms']:+.4g} ms)" for x in d["reasons"]) + ")"
            for d in r["differences"])
        bounds = {}
        for k in TOOL_ORDER:
            interval = (r.get("intervals") or {}).get(k) or {}
            bounds[f"{k}_ms_low"] = interval.get("low")
            bounds[f"{k}_ms_high"] = interval.get("high")
        flat.append({"category": r["category"], **{f"{k}_ms": r.get(k) for k in TOOL_ORDER},
                     **bounds, "differences": reasons})
    return flat


def chart_long(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """category x tool ms, for the chart (categories no tool measured above zero left out)."""
    data = [{"category": r["category"], "tool": TOOL_NAMES[k], "ms": float(r[k])}
            for r in rows if r["category"] in CATEGORIES
            for k in TOOL_ORDER if r.get(k) is not None]
    frame = pd.DataFrame(data, columns=["category", "tool", "ms"])
    shown = frame.groupby("category")["ms"].transform(lambda s: (s.abs() > 0).any())
    return frame[shown.astype(bool)] if not frame.empty else frame


def _page_figure(b: Builder, hw: str, combo_id: str, run_id: str,
                 study: Mapping[str, Any]) -> dict[str, Any] | None:
    """The latency the model page shows for this combination where it comes from another
    run than the study, with whether the two disagree beyond their intervals (the study's
    reportgen forward against the page's median)."""
    shown = b.shown_latency(hw, combo_id)
    if shown is None or shown["run_id"] == run_id:
        return None
    own = (study.get("tools") or {}).get("reportgen") or {}
    found = own.get("forward_interval")
    interval: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    low, high = interval.get("low"), interval.get("high")
    apart = (None not in (low, high, shown["ci_low"], shown["ci_high"])
             and (high < shown["ci_low"] or low > shown["ci_high"]))
    return {**shown, "disagree": bool(apart)}


def page(b: Builder) -> list[Page]:
    """"Compared with other tools": every current combination with a tools study,
    grouped by hardware; none when no record has one."""
    path = PAGE
    out: list[Chart] = []
    by_hw: dict[str, list[dict[str, Any]]] = {}
    found = sorted(((run.hardware, str(fields.get(c.record, "id") or c.path.stem), run, c)
                    for run in b.current for c in run.combinations),
                   key=lambda item: item[:2])
    for hw, combo_id, run, c in found:
        record = c.record
        study = study_of(record)
        if study is None or hw not in b.hw_slugs:
            continue
        trace = trace_path(run.path, study)
        model = str(fields.get(record, "combination.model"))
        entry: dict[str, Any] = {
            "combo_id": combo_id, "model": model, "status": study.get("status"),
            "reason": study.get("reason"), "iterations": study.get("iterations"),
            "passes": study.get("passes"),
            "link": rel(path, b.combo_page(hw, model)) if model in b.model_slugs else None,
            "trace": (rel(path, b.data(f"{run.rel}/{study['trace']}"))
                      if trace is not None else None),
            "tools": tool_rows(study), "rows": [], "comparison": None,
            "source": b.provenance(run.run_id, record), "page": _page_figure(b, hw, combo_id, run.run_id, study)}
        if study.get("comparison"):
            rows = table_rows(study)
            comparison = study["comparison"]
            entry.update(rows=rows, comparison={
                "basis": comparison.get("basis"), "forward_ms": comparison.get("forward_ms"),
                "threshold": comparison.get("threshold"),
                "threshold_ms": comparison.get("threshold_ms")})
            entry["present"] = [k for k in TOOL_ORDER
                                if any(r.get(k) is not None for r in rows)]
            entry["table"] = b.table(path, f"{b.hw_slugs[hw]}-{slugify(combo_id)}", flat_rows(rows))
            long = chart_long(rows)
            if not long.empty:
                names = [TOOL_NAMES[k] for k in entry["present"]]
                entry["chart"] = b.chart(
                    path, f"tools-{b.hw_slugs[hw]}-{slugify(combo_id)}",
                    f"{combo_id}: time per category by tool (ms per forward)",
                    charts.tools_chart(long, names), out)
        by_hw.setdefault(hw, []).append(entry)
    if not by_hw:
        return []
    sections_ = [{"hardware": b.hw_labels[hw], "hw_link": rel(path, b.hw_page(hw)),
                  "combinations": entries} for hw, entries in sorted(by_hw.items())]
    return [Page(path, "tools.md.j2", {"sections": sections_, "names": TOOL_NAMES, "title": TITLE},
                 tuple(out))]

