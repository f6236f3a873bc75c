"""The roofline on the site: a section of each combination page and the findings-level
page "Memory traffic and roofline". Data from ``render.roofline``; charts and tables
through the page builder's helpers, so each has its CSV and JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from reportgen import fmt, peaks
from reportgen.records import fields
from reportgen.records.status import OK
from reportgen.render import charts, roofline
from reportgen.render.builder import Builder, Page, rel
from reportgen.render.charts import Chart
from reportgen.render.findings import FINDINGS_INDEX, claim_page_path

PAGE = "findings/memory-traffic-and-roofline.md"
# the claim whose quote speaks of attention consuming disproportionate GPU memory bandwidth
CLAIM_ID = "bert-base-attention-over-60-percent"
_GROUP = ["scale", "depth", "mode", "dtype", "attn", "batch"]
_TABLE_COLUMNS = ("combo_id", "category", "flops", "bytes", "bytes_source", "ms", "ms_low",
                  "ms_high", "interval", "confidence", "bandwidth", "bandwidth_low", "bandwidth_high",
                  "pct_peak_bandwidth", "pct_peak_bandwidth_low", "pct_peak_bandwidth_high",
                  "intensity", "flops_per_s", "flops_per_s_low", "flops_per_s_high")


def selected(rows: pd.DataFrame) -> pd.DataFrame:
    """The combinations a roofline shows: eager forwards (a compiled forward's time is
    mostly ``compiled``, which has no analytic formula), the longest measured length of
    each setting."""
    ok = rows[(rows["status"] == OK) & (rows["compile"] == "none")]
    if ok.empty:
        return ok
    group = [c for c in _GROUP if c in ok.columns]  # (frames of whole models may lack depth)
    longest = ok.sort_values("seq", kind="mergesort").groupby(group, sort=True).tail(1)
    return longest.sort_values(["mode", "attn", "dtype", "batch"], kind="mergesort")


def panel_label(row: Mapping[str, Any]) -> str:
    return (f"{row['mode']}, {row['dtype']}, {row['attn']}, batch {row['batch']}, "
            f"{row['seq']} {fmt.sequence_unit(row.get('sequence'))}"
            + (f", {row['depth']}" if row.get("depth") else ""))


def _roof_entry(panel: str, roof: roofline.Roof) -> dict[str, Any]:
    return {"panel": panel, "device": roof.device, "kind": roof.kind,
            "flops_per_s": roof.flops_per_s, "bandwidth": roof.bandwidth, "ridge": roof.ridge,
            "flops_source": roof.flops_source, "bandwidth_source": roof.bandwidth_source,
            "run_id": roof.run_id}


def measured(b: Builder, hw: str, rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Each selected combination with its record, roof, category rows and attention
    beside the rest."""
    out = []
    probe = b.probes.setdefault(hw, roofline.latest_probe(b.runs, hw))
    for r in selected(rows).to_dict(orient="records"):
        record = b.records[(hw, str(r["combo_id"]))]
        env = fields.run_get(b.runs_by_id[str(r["run_id"])].record, "environment") or {}
        roof = roofline.roof_for(record, env, hw, lambda: probe)
        if roof.kind == "cpu":
            roof = replace(roof, device=b.hw_labels[hw])
        cats = roofline.category_rows(record, roof)
        if not cats:
            continue
        out.append({"row": r, "panel": panel_label(r), "roof": roof, "categories": cats,
                    "left_out": roofline.left_out(record),
                    "attention": roofline.attention_vs_rest(record, roof),
                    "recomputed": any(c["bytes_source"] == "recomputed" for c in cats)})
    return out


def _unplaced(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The categories the roofline cannot place, for the sentence that names them: those
    whose memory traffic is not modelled, and those the attribution gave no time."""
    return {"unmodelled": sorted({c["category"] for i in items for c in i["categories"]
                                  if not c["modelled"]}),
            "left_out": sorted({c for i in items for c in i["left_out"]})}


def combination_section(b: Builder, page: str, hw: str, rows: pd.DataFrame,
                        out: list[Chart]) -> dict[str, Any] | None:
    items = measured(b, hw, rows)
    if not items:
        return None
    points = [{**c, "panel": i["panel"]} for i in items for c in i["categories"]]
    roofs = {i["panel"]: i["roof"] for i in items}
    table = [{"panel": i["panel"], **{k: c.get(k) for k in _TABLE_COLUMNS if k != "combo_id"},
              "combo_id": i["row"]["combo_id"]} for i in items for c in i["categories"]]
    drawn_rows = roofline.chart_rows(points, roofs)
    return {
        # no chart where no category has both FLOPs and modelled bytes (a state-space
        # model's mixer): the sentence above the table names what cannot be placed
        "chart": b.chart(page, "roofline", "Roofline: each category at its arithmetic "
                          "intensity and achieved FLOP/s, under the device's roof",
                          charts.roofline_chart(drawn_rows), out) if drawn_rows else None,
        "items": [{"panel": i["panel"], "categories": i["categories"],
                   "roof": _roof_entry(i["panel"], i["roof"])} for i in items],
        "roofs": [_roof_entry(p, r) for p, r in roofs.items()],
        "drawn": any(r.flops_per_s or r.bandwidth for r in roofs.values()),
        "recomputed": any(i["recomputed"] for i in items),
        **_unplaced(items),
        "share_interval": any(str(c.get("interval") or "").startswith("share")
                              for c in points),
        "data": b.table(page, "roofline-categories", table),
        "findings_link": rel(page, PAGE),
    }


def findings_page(b: Builder) -> list[Page]:
    """The "Memory traffic and roofline" page; none when no combination has a roof."""
    f = b.frame
    if f.empty:
        return []
    out: list[Chart] = []
    sections: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    verdict: list[dict[str, Any]] = []
    for hw, part in f.groupby("hardware", sort=True):
        models = []
        for model, rows in part.groupby("model", sort=True):
            items = measured(b, str(hw), rows)
            if not items:
                continue
            for i in items:
                table += [{"hardware": b.hw_labels[hw], "model": model,
                           **{k: c.get(k) for k in _TABLE_COLUMNS if k != "combo_id"},
                           "combo_id": i["row"]["combo_id"]} for c in i["categories"]]
                a = i["attention"]
                if a is not None:
                    verdict.append({"hardware": b.hw_labels[hw], "model": model,
                                    "combination": i["panel"], "combo_id": i["row"]["combo_id"],
                                    **_flat(a)})
            models.append({"model": model, "link": rel(PAGE, b.combo_page(str(hw), str(model))),
                           **_unplaced(items),
                           "items": [{"panel": i["panel"], "categories": i["categories"],
                                      "attention": i["attention"],
                                      "roof": _roof_entry(i["panel"], i["roof"])} for i in items]})
        if models:
            kind = models[0]["items"][0]["roof"]["kind"]
            mine = [v for v in verdict if v["hardware"] == b.hw_labels[hw]
                    and v["attention_higher"] is not None]
            sections.append({"hardware": b.hw_labels[hw], "kind": kind, "models": models,
                             "probe_run": (b.probes.get(str(hw)) or (None,))[0],
                             "compared": len(mine),
                             "higher": sum(1 for v in mine if v["attention_higher"]),
                             "lower": sum(1 for v in mine if v["attention_lower"])})
    if not sections:
        return []
    claims = _claim_pages(b)
    ctx = {
        "sections": sections,
        "gpu_measured": any(s["kind"] == "gpu" for s in sections),
        "verdict": verdict,
        "verdict_data": b.table(PAGE, "attention-vs-rest", verdict),
        "categories_data": b.table(PAGE, "categories", table),
        # datasheet addresses are constants of reportgen.peaks, not run data: links as they are
        "peaks": [{**r, "url": fmt.Raw(str(r["url"]))} for r in peaks.table_rows()],
        "peaks_data": b.table(PAGE, "gpu-peaks", peaks.table_rows()),
        "claim_link": (rel(PAGE, claims[CLAIM_ID]) if CLAIM_ID in claims else None),
        "findings_index": rel(PAGE, FINDINGS_INDEX) if claims else None,
        "methodology": rel(PAGE, "methodology.md"),
    }
    return [Page(PAGE, "roofline.md.j2", ctx, tuple(out))]


def _claim_pages(b: Builder) -> dict[str, str]:
    """Claim id -> its Findings page, when the site has a Findings section."""
    if b.report is None:
        return {}
    return {r.claim.id: claim_page_path(r.claim.id) for r in b.report.claims}


def _flat(a: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("bytes_share", "flops_share", "ms", "ms_low", "ms_high", "confidence", "bandwidth", "bandwidth_low",
            "bandwidth_high", "pct_peak_bandwidth", "pct_peak_bandwidth_low",
            "pct_peak_bandwidth_high")
    out: dict[str, Any] = {}
    for side, prefix in (("attention", "attention_"), ("rest", "rest_")):
        out.update({prefix + k: a[side].get(k) for k in keys})
    out["attention_higher"] = a["higher"]
    out["attention_lower"] = a["lower"]
    return out
