"""Read a runs/ tree into stored runs with their combination records, in a stable order.

Records go through ``reportgen.records.schema`` (validation, migration of older versions,
refusal of newer ones); this module adds each run's place in the tree and its combinations'
files (`schema.Run`, `schema.StoredCombination`), which the site links to.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reportgen.errors import UserError
from reportgen.records import paths, schema
from reportgen.records.schema import Run, StoredCombination


def load_runs(root: Path) -> list[Run]:
    """Every run under ``root`` (``<hardware>/<run>/run.json``), sorted by path, with its
    combinations loaded.

    A missing root is a user error; an empty root gives an empty list (the site then says
    that nothing has been measured yet). Combinations are read from the files present,
    sorted by id, so a run that was interrupted shows what it finished.
    """
    if not root.is_dir():
        raise UserError(f"runs directory {root} does not exist")
    runs: list[Run] = []
    for run in schema.iter_runs(root):
        rel = run.path.resolve().relative_to(root.resolve()).as_posix()
        if rel == ".":
            rel = run.path.name
        runs.append(dataclasses.replace(with_combinations(run), rel=rel))
    return runs


def with_combinations(run: Run) -> Run:
    """``run`` with its combinations loaded: the records present, sorted by id."""
    combos: list[StoredCombination] = []
    for combo_json in paths.combination_files(run.path):
        combo = schema.load_combination(combo_json)
        combos.append(StoredCombination(record=combo, path=combo_json, trace=paths.trace_path(run.path, combo)))
    return dataclasses.replace(run, combinations=tuple(combos))
