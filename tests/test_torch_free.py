"""The base install (render, check, summary, status, compare) never imports torch or
transformers; without them, measuring commands say what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
RUN = "runs/cpu-amd-epyc-2c/cpu-default-c11f32ec"

READ_SIDE = f"""
import sys
from reportgen.cli import main

docs = sys.argv[1]
codes = [
    main(["render", "--runs", "runs", "--docs", docs, "--no-svg"]),
    main(["check", "--runs", "runs"]),
    main(["summary", "{RUN}", "--format", "json"]),
    main(["status", "{RUN}"]),
    main(["compare", "{RUN}", "{RUN}", "--format", "markdown"]),
]
loaded = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("CODES", codes, "LOADED", loaded, file=sys.stderr)
sys.exit(1 if loaded else 0)
"""

# torch and transformers made unimportable, as on a base install
WITHOUT_EXTRA = """
import sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
from reportgen.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                          check=False, capture_output=True, text=True, timeout=600)


def test_read_side_commands_never_import_torch(tmp_path: Path) -> None:
    done = _python(READ_SIDE, str(tmp_path / "docs"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOADED []" in done.stderr
    assert "CODES [0, " in done.stderr  # render succeeded
    assert (tmp_path / "docs" / "index.md").is_file()


def test_profile_without_the_extra_says_what_to_install(tmp_path: Path) -> None:
    for command in (["profile", "--suite", "tiny", "--out", str(tmp_path / "runs")], ["env"]):
        done = _python(WITHOUT_EXTRA, *command)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'reportgen[profile]'" in lines[0]
    assert not (tmp_path / "runs").exists()
