"""One record model: outside ``reportgen/records/`` no module reads a record's sections by
raw string keys; it reads them through ``records.fields`` (``get``/``number`` for a
combination record, ``run_get``/``run_number`` for run.json), whose literal paths
``tests/test_fields.py`` checks against the JSON Schemas.

The scan (ast) covers every module of the package but ``records/`` (the readers themselves)
and the measuring side that writes records (``profile/``, ``execute/``), the bench
included. It fails on ``x["timing"]`` or ``x.get("timing", ...)`` read with a literal key
that names a section only records hold; writing such a key (``row["moe"] = ...``, ``del``)
is no read and passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"

#: the sections only records hold (ARCHITECTURE.md, "Combination record", "Run record")
SECTIONS = frozenset({"timing", "attribution", "profile", "memory", "flops", "ops", "moe", "studies",
                      "inputs", "environment", "execution", "preflight"})

#: the packages whose modules write records (or are the readers): not scanned
WRITERS = ("records", "profile", "execute")

#: the module that may read these keys raw, and why
EXEMPT_MODULES = {"scrub.py": "rewrites stored records in place, every section as it is on disk"}

#: reads of these keys from dicts that are not records: (module, the dict's name, key) -> what it is
NOT_RECORDS = {
    ("bench/orchestrate.py", "doc", "environment"): "the bench results document's environment",
    ("render/compare.py", "bench", "environment"): "the bench results document's environment",
    ("bench/trace_check.py", "cmp", "ops"): "compare_totals' result: the ops it compared",
}


def _scanned() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if p.relative_to(PACKAGE).parts[0] not in WRITERS]


def _raw_reads(path: Path) -> list[tuple[int, str, str]]:
    """Each (line, dict's name, key) where ``path`` reads a record section by a literal key
    (the name is ``""`` where the dict read is no plain name)."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key: object = None
        owner: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if isinstance(node.slice, ast.Constant):
                key, owner = node.slice.value, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            key, owner = node.args[0].value, node.func.value
        if isinstance(key, str) and key in SECTIONS:
            found.append((node.lineno, owner.id if isinstance(owner, ast.Name) else "", key))
    return sorted(found)


def raw_section_reads() -> list[str]:
    out = []
    for path in _scanned():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in EXEMPT_MODULES:
            out.extend(f"reportgen/{rel}:{line} ({key!r})" for line, owner, key in _raw_reads(path)
                       if (rel, owner, key) not in NOT_RECORDS)
    return out


def test_no_module_reads_a_record_section_by_a_raw_key() -> None:
    found = raw_section_reads()
    assert not found, ("record sections read by raw keys; read them through records.fields:\n"
                       + "\n".join(found))


def test_the_scan_covers_the_render_side_and_the_bench() -> None:
    scanned = {p.relative_to(PACKAGE).as_posix() for p in _scanned()}
    assert {"render/pages.py", "render/analysis.py", "bench/coverage.py", "bench/effort.py",
            "traffic.py", "render/readme.py"} <= scanned
    assert not any(s.startswith(("records/", "profile/", "execute/")) for s in scanned)
    assert set(EXEMPT_MODULES) <= scanned  # an exemption names a module the scan reads


def test_every_exempt_read_is_still_there() -> None:
    """An exemption whose read is gone leaves the list too."""
    reads = {(p.relative_to(PACKAGE).as_posix(), owner, key) for p in _scanned() for _, owner, key in _raw_reads(p)}
    assert set(NOT_RECORDS) <= reads, set(NOT_RECORDS) - reads


def test_the_scan_sees_a_raw_read(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('a = r["timing"]\nb = r.get("flops") or {}\nc = r.get("id")\nr["moe"] = 1\n'
                   'd = r.get("environment", {})\n', encoding="utf-8")
    assert _raw_reads(src) == [(1, "r", "timing"), (2, "r", "flops"), (5, "r", "environment")]
