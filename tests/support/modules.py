"""The test modules read as source (ast), never imported: what each imports and which
marks it names. The harness test checks the rules with it; conftest.py uses it to
collect only the modules that name a mark when ``-m`` selects by that mark alone."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Import:
    module: str  # as written, e.g. "test_render", "support.site", "torch.nn"
    line: int
    top_level: bool  # at module level (runs at import) rather than inside a function


def module_paths(tests: Path = TESTS) -> list[Path]:
    return sorted(tests.glob("test_*.py"))


def _walk(tree: ast.Module) -> Iterator[tuple[ast.AST, bool]]:
    """Every node with whether it runs at import (not inside a def or lambda)."""
    stack: list[tuple[ast.AST, bool]] = [(tree, True)]
    while stack:
        node, top = stack.pop()
        yield node, top
        inner = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def imports(path: Path) -> list[Import]:
    """Every import statement in ``path``, at any depth; relative imports are named with
    their dots (".x")."""
    found = []
    for node, top in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append(Import("." * node.level + (node.module or ""), node.lineno, top))
    return sorted(found, key=lambda i: (i.line, i.module))


def cross_imports(tests: Path = TESTS) -> dict[str, list[Import]]:
    """For each test module (and conftest.py) under ``tests``: its imports of other test
    modules or conftest, which must come from the support package instead."""
    names = {p.stem for p in module_paths(tests)} | {"conftest"}
    wrong: dict[str, list[Import]] = {}
    for path in [*module_paths(tests), tests / "conftest.py", *sorted((tests / "support").glob("*.py"))]:
        if not path.is_file():
            continue
        bad = [i for i in imports(path) if i.module.lstrip(".").split(".")[0] in names]
        if bad:
            wrong[path.relative_to(tests).as_posix()] = bad
    return wrong


def _mark_names(node: ast.AST) -> Iterator[str]:
    """``pytest.mark.NAME`` (called or not) anywhere under ``node``."""
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark" and isinstance(sub.value.value, ast.Name)
                and sub.value.value.id == "pytest"):
            yield sub.attr


def module_marks(path: Path) -> set[str]:
    """The marks ``path`` puts on all its tests (its module-level ``pytestmark``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            marks.update(_mark_names(node))
    return marks


def named_marks(path: Path) -> set[str]:
    """Every mark ``path`` names anywhere (module, class or test)."""
    return set(_mark_names(ast.parse(path.read_text(encoding="utf-8"), str(path))))


CLOCKS = frozenset({"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                    "process_time", "thread_time"})


def _reads_clock(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CLOCKS
               and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "time" for sub in ast.walk(node))


def _elapsed(node: ast.AST, names: set[str]) -> bool:
    """``node`` holds a difference of host clock readings (or a name bound to one)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in names:
            return True
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub) and (
                _reads_clock(sub.left) or _reads_clock(sub.right)):
            return True
    return False


def timed_asserts(path: Path) -> list[int]:
    """Lines of ``path`` that assert on host wall time: an ``assert`` comparing a difference
    of ``time`` clock readings (directly or through a name bound to one). Deadlines of a
    wait (``time.monotonic() < deadline``) are not differences and pass."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    elapsed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _elapsed(node.value, elapsed):
            elapsed.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Assert) and any(
                      isinstance(c, ast.Compare) and _elapsed(c, elapsed) for c in ast.walk(node.test)))
