"""The findings pages built from ``render.payoff``: "Attention speedups checked end to
end" (Amdahl's prediction from the attribution against the measured speedup) and "Does
it pay off?" (each measured end-to-end gain beside the others, per model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from reportgen import fmt
from reportgen.records import fields
from reportgen.render import analysis, charts, payoff
from reportgen.render.builder import Builder, Page, rel
from reportgen.render.charts import Chart
from reportgen.stats.bootstrap import CONFIDENCE as BOOTSTRAP_LEVEL

SPEEDUPS = "findings/speedups.md"
PAYOFF = "findings/payoff.md"

# The downloadable columns of each table (rows carry more: links, nested lists).
_SPEEDUP_COLUMNS = ("hardware", "model", "setting", "seq", "base_value", "new_value", "a", "a_low",
                    "a_high", "s", "s_low", "s_high", "predicted", "predicted_low", "predicted_high",
                    "speedup", "speedup_low", "speedup_high", "confidence", "agree", "measured_over_predicted", "gap",
                    "attributed", "attributed_low", "attributed_high", "moved_outside", "method",
                    "iterations", "source", "why", "base_combo", "base_run", "new_combo", "new_run")
_PAYOFF_COLUMNS = ("hardware", "model", "gain", "base_value", "new_value", "setting", "seq", "speedup",
                   "speedup_low", "speedup_high", "confidence", "verdict", "verdict_level", "test", "p_value",
                   "interval", "reason",
                   "base_combo", "base_run", "new_combo", "new_run")
_MISSING_COLUMNS = ("hardware", "model", "gain", "status", "why", "command")


def _label(row: Mapping[str, Any], with_model: bool = True) -> str:
    head = f"{row['model']} · " if with_model else ""
    return (f"{head}{row['setting']} · {fmt.length_short(row['seq'], row.get('sequence'))} · "
            f"{row['base_value']} → {row['new_value']}")


def _grouped(rows: Sequence[Mapping[str, Any]],
             labels: Mapping[str, str]) -> list[tuple[str, list[tuple[str, list[Any]]]]]:
    """Rows by hardware (label order), then by model."""
    by: dict[str, dict[str, list[Any]]] = {}
    for r in rows:
        by.setdefault(str(r["hardware"]), {}).setdefault(str(r["model"]), []).append(r)
    return [(hw, sorted(models.items())) for hw, models in sorted(by.items(), key=lambda kv: labels.get(kv[0], kv[0]))]


def _href(b: Builder, hw: str, model: str) -> str:
    """A chart mark's link to the combination page, from this page's URL (findings/<page>/)."""
    return "../../" + b.combo_page(hw, model)[: -len(".md")] + "/"


def _point(b: Builder, r: Mapping[str, Any], series: str, key: str) -> dict[str, Any]:
    """One mark of ``charts.gain_chart``: the value ``key`` of row ``r`` with its interval."""
    return {"label": _label(r), "series": series, "gain": r[key], "gain_low": r[f"{key}_low"],
            # the measured speedup's level is its records'; the prediction's a 95% bootstrap
            "gain_high": r[f"{key}_high"],
            "confidence": r.get("confidence") if key == "speedup" else BOOTSTRAP_LEVEL,
            "href": _href(b, str(r["hardware"]), str(r["model"]))}


def _gain_chart(b: Builder, path: str, name: str, title: str, points: list[dict[str, Any]],
                series_title: str, out: list[Chart]) -> dict[str, str] | None:
    if not points:
        return None
    return b.chart(path, name, title, charts.gain_chart(
        points, series_title=series_title, x_title="end-to-end gain (base latency / new latency)"), out)


def _inputs(b: Builder) -> tuple[pd.DataFrame, payoff.Records, Mapping[tuple[str, ...], Path | None]]:
    """The pairs over every current run (a combination several runs measured is a
    candidate from each, so a pair can take both sides from one run), and the records and
    traces keyed by (hardware, run, combination)."""
    records: dict[tuple[str, ...], Mapping[str, Any]] = {}
    traces: dict[tuple[str, ...], Path | None] = {}
    for run in b.current:
        for c in run.combinations:
            key = (run.hardware, run.run_id, str(fields.get(c.record, "id") or c.path.stem))
            records[key] = c.record
            traces[key] = c.trace
    return payoff.pairs(analysis.combinations_frame(b.current, latest_only=False)), records, traces


def speedups_page(b: Builder) -> list[Page]:
    path = SPEEDUPS
    out: list[Chart] = []
    matched, records, traces = _inputs(b)
    rows = payoff.amdahl_rows(matched, records, traces)
    for r in rows:
        r["link"] = rel(path, b.combo_page(str(r["hardware"]), str(r["model"])))
        r["sequence"] = b.sequences.get((str(r["hardware"]), str(r["model"])), fmt.TOKENS)
        r["label"] = _label(r, with_model=False)
    summary = {(str(s["hardware"]), str(s["model"])): s for s in payoff.agreement(rows)}
    sections = []
    for hw, models in _grouped(rows, b.hw_labels):
        points = [_point(b, r, series, key) for _, part in models for r in part
                  for series, key in (("predicted from the attribution", "predicted"), ("measured", "speedup"))
                  if r[key] is not None and r[f"{key}_low"] is not None]
        chart = _gain_chart(b, path, f"speedups-{b.hw_slugs[hw]}",
                            f"Attention switches on {b.hw_labels[hw]}: end-to-end speedup predicted "
                            "by Amdahl's law against measured, with their intervals", points, "speedup", out)
        sections.append({"hardware": b.hw_labels[hw], "chart": chart,
                         "models": [{"model": m, "rows": part, "summary": summary[(hw, m)],
                                     "link": part[0]["link"]} for m, part in models]})
    moved = [{"hardware": r["hardware"], "model": r["model"], "pair": _label(r), **m}
             for r in rows for m in r["moved"]]
    ctx = {"sections": sections, "part": " + ".join(payoff.PART), "too_noisy": payoff.TOO_NOISY,
           "payoff_link": "payoff.md",
           "data": b.table(path, "speedups", [{k: r.get(k) for k in _SPEEDUP_COLUMNS} for r in rows]),
           "moved_data": b.table(path, "moved", moved) if moved else None}
    return [Page(path, "speedups.md.j2", ctx, tuple(out))]


def payoff_page(b: Builder) -> list[Page]:
    path = PAYOFF
    out: list[Chart] = []
    matched, records, _ = _inputs(b)
    rows = payoff.payoff(matched, records)
    absent = payoff.missing(b.frame, matched)
    for r in rows:
        r["link"] = rel(path, b.combo_page(str(r["hardware"]), str(r["model"])))
        r["sequence"] = b.sequences.get((str(r["hardware"]), str(r["model"])), fmt.TOKENS)
        r["label"] = _label(r, with_model=False)
    for r in absent:
        r["link"] = rel(path, b.combo_page(str(r["hardware"]), str(r["model"])))
    by_model: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in absent:
        by_model.setdefault((str(r["hardware"]), str(r["model"])), []).append(r)
    sections = []
    everything = rows + [{**r, "missing": True} for r in absent]
    for hw, models in _grouped(everything, b.hw_labels):
        points = [_point(b, r, r["gain_title"], "speedup") for _, part in models for r in part
                  if not r.get("missing") and r["speedup"] is not None]
        chart = _gain_chart(b, path, f"payoff-{b.hw_slugs[hw]}",
                            f"Measured end-to-end gains on {b.hw_labels[hw]} (base latency / new "
                            "latency, with their intervals)", points, "switch", out)
        entries = []
        for model, part in models:
            measured = [r for r in part if not r.get("missing")]
            entries.append({"model": model, "link": part[0]["link"],
                            "gains": [{"title": g.title,
                                       "rows": [r for r in measured if r["gain"] == g.name],
                                       "missing": [r for r in by_model.get((hw, model), [])
                                                   if r["gain"] == g.name]}
                                      for g in payoff.GAINS]})
        sections.append({"hardware": b.hw_labels[hw], "chart": chart, "models": entries})
    ctx = {"sections": sections, "speedups_link": "speedups.md",
           "suites": sorted(set(payoff.SUITE_FOR_DEVICE.values())),
           "data": b.table(path, "gains", [{k: r.get(k) for k in _PAYOFF_COLUMNS} for r in rows]),
           "missing_data": b.table(path, "not-measured", [{k: r.get(k) for k in _MISSING_COLUMNS}
                                                          for r in absent]) if absent else None}
    return [Page(path, "payoff.md.j2", ctx, tuple(out))]
