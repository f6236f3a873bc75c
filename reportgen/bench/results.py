"""The bench's figures: one figure record, the verdict of a value against its goal, the
results document they make and its atomic write. The file's format and its reader (kind,
version, figure order, validation) are ``reportgen.records.bench``.

No torch here.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reportgen.records.bench import FAIL, FIGURES, INFO, KIND, NOT_MEASURED, PASS, SCHEMA_VERSION, STATUSES
from reportgen.records.store import atomic_write_bytes


def figure(
    title: str,
    question: str,
    *,
    value: float | None,
    unit: str,
    goal: str,
    goal_spec: Mapping[str, Any] | None,
    interval: Sequence[float] | None = None,
    interval_kind: str | None = None,
    status: str | None = None,
    notes: Iterable[str] = (),
    rows: Iterable[Mapping[str, Any]] = (),
    duration_s: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One figure record; ``status`` defaults to the verdict of ``goal_spec`` on
    ``value``/``interval`` (``info`` when there is no goal)."""
    interval_list = [float(x) for x in interval] if interval is not None else None
    if status is None:
        status = verdict(goal_spec, value, interval_list)
    if status not in STATUSES:
        raise ValueError(f"status {status!r} not one of {STATUSES}")
    record: dict[str, Any] = {
        "title": title,
        "question": question,
        "status": status,
        "value": _clean(value),
        "unit": unit,
        "interval": interval_list,
        "interval_kind": interval_kind,
        "goal": goal,
        "goal_spec": dict(goal_spec) if goal_spec is not None else None,
        "notes": list(notes),
        "rows": [dict(r) for r in rows],
        "duration_s": duration_s,
    }
    if extra:
        record.update(extra)
    return record


def not_measured(title: str, question: str, goal: str, reason: str, *, unit: str = "") -> dict[str, Any]:
    """A figure that could not be measured here, with the reason on the page."""
    return figure(
        title, question, value=None, unit=unit, goal=goal, goal_spec=None,
        status=NOT_MEASURED, notes=[reason],
    )


def verdict(goal_spec: Mapping[str, Any] | None, value: float | None,
            interval: Sequence[float] | None = None) -> str:
    """pass/fail of a value against a goal.

    Goal kinds: ``ratio_within`` (|value - 1| <= target), ``below`` (value < target),
    ``above`` (value >= target), ``at_least`` (same as above; counts), ``all`` (value is the
    fraction of rows passing; pass when it is 1).
    """
    if goal_spec is None:
        return INFO
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    kind = goal_spec["kind"]
    target = float(goal_spec.get("target", 0.0))
    if kind == "ratio_within":
        ok = abs(value - 1.0) <= target
    elif kind == "rel_within":
        ok = abs(value) <= target
    elif kind == "below":
        ok = value < target
    elif kind in ("above", "at_least"):
        ok = value >= target
    elif kind == "all":
        ok = value >= 1.0
    else:
        raise ValueError(f"unknown goal kind {kind!r}")
    return PASS if ok else FAIL


# ---------------------------------------------------------------- file I/O


def results_document(figures: Mapping[str, Mapping[str, Any]], *, environment: Mapping[str, Any],
                     created: str, quick: bool, duration_s: float, command: str) -> dict[str, Any]:
    ordered = {k: dict(figures[k]) for k in FIGURES if k in figures}
    ordered.update({k: dict(v) for k, v in figures.items() if k not in ordered})
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "created": created,
        "quick": quick,
        "duration_s": duration_s,
        "command": command,
        "environment": dict(environment),
        "summary": summary(ordered),
        "figures": ordered,
    }


def summary(figures: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for fig in figures.values():
        counts[fig["status"]] = counts.get(fig["status"], 0) + 1
    return counts


def write_results(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> Path:
    """Atomic write (temp file in the same directory, fsync, replace)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(_clean(doc), indent=1, sort_keys=False, allow_nan=False) + "\n"
    atomic_write_bytes(p, data.encode("utf-8"))
    return p


def _clean(obj: Any) -> Any:
    """NaN/inf become null (JSON has neither); tuples become lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj
