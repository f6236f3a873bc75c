"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from slurm_cluster import SlurmCluster, skip_reason

from reportgen.schema import VALIDATE_ENV

# Every record any test writes through reportgen.store (in this process, its workers and
# the CLI subprocesses, which inherit the environment) is checked against its JSON Schema.
os.environ[VALIDATE_ENV] = "1"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real one-node Slurm cluster on this host (see tests/slurm_cluster.py), started
    once per session; skips where Slurm/munge are not installed or we are not root.

    Subprocesses find it with ``env=slurm_cluster.env``; code that runs the clients
    itself (submitit) after ``slurm_cluster.apply_env(monkeypatch)``.
    """
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster() as cluster:
        yield cluster
