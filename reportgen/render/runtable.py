"""The run table's rows: one per combination of a run, in suite order (unmeasured ones
``pending``), as plain data over its stored records, with no torch. ``reportgen summary``
prints them as a table, JSON or CSV, ``reportgen profile`` after a run (``print_run``), and
the README's figures read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reportgen import depth
from reportgen.categories import CATEGORIES
from reportgen.intervals import unstable_reason, wide_reason
from reportgen.records import fields
from reportgen.records.schema import Run, load_combination
from reportgen.records.status import PENDING, is_ok
from reportgen.render.shown import shown_categories

COMBINATION_FIELDS: tuple[str, ...] = (
    "model",
    "scale",
    "mode",
    "dtype",
    "attn_implementation",
    "batch_size",
    "seq_len",
    "device",
    "compile",
)
LATENCY_FIELDS: tuple[str, ...] = ("median", "ci_low", "ci_high", "confidence", "n")
WHOLE_FIELDS: tuple[str, ...] = ("median", "ci_low", "ci_high", "confidence")

_TO_MS = {"ms": 1.0, "s": 1e3, "us": 1e-3, "ns": 1e-6}
MOE_LOAD = "moe_max_over_mean"
"""A mixture-of-experts record's busiest expert's tokens against the mean (its ``moe``
section; 1: balanced): a key of its row, and a column only where some row has it."""


def combination_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """The summary row of one combination record (any status)."""
    combination = fields.get(record, "combination") or {}
    categories = fields.get(record, "attribution.categories") or {}
    # a dense model's row (and so the CSV of a run of them) has no mixer or moe.* shares
    shown = shown_categories([categories])
    scale = _TO_MS.get(str(fields.get(record, "timing.unit") or "ms"), 1.0)

    def ms(value: Any) -> float | None:
        return None if value is None else float(value) * scale

    row: dict[str, Any] = {
        "id": fields.get(record, "id"),
        **{key: combination.get(key) for key in COMBINATION_FIELDS},
        # records made before the compile axis ran eagerly
        "compile": fields.get(record, "combination.compile") or "none",
        "compile_s": fields.get(record, "compile.compile_s"),
        "status": fields.get(record, "status"),
        "reason": fields.get(record, "reason"),
        "latency_ms": {
            "median": ms(fields.get(record, "timing.median")),
            "ci_low": ms(fields.get(record, "timing.ci_low")),
            "ci_high": ms(fields.get(record, "timing.ci_high")),
            # the level the interval states: below 95% under six rounds
            "confidence": fields.get(record, "timing.confidence"),
            "n": fields.get(record, "timing.n"),
        },
        "profiler_overhead": fields.get(record, "profile.overhead_ratio"),
        "shares": {
            name: fields.get(record, ("attribution", "categories", name, "share"))
            for name in ordered_categories(categories)
            if isinstance(categories[name], Mapping) and (name in shown or name not in CATEGORIES)
        },
    }
    unstable = unstable_reason(record) if is_ok(record) else None
    if unstable:
        row["unstable"] = unstable  # a key only where it applies: clean runs' CSVs stay as they were
    wide = wide_reason(record) if is_ok(record) else None
    if wide:  # an interval past twice its median, with why: a key only where it applies
        row["wide"] = wide
    label = depth.record_label(record)
    if label:  # fewer layers measured than the model has: keys only where that applies
        row["depth"] = label
        if fields.get(record, "depth.whole") is not None:
            row["whole_ms"] = {"median": ms(fields.get(record, "depth.whole.median_ms")),
                               "ci_low": ms(fields.get(record, "depth.whole.ci_low_ms")),
                               "ci_high": ms(fields.get(record, "depth.whole.ci_high_ms")),
                               # the measured median's interval stands at this level inside it
                               "confidence": fields.get(record, "timing.confidence")}
    load = moe_load(record)
    if load is None:
        return row  # dense models and records made before routing was recorded: as before
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key == "shares":
            out[MOE_LOAD] = load
        out[key] = value
    return out


def moe_load(record: Mapping[str, Any]) -> float | None:
    """The busiest expert's tokens against the mean, over the layers (``moe.max_over_mean``);
    None without a ``moe`` section or that figure."""
    value = fields.get(record, "moe.max_over_mean")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def has_moe_load(rows: Iterable[Mapping[str, Any]]) -> bool:
    return any(row.get(MOE_LOAD) is not None for row in rows)


def pending_row(combo_id: str, combination: Mapping[str, Any] | None) -> dict[str, Any]:
    return combination_row({"id": combo_id, "combination": combination or {}, "status": PENDING})


def run_rows(run: Run) -> list[dict[str, Any]]:
    """One row per combination of the run, in suite order; unmeasured ones ``pending``."""
    ids = [str(i) for i in fields.run_get(run.record, "combinations") or []]
    by_id = dict(zip(ids, fields.run_get(run.record, "suite.spec.combinations") or []))
    rows = []
    for combo_id in run.combination_ids():
        path = run.combination_path(combo_id)
        if path.is_file():
            rows.append(combination_row(load_combination(path)))
        else:
            rows.append(pending_row(combo_id, by_id.get(combo_id)))
    return rows


def ordered_categories(names: Iterable[str]) -> list[str]:
    """``names`` in the categories' display order, any other names after them, sorted."""
    names = list(names)
    known = [c for c in CATEGORIES if c in names]
    return known + sorted(n for n in names if n not in CATEGORIES)
