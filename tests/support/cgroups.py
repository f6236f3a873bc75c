"""Memory cgroups of a test's own, for the tests where the kernel's OOM killer really ends
a measuring process (skipped where this host cannot make one)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from reportgen.execute import memory


def _memory_cgroup_parent() -> tuple[Path | None, str]:
    if os.geteuid() != 0:
        return None, "making a memory cgroup needs root"
    v1 = memory.CGROUP_ROOT / "memory"
    if (v1 / "cgroup.procs").is_file() and os.access(v1, os.W_OK):
        return v1, ""
    return None, "no writable cgroup v1 memory hierarchy on this host"


# the kernel's OOM-kill counter sometimes stays still under load; the limit hit does not
CGROUP_OOM = re.compile(r"; its memory cgroup \(limit 0\.2 GiB\) (recorded an OOM kill|hit its limit): "
                        r"out of memory$")


@contextlib.contextmanager
def limited_memory_cgroup(name: str) -> Iterator[Path]:
    """A memory cgroup of its own with a 256 MiB limit (the test is skipped where none can be made)."""
    parent, why = _memory_cgroup_parent()
    if parent is None:
        pytest.skip(why)
    group = parent / f"{name}-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(256 * 1024**2))
        yield group
    finally:
        group.rmdir()
