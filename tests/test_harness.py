"""The test harness checks itself: test modules share helpers only through tests/support/,
the modules marked torchfree (what the Pages job runs on the base install) import without
torch, the Pages workflow selects its tests by that mark, and no test asserts on host wall
time (timings belong to the bench). Every rule is shown failing on a small tree of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.modules import (
    TESTS,
    cross_imports,
    imports,
    module_marks,
    module_paths,
    named_marks,
    timed_asserts,
)

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = TESTS.parent
# what only the `profile` and `tools` extras install: absent on the base install
EXTRAS_ONLY = ("torch", "transformers", "hta")
# pytest with those unimportable, as on the base install (absent, not None in sys.modules:
# libraries such as scipy look for an imported torch there)
COLLECT_WITHOUT_EXTRAS = f"""
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the base install)", name=name)
        return None

sys.meta_path.insert(0, Absent())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def torchfree_modules(tests: Path = TESTS) -> list[Path]:
    return [p for p in module_paths(tests) if "torchfree" in module_marks(p)]


def collect_without_extras(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    """``pytest --collect-only -m torchfree`` of ``paths`` with torch, transformers and
    HolisticTraceAnalysis unimportable, under this checkout's pytest settings."""
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "torchfree",
            "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), *map(str, paths)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    return subprocess.run([sys.executable, "-c", COLLECT_WITHOUT_EXTRAS, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


# --- helpers come from tests/support/, never from another test module ----------------------


def test_no_test_module_imports_another() -> None:
    assert cross_imports() == {}


def test_the_import_check_finds_a_test_module_importing_another(tmp_path: Path) -> None:
    tests = _write(tmp_path, {
        "conftest.py": "import pytest\n",
        "test_a.py": """\
            from support.site import make_project
            import test_b as b

            def test_x() -> None:
                from test_b import helper
            """,
        "test_b.py": "def helper() -> None:\n    pass\n",
        "test_c.py": "from conftest import in_ci\n",
        "support/__init__.py": "",
        "support/site.py": "from test_b import helper\n",
    })
    wrong = cross_imports(tests)
    assert {name: [(i.module, i.line, i.top_level) for i in found] for name, found in wrong.items()} == {
        "test_a.py": [("test_b", 2, True), ("test_b", 5, False)],
        "test_c.py": [("conftest", 1, True)],
        "support/site.py": [("test_b", 1, True)],
    }
    (tests / "test_a.py").write_text("from support import site\n")
    (tests / "test_c.py").write_text("import pytest\n")
    (tests / "support" / "site.py").write_text("import os\n")
    assert cross_imports(tests) == {}


def test_the_tests_folder_holds_only_test_modules_and_conftest() -> None:
    """A helper module beside the tests is a helper outside the support package."""
    loose = sorted(p.name for p in TESTS.glob("*.py") if p.name != "conftest.py" and not p.name.startswith("test_"))
    assert loose == []
    assert (TESTS / "support" / "__init__.py").is_file()


# --- the torchfree mark ---------------------------------------------------------------------


def test_torchfree_is_a_module_mark() -> None:
    """conftest.py decides what ``-m torchfree`` collects from each module's pytestmark, so a
    test-level torchfree mark would never run in the Pages job."""
    assert [p.name for p in module_paths() if "torchfree" in named_marks(p) - module_marks(p)] == []
    assert len(torchfree_modules()) >= 10


def test_torchfree_modules_import_nothing_from_the_extras() -> None:
    """At any depth, inside a test as well: what the collection below cannot see."""
    found = {p.name: [(i.module, i.line) for i in imports(p) if i.module.split(".")[0] in EXTRAS_ONLY]
             for p in torchfree_modules()}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_torchfree_modules_collect_without_torch() -> None:
    modules = torchfree_modules()
    done = collect_without_extras(modules)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert collected == {p.relative_to(ROOT).as_posix() for p in modules}


def test_the_torchfree_check_fails_on_a_module_that_needs_torch(tmp_path: Path) -> None:
    tests = _write(tmp_path, {
        "test_top.py": """\
            import pytest
            import torch

            pytestmark = pytest.mark.torchfree

            def test_x() -> None:
                assert torch
            """,
        "test_inside.py": """\
            import pytest

            pytestmark = [pytest.mark.slow, pytest.mark.torchfree]

            def test_x() -> None:
                import transformers
            """,
        "test_test_level.py": """\
            import pytest

            @pytest.mark.torchfree
            def test_x() -> None:
                pass
            """,
    })
    assert [p.name for p in torchfree_modules(tests)] == ["test_inside.py", "test_top.py"]
    done = collect_without_extras([tests / "test_top.py"])
    assert done.returncode != 0 and "No module named 'torch' (not in the base install)" in done.stdout
    assert collect_without_extras([tests / "test_inside.py"]).returncode == 0  # only the static check sees it
    assert [(i.module, i.top_level) for i in imports(tests / "test_inside.py") if i.module == "transformers"] == [
        ("transformers", False)]
    level = tests / "test_test_level.py"
    assert "torchfree" in named_marks(level) and "torchfree" not in module_marks(level)


def test_the_pages_workflow_selects_its_tests_by_the_mark() -> None:
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text()
    runs = [line for line in workflow.splitlines() if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(runs) == 1 and "-m torchfree" in runs[0], runs
    assert "tests/test_" not in workflow and "--deselect" not in workflow


# --- timings belong to the bench ------------------------------------------------------------


def test_no_test_asserts_on_host_wall_time() -> None:
    found = {p.name: lines for p in module_paths() if (lines := timed_asserts(p))}
    assert found == {}


def test_the_wall_time_check_finds_an_elapsed_time_assertion(tmp_path: Path) -> None:
    path = _write(tmp_path, {"test_t.py": """\
        import time

        def test_fast() -> None:
            t0 = time.perf_counter()
            assert time.perf_counter() - t0 < 5
            elapsed = time.monotonic() - t0
            took = elapsed * 1000
            assert took < 3, "slow"
            deadline = time.monotonic() + 60
            assert time.monotonic() < deadline
        """}) / "test_t.py"
    assert timed_asserts(path) == [5, 8]


# --- a shared fixture is built once per run ---------------------------------------------------


def test_the_tests_that_share_a_fixture_run_in_one_worker(tmp_path: Path) -> None:
    """conftest.py names each test's pytest-xdist group by the shared fixtures it uses and
    hands the tests out by group, so a module's fixture is built in one worker only, however
    the other tests interleave: here under this checkout's conftest, in two workers."""
    builds = tmp_path / "builds"
    tests = _write(tmp_path / "tree", {
        "pytest.ini": "[pytest]\n",
        "tests/conftest.py": (TESTS / "conftest.py").read_text(encoding="utf-8"),
        "tests/test_shared.py": """\
            import os
            import time

            import pytest

            @pytest.fixture(scope="module")
            def built() -> str:
                with open(os.environ["BUILDS"], "a") as log:
                    log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
                return "built"

            @pytest.mark.parametrize("n", range(3))
            def test_alone(n: int) -> None:
                time.sleep(0.2)

            @pytest.mark.parametrize("n", range(3))
            def test_shares(built: str, n: int) -> None:
                time.sleep(0.2)
            """,
    })
    # the default loop (no -n, no --dist: conftest chooses), in two workers on any host
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), "BUILDS": str(builds),
           "PYTEST_XDIST_AUTO_NUM_WORKERS": "2"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=tests, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0 and "6 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(builds.read_text().splitlines()) == 1, builds.read_text()
