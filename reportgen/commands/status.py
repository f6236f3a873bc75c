"""``reportgen status RUN_DIR``: what a run has done, is doing and has left.

Reads only the run directory (records and claims), so it works from any node of a
cluster while Slurm tasks measure, and without torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from reportgen.records import fields
from reportgen.records.schema import load_run
from reportgen.records.status import FAILED, PLAN_STATES

FORMATS: tuple[str, ...] = ("table", "json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="done / running / pending / failed / skipped combinations of a run",
        description="Each combination of a run: done (ok, skipped, failed), running (claimed by a "
        "live worker, with its host, pid and Slurm job) or pending.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (holds run.json)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    parser.set_defaults(func=run)


def status_rows(run_dir: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from reportgen.execute.plan import slurm_label, states

    run = load_run(run_dir)
    rows = []
    for entry in states(run.path, fields.run_get(run.record, "combinations") or []):
        claim = entry.claim or {}
        rows.append({
            "id": entry.id,
            "state": entry.state,
            "reason": entry.reason,
            "slot": fields.get(entry.record, "execution.slot"),
            "host": claim.get("host"),
            "pid": claim.get("pid"),
            "slurm_job": slurm_label(claim.get("slurm") or fields.get(entry.record, "execution.slurm")),
            "heartbeat_age_s": round(claim["age_s"], 1) if "age_s" in claim else None,
        })
    counts = Counter(row["state"] for row in rows)
    summary = {"run_id": run.run_id, "status": fields.run_get(run.record, "status"),
               "counts": {state: counts.get(state, 0) for state in PLAN_STATES},
               "slurm_jobs": sorted({row["slurm_job"] for row in rows if row["slurm_job"]})}
    return summary, rows


def run(args: argparse.Namespace) -> int:
    summary, rows = status_rows(args.run_dir)
    if args.format == "json":
        sys.stdout.write(json.dumps({**summary, "combinations": rows}, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Column, Table

    console = Console(highlight=False)
    counts = ", ".join(f"{n} {state}" for state, n in summary["counts"].items())
    console.print(f"{summary['run_id']}: {counts}", markup=False)
    if summary["slurm_jobs"]:
        console.print("Slurm jobs: " + ", ".join(summary["slurm_jobs"]), markup=False)
    table = Table("state", "where", "Slurm job", "reason")
    table.columns.insert(0, Column("combination", overflow="fold"))
    for row in rows:
        where = row["slot"] or (f"{row['host']} pid {row['pid']}" if row["host"] else "")
        table.add_row(row["id"], row["state"], where, row["slurm_job"] or "", row["reason"] or "")
    console.print(table)
    if summary["counts"][FAILED]:
        console.print("failed combinations are measured again with `reportgen profile ... --retry-failed`",
                      markup=False)
    return 0
