"""Shared fixtures, and how the test loop runs.

The default loop spreads the tests over one process per CPU (when pytest-xdist is
installed) and leaves out the tests marked ``slow`` (real worker processes, the Slurm
cluster, the browser, the architectures sweep). Where ``CI`` is set, or with ``--slow``,
every test runs; an explicit ``-m`` expression chooses for itself. ``-m torchfree`` (the
Pages job, on the base install) imports only the modules marked ``torchfree``.

Helpers the test modules share live in tests/support/, one module per concept.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.modules import module_marks
from support.slurm import SlurmCluster, skip_reason

from reportgen.records.schema import VALIDATE_ENV

# One OpenMP team per CPU across the pytest-xdist workers: each worker's torch (and the
# measurement processes it starts, which inherit the environment) runs CPUs / workers
# threads. Two workers each running a team as wide as the host put two threads on every
# core, and a parallel region whose thread lost its core waits for it: a tiny forward that
# takes 2 ms alone took up to 600 ms so. A thread count the caller set is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

# Every record any test writes through reportgen.records.store (in this process, its workers and
# the CLI subprocesses, which inherit the environment) is checked against its JSON Schema.
os.environ[VALIDATE_ENV] = "1"

def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (the default where CI is set)")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With pytest-xdist installed and no ``-n`` given: ``-n auto --dist loadgroup``.
    Runs before xdist's own hook, which turns "auto" into the CPU count; ``-n 0``,
    ``-p no:xdist``, ``--pdb`` and ``--collect-only`` keep one process."""
    if not config.pluginmanager.has_plugin("xdist"):
        return
    if hasattr(config, "workerinput"):
        # a worker parses the command line as given, without the --dist chosen here: it
        # names each test by its group (what the scheduler groups by) only when told
        config.option.loadgroup = bool(config.workerinput.get("loadgroup", config.option.loadgroup))
        return
    option = config.option
    if option.numprocesses is None and not option.usepdb and not option.collectonly:
        option.numprocesses = "auto"
        if option.dist == "no":
            option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tells each pytest-xdist worker whether the tests are handed out by group."""
    node.workerinput["loadgroup"] = node.config.option.dist == "loadgroup"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m torchfree`` alone, a test module that is not marked torchfree (with its
    module-level ``pytestmark``) is not even imported: on the base install its top-level
    ``import torch`` would fail the collection."""
    if ((config.option.markexpr or "").strip() == "torchfree" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and "torchfree" not in module_marks(collection_path)):
        return True
    return None


def run_slow(config: pytest.Config) -> bool:
    return bool(config.getoption("--slow") or in_ci() or config.option.markexpr)


def pytest_report_header(config: pytest.Config) -> str:
    if run_slow(config):
        return "slow tests: included"
    return "slow tests: left out (run them with --slow, or CI=true)"


def shared_fixtures(item: pytest.Item) -> list[str]:
    """The module or session fixtures of ours that ``item`` uses (a built site, a sweep, the
    Slurm cluster), each named as a group: a test module's by its module, a conftest's by
    its name."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    names = []
    for name, defs in sorted(info.name2fixturedefs.items()):
        fixture = defs[-1]
        if fixture.scope in ("module", "package", "session") and fixture.baseid.startswith("tests"):
            names.append(fixture.baseid if fixture.baseid.endswith(".py") else name)
    return names


def shared_groups(items: list[pytest.Item]) -> dict[str, str]:
    """The xdist group of each test that uses a shared fixture: the tests that share one,
    directly or through another (a module's site built on the session's render), run in one
    worker, so each is built once. A group is named by its first fixture in sorted order."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    uses = {item.nodeid: shared_fixtures(item) for item in items}
    for names in uses.values():
        for name in names[1:]:
            a, b = sorted((root(names[0]), root(name)))
            parent[b] = a
    return {nodeid: root(names[0]) for nodeid, names in uses.items() if names}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test's xdist group, puts the slow tests first, then leaves them out where
    they do not run. First among the hooks: a worker's pytest-xdist names each test by its
    group (the ``@group`` its scheduler reads) in its own hook, which would otherwise run
    first and find no group marked."""
    groups = shared_groups(items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # pytest-xdist hands out the groups first (the largest first), then the other tests in
    # this order: the slow ones among those go out next, so that the last tests a worker
    # takes are short ones and the workers finish together. A group's tests keep their order
    # (a module's fixture is set up once for its tests in a row).
    items.sort(key=lambda item: 0 if item.nodeid in groups else 1 if item.get_closest_marker("slow") else 2)
    if run_slow(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real one-node Slurm cluster on this host (see tests/support/slurm.py), started
    once per session (per xdist worker; every test that uses it is in the worker's
    ``slurm`` group); skips where Slurm/munge are not installed or we are not root.

    Subprocesses find it with ``env=slurm_cluster.env``; code that runs the clients
    itself (submitit) after ``slurm_cluster.apply_env(monkeypatch)``.
    """
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def committed_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site project with the committed runs/, claims/ and bench/ rendered into it, for
    the public address ``support.site.SITE_URL``: rendered once per session (its tests share
    one xdist worker), read by the site checks and the depth checks, written by none."""
    from support.site import make_project, render_committed

    project = make_project(tmp_path_factory.mktemp("committed") / "project")
    render_committed(project)
    return project


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site project with the test site rendered into it (the runs fixture, its claims
    and bench results, with SVG fallbacks), once per session: the render tests read it, the
    browser tests build and serve it; none writes to it."""
    from support.site import make_project, render_fixture

    project = make_project(tmp_path_factory.mktemp("site") / "project")
    render_fixture(project / "docs")
    return project
