"""A training step on the combination page: for every ``train`` / ``train-nooptim``
combination of the page, its forward, backward and optimizer shares of the step (the
headline method's, with their 95% intervals), where the backward's time went, and its
memory (the step's peak, parameters, gradients and optimizer state, the activations the
forward saved for the backward per category, beside the analytic figures). Plain rows
from the records' ``attribution.phases`` and ``memory.training``; None for a page without
a training step. No torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.records.status import is_ok
from reportgen.vocabulary import PHASES, TRAIN_MODES

__all__ = ["phase_rows", "section", "training_rows"]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def phase_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per phase of a training record: ms per step, share and its interval."""
    phases = fields.get(record, "attribution.phases") or {}
    out = []
    for name in PHASES:
        p = phases.get(name)
        if not isinstance(p, Mapping):
            continue
        cats = p.get("categories") or {}
        ms = {c: _num(v.get("ms") if isinstance(v, Mapping) else v) or 0.0 for c, v in cats.items()}
        top = sorted(((v, c) for c, v in ms.items() if c not in ("overhead",) and v > 0), reverse=True)[:3]
        total = _num(p.get("ms")) or 0.0
        out.append({"phase": name, "ms": _num(p.get("ms")), "share": _num(p.get("share")),
                    "share_low": _num(p.get("share_low")), "share_high": _num(p.get("share_high")),
                    "top": [{"category": c, "ms": v, "of_phase": v / total if total > 0 else None}
                            for v, c in top]})
    return out


def _saved_rows(training: Mapping[str, Any]) -> list[dict[str, Any]]:
    saved = training.get("saved_activation_bytes") or {}
    total = sum(int(v) for v in saved.values() if isinstance(v, (int, float)))
    rows = [{"category": c, "bytes": int(saved[c]), "share": saved[c] / total if total else None}
            for c in CATEGORIES if isinstance(saved.get(c), (int, float)) and saved[c] > 0]
    return sorted(rows, key=lambda r: -r["bytes"])  # largest first


def training_rows(records: Sequence[tuple[Mapping[str, Any], str | None]]) -> list[dict[str, Any]]:
    """One row per training record (``(record, json link)``), in the given order."""
    rows = []
    for record, link in records:
        combo = fields.get(record, "combination") or {}
        if not is_ok(record) or combo.get("mode") not in TRAIN_MODES:
            continue
        training = fields.get(record, "memory.training") or {}
        phases = {r["phase"]: r for r in phase_rows(record)}
        analytic = fields.get(record, "memory.training.analytic_bytes") or {}
        rows.append({
            "combo_id": str(fields.get(record, "id")), "mode": combo.get("mode"),
            "attn": combo.get("attn_implementation"), "dtype": combo.get("dtype"),
            "seq": combo.get("seq_len"), "batch": combo.get("batch_size"), "json": link,
            "median": _num(fields.get(record, "timing.median")),
            "ci_low": _num(fields.get(record, "timing.ci_low")),
            "ci_high": _num(fields.get(record, "timing.ci_high")),
            "confidence": _num(fields.get(record, "timing.confidence")),
            "method": fields.get(record, "attribution.headline_method") or "profiler",
            "phases": phases,
            "phase_list": phase_rows(record),
            "step_peak": _num(fields.get(record, "memory.training.step_peak_bytes")),
            "step_peak_method": fields.get(record, "memory.training.step_peak_method"),
            "saved_total": _num(fields.get(record, "memory.training.saved_activation_bytes_total")),
            "saved": _saved_rows(training),
            "parameters": _num(fields.get(record, "memory.training.resident_bytes.parameters")),
            "gradients": _num(fields.get(record, "memory.training.resident_bytes.gradients")),
            "optimizer_state": _num(fields.get(record, "memory.training.resident_bytes.optimizer_state")),
            "analytic": {k: _num(v) for k, v in analytic.items()},
        })
    return rows


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("combo_id", "mode", "attn", "dtype", "seq", "batch", "median",
                               "ci_low", "ci_high", "confidence", "method", "step_peak", "saved_total",
                               "parameters", "gradients", "optimizer_state")}
    for name in PHASES:
        p = row["phases"].get(name) or {}
        for key in ("share", "share_low", "share_high"):
            out[f"{name}_{key}"] = p.get(key)
    return out


def section(site: Any, path: str, records: Sequence[tuple[Mapping[str, Any], str | None]]
            ) -> dict[str, Any] | None:
    """The page's "Training step" section: its rows and their downloadable table; None
    where the page has no training step. ``site`` is the page builder (its ``table``)."""
    rows = training_rows(records)
    if not rows:
        return None
    return {"rows": rows, "data": site.table(path, "training", [_csv_row(r) for r in rows]),
            "has_optimizer": any("optimizer" in r["phases"] for r in rows)}
