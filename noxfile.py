"""Sessions: `nox -s report` (profile, render, build the site), `nox -s tests` (what CI runs:
ruff, mypy and pytest), `nox -s lint` and `nox -s typecheck`."""

from __future__ import annotations

import os
import subprocess
import tempfile

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]  # mypy included

PYPROJECT = nox.project.load_toml("pyproject.toml")

# The venvs see the host's site-packages so that a host's own torch (a CUDA build on a GPU
# host) satisfies the `profile` extra's `torch>=...` and pip downloads no second copy.
# Rendering and publishing need only the base install (no torch).
VENV = ["--system-site-packages"]


def install(session: nox.Session, *groups: str, extras: str = "") -> None:
    """The package (with ``extras``, e.g. "profile") and the dependency groups, in one pip
    call (one resolution instead of one per group)."""
    session.install("-e", f".[{extras}]" if extras else ".", *group_requirements(*groups))


def install_groups(session: nox.Session, *groups: str) -> None:
    session.install(*group_requirements(*groups))


def extra_requirements(extra: str) -> list[str]:
    return list(PYPROJECT["project"]["optional-dependencies"][extra])


def group_requirements(*groups: str) -> list[str]:
    return [req for group in groups for req in nox.project.dependency_groups(PYPROJECT, group)]


@nox.session(venv_params=VENV)
def tests(session: nox.Session) -> None:
    """Run ruff, mypy and the test suite (CPU only; tiny models built in-process)."""
    # tools: the tools study's HolisticTraceAnalysis is tested for real, not as missing;
    # installed without its jupyterlab requirement, with what it imports (tools-runtime)
    install(session, "test", "lint", "typecheck", "tools-runtime", extras="profile")
    session.install("--no-deps", *extra_requirements("tools"))
    session.run("ruff", "check", ".")  # about a second: every test run checks the code first
    # mypy takes about a minute of one CPU: it runs beside pytest, whose workers leave a CPU
    # idle while the last of them finishes, and its report follows pytest's
    with tempfile.TemporaryFile() as report:
        mypy = subprocess.Popen([os.path.join(session.bin, "mypy"), "reportgen"], stdout=report,
                                stderr=subprocess.STDOUT)
        try:
            # python -m: a pytest on the host (seen through the system site) would not see the
            # venv. tests/conftest.py spreads the tests over the CPUs (pytest-xdist) and leaves
            # the slow ones out unless CI is set or --slow is given; --durations: where the time goes.
            session.run("python", "-m", "pytest", "--durations=25", *session.posargs)
        finally:
            code = mypy.wait()
            report.seek(0)
            session.log("mypy reportgen:\n" + report.read().decode())
    if code:
        session.error(f"mypy reportgen exited {code}")


@nox.session(venv_params=VENV)
def lint(session: nox.Session) -> None:
    """Check the code with ruff (the rules are in pyproject.toml)."""
    install_groups(session, "lint")
    session.run("ruff", "check", *(session.posargs or ["."]))


@nox.session(venv_params=VENV)
def typecheck(session: nox.Session) -> None:
    """Type-check the package with mypy (settings in pyproject.toml)."""
    install(session, "typecheck", extras="profile")
    session.run("mypy", *(session.posargs or ["reportgen"]))


@nox.session(venv_params=VENV)
def report(session: nox.Session) -> None:
    """Profile the default suite for this host, render the pages, build the site."""
    install(session, extras="profile")
    session.run("reportgen", "profile", *session.posargs)
    session.run("reportgen", "render", "--runs", "runs", "--docs", "docs")
    session.run("reportgen", "check", "--runs", "runs")
    session.run("python", "-m", "mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(venv_params=VENV, default=False)
def bench(session: nox.Session) -> None:
    """Validate the numbers against independent references; writes bench/<host>.json."""
    install(session, extras="profile")
    session.run("python", "scripts/bench.py", *session.posargs)


@nox.session(venv_params=VENV, default=False)
def history(session: nox.Session) -> None:
    """Measure the history suite once per torch and transformers release (reportgen history)."""
    install(session, extras="profile")
    session.run("reportgen", "history", *(session.posargs or ["--releases", "last:6"]))


@nox.session(venv_params=VENV, default=False)
def serve(session: nox.Session) -> None:
    """Render the committed runs and preview the site with live reload."""
    install(session)
    session.run("reportgen", "render", "--runs", "runs", "--docs", "docs")
    session.run("python", "-m", "mkdocs", "serve", "-a", "127.0.0.1:8000", *session.posargs,
                env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(venv_params=VENV, default=False)
def publish(session: nox.Session) -> None:
    """Render the committed runs and deploy the site to GitHub Pages (gh-pages branch);
    needs SITE_URL, the site's public address."""
    install(session)
    session.run("python", "-m", "reportgen.render.publish")  # no real SITE_URL: stop here
    session.run("reportgen", "render", "--runs", "runs", "--docs", "docs")
    session.run("python", "-m", "mkdocs", "gh-deploy", "--strict", "--force", *session.posargs)
