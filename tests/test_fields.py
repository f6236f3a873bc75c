"""Record fields are read by names the records carry: every literal path the package gives
``records.fields`` is declared by the record's JSON Schema (``get``/``number``: the
combination record's, ``run_get``/``run_number``: the run record's)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"

#: the reading functions of ``records.fields`` and the record kind each one reads
READERS = {"get": COMBINATION_KIND, "number": COMBINATION_KIND, "run_get": RUN_KIND, "run_number": RUN_KIND}


def _paths_read(kind: str = COMBINATION_KIND) -> dict[str, list[str]]:
    """Every path the package reads from a ``kind`` record through ``records.fields``:
    literal strings as they are, f-strings and tuples with ``*`` for each formatted or
    computed part (a list's index among them)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "fields"
                    and READERS.get(node.func.attr) == kind and len(node.args) >= 2):
                continue
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                dotted = arg.value
            elif isinstance(arg, ast.JoinedStr):
                dotted = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in arg.values)
            elif isinstance(arg, ast.Tuple):
                dotted = ".".join(e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "*"
                                  for e in arg.elts)
            else:
                continue
            found.setdefault(dotted, []).append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_every_field_read_is_declared_by_the_schema() -> None:
    read = _paths_read()
    assert len(read) >= 30  # the combinations table reads its columns through fields
    undeclared = {p: where for p, where in read.items() if not fields.declared(p)}
    assert not undeclared, f"fields the combination schema does not declare: {undeclared}"


def test_every_run_field_read_is_declared_by_the_run_schema() -> None:
    read = _paths_read(RUN_KIND)
    assert len(read) >= 20  # the environment facts a hardware page lists
    undeclared = {p: where for p, where in read.items() if not fields.declared(p, RUN_KIND)}
    assert not undeclared, f"fields the run schema does not declare: {undeclared}"


def test_a_misspelled_field_is_not_declared() -> None:
    assert fields.declared("attribution.categories.*.share_low")
    assert fields.declared("timing.ci_low") and fields.declared("memory.attention_activation_bytes.analytic")
    # the names a reader once used for the share interval, never written by any record
    assert not fields.declared("attribution.categories.*.share_ci_low")
    assert not fields.declared("timing.ci_lower")
    assert not fields.declared("nothing")
    assert fields.declared("environment.gpus.*.name", RUN_KIND)
    assert fields.declared(("environment", "gpus", "*", "sm_clock_mhz"), RUN_KIND)
    assert not fields.declared("environment.gpus.*.clocks_mhz", RUN_KIND)
    assert not fields.declared("environment.host.cpu_brand", RUN_KIND)


def test_reading_tolerates_what_older_and_failed_records_lack() -> None:
    record = {"status": "failed", "timing": None,
              "attribution": {"categories": {c: {"share": 0.1, "flag": True} for c in CATEGORIES}}}
    assert fields.get(record, "timing.median") is None
    assert math.isnan(fields.number(record, "timing.median"))
    assert fields.number(record, "attribution.categories.mlp.share") == 0.1
    # a category's name holds a dot: its path is a tuple of keys
    assert fields.number(record, ("attribution", "categories", "attention.core", "share")) == 0.1
    assert math.isnan(fields.number(record, "attribution.categories.attention.core.share"))
    assert math.isnan(fields.number(record, "attribution.categories.mlp.flag"))  # a bool is no number
    assert fields.get(None, "timing") is None
    # an integer key picks a list's item
    run = {"environment": {"gpus": [{"name": "H200"}]}}
    assert fields.run_get(run, ("environment", "gpus", 0, "name")) == "H200"
    assert fields.run_get(run, ("environment", "gpus", 1, "name")) is None
    assert fields.run_get(run, ("environment", "gpus", "0", "name")) is None
    assert math.isnan(fields.run_number(run, ("environment", "gpus", 0, "name")))
