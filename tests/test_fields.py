"""Record fields are read by names the records carry: every literal path the package gives
``records.fields`` is declared by the record's JSON Schema."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from reportgen.categories import CATEGORIES
from reportgen.records import fields

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"


def _paths_read() -> dict[str, list[str]]:
    """Every ``fields.get``/``fields.number`` call's path in the package: literal strings
    as they are, f-strings with ``*`` for each formatted part."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "fields"
                    and node.func.attr in ("get", "number") and len(node.args) >= 2):
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


def test_a_misspelled_field_is_not_declared() -> None:
    assert fields.declared("attribution.categories.*.share_low")
    assert fields.declared("timing.ci_low") and fields.declared("memory.attention_activation_bytes.analytic")
    # the names a reader once used for the share interval, never written by any record
    assert not fields.declared("attribution.categories.*.share_ci_low")
    assert not fields.declared("timing.ci_lower")
    assert not fields.declared("nothing")


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
