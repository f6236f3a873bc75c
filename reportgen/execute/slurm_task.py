"""One array task of the Slurm executor, on its compute node: :func:`task_main`.

submitit pickles :func:`task_main` (by reference: this module is imported on the node) with
the suite and the flags. The task records the node's environment, opens the run directory
of the node's hardware and measures with the local machinery (one supervised worker per
CPU, or per GPU the task was given) over the combinations of that directory that have no
record. Tasks coordinate only through the run directory (``plan.Claims``); with
``--force`` or ``--retry-failed`` a record written by this submission counts as done, so
the tasks of one array never measure a combination twice. Every task writes run.json
(last writer wins), and SIGTERM from Slurm (scancel, time limit, preemption) leaves the
combination being measured pending, never ``failed``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from reportgen.execute import plan
from reportgen.execute.console import Progress
from reportgen.execute.job import Job
from reportgen.execute.local import LocalExecutor
from reportgen.execute.record import git_of, run_record
from reportgen.execute.supervisor import Outcome, Supervisor
from reportgen.records.stamps import utc_now
from reportgen.records.status import FAILED, RUNNING
from reportgen.records.store import RunStore
from reportgen.suite import Suite

CANCEL_GRACE_S = 2.0      # a worker killed by SIGTERM: how long to wait for the task's own SIGTERM


class TaskCancelled(BaseException):
    """Slurm stopped this task (scancel, time limit, preemption): the combination being
    measured stays pending, never ``failed``. A BaseException, like KeyboardInterrupt."""


def after(stamp: Any, since: str) -> bool:
    """Whether the ISO time ``stamp`` is at or after ``since``; False when either is not one."""
    try:
        return _dt.datetime.fromisoformat(str(stamp)) >= _dt.datetime.fromisoformat(since)
    except ValueError:
        return False


@dataclass
class _SubmissionJob(Job):
    """A Job that, with ``--force`` or ``--retry-failed``, counts a record measured by this
    submission as done, so the tasks of one array never measure a combination twice."""

    submitted_at: str = ""
    array_job_id: str | None = None

    def still_wanted(self, combo: Any) -> bool:
        if measured_by_submission(self.store, combo.id, self.submitted_at, self.array_job_id):
            return False
        return super().still_wanted(combo)


def measured_by_submission(store: RunStore, combo_id: str, submitted_at: str, array_job_id: str | None) -> bool:
    """A record started after the submission, or by a task of this job array (which no
    clock skew between nodes can hide)."""
    record = plan.read_record(store.run_dir, combo_id)
    if record is None:  # none, or unreadable: measured again
        return False
    slurm = (record.get("execution") or {}).get("slurm") or {}
    if array_job_id is not None and str(slurm.get("array_job_id") or slurm.get("job_id")) == array_job_id:
        return True
    return after(record.get("started"), submitted_at)


class _TaskSupervisor(Supervisor):
    """Slurm stops a task with SIGTERM to every process of it, workers included. A worker
    killed that way was interrupted, not failed: once this task's own SIGTERM handler has
    run, the combination is left pending (no ``failed`` record) instead."""

    def __init__(self, *args: Any, cancelled: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cancelled = cancelled

    def run(self, task: Mapping[str, Any]) -> Outcome:
        outcome = super().run(task)
        if (outcome.status == FAILED and outcome.execution.get("worker_exit") == -signal.SIGTERM
                and self.cancelled.wait(CANCEL_GRACE_S)):
            raise TaskCancelled("Slurm stopped this task")
        return outcome


def _task_gpus(device: str, environ: Mapping[str, str]) -> list[int] | None:
    """Every GPU this task was given (Slurm sets CUDA_VISIBLE_DEVICES), one worker each."""
    if device != "cuda":
        return None
    visible = [v for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        count = len(visible)
    else:
        import torch

        count = int(torch.cuda.device_count())
    if count == 0:
        raise RuntimeError("this Slurm task has no GPU (CUDA_VISIBLE_DEVICES is empty and torch sees none)")
    return list(range(count))


def task_main(out: Path, suite: Suite, *, measure: str, preflight: str | None, timeout_s: float | None,
              force: bool, retry_failed: bool, submitted_at: str, command: str) -> dict[str, Any]:
    """One array task on its node: measure what its hardware's run directory still lacks."""
    from reportgen.execute import runner
    from reportgen.execute.devices import worker_specs

    device = suite.settings.device
    environment = {**runner.collect_environment(device), "seeds": {"suite": suite.settings.seed}}
    store = RunStore(out, runner.hardware_slug(environment), suite)
    if force:  # a finished run is never modified: the submission's own new run
        store = store.forced_run(submitted_at)
    combos = suite.combinations()
    me = plan.owner()
    slurm_ids = me.get("slurm") or {}
    array_job_id = slurm_ids.get("array_job_id") or slurm_ids.get("job_id")
    label = f"{array_job_id}_{slurm_ids['array_task_id']}" if "array_task_id" in slurm_ids else array_job_id
    gpus = _task_gpus(device, os.environ)
    specs = worker_specs(device, gpus, gpu_count=len(gpus or []), measure=measure, preflight=preflight)
    previous = store.read_run()
    started = previous.get("started", utc_now()) if previous else utc_now()
    execution = {"executor": "slurm", "job_id": array_job_id, "tasks": _int(os.environ.get("SLURM_ARRAY_TASK_COUNT")),
                 "submitted": submitted_at, "workers": [spec.slot for spec in specs], "updated_by": label}
    todo = [c for c in plan.todo(store, combos, force=force, retry_failed=retry_failed)
            if not measured_by_submission(store, c.id, submitted_at, array_job_id)]
    job = _SubmissionJob(store=store, todo=todo, settings=suite.settings, git=git_of(environment),
                         retry_failed=retry_failed, force=force, executor="slurm",
                         submitted_at=submitted_at, array_job_id=array_job_id)
    write = partial(_write_run, store, suite, command=command, environment=environment, started=started,
                    execution=execution)
    if todo:
        write(None)
    cancelled = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough; cleaning up must finish
        cancelled.set()
        raise TaskCancelled(f"Slurm stopped this task ({signal.Signals(signum).name})")

    before = signal.signal(signal.SIGTERM, on_sigterm)
    ending = "ended"
    try:
        try:
            executor = LocalExecutor(specs, timeout_s=timeout_s or runner.default_timeout(suite.settings),
                                     supervisor=partial(_TaskSupervisor, cancelled=cancelled))
            with Progress(len(combos), len(todo), len(combos) - len(todo), enabled=True) as progress:
                executor.run(job, progress)
        except BaseException as exc:
            if isinstance(exc, (TaskCancelled, KeyboardInterrupt, SystemExit)) or _submitit_stop(exc):
                ending = "interrupted"  # cancelled, timed out or preempted: what ran stays pending
            raise
        finally:
            write(ending, measured=bool(job.records))
    except TaskCancelled as exc:
        print(f"reportgen: {exc} after {len(job.records)} combinations; the one it was measuring stays pending",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM) from None  # one line in the task's log, not a traceback
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, before)
    counts: dict[str, int] = {}
    for record in job.records:
        counts[record["status"]] = counts.get(record["status"], 0) + 1
    return {"run_dir": str(store.run_dir), "run_id": store.run_id, "task": label,
            "host": me["host"], "measured": counts}


def _submitit_stop(exc: BaseException) -> bool:
    """submitit's handler of Slurm's warning signal (time limit, preemption) raises this."""
    try:
        from submitit.core.utils import UncompletedJobError
    except ImportError:
        return False
    return isinstance(exc, UncompletedJobError)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _write_run(store: RunStore, suite: Suite, ending: str | None, *, command: str,
               environment: Mapping[str, Any], started: str, execution: Mapping[str, Any],
               measured: bool = True) -> None:
    """run.json from one of many tasks: atomically, last writer wins, counts from the records.

    ``ending`` None: starting (status running). Otherwise this task is done: the run ends
    (complete, incomplete, interrupted) unless another process still holds a claim, in
    which case it stays running and that process writes the end. A writer that decided
    "running" may land after the last task's final write, so each writer checks the
    claims again after writing and rewrites when its decision no longer holds.
    """
    ids = [c.id for c in suite.combinations()]
    claims = plan.Claims(store.run_dir)

    def held() -> bool:
        return any(combo_id in ids for combo_id in claims.live())

    for _ in range(3):
        busy = ending is None or held()
        state = RUNNING if busy else str(ending)
        record = run_record(store, suite, command=command, environment=environment, started=started, state=state,
                            finished=None if busy else utc_now(), execution=execution)
        previous = store.read_run()
        if (not measured and previous is not None and previous.get("status") == record["status"]
                and previous.get("counts") == record["counts"]):
            return  # nothing measured and nothing changed: keep the record as it was
        store.write_run(record)
        if ending is None or held() == busy:
            return
