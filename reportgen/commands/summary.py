"""``reportgen summary RUN_DIR``: one row per combination, as a table, JSON or CSV.

The row builders (:func:`run_rows`, :func:`combination_row`, :func:`flatten_row`) are
plain data functions over stored records, with no torch, so the render side and the
runner's end-of-run table (:func:`print_run`, after ``reportgen profile`` on this host or
on Slurm) reuse them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reportgen import depth
from reportgen.categories import CATEGORIES
from reportgen.intervals import unstable_reason
from reportgen.records import fields, paths
from reportgen.records.schema import Run, load_combination, load_run
from reportgen.records.status import FAILED, OK, PENDING, SKIPPED, is_ok
from reportgen.render.shown import shown_categories

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

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
LATENCY_FIELDS: tuple[str, ...] = ("median", "ci_low", "ci_high", "n")
WHOLE_FIELDS: tuple[str, ...] = ("median", "ci_low", "ci_high")
FORMATS: tuple[str, ...] = ("table", "json", "csv")

_TO_MS = {"ms": 1.0, "s": 1e3, "us": 1e-3, "ns": 1e-6}
MOE_LOAD = "moe_max_over_mean"
"""A mixture-of-experts record's busiest expert's tokens against the mean (its ``moe``
section; 1: balanced): a key of its row, and a column only where some row has it."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "summary",
        help="one row per combination of a run",
        description="One row per combination of a run: status, median latency with its "
        "95%% CI, profiler overhead, the time share of each category and, for "
        "mixture-of-experts models, the busiest expert's load against the mean.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (holds run.json)")
    parser.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = run_rows(load_run(args.run_dir))
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2, allow_nan=False) + "\n")
    elif args.format == "csv":
        sys.stdout.write(rows_to_csv(rows))
    else:
        table_console().print(render_table(rows))
    return 0


# --- rows -----------------------------------------------------------------------------


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
            "n": fields.get(record, "timing.n"),
        },
        "profiler_overhead": fields.get(record, "profile.overhead_ratio"),
        "shares": {
            name: fields.get(record, ("attribution", "categories", name, "share"))
            for name in _ordered_categories(categories)
            if isinstance(categories[name], Mapping) and (name in shown or name not in CATEGORIES)
        },
    }
    unstable = unstable_reason(record) if is_ok(record) else None
    if unstable:
        row["unstable"] = unstable  # a key only where it applies: clean runs' CSVs stay as they were
    label = depth.record_label(record)
    if label:  # fewer layers measured than the model has: keys only where that applies
        row["depth"] = label
        if fields.get(record, "depth.whole") is not None:
            row["whole_ms"] = {"median": ms(fields.get(record, "depth.whole.median_ms")),
                               "ci_low": ms(fields.get(record, "depth.whole.ci_low_ms")),
                               "ci_high": ms(fields.get(record, "depth.whole.ci_high_ms"))}
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


def _ordered_categories(names: Iterable[str]) -> list[str]:
    names = list(names)
    known = [c for c in CATEGORIES if c in names]
    return known + sorted(n for n in names if n not in CATEGORIES)


def flatten_row(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects become dotted keys: ``latency_ms.median``, ``shares.attention.core``."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_row(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def csv_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    rows = list(rows)
    categories = _ordered_categories({c for row in rows for c in row.get("shares", {})})
    return (
        ["id", *COMBINATION_FIELDS, "status", "reason"]
        + [f"latency_ms.{f}" for f in LATENCY_FIELDS]
        + ["profiler_overhead", "compile_s"]
        + (["unstable"] if any(row.get("unstable") for row in rows) else [])
        + (["depth"] if any(row.get("depth") for row in rows) else [])
        + ([f"whole_ms.{f}" for f in WHOLE_FIELDS] if any(row.get("whole_ms") for row in rows) else [])
        + ([MOE_LOAD] if has_moe_load(rows) else [])
        + [f"shares.{c}" for c in categories]
    )


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=csv_columns(rows), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # repr() of a float round-trips exactly; None is an empty cell.
        writer.writerow(
            {
                k: ("" if v is None else repr(v) if isinstance(v, float) else v)
                for k, v in flatten_row(row).items()
            }
        )
    return buffer.getvalue()


# --- display --------------------------------------------------------------------------


def _ci_text(latency: Mapping[str, Any]) -> str:
    low, high = latency.get("ci_low"), latency.get("ci_high")
    return f"[{low:.4g}, {high:.4g}]" if low is not None and high is not None else ""


def _shares_text(shares: Mapping[str, Any], top: int = 3) -> str:
    ranked = sorted(((v, k) for k, v in shares.items() if v is not None), reverse=True)[:top]
    return ", ".join(f"{name} {value:.0%}" for value, name in ranked)


def table_console() -> Console:
    """stdout; wide when piped, so a 40-character combination id does not wrap the table."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def depth_text(row: Mapping[str, Any]) -> str:
    """A depth-reduced row's label, with the whole model's extrapolated median and interval."""
    whole = row.get("whole_ms") or {}
    if whole.get("median") is None:
        return str(row["depth"])
    return f"{row['depth']}: whole model {whole['median']:.4g} ms {_ci_text(whole)}"


def render_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("combination", no_wrap=True)
    table.add_column("status")
    table.add_column("median ms", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("profiled/unprofiled", justify="right")
    moe = has_moe_load(rows)
    if moe:
        table.add_column("MoE busiest/mean", justify="right")
    table.add_column("top categories / reason", overflow="fold")
    styles = {OK: "green", SKIPPED: "yellow", FAILED: "red", PENDING: "dim"}
    for row in rows:
        status = str(row.get("status"))
        overhead = row.get("profiler_overhead")
        latency = row.get("latency_ms") or {}
        detail = (
            _shares_text(row.get("shares") or {}) if status == OK else (row.get("reason") or "")
        )
        if row.get("unstable"):
            detail = f"unstable: {row['unstable']}" + (f"; {detail}" if detail else "")
        if row.get("depth"):
            detail = f"{depth_text(row)}; {detail}" if detail else depth_text(row)
        # Text cells: a reason like "shape [1, 2]" must not be read as rich markup.
        load = row.get(MOE_LOAD)
        table.add_row(
            Text(str(row.get("id"))),
            Text(status, style=styles.get(status, "")),
            "" if latency.get("median") is None else f"{latency['median']:.4g}",
            _ci_text(latency),
            "" if overhead is None else f"{overhead:.2f}x",
            *(["" if load is None else f"{load:.2f}x"] if moe else []),
            Text(detail),
        )
    return table


def print_run(run_dir: Path) -> None:
    """The table a finished ``reportgen profile`` prints: every combination of the run in
    ``run_dir``, where its records are, and what to do about failures."""
    run = load_run(run_dir)
    rows = run_rows(run)
    counts = fields.run_get(run.record, "counts") or {}
    title = f"{run.run_id}: " + ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    console = table_console()
    console.print(render_table(rows, title=title))
    console.print(f"records: {run_dir}", markup=False, highlight=False)
    if counts.get(FAILED):
        console.print(f"{counts[FAILED]} failed: the reasons are in the table and the worker logs in "
                      f"{paths.logs_dir(run_dir)}; rerun with --retry-failed to measure them again",
                      markup=False, highlight=False, soft_wrap=True)
