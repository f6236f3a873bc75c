"""``reportgen summary RUN_DIR``: one row per combination, as a table, JSON or CSV.

The rows are ``reportgen.render.runtable``'s (plain data over stored records, with no
torch, which the README's figures read too); here they are printed, and the runner's
end-of-run table (:func:`print_run`, after ``reportgen profile`` on this host or on Slurm)
is printed the same way.
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

from reportgen.records import fields, paths
from reportgen.records.schema import load_run
from reportgen.records.status import FAILED, OK, PENDING, SKIPPED
from reportgen.render.runtable import (
    COMBINATION_FIELDS,
    LATENCY_FIELDS,
    MOE_LOAD,
    WHOLE_FIELDS,
    has_moe_load,
    ordered_categories,
    run_rows,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

FORMATS: tuple[str, ...] = ("table", "json", "csv")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "summary",
        help="one row per combination of a run",
        description="One row per combination of a run: status, median latency with its "
        "confidence interval (95%, or the lower level fewer rounds state), profiler "
        "overhead, the time share of each category and, for "
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


# --- CSV ------------------------------------------------------------------------------


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
    categories = ordered_categories({c for row in rows for c in row.get("shares", {})})
    return (
        ["id", *COMBINATION_FIELDS, "status", "reason"]
        + [f"latency_ms.{f}" for f in LATENCY_FIELDS]
        + ["profiler_overhead", "compile_s"]
        + (["unstable"] if any(row.get("unstable") for row in rows) else [])
        + (["wide"] if any(row.get("wide") for row in rows) else [])
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


def _ci_text(latency: Mapping[str, Any], shared: float | None) -> str:
    """The interval with its level where it is not the ``shared`` one the heading states."""
    from reportgen.fmt import ci_level

    low, high = latency.get("ci_low"), latency.get("ci_high")
    if low is None or high is None:
        return ""
    return ci_level(low, high, latency.get("confidence"), shared, number=lambda x: f"{x:.4g}")


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
    return f"{row['depth']}: whole model {whole['median']:.4g} ms {_ci_text(whole, None)}"


def render_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("combination", no_wrap=True)
    table.add_column("status")
    table.add_column("median ms", justify="right")
    from reportgen.fmt import ci_heading, shared_level

    shared = shared_level([row.get("latency_ms") or {} for row in rows])
    table.add_column(ci_heading(shared), justify="right")
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
        if row.get("wide"):
            detail = f"wide interval: {row['wide']}" + (f"; {detail}" if detail else "")
        if row.get("depth"):
            detail = f"{depth_text(row)}; {detail}" if detail else depth_text(row)
        # Text cells: a reason like "shape [1, 2]" must not be read as rich markup.
        load = row.get(MOE_LOAD)
        table.add_row(
            Text(str(row.get("id"))),
            Text(status, style=styles.get(status, "")),
            "" if latency.get("median") is None else f"{latency['median']:.4g}",
            _ci_text(latency, shared),
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
