"""The `slurm_cluster` fixture: a real one-node Slurm cluster runs jobs, arrays, cancellations
and submitit jobs. Skipped where Slurm and munge are not installed (see tests/support/slurm.py)."""

from __future__ import annotations

import math
import operator
import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.slurm import SlurmCluster, wait_until

pytestmark = pytest.mark.slow


def test_sinfo_shows_the_node_idle(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.wait_for_node("idle", timeout=30)
    out = slurm_cluster.run(["sinfo", "-h", "-o", "%P %T %c %N"]).stdout.split()
    assert out == ["debug*", "idle", str(os.cpu_count()), slurm_cluster.hostname]


def test_sbatch_wrap_job_writes_a_file(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", f"--output={tmp_path}/slurm-%j.out",
                               "--wrap", 'echo "job $SLURM_JOB_ID on $SLURMD_NODENAME" > written.txt')
    slurm_cluster.wait_job(job, timeout=60)
    assert (tmp_path / "written.txt").read_text() == f"job {job} on {slurm_cluster.hostname}\n"


def test_job_array_runs_two_tasks_concurrently(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs")
    # A barrier: each task marks its start and waits (30 s at most) for the other's mark,
    # so both succeed only if both run at once, one CPU each.
    script = (
        "touch started.$SLURM_ARRAY_TASK_ID\n"
        "for i in $(seq 300); do\n"
        "  if [ -e started.0 ] && [ -e started.1 ]; then echo together > done.$SLURM_ARRAY_TASK_ID; exit 0; fi\n"
        "  sleep 0.1\n"
        "done\n"
        "exit 1\n"
    )
    job = slurm_cluster.sbatch("--array=0-1", "--cpus-per-task=1", f"--chdir={tmp_path}",
                               f"--output={tmp_path}/slurm-%A_%a.out", "--wrap", script)
    slurm_cluster.wait_job(job, timeout=90)
    assert sorted(p.name for p in tmp_path.glob("done.*")) == ["done.0", "done.1"]


def test_scancel_ends_a_running_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", f"--output={tmp_path}/slurm-%j.out",
                               "--wrap", "touch running; sleep 600")
    wait_until(lambda: slurm_cluster.job_states(job) == ["RUNNING"] and (tmp_path / "running").exists(),
               f"job {job} to run", timeout=60, cluster=slurm_cluster)
    slurm_cluster.run(["scancel", job])
    assert slurm_cluster.wait_job(job, timeout=60, states=["CANCELLED"]) == "CANCELLED"


def test_sacct_reports_job_states(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    if not slurm_cluster.accounting:
        pytest.skip("no slurmdbd/MariaDB installed: sacct says 'Slurm accounting storage is disabled'")
    job = slurm_cluster.sbatch(f"--chdir={tmp_path}", f"--output={tmp_path}/slurm-%j.out", "--wrap", "true")
    slurm_cluster.wait_job(job, timeout=60)

    def sacct_state() -> str:
        out = slurm_cluster.run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,State"]).stdout
        return dict(line.split("|") for line in out.splitlines()).get(job, "")

    # slurmctld sends job records to slurmdbd asynchronously.
    assert wait_until(lambda: sacct_state() == "COMPLETED", f"sacct to show job {job} COMPLETED",
                      timeout=30, cluster=slurm_cluster)


# --- submitit -------------------------------------------------------------------------


def submitit_executor(slurm_cluster: SlurmCluster, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    submitit = pytest.importorskip("submitit")
    # submitit runs sbatch/squeue/sacct/scancel itself, with os.environ.
    slurm_cluster.apply_env(monkeypatch)
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(timeout_min=5, slurm_partition=slurm_cluster.partition, cpus_per_task=1)
    return executor


def result_within(job: Any, timeout: float, cluster: SlurmCluster) -> Any:
    wait_until(job.done, f"submitit job {job.job_id}", timeout=timeout, cluster=cluster)
    return job.result()


def test_submitit_job_returns_its_result(slurm_cluster: SlurmCluster, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    executor = submitit_executor(slurm_cluster, tmp_path / "submitit", monkeypatch)
    job = executor.submit(math.factorial, 5)
    assert result_within(job, 90, slurm_cluster) == 120
    jobs = executor.map_array(operator.mul, [1, 2], [3, 4])
    assert [result_within(j, 90, slurm_cluster) for j in jobs] == [3, 8]


def test_submitit_reports_an_exception_raised_in_the_job(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    executor = submitit_executor(slurm_cluster, tmp_path / "submitit", monkeypatch)
    from submitit.core.utils import FailedJobError

    job = executor.submit(math.sqrt, -1)
    with pytest.raises(FailedJobError, match="math domain error"):
        result_within(job, 90, slurm_cluster)


def test_submitit_sees_a_cancelled_job_end(slurm_cluster: SlurmCluster, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that dies without writing its result is 'done' only through sacct's state."""
    executor = submitit_executor(slurm_cluster, tmp_path / "submitit", monkeypatch)
    if not slurm_cluster.accounting:
        pytest.skip("no slurmdbd/MariaDB installed: submitit cannot see a job end without sacct")
    job = executor.submit(time.sleep, 600)
    wait_until(lambda: slurm_cluster.job_states(job.job_id) == ["RUNNING"], f"job {job.job_id} to run",
               timeout=60, cluster=slurm_cluster)
    job.cancel()
    wait_until(lambda: job.done(force_check=True), f"submitit to see job {job.job_id} end",
               timeout=60, cluster=slurm_cluster)
    assert job.state.startswith("CANCELLED")
