"""A `reportgen profile` flag value the model cannot take: refused with one line on
stderr, exit 2, before anything is written (the depth and expert flags share it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reportgen import cli


def config_file(tmp_path: Path, data: dict[str, Any], name: str = "m") -> str:
    """``data`` as a model's config.json under ``tmp_path``; its path, a model name."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    return str(folder / "config.json")


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def refused_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], flag: str,
                 value: str) -> str:
    """The one line ``profile --models <data's config> flag value`` is refused with."""
    out = tmp_path / "runs"
    model = config_file(tmp_path, data)
    argv = ["profile", "--models", model, flag, value, "--seq-lens", "8", "--device", "cpu", "--out", str(out)]
    assert cli.main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{flag} {value}" in line
    assert not out.exists()
    return line
