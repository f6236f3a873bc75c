"""Compiled against eager: for each compiled combination, the eager one at the same
setting and length, their latencies with intervals, their breakdowns and the compile
time. Pure pandas over the combinations frame (no torch)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from reportgen import fmt, stats
from reportgen.records.status import OK
from reportgen.render import analysis

_MATCH = ["scale", "mode", "dtype", "attn", "batch", "seq"]
COLUMNS = [*_MATCH, "compile", "eager_median", "eager_ci_low", "eager_ci_high", "eager_confidence",
           "eager_combo", "compiled_median", "compiled_ci_low", "compiled_ci_high",
           "compiled_confidence", "compiled_combo",
           "speedup", "significant", "compile_s", "recompiles", "graph_breaks",
           "compiled_share", "eager_basis", "compiled_basis"]


def pairs(page: pd.DataFrame) -> pd.DataFrame:
    """One row per compiled combination that has an eager twin (both ``ok``).

    ``speedup`` is eager median / compiled median; ``significant`` is true when the two
    intervals (at the levels ``eager_confidence`` and ``compiled_confidence`` they state)
    do not overlap (METHOD.md rule 5).
    """
    ok = page[(page["status"] == OK) & page["median"].notna()]
    eager = {tuple(r[k] for k in _MATCH): r for _, r in ok[ok["compile"] == "none"].iterrows()}
    out: list[dict[str, Any]] = []
    for _, row in ok[ok["compile"] != "none"].iterrows():
        twin = eager.get(tuple(row[k] for k in _MATCH))
        if twin is None:
            continue
        out.append({
            **{k: row[k] for k in _MATCH}, "compile": row["compile"],
            "eager_median": twin["median"], "eager_ci_low": twin["ci_low"],
            "eager_ci_high": twin["ci_high"], "eager_confidence": twin.get("confidence"),
            "eager_combo": twin["combo_id"],
            "compiled_median": row["median"], "compiled_ci_low": row["ci_low"],
            "compiled_ci_high": row["ci_high"], "compiled_confidence": row.get("confidence"),
            "compiled_combo": row["combo_id"],
            "speedup": float(twin["median"] / row["median"]) if row["median"] > 0 else math.nan,
            "significant": stats.difference(
                None, None, interval_a=(twin["ci_low"], twin["ci_high"]),
                interval_b=(row["ci_low"], row["ci_high"])).significant,
            "compile_s": row["compile_s"], "recompiles": row["recompiles"],
            "graph_breaks": row["graph_breaks"], "compiled_share": row["share:compiled"],
            "eager_basis": twin["basis"], "compiled_basis": row["basis"],
        })
    frame = pd.DataFrame(out, columns=COLUMNS)
    return frame.sort_values([*_MATCH, "compile"], kind="mergesort").reset_index(drop=True)


def shares(page: pd.DataFrame, matched: pd.DataFrame) -> pd.DataFrame:
    """Category shares of both sides of each pair, one bar per ``variant``
    (e.g. ``forward sdpa s128 eager``, ``forward sdpa s128 compile default``), for ``charts.shares_chart``."""
    ids = list(dict.fromkeys([*matched["eager_combo"], *matched["compiled_combo"]]))
    rows = page[page["combo_id"].isin(ids)].copy()
    rows["variant"] = [f"{r['mode']} {r['attn']} {fmt.length_short(r['seq'], r.get('sequence'))} "
                       + ("eager" if r["compile"] == "none" else f"compile {r['compile']}")
                       for _, r in rows.iterrows()]
    rows = rows.sort_values(["mode", "seq", "attn", "compile"], kind="mergesort")
    return analysis.shares_long(rows, by="variant")
