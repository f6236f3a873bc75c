"""Record fields are read by names the records carry: every literal path the package gives
``records.fields`` is declared by the record's JSON Schema (``get``/``number``: a combination
record's; ``get_run``: a run record's)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"
#: the record kind each reader of ``records.fields`` reads
READERS = {"get": COMBINATION_KIND, "number": COMBINATION_KIND, "get_run": RUN_KIND}


def _paths_read() -> dict[tuple[str, str], list[str]]:
    """Every ``fields.get``/``fields.number``/``fields.get_run`` call's path in the package,
    by the kind of record it reads: literal strings as they are, f-strings with ``*`` for
    each formatted part."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "fields"
                    and node.func.attr in READERS and len(node.args) >= 2):
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
            key = (READERS[node.func.attr], dotted)
            found.setdefault(key, []).append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_every_field_read_is_declared_by_the_schema() -> None:
    read = _paths_read()
    # the combinations table reads its columns through fields; compare its runs' libraries
    assert len([k for k in read if k[0] == COMBINATION_KIND]) >= 30
    assert (RUN_KIND, "environment.libraries") in read
    undeclared = {f"{kind}: {p}": where for (kind, p), where in read.items() if not fields.declared(p, kind)}
    assert not undeclared, f"fields the record's schema does not declare: {undeclared}"


def test_a_misspelled_field_is_not_declared() -> None:
    assert fields.declared("attribution.categories.*.share_low")
    assert fields.declared("timing.ci_low") and fields.declared("memory.attention_activation_bytes.analytic")
    # the names a reader once used for the share interval, never written by any record
    assert not fields.declared("attribution.categories.*.share_ci_low")
    assert not fields.declared("timing.ci_lower")
    assert not fields.declared("nothing")
    # a run record's fields are the run schema's
    assert fields.declared("environment.git.commit", RUN_KIND) and fields.declared("suite.name", RUN_KIND)
    assert not fields.declared("environment.git.commit") and not fields.declared("timing.median", RUN_KIND)


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
