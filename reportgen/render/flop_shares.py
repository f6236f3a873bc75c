"""The findings page "Time share against FLOP share": for each hardware, model and mode of
the current runs, each category's measured share of the forward (the headline attribution
method's, with its interval) beside its share of the analytic FLOPs, and the ratio of the
two. Both shares are read from the record as stored; nothing is measured here."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.records.status import OK
from reportgen.render import analysis
from reportgen.render.builder import Builder, Page, rel
from reportgen.render.shown import shown_categories
from reportgen.stats.bootstrap import CONFIDENCE

PATH = "findings/time-vs-flops.md"
TITLE = "Time share against FLOP share"
PAPER = {"title": "Data Movement Is All You Need: A Case Study on Optimizing Transformers",
         "authors": "Ivanov, Dryden, Ben-Nun, Li and Hoefler; MLSys 2021",
         "url": "https://arxiv.org/abs/2007.00072"}
"""The paper whose Table 1 (BERT training in PyTorch) the page sets the tables beside, as context."""
PAPER_ROWS = (("tensor contractions", 0.9980, 0.610), ("statistical normalizations (softmax, layer norm)",
                                                         0.0017, 0.255),
              ("element-wise operators", 0.0003, 0.135))
"""(class, FLOP share, runtime share) as secondary sources give the paper's Table 1."""
TOP = 2
"""How many categories the sentence per hardware names."""
NOT_OPERATORS = ("other", "overhead")
"""Time outside any named operator: never named as a category whose time exceeds its FLOPs."""

_COLUMNS = ("hardware", "model", "mode", "setting", "seq", "run_id", "combo_id", "method", "category",
            "time_share", "time_low", "time_high", "confidence", "flops", "flop_share", "ratio", "missed")


def _number(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def category_rows(record: Mapping[str, Any], categories: Sequence[str] = CATEGORIES) -> list[dict[str, Any]]:
    """Per category of ``record``: its time share (``attribution.categories.<c>.share``,
    the headline method's, with ``share_low``/``share_high``), its analytic FLOPs
    (``flops.analytic.<c>``) and their share of the analytic total, and time share / FLOP
    share. A FLOP share is None where the record has no analytic FLOPs, and where the
    analytic count gives 0 but the FLOP counter (``flops.counted.<c>``) does not: the
    analytic model misses that category's arithmetic (``missed`` holds the counted FLOPs),
    so 0 would misstate it. The ratio is None where the category has no FLOPs (a ratio to
    zero is no number)."""
    analytic = fields.get(record, "flops.analytic") or {}
    counted = fields.get(record, "flops.counted") or {}
    flops = {c: _number(analytic.get(c)) for c in categories} if isinstance(analytic, Mapping) else {}
    total = sum(v for v in (_number(x) for x in (analytic.values() if isinstance(analytic, Mapping) else ()))
                if v is not None and v > 0)
    out = []
    for c in categories:
        share = _number(fields.get(record, ("attribution", "categories", c, "share")))
        fl = flops.get(c)
        flop_share = fl / total if fl is not None and total > 0 else None
        missed = _number(counted.get(c)) if isinstance(counted, Mapping) else None
        if fl is not None and fl <= 0 and missed is not None and missed > 0:
            flop_share = None
        else:
            missed = None
        out.append({"category": c, "time_share": share,
                    "time_low": _number(fields.get(record, ("attribution", "categories", c, "share_low"))),
                    "time_high": _number(fields.get(record, ("attribution", "categories", c, "share_high"))),
                    "flops": fl, "flop_share": flop_share, "missed": missed,
                    "ratio": (share / flop_share if share is not None and flop_share else None)})
    return out


def interval_note(record: Mapping[str, Any]) -> str:
    """What the time shares' intervals are, in the record's own words where it has them."""
    if not any(_number(fields.get(record, ("attribution", "categories", c, "share_low"))) is not None
               for c in CATEGORIES):
        return "not recorded"
    method = str(fields.get(record, "attribution.headline_method") or "profiler")
    words = fields.get(record, ("attribution", "methods", method, "interval"))
    return str(words) if words else f"{CONFIDENCE:.0%} percentile bootstrap over the attributed iterations"


def exceeding(rows: Sequence[Mapping[str, Any]], top: int = TOP) -> list[dict[str, Any]]:
    """The ``top`` categories whose time share most exceeds their FLOP share (in points of
    share), among those with a time share above their FLOP share; categories with no FLOP
    share known, and the time outside any operator (``NOT_OPERATORS``), are left out."""
    gaps = [{"category": r["category"], "gap": r["time_share"] - r["flop_share"],
             "time_share": r["time_share"], "flop_share": r["flop_share"]}
            for r in rows if r["category"] not in NOT_OPERATORS
            and r["time_share"] is not None and r["flop_share"] is not None
            and r["time_share"] > r["flop_share"]]
    return sorted(gaps, key=lambda g: (-g["gap"], g["category"]))[:top]


def chosen(frame: pd.DataFrame) -> list[pd.Series]:
    """Per (hardware, model, mode): the combination of the setting that model's page charts
    in that mode (``analysis.reference_setting``) at its longest length."""
    ok = frame[(frame["status"] == OK) & frame["headline_method"].notna()] if not frame.empty else frame
    out: list[pd.Series] = []
    if ok.empty:
        return out
    for _, part in ok.groupby(["hardware", "model", "mode"], sort=True):
        setting = analysis.reference_setting(part)
        if setting is None:
            continue
        rows = analysis.select(part, setting)
        if not rows.empty:
            out.append(rows.iloc[-1])
    return out


def page(b: Builder) -> list[Page]:
    path = PATH
    sections: dict[str, dict[str, Any]] = {}
    download: list[dict[str, Any]] = []
    for row in chosen(b.frame):
        hw, model, combo = str(row["hardware"]), str(row["model"]), str(row["combo_id"])
        record = b.records.get((hw, combo))
        if record is None:
            continue
        rows = category_rows(record)
        shown = set(shown_categories([row.to_dict()]))
        rows = [r for r in rows if r["category"] in shown]
        setting = (f"{row['mode']}, {row['dtype']}, {row['attn']}, batch {int(row['batch'])}"
                   + (f", compile {row['compile']}" if row["compile"] != "none" else "")
                   # a model measured with fewer layers or experts says so (depth.record_label)
                   + (f" ({row['depth']})" if row.get("depth") else ""))
        method = str(row["headline_method"])
        section = sections.setdefault(hw, {"hardware": b.hw_labels.get(hw, hw), "entries": [], "gaps": []})
        gaps = exceeding(rows)
        entry: dict[str, Any] = {
            "model": model, "mode": str(row["mode"]), "setting": setting, "seq": int(row["seq"]),
            "run_id": str(row["run_id"]), "method": method, "interval": interval_note(record),
            "link": rel(path, b.combo_page(hw, model)), "rows": rows, "exceeding": gaps,
            "missed": [r["category"] for r in rows if r["missed"]]}
        section["entries"].append(entry)
        for g in gaps:
            section["gaps"].append({**g, "model": model, "mode": entry["mode"]})
        download += [{"hardware": hw, "model": model, "mode": entry["mode"], "setting": setting,
                      "seq": entry["seq"], "run_id": entry["run_id"], "combo_id": combo, "method": method,
                      "confidence": CONFIDENCE, **r} for r in rows]
    ordered = sorted(sections.values(), key=lambda s: str(s["hardware"]))
    for s in ordered:
        s["named"] = _named(s["gaps"])
        norm = [r["time_share"] for e in s["entries"] for r in e["rows"]
                if r["category"] == "norm" and r["time_share"] is not None]
        s["norm"] = (min(norm), max(norm)) if norm else None
    ctx = {"sections": ordered, "paper": PAPER, "paper_rows": PAPER_ROWS,
           "data": b.table(path, "shares", [{k: r.get(k) for k in _COLUMNS} for r in download])}
    return [Page(path, "time_vs_flops.md.j2", ctx)]


def _named(gaps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The categories named most often among each combination's largest excesses on one
    hardware, with how many of its tables name them and the largest excess seen."""
    by: dict[str, dict[str, Any]] = {}
    for g in gaps:
        e = by.setdefault(str(g["category"]), {"category": g["category"], "tables": 0, "max_gap": 0.0})
        e["tables"] += 1
        e["max_gap"] = max(e["max_gap"], float(g["gap"]))
    return sorted(by.values(), key=lambda e: (-e["tables"], -e["max_gap"], e["category"]))[:TOP]
