"""Where each file of a run directory lives (ARCHITECTURE.md, "runs/ layout")::

    <run>/run.json
    <run>/combinations/<combo-id>.json
    <run>/traces/<combo-id>.trace.json.gz     (the record's profile.trace, relative)
    <run>/traces/<combo-id>.tools.trace.json.gz
    <run>/logs/                               (the workers' output)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
COMBINATIONS = "combinations"
TRACES = "traces"
LOGS = "logs"


def run_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / RUN_FILE


def combination_path(run_dir: str | Path, combo_id: str) -> Path:
    return Path(run_dir) / COMBINATIONS / f"{combo_id}.json"


def logs_dir(run_dir: str | Path) -> Path:
    """Where the run's workers write their output."""
    return Path(run_dir) / LOGS


def combination_files(run_dir: str | Path) -> list[Path]:
    """Every combination record on disk in ``run_dir``, by file name."""
    return sorted((Path(run_dir) / COMBINATIONS).glob("*.json"))


def trace_file(run_dir: str | Path, combo_id: str, kind: str = "") -> Path:
    """Where the profiled pass's trace of ``combo_id`` is written (``kind="tools"``: the
    tools study's)."""
    suffix = f".{kind}" if kind else ""
    return Path(run_dir) / TRACES / f"{combo_id}{suffix}.trace.json.gz"


def trace_ref(path: Path) -> str:
    """What a record stores for a trace it wrote: its place in the run, ``traces/<file>``."""
    return f"{TRACES}/{path.name}"


def trace_path(run_dir: str | Path, record: Mapping[str, Any]) -> Path | None:
    """The trace ``record``'s profiled pass kept, inside ``run_dir``; None where the record
    names none, or names a place outside the run or a file that is not there."""
    rel = (record.get("profile") or {}).get("trace")
    if not isinstance(rel, str) or not rel:
        return None
    root = Path(run_dir).resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return Path(run_dir) / rel
