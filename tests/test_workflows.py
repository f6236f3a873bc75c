"""Every GitHub workflow passes zizmor's offline audit, and publishing needs a real URL."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from reportgen.errors import UserError
from reportgen.render.publish import check_site_url

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _zizmor() -> str | None:
    # the venv's scripts directory first: `python -m pytest` may run without it on PATH
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        if (Path(scripts) / "zizmor").is_file():
            return str(Path(scripts) / "zizmor")
    return shutil.which("zizmor")


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_zizmor_finds_nothing(workflow: Path) -> None:
    zizmor = _zizmor()
    if zizmor is None:
        pytest.skip("zizmor is not installed (it is in the test dependency group)")
    done = subprocess.run([zizmor, "--offline", "--no-progress", str(workflow)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflows_exist() -> None:
    assert WORKFLOWS


@pytest.mark.parametrize("url", [None, "", "http://127.0.0.1:8000/", "http://localhost/",
                                 "ftp://example.org/", "file:///tmp/site"])
def test_publishing_refuses_a_local_site_url(url: str | None) -> None:
    with pytest.raises(UserError):
        check_site_url(url)


def test_publishing_accepts_a_public_site_url() -> None:
    assert check_site_url("https://example.github.io/reportgen/")
