"""Figure 5: the exported Chrome trace, read by independent code.

A deliberately small reader of the Chrome trace format (plain ``json`` + ``gzip``; it shares
no code with ``reportgen.attribution``): complete events (``ph == "X"``) of category
``cpu_op``, nested per thread by their timestamps, totalled per op name both as top-level
(inclusive) time and as self (exclusive) time; on a device trace, the device events
(kernels, memory copies and sets) of every stream, whichever host thread launched them.
The totals are then compared with the ops (or kernel) table that reportgen stored for
the same trace.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen.records import fields
from reportgen.records.bench import NOT_MEASURED
from reportgen.records.status import is_ok

EPS_US = 1e-3  # timestamps carry nanoseconds as fractions of a microsecond


@dataclass
class OpTotals:
    """Per op name: calls, top-level inclusive time and self time, in microseconds."""

    calls: dict[str, int] = field(default_factory=dict)
    top_level_us: dict[str, float] = field(default_factory=dict)
    top_level_calls: dict[str, int] = field(default_factory=dict)
    self_us: dict[str, float] = field(default_factory=dict)
    windows: int = 0

    def as_ms(self, basis: str) -> dict[str, float]:
        src = self.self_us if basis == "self" else self.top_level_us
        return {k: v / 1000.0 for k, v in src.items()}


def load_trace(path: str | Path) -> dict[str, Any]:
    """A Chrome trace as a dict, gzipped or not."""
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt") as fh:  # type: ignore[operator]
        doc = json.load(fh)
    if isinstance(doc, list):  # the format also allows a bare event array
        doc = {"traceEvents": doc}
    return doc


def op_totals(trace: Mapping[str, Any], *, op_category: str = "cpu_op",
              window: Callable[[Mapping[str, Any]], bool] | None = None) -> OpTotals:
    """Totals of ``op_category`` events per name.

    ``window``: a predicate over non-op X events (e.g. ``ProfilerStep#`` annotations);
    when given, only ops that lie inside a matching window count.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    windows_by_thread: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    if window is not None:
        for e in events:
            if e.get("cat") != op_category and window(e):
                ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
                windows_by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + dur))
    ops_by_thread: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") == op_category:
            ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
            ops_by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((ts, dur, str(e["name"])))

    out = OpTotals(windows=sum(len(w) for w in windows_by_thread.values()))
    for thread, ops in ops_by_thread.items():
        wins = sorted(windows_by_thread.get(thread, [])) if window is not None else None
        if window is not None and not wins:
            continue
        # Parents before children: by start time, then longer first.
        ops.sort(key=lambda o: (o[0], -o[1]))
        stack: list[list[Any]] = []  # [end, name, dur, children_us]

        for ts, dur, name in ops:
            _close_until(stack, ts, out)
            if wins is not None and not _inside(wins, ts, ts + dur):
                continue
            out.calls[name] = out.calls.get(name, 0) + 1
            if stack:
                stack[-1][3] += dur
            else:
                out.top_level_us[name] = out.top_level_us.get(name, 0.0) + dur
                out.top_level_calls[name] = out.top_level_calls.get(name, 0) + 1
            stack.append([ts + dur, name, dur, 0.0])
        _close_until(stack, float("inf"), out)
    return out


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


@dataclass
class DeviceTotals:
    """Device events of the iteration windows, per name (durations in microseconds), with
    the busy time (union over streams) and the windows' span from each window's start to
    its last device event's end."""

    calls: dict[str, int] = field(default_factory=dict)
    total_us: dict[str, float] = field(default_factory=dict)
    kernels: int = 0
    memory_ops: int = 0
    unlinked: int = 0
    busy_us: float = 0.0
    span_us: float = 0.0
    windows: int = 0
    events: int = 0


def device_totals(trace: Mapping[str, Any],
                  window: Callable[[Mapping[str, Any]], bool]) -> DeviceTotals:
    """Device events inside the ``window`` annotations (on any host thread).

    An event whose ``correlation`` matches a runtime launch (on any host thread) counts
    when the launch lies inside a window; an event without a matching launch counts when
    it starts inside a window (``unlinked``).
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    wins = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
                  for e in events if e.get("cat") not in DEVICE_CATEGORIES and window(e))
    launched_at = {(e.get("args") or {}).get("correlation"): float(e["ts"]) for e in events
                   if e.get("cat") in LAUNCH_CATEGORIES}
    launched_at.pop(None, None)

    def window_of(ts: float) -> int | None:
        for i, (w0, w1) in enumerate(wins):
            if w0 <= ts < w1:
                return i
        return None

    out = DeviceTotals(windows=len(wins))
    per_window: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(wins))}
    for e in events:
        if e.get("cat") not in DEVICE_CATEGORIES:
            continue
        out.events += 1
        start, dur = float(e["ts"]), float(e.get("dur", 0.0))
        launch = launched_at.get((e.get("args") or {}).get("correlation"))
        index = window_of(start if launch is None else launch)
        if index is None:
            continue
        name = str(e.get("name"))
        out.calls[name] = out.calls.get(name, 0) + 1
        out.total_us[name] = out.total_us.get(name, 0.0) + dur
        if e["cat"] == "kernel":
            out.kernels += 1
        else:
            out.memory_ops += 1
        out.unlinked += launch is None
        per_window[index].append((start, start + dur))
    for index, spans in per_window.items():
        end = wins[index][0]
        for a, b in sorted(spans):  # union of busy time: merge overlapping intervals
            if b > end:
                out.busy_us += b - max(a, end)
                end = b
        out.span_us += end - wins[index][0]
    return out


def _close_until(stack: list[list[Any]], ts: float, out: OpTotals) -> None:
    """Pop every open op that ended by ``ts``, adding its self time (its time less its
    children's) to ``out``."""
    while stack and stack[-1][0] <= ts + EPS_US:
        _end, name, dur, children = stack.pop()
        out.self_us[name] = out.self_us.get(name, 0.0) + max(dur - children, 0.0)


def _inside(wins: Sequence[tuple[float, float]], start: float, end: float) -> bool:
    for w0, w1 in wins:
        if w0 - EPS_US <= start and end <= w1 + EPS_US:
            return True
        if w0 > start:
            break
    return False


def compare_totals(mine_ms: Mapping[str, float], theirs_ms: Mapping[str, float],
                   *, scale: float = 1.0) -> dict[str, Any]:
    """Agreement of two per-name totals (``theirs`` multiplied by ``scale`` first, e.g. the
    number of iterations when a table is per forward).

    ``weighted_rel_diff`` = sum |mine - theirs| / sum theirs: every op's disagreement counts,
    weighted by its time. ``total_rel_diff`` compares the grand totals.
    """
    names = sorted(set(mine_ms) | set(theirs_ms))
    rows: list[dict[str, Any]] = []
    abs_sum = 0.0
    theirs_sum = sum(v * scale for v in theirs_ms.values())
    mine_sum = sum(mine_ms.values())
    for name in names:
        a = float(mine_ms.get(name, 0.0))
        b = float(theirs_ms.get(name, 0.0)) * scale
        abs_sum += abs(a - b)
        rows.append({"name": name, "reader_ms": a, "reportgen_ms": b,
                     "rel_diff": (a - b) / b if b else (0.0 if a == 0 else float("inf"))})
    rows.sort(key=lambda r: -max(r["reader_ms"], r["reportgen_ms"]))
    return {
        "weighted_rel_diff": abs_sum / theirs_sum if theirs_sum else float("nan"),
        "total_rel_diff": (mine_sum - theirs_sum) / theirs_sum if theirs_sum else float("nan"),
        "reader_total_ms": mine_sum,
        "reportgen_total_ms": theirs_sum,
        "only_reader": [n for n in names if n not in theirs_ms],
        "only_reportgen": [n for n in names if n not in mine_ms],
        "ops": rows,
    }


def ops_table_totals(ops_rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """reportgen's ops table (``name``, ``total_ms``, maybe split by category) summed per name."""
    totals: dict[str, float] = {}
    for row in ops_rows:
        totals[str(row["name"])] = totals.get(str(row["name"]), 0.0) + float(row["total_ms"])
    return totals


def try_hta(trace_dir: str | Path) -> dict[str, Any] | None:
    """Optional second opinion from HolisticTraceAnalysis, when it is installed."""
    try:
        from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - optional extra; any import failure means "absent"
        return None
    try:
        analysis = TraceAnalysis(trace_dir=str(trace_dir))
        return {"available": True, "ranks": list(analysis.t.traces.keys())}
    except Exception as exc:  # noqa: BLE001
        return {"available": True, "error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------- the figure

GOAL = 0.01
QUESTION = (
    "Does the exported Chrome trace say what reportgen's op tables say? A minimal reader "
    "written for this check (plain `json`, no reportgen code) totals the top-level `cpu_op` "
    "events inside each profiled forward per op name (on a GPU: every device event of the "
    "forward, on every stream, whichever thread launched it); the totals are compared with "
    "the table stored in the combination's record."
)


def iteration_window(event: Mapping[str, Any]) -> bool:
    """reportgen marks each profiled forward with a ``rg|iteration`` user annotation."""
    return event.get("name") == "rg|iteration"


def check_record(record: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    rel = fields.get(record, "profile.trace")
    if not rel:
        raise FileNotFoundError("record has no trace")
    trace = load_trace(run_dir / rel)
    if fields.get(record, "attribution.basis") == "device":
        return _check_device(record, trace)
    totals = op_totals(trace, window=iteration_window)
    n_iter = totals.windows or int(fields.get(record, "profile.iterations") or 1)
    cmp = compare_totals(totals.as_ms("top"), ops_table_totals(fields.get(record, "ops") or []),
                         scale=float(n_iter))
    return {"combination": record["id"], "basis": "top-level cpu_op, inclusive",
            "iterations": n_iter, "weighted_rel_diff": cmp["weighted_rel_diff"],
            "total_rel_diff": cmp["total_rel_diff"], "reader_total_ms": cmp["reader_total_ms"],
            "reportgen_total_ms": cmp["reportgen_total_ms"], "ops": len(cmp["ops"]),
            "only_reader": cmp["only_reader"], "only_reportgen": cmp["only_reportgen"],
            "largest_ops": cmp["ops"][:5]}


def _check_device(record: Mapping[str, Any], trace: Mapping[str, Any]) -> dict[str, Any]:
    """The kernel table, the counts and the busy and idle time of a device record against
    the reader's own totals of the device events."""
    totals = device_totals(trace, iteration_window)
    n_iter = totals.windows or 1
    mine = {k: v / 1000.0 for k, v in totals.total_us.items()}
    cmp = compare_totals(mine, ops_table_totals(fields.get(record, "ops") or []), scale=float(n_iter))
    attribution = fields.get(record, "attribution") or {}
    forward = float(attribution.get("forward_ms") or 0.0)
    idle = float(attribution.get("device_idle_ms") or 0.0)
    busy_ms = totals.busy_us / 1000.0 / n_iter
    counts = {
        "kernels": (totals.kernels / n_iter, attribution.get("launches_per_forward")),
        "memory_ops": (totals.memory_ops / n_iter, attribution.get("memory_ops_per_forward")),
        "unlinked": (totals.unlinked / n_iter, attribution.get("unlinked_device_events")),
    }
    # Counts disagree by whole events per forward: relative to the count, at least 1.
    mismatched = {k: (1.0 if b is None else abs(a - float(b)) / max(float(b), 1.0))
                  for k, (a, b) in counts.items() if b is None or abs(a - float(b)) > 1e-9}
    rel = [cmp["weighted_rel_diff"],
           abs(busy_ms - (forward - idle)) / busy_ms if busy_ms else 0.0,
           abs(totals.span_us / 1000.0 / n_iter - forward) / forward if forward else 0.0,
           *mismatched.values()]
    return {"combination": record["id"],
            "basis": "device events of every stream, launched from any host thread",
            "iterations": n_iter, "weighted_rel_diff": max(rel),
            "total_rel_diff": cmp["total_rel_diff"], "reader_total_ms": cmp["reader_total_ms"],
            "reportgen_total_ms": cmp["reportgen_total_ms"], "ops": len(cmp["ops"]),
            "only_reader": cmp["only_reader"], "only_reportgen": cmp["only_reportgen"],
            "reader_busy_ms": busy_ms, "reportgen_busy_ms": forward - idle,
            "counts": {k: {"reader": a, "reportgen": b} for k, (a, b) in counts.items()},
            "count_mismatches": sorted(mismatched), "largest_ops": cmp["ops"][:5]}


def run(records: Sequence[Mapping[str, Any]], run_dir: Path, *,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    from reportgen.bench.results import figure

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for rec in records:
        if not is_ok(rec):
            continue
        try:
            row = check_record(rec, run_dir)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"{rec.get('id')}: {type(exc).__name__}: {exc}")
            continue
        rows.append(row)
    goal = f"every op's total within {GOAL:.0%} (time-weighted), every combination"
    spec = {"kind": "below", "target": GOAL}
    if not rows:
        return figure("Trace read independently", QUESTION, value=None, unit="fraction",
                      goal=goal, goal_spec=spec, status=NOT_MEASURED,
                      notes=notes or ["no traces in the suite run"])
    worst = max(rows, key=lambda r: r["weighted_rel_diff"])
    hta = try_hta(run_dir / "traces")
    notes = [
        f"Worst: {worst['combination']}, sum over ops of |reader - reportgen| = "
        f"{worst['weighted_rel_diff']:.2e} of the total; {len(rows)} traces read.",
        "Reader: top-level cpu_op X events inside each rg|iteration annotation, nested per "
        "thread by timestamp (reportgen's table is per forward; multiplied by the iterations). "
        "On a device trace: kernels, memory copies and sets of every stream whose launch "
        "(any host thread) lies inside an iteration, or, with no launch record, that start "
        "inside one; their per-name totals, counts, busy time (union over streams) and "
        "window (iteration start to last device event) against the record's.",
        ("HolisticTraceAnalysis: " + (str(hta) if hta else "not installed (optional; "
                                                           "not needed for this check)")),
        *notes,
    ]
    for r in rows:
        log(f"  trace {r['combination']}: weighted diff {r['weighted_rel_diff']:.2e}")
    return figure("Trace read independently", QUESTION, value=worst["weighted_rel_diff"],
                  unit="fraction", goal=goal, goal_spec=spec, notes=notes, rows=rows)
