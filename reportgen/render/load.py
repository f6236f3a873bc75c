"""Read a runs/ tree into plain records, in a stable order.

Records go through ``reportgen.records.schema`` (validation, migration of older versions, refusal
of newer ones); this module only adds the file locations the site links to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen.errors import UserError
from reportgen.records import paths, schema


@dataclass(frozen=True)
class Combination:
    """One combination record and where its files are."""

    record: Mapping[str, Any]
    path: Path  # the combination JSON
    trace: Path | None  # the gzipped Chrome trace, when it exists


@dataclass(frozen=True)
class Run:
    """One run directory: ``run.json`` and its combinations, sorted by id."""

    record: Mapping[str, Any]
    path: Path  # the run directory
    rel: str  # the run directory relative to the runs root, with forward slashes
    combinations: tuple[Combination, ...] = field(default=())

    @property
    def run_id(self) -> str:
        return str(self.record.get("run_id") or self.rel)

    @property
    def hardware(self) -> str:
        return str(self.record.get("hardware") or self.rel.split("/")[0])


def load_runs(root: Path) -> list[Run]:
    """Every run under ``root`` (``<hardware>/<run>/run.json``), sorted by path.

    A missing root is a user error; an empty root gives an empty list (the site then says
    that nothing has been measured yet). Combinations are read from the files present,
    sorted by id, so a run that was interrupted shows what it finished.
    """
    if not root.is_dir():
        raise UserError(f"runs directory {root} does not exist")
    runs: list[Run] = []
    for loaded in schema.iter_runs(root):
        run_dir = loaded.path
        record = dict(loaded.record)
        combos: list[Combination] = []
        for combo_json in paths.combination_files(run_dir):
            combo = schema.load_combination(combo_json)
            combos.append(Combination(record=combo, path=combo_json, trace=paths.trace_path(run_dir, combo)))
        rel = run_dir.resolve().relative_to(root.resolve()).as_posix()
        if rel == ".":
            rel = run_dir.name
        runs.append(Run(record=record, path=run_dir, rel=rel, combinations=tuple(combos)))
    return runs
