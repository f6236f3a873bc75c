"""Attention's share of the time against the length of the context, across models: one
line per (hardware, model, mode) measured at ``MIN_LENGTHS`` or more lengths, each with
the length at which attention overtakes the rest of the layer (``crossover``) and its
interval. A pure function of the combinations frame; the home page charts it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from reportgen.records.status import OK
from reportgen.render import analysis
from reportgen.render.crossover import attention_crossover

MIN_LENGTHS = 3
"""A line is drawn for a setting measured at this many lengths or more: two points say
nothing of a curve."""


def _share_at(sel: pd.DataFrame, seq: float) -> float | None:
    """Attention's share at ``seq``, interpolated on a log length axis between the two
    measured lengths around it (None outside the measured range)."""
    pts = sorted((float(s), float(a)) for s, a in zip(sel["seq"], sel["attention_share"])
                 if isinstance(a, int | float) and not math.isnan(a))
    for (s0, a0), (s1, a1) in zip(pts, pts[1:]):
        if s0 <= seq <= s1:
            t = (math.log(seq) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return a0 + t * (a1 - a0)
    return None


def share_lines(frame: pd.DataFrame, hw_labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """One entry per (hardware, model, mode) whose reference setting in that mode
    (``analysis.reference_setting``) was measured at ``MIN_LENGTHS`` or more lengths:
    its label (``depth`` says where fewer layers than the model has were measured), the
    points (length, attention's share), its crossover and, where the crossover lies
    within the measured range, attention's share there (``crossover_share``). Isolated
    attention (one attention layer alone) has no rest of a layer and draws no line."""
    out: list[dict[str, Any]] = []
    if frame.empty:
        return out
    ok = frame[(frame["status"] == OK) & (frame["architecture"] != "attention")]
    for (hw, model, mode), part in ok.groupby(["hardware", "model", "mode"], sort=True):
        setting = analysis.reference_setting(part)
        if setting is None:
            continue
        sel = analysis.select(part, setting)
        sel = sel[sel["attention_share"].notna()]
        if sel["seq"].nunique() < MIN_LENGTHS:
            continue
        crossing = attention_crossover(sel)
        inside = crossing["status"] == "crossover"
        hardware = hw_labels.get(str(hw), str(hw))
        out.append({"hardware": hardware, "model": str(model), "mode": str(mode),
                    "series": f"{model}, {mode}" + (f" ({hardware})" if len(hw_labels) > 1 else ""),
                    "depth": str(setting.get("depth") or ""), "setting": setting,
                    "sequence": analysis.sequence_of(sel)[0],
                    "points": [{"seq": int(s), "attention_share": float(a)}
                               for s, a in zip(sel["seq"], sel["attention_share"])],
                    "crossover": crossing,
                    "crossover_share": _share_at(sel, float(crossing["seq"])) if inside else None})
    return out


def chart_rows(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's rows: each line's points (``kind`` "share") and its crossover within the
    measured range (``kind`` "crossover": the length with its interval, an open end drawn
    to the measured range's end, at attention's share there)."""
    rows: list[dict[str, Any]] = []
    for line in lines:
        common = {"series": line["series"], "hardware": line["hardware"], "model": line["model"],
                  "mode": line["mode"], "depth": line["depth"]}
        rows.extend({**common, "kind": "share", **p} for p in line["points"])
        c = line["crossover"]
        if line["crossover_share"] is None:
            continue
        low = c["seq_low"] if c["seq_low"] is not None else (c["seq_min"] if c["below"] else c["seq"])
        high = c["seq_high"] if c["seq_high"] is not None else (c["seq_max"] if c["beyond"] else c["seq"])
        rows.append({**common, "kind": "crossover", "seq": float(c["seq"]),
                     "seq_low": float(low), "seq_high": float(high),
                     "attention_share": float(line["crossover_share"]), "against": c["against"],
                     "level": c["level"] if c["per_length"] else None})
    return rows


def crossover_table(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each line's crossover as a download row: the point, the interval's ends (empty
    where open or absent), the level, whether it is extrapolated from the fits."""
    return [{"hardware": line["hardware"], "model": line["model"], "mode": line["mode"],
             "depth": line["depth"], "against": line["crossover"]["against"],
             "status": line["crossover"]["status"],
             "crossover_seq": line["crossover"]["seq"], "crossover_low": line["crossover"]["seq_low"],
             "crossover_high": line["crossover"]["seq_high"],
             "level": line["crossover"]["level"] if line["crossover"]["seq"] is not None else None,
             "extrapolated": line["crossover"]["extrapolated"],
             "lengths": len(line["points"]), "seq_min": line["crossover"]["seq_min"],
             "seq_max": line["crossover"]["seq_max"]}
            for line in lines]
