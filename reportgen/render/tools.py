"""The "Compared with other tools" page: each combination's ``studies.tools`` (the
category breakdown as reportgen computes it beside torch's key_averages,
HolisticTraceAnalysis and Nsight Systems on the same forward). Reads records only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reportgen.categories import CATEGORIES
from reportgen.render import fmt

PAGE = "tools.md"
TITLE = "Compared with other tools"
TOOL_NAMES = {"reportgen": "reportgen", "key_averages": "torch key_averages",
              "hta": "HolisticTraceAnalysis", "nsys": "Nsight Systems"}
TOOL_ORDER = tuple(TOOL_NAMES)


def study_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record's tools study, or None where it has none."""
    studies = record.get("studies")
    study = studies.get("tools") if isinstance(studies, Mapping) else None
    return study if isinstance(study, Mapping) else None


def trace_path(run_dir: Path, study: Mapping[str, Any] | None) -> Path | None:
    """The study's trace file inside ``run_dir``, where it is there."""
    name = (study or {}).get("trace")
    if not isinstance(name, str) or not name.startswith("traces/") or ".." in name:
        return None
    path = run_dir / name
    return path if path.is_file() else None


def interval_text(interval: Mapping[str, Any] | None) -> str:
    """`` [low, high]`` of a figure's pass interval; `` (one pass)`` where one pass cannot
    give one; empty where the record has none (a study made before passes)."""
    if not isinstance(interval, Mapping):
        return ""
    if not interval.get("confidence"):
        return " (one pass)"
    return " " + fmt.ci(interval.get("low"), interval.get("high"))


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
                    "forward_ms": t.get("forward_ms"), "idle_ms": t.get("idle_ms"),
                    "forward_interval": interval_text(t.get("forward_interval")),
                    "reason": t.get("reason"), "notes": list(t.get("notes") or [])})
    return out


def table_rows(study: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per category: each tool's ms per forward and the differences with their reasons."""
    comparison = study.get("comparison") or {}
    out = []
    for row in comparison.get("rows") or []:
        differences = []
        for d in row.get("differences") or []:
            interval = d.get("interval") if isinstance(d.get("interval"), Mapping) else None
            differences.append({
                "tool": TOOL_NAMES.get(str(d.get("tool")), str(d.get("tool"))),
                "ms": d.get("ms"), "share_of_forward": d.get("share_of_forward"),
                "interval": interval_text(interval),
                "explained": bool(d.get("explained")),
                "reasons": [{"reason": r.get("reason"), "ms": r.get("ms")}
                            for r in d.get("reasons") or []]})
        intervals = row.get("intervals") if isinstance(row.get("intervals"), Mapping) else {}
        out.append({"category": row.get("category"),
                    **{key: row.get(key) for key in TOOL_ORDER},
                    "intervals": {key: intervals.get(key) for key in TOOL_ORDER
                                  if isinstance(intervals.get(key), Mapping)},
                    "cells": {key: ("" if row.get(key) is None else fmt.num(row.get(key)))
                              + (interval_text(intervals.get(key)) if row.get(key) is not None else "")
                              for key in TOOL_ORDER},
                    "differences": differences})
    return out


def flat_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table as plain columns, for its CSV and JSON: one line per category."""
    flat = []
    for r in rows:
        reasons = "; ".join(
            f"{d['tool']} {d['ms']:+.4g} ms{d.get('interval', '')}: " + ", ".join(
                f"{x['reason']} ({x['ms']:+.4g} ms)" for x in d["reasons"])
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

