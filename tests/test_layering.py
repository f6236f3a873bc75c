"""The package's layering, read from its source (ast): no module imports itself back
through others, nor any package (``reportgen.render``, ``reportgen.claims``, ...) through
another's modules; no import runs back up a floor (the facts below the pages that show
them: ``FLOORS``); the render side never reaches the measuring side, ``execute`` never
imports a command, and no module outside the measuring side reaches it through
``importlib``.

Every import counts: at module level, inside functions, under ``TYPE_CHECKING`` and through
``importlib.import_module("reportgen....")``. The sides are ARCHITECTURE.md's: the
measuring side is ``reportgen.profile``, the worker processes' modules and any module that
imports torch or transformers at its top; the render side is ``reportgen.render``,
``reportgen.claims``, the commands that read runs, the README's command and the bench's
figures.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"

MEASURING_PACKAGES = ("reportgen.profile",)
MEASURING_MODULES = {"reportgen.execute.worker", "reportgen.execute.inline", "reportgen.execute.slurm_task"}
TORCH = ("torch", "transformers")
RENDER_PACKAGES = ("reportgen.render", "reportgen.claims")
RENDER_MODULES = {"reportgen.commands.render", "reportgen.commands.check", "reportgen.commands.summary",
                  "reportgen.commands.status", "reportgen.commands.compare", "reportgen.readme",
                  "reportgen.bench.results"}  # the bench's figures and verdicts

#: The floors of what the render side shows, lowest first. A module imports from its own
#: floor and those below it, never from one above: an import that runs back up a floor
#: would make the floors import each other round.
#:
#: 1. ``reportgen.fmt``, the formatter set: it imports nothing of reportgen, so the facts
#:    and the pages write a number the same way;
#: 2. the facts: ``reportgen.claims`` (the claims registry, the checks against the runs,
#:    their verdicts and the evidence a verdict rests on) and ``reportgen.bench`` (the
#:    bench's figures and their verdicts, its results files read through
#:    ``reportgen.records.bench``);
#: 3. the pages: ``reportgen.render``, every page of the site (the Findings section and the
#:    Validation page included) and the README's figures.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("reportgen.fmt",),
    ("reportgen.claims", "reportgen.bench"),
    ("reportgen.render",),
)

#: Circles still to break, each as the set of its modules. The test fails once one is gone,
#: so that it leaves this list too.
OPEN_CIRCLES: list[frozenset[str]] = []


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)  # every import, anywhere in the file
    top: set[str] = field(default_factory=set)  # those run when the module is imported
    torch: bool = False  # imports torch or transformers at its top
    dynamic: set[str] = field(default_factory=set)  # those named to importlib.import_module


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, name: str, is_package: bool) -> Iterator[str]:
    """The absolute dotted names ``node`` imports (``from reportgen.stats import median``:
    ``reportgen.stats.median``); the longest prefix that is a module is the one imported."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        yield from (f"{source}.{alias.name}" for alias in node.names)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "import_module" and node.args
          and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        yield node.args[0].value


def _top_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements that run on import: the module's body, into ``if``/``try`` blocks
    but not into functions, classes' methods or ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                stack.extend(node.orelse)
                continue
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
        elif isinstance(node, ast.ClassDef):
            stack.extend(n for n in node.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def read_package(root: Path = PACKAGE) -> dict[str, Module]:
    modules = {module_name(p, root): Module(module_name(p, root), p) for p in sorted(root.rglob("*.py"))}

    def resolve(importer: str, target: str) -> str | None:
        """The module imported, or None for one outside the package or one of the
        importer's own packages (initialised before it, whatever it imports)."""
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target or target == importer or importer.startswith(target + "."):
            return None
        return target

    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        is_package = module.path.name == "__init__.py"
        for node in ast.walk(tree):
            for target in _targets(node, module.name, is_package):
                found = resolve(module.name, target)
                if found:
                    module.imports.add(found)
                    if isinstance(node, ast.Call):
                        module.dynamic.add(found)
        for statement in _top_level(tree):
            for node in ast.walk(statement):
                for target in _targets(node, module.name, is_package):
                    if target.split(".")[0] in TORCH:
                        module.torch = True
                    found = resolve(module.name, target)
                    if found:
                        module.top.add(found)
    return modules


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Every set of modules that import each other round (Tarjan's strongly connected
    components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def floor_of(name: str) -> int | None:
    """The floor (``FLOORS``' index) a module is on, or None for one on none of them."""
    for level, packages in enumerate(FLOORS):
        if any(name == p or name.startswith(p + ".") for p in packages):
            return level
    return None


def upward_imports(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Each module on a floor -> the modules on a floor above its own that it imports."""
    found: dict[str, list[str]] = {}
    for name, m in sorted(modules.items()):
        level = floor_of(name)
        if level is None:
            continue
        above = sorted(i for i in m.imports if (other := floor_of(i)) is not None and other > level)
        if above:
            found[name] = above
    return found


def package_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """reportgen's top-level packages and modules (``reportgen.render``, ``reportgen.fmt``)
    -> those their modules import: two packages whose modules import each other's are a
    circle here though no module imports itself back."""
    def top(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for name, m in modules.items():
        graph.setdefault(top(name), set()).update(top(i) for i in m.imports if top(i) != top(name))
    return graph


def measuring(modules: dict[str, Module]) -> set[str]:
    """The measuring side: its packages and modules, any module importing torch at its
    top, and any module that imports one of those at its top."""
    side = {name for name, m in modules.items()
            if name.startswith(MEASURING_PACKAGES) or name in MEASURING_MODULES or m.torch}
    grew = True
    while grew:
        grew = False
        for name, m in modules.items():
            if name not in side and m.top & side:
                side.add(name)
                grew = True
    return side


def render_side(modules: dict[str, Module]) -> set[str]:
    return {name for name in modules if name.startswith(RENDER_PACKAGES) or name in RENDER_MODULES}


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return read_package()


def test_no_module_imports_itself_back(modules: dict[str, Module]) -> None:
    found = circles({name: m.imports for name, m in modules.items()})
    new = [sorted(c) for c in found if c not in OPEN_CIRCLES]
    assert not new, f"import circles: {new}"
    assert not [sorted(c) for c in OPEN_CIRCLES if c not in found], "gone: remove it from OPEN_CIRCLES"


def test_no_package_imports_itself_back(modules: dict[str, Module]) -> None:
    """The render side's pages once lived beside their facts: ``claims`` and ``bench``
    wrote their own pages with ``render``'s machinery while ``render`` imported them for
    the site, so the packages imported each other round with no module doing so."""
    found = [sorted(c) for c in circles(package_graph(modules))]
    assert not found, f"packages importing each other round: {found}"


def test_no_import_runs_back_up_a_floor(modules: dict[str, Module]) -> None:
    """The facts (claims, the bench's figures) import nothing of the pages (``render``),
    and the formatter set nothing of either: a fact that needs a number written uses
    ``fmt`` below it, and a page reads the facts from above."""
    assert {"reportgen.fmt", "reportgen.claims.evaluate", "reportgen.bench.results",
            "reportgen.render.findings", "reportgen.render.validation"} <= set(modules)
    assert [floor_of(n) for n in ("reportgen.fmt", "reportgen.bench.ablation", "reportgen.render.readme",
                                  "reportgen.records.bench")] == [0, 1, 2, None]
    wrong = upward_imports(modules)
    assert not wrong, f"imports running back up a floor (FLOORS): {wrong}"


def test_the_render_side_imports_nothing_that_measures(modules: dict[str, Module]) -> None:
    side = measuring(modules)
    assert {"reportgen.profile.building", "reportgen.execute.worker", "reportgen.bench.ablation"} <= side
    wrong = {name: sorted(modules[name].imports & side) for name in sorted(render_side(modules))
             if modules[name].imports & side}
    assert not wrong, f"render-side modules importing measuring ones: {wrong}"


def test_importlib_hides_no_measuring_import(modules: dict[str, Module]) -> None:
    """A module both sides use reaches nothing of the measuring side by a name given to
    importlib: what it needs of it lives below both (the model presets: ``presets``)."""
    side = measuring(modules)
    wrong = {name: sorted(m.dynamic & side) for name, m in sorted(modules.items())
             if name not in side and m.dynamic & side}
    assert not wrong, f"modules importing measuring ones through importlib: {wrong}"


def test_execute_imports_no_command(modules: dict[str, Module]) -> None:
    """The commands drive ``execute``, never the other way round: what both need lives in
    ``execute`` or ``records``, and a command's output (the run table) is passed down."""
    wrong = {name: sorted(i for i in m.imports if i.startswith("reportgen.commands"))
             for name, m in sorted(modules.items()) if name.startswith("reportgen.execute")}
    wrong = {name: found for name, found in wrong.items() if found}
    assert not wrong, f"execute modules importing commands: {wrong}"


def test_records_sit_at_the_bottom(modules: dict[str, Module]) -> None:
    """Every module reads and writes records through ``records``, so ``records`` imports
    nothing of reportgen above it: only ``errors``, and the suite a run records for type
    checking alone."""
    allowed = {"reportgen.errors"}
    wrong = {}
    for name, m in sorted(modules.items()):
        if name == "reportgen.records" or name.startswith("reportgen.records."):
            above = {i for i in m.imports if not i.startswith("reportgen.records") and i not in allowed}
            above -= {"reportgen.suite"} - m.top  # a type-only import of the suite
            if above:
                wrong[name] = sorted(above)
    assert "reportgen.records.schema" in modules and "reportgen.records.store" in modules
    assert not wrong, f"records modules importing modules above them: {wrong}"


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "reportgen"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reportgen import b\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("import importlib\nimport torch\n"
                                      "def g():\n    return importlib.import_module('reportgen.a')\n")
    (pkg / "d.py").write_text("from reportgen.sub.c import g\n")
    found = read_package(pkg)
    assert found["reportgen.a"].imports == {"reportgen.b"} and not found["reportgen.a"].top
    assert found["reportgen.b"].imports == {"reportgen.sub.c"}
    assert found["reportgen.sub.c"].torch and found["reportgen.sub.c"].imports == {"reportgen.a"}
    assert found["reportgen.sub.c"].dynamic == {"reportgen.a"} and not found["reportgen.b"].dynamic
    assert found["reportgen.d"].top == {"reportgen.sub.c"}
    graph = {name: m.imports for name, m in found.items()}
    assert circles(graph) == [frozenset({"reportgen.a", "reportgen.b", "reportgen.sub.c"})]
    assert measuring(found) == {"reportgen.sub.c", "reportgen.d"}


def test_an_import_back_up_a_floor_and_a_package_circle_are_found(tmp_path: Path) -> None:
    """A claim page written in ``claims`` with the render side's machinery, while
    ``render`` reads the claims: no module circle, but an import up a floor and a circle of
    packages."""
    pkg = tmp_path / "reportgen"
    for sub in ("claims", "render"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "fmt.py").write_text("")
    (pkg / "claims" / "evaluate.py").write_text("from reportgen import fmt\n")
    (pkg / "claims" / "pages.py").write_text("from reportgen.render.builder import rel\n")
    (pkg / "render" / "builder.py").write_text("")
    (pkg / "render" / "site.py").write_text("from reportgen.claims.evaluate import check\n")
    found = read_package(pkg)
    assert not circles({name: m.imports for name, m in found.items()})
    assert upward_imports(found) == {"reportgen.claims.pages": ["reportgen.render.builder"]}
    assert circles(package_graph(found)) == [frozenset({"reportgen.claims", "reportgen.render"})]
    (pkg / "claims" / "pages.py").unlink()
    found = read_package(pkg)
    assert not upward_imports(found) and not circles(package_graph(found))
