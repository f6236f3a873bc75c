"""The Slurm executor (``--executor slurm``): one job array, submitted through submitit.

Every array task runs :func:`reportgen.execute.slurm_task.task_main` on its node: it
measures, with the local machinery, the combinations of its hardware's run directory that
have no record. Tasks coordinate only through the run directory (``plan.Claims``), so the
tasks of one array, a resubmission and a local run never measure one combination twice,
and a resubmission measures only what is missing.

The submitting process validates everything before it submits (nothing is written or
submitted on a bad flag), then either waits, showing the tasks' states and the records as
they appear, or (``--no-wait``) prints the job id and how to follow it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Self

from reportgen.errors import UserError
from reportgen.execute import plan
from reportgen.execute.slurm_task import after, task_main
from reportgen.records.schema import load_run
from reportgen.records.stamps import utc_now
from reportgen.records.status import COMBINATION_STATUSES, FAILED, PENDING, PLAN_STATES, RUNNING
from reportgen.records.store import run_names
from reportgen.suite import Suite

DEFAULT_TIME_MIN = 60     # a task stopped by its time limit keeps every record; rerun to resume
GPU_TASKS_MAX = 8         # default array size on a GPU suite: min(pending combinations, this)
CPU_TASKS = 1             # default on a CPU suite: see _default_tasks
POLL_S = 2.0              # how often the waiting display reads records and job states
NO_WAIT_GRACE_S = 30.0    # --no-wait: how long to let started tasks name their run directory
SINFO_TIMEOUT_S = 30.0
UNSEEN_AFTER_S = 60.0     # a task in neither squeue nor sacct this long after submission has ended
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}

# sbatch flags reportgen sets itself (submitit's plumbing) or that have their own --slurm-* flag
_RESERVED = {"array": "--slurm-tasks", "output": None, "error": None, "open-mode": None, "signal": None,
             "partition": "--slurm-partition", "account": "--slurm-account", "time": "--slurm-time",
             "gpus-per-task": "--slurm-gpus-per-task", "constraint": "--slurm-constraint",
             "exclusive": "--slurm-exclusive", "cpus-per-task": "--slurm-cpus-per-task", "mem": "--slurm-mem",
             "job-name": None}
_TIME_RE = re.compile(r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")
_MEM_RE = re.compile(r"^(?P<n>\d+)(?P<unit>[KMGT]?)B?$", re.IGNORECASE)
_FLAG_RE = re.compile(r"^[a-z][a-z0-9-]*$")


# --- options ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SlurmOptions:
    """The ``--slurm-*`` flags and ``--no-wait``, validated."""

    partition: str | None = None
    account: str | None = None
    time_min: int = DEFAULT_TIME_MIN
    gpus_per_task: int | None = None
    constraint: str | None = None
    exclusive: bool = False
    tasks: int | None = None  # None: the default for the suite's device
    cpus_per_task: int | None = None
    mem: str | None = None
    sbatch: tuple[tuple[str, str | bool], ...] = ()
    wait: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SlurmOptions:
        return cls(
            partition=_text(args.slurm_partition, "--slurm-partition"),
            account=_text(args.slurm_account, "--slurm-account"),
            time_min=DEFAULT_TIME_MIN if args.slurm_time is None else parse_time(args.slurm_time),
            gpus_per_task=_positive(args.slurm_gpus_per_task, "--slurm-gpus-per-task"),
            constraint=_text(args.slurm_constraint, "--slurm-constraint"),
            exclusive=bool(args.slurm_exclusive),
            tasks=_positive(args.slurm_tasks, "--slurm-tasks"),
            cpus_per_task=_positive(args.slurm_cpus_per_task, "--slurm-cpus-per-task"),
            mem=None if args.slurm_mem is None else parse_mem(args.slurm_mem),
            sbatch=tuple(parse_sbatch(item) for item in args.slurm_sbatch or ()),
            wait=not args.no_wait,
        )

    def parameters(self, *, tasks: int, gpus_per_task: int | None, name: str) -> dict[str, Any]:
        """``AutoExecutor.update_parameters`` keywords for an array of ``tasks`` tasks."""
        params: dict[str, Any] = {"name": name, "timeout_min": self.time_min, "slurm_array_parallelism": tasks}
        optional = {"slurm_partition": self.partition, "slurm_account": self.account,
                    "slurm_gpus_per_task": gpus_per_task, "slurm_constraint": self.constraint,
                    "cpus_per_task": self.cpus_per_task, "slurm_mem": self.mem,
                    "slurm_exclusive": True if self.exclusive else None,
                    "slurm_additional_parameters": dict(self.sbatch) or None}
        params.update({key: value for key, value in optional.items() if value is not None})
        return params


def _text(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise UserError(f"{flag}: empty")
    return value.strip()


def _positive(value: str | None, flag: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise UserError(f"{flag}: {value!r} is not a whole number") from None
    if number <= 0:
        raise UserError(f"{flag}: must be at least 1, not {value}")
    return number


def parse_time(text: str) -> int:
    """Minutes from ``--slurm-time``: minutes, or Slurm's MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    match = _TIME_RE.match(text.strip())
    if match is None:
        raise UserError(f"--slurm-time: {text!r} is not minutes or a Slurm time (MM:SS, HH:MM:SS, D-HH:MM:SS)")
    days, a, b, c = (int(v) if v is not None else None for v in match.group("days", "a", "b", "c"))
    assert a is not None
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = a * 3600 + (b or 0) * 60 + c
    else:  # MM, MM:SS
        seconds = a * 60 + (b or 0)
    if seconds <= 0:
        raise UserError(f"--slurm-time: must be more than 0, not {text}")
    return math.ceil(seconds / 60)


def parse_mem(text: str) -> str:
    """``--slurm-mem`` as sbatch's ``--mem`` takes it: a number of MB, or with K, M, G or T."""
    match = _MEM_RE.match(text.strip())
    if match is None:
        raise UserError(f"--slurm-mem: {text!r} is not a size like 16G or 16000 (MB)")
    if int(match["n"]) <= 0:
        raise UserError(f"--slurm-mem: must be more than 0, not {text} (Slurm's --mem=0, every MB of the node, "
                        "goes through --slurm-sbatch mem=0)")
    return f"{int(match['n'])}{match['unit'].upper()}"


def parse_sbatch(item: str) -> tuple[str, str | bool]:
    """``--slurm-sbatch FLAG=VALUE`` (or a bare FLAG) -> (flag, value) for submitit."""
    key, sep, value = item.partition("=")
    key = key.strip().lstrip("-").replace("_", "-").lower()
    if not _FLAG_RE.match(key):
        raise UserError(f"--slurm-sbatch: {item!r} is not FLAG=VALUE (an sbatch long option without its dashes)")
    if key in _RESERVED and not (key == "mem" and value.strip() == "0"):
        own = _RESERVED[key]
        raise UserError(f"--slurm-sbatch: {key} " + (f"has its own flag: {own}" if own else "is set by reportgen"))
    if sep and not value.strip():
        raise UserError(f"--slurm-sbatch: {key}= has no value")
    return key, value.strip() if sep else True


def default_suite_name(device: str, gpus_per_task: str | None) -> str:
    """The default suite on the nodes, not this host: gpu-default when GPUs are asked for."""
    return "gpu-default" if gpus_per_task is not None or device == "cuda" else "cpu-default"


def resolve_device(device: str, options: SlurmOptions) -> tuple[str, int | None]:
    """(device, GPUs per task). ``auto`` is settled here, not on the nodes, because the
    device is part of the suite hash every task must agree on: cuda when GPUs are asked for."""
    if device == "auto":
        device = "cuda" if options.gpus_per_task else "cpu"
    if device == "cpu":
        if options.gpus_per_task:
            raise UserError("--slurm-gpus-per-task: the suite measures on the cpu (--device cpu); "
                            "its GPUs would sit idle")
        return device, None
    return device, options.gpus_per_task or 1


def _default_tasks(device: str, pending: int) -> int:
    """GPU suites: one task per pending combination, up to GPU_TASKS_MAX. CPU suites: one
    task. A CPU measurement's numbers depend on everything else running on the node's
    cores and memory bandwidth, and Slurm packs array tasks onto one node unless told
    otherwise; more tasks are for ``--slurm-tasks N --slurm-exclusive`` (a node each)."""
    if device == "cuda":
        return max(1, min(pending, GPU_TASKS_MAX))
    return CPU_TASKS


# --- the cluster --------------------------------------------------------------------------

def partitions() -> tuple[list[str], str | None]:
    """(partitions, the default one) from ``sinfo``; a UserError when no cluster answers."""
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UserError("--executor slurm: no Slurm cluster here: sinfo is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--executor slurm: no reachable Slurm cluster: sinfo did not answer within "
                        f"{SINFO_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        message = " ".join((proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").split())
        raise UserError(f"--executor slurm: no reachable Slurm cluster: sinfo: {message}")
    names = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    default = next((name.rstrip("*") for name in names if name.endswith("*")), None)
    return [name.rstrip("*") for name in names], default


def _import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UserError("--executor slurm: needs submitit: pip install 'reportgen[slurm]'") from None
    return submitit


# --- submitting ---------------------------------------------------------------------------

def main(args: argparse.Namespace, suite: Suite, *, out: Path, command: str, timeout_s: float | None,
         show_run: Callable[[Path], None]) -> int:
    """Validate, submit one job array, then wait for it (or not, with ``--no-wait``);
    ``show_run`` prints each run directory's table once every task has ended (the
    ``profile`` command's run table: a command's, so it is passed down, not imported)."""
    from reportgen.execute import runner

    options = SlurmOptions.from_args(args)
    if args.devices is not None:
        raise UserError("--devices: Slurm allocates the GPUs; use --slurm-gpus-per-task")
    device, gpus_per_task = resolve_device(suite.settings.device, options)
    suite = suite.with_device(device)
    submitit = _import_submitit()
    names, default = partitions()
    partition = options.partition or default
    if options.partition is not None and options.partition not in names:
        raise UserError(f"--slurm-partition: no partition {options.partition!r}; sinfo lists: "
                        f"{', '.join(names) or 'none'}")

    combos = suite.combinations()
    name = f"{suite.name}-{suite.hash[:8]}"
    dirs = run_dirs(out, name)
    pending = len(combos) if args.force or not dirs else max(
        sum(1 for e in plan.states(d, [c.id for c in combos])
            if e.record is None or (args.retry_failed and e.state == FAILED)) for d in dirs)
    tasks = options.tasks or _default_tasks(device, pending)
    folder = out / ".slurm" / name
    submitted_at = utc_now()
    task = partial(task_main, out.resolve(), suite, measure=runner.MEASURE, preflight=runner.PREFLIGHT,
                   timeout_s=timeout_s, force=args.force, retry_failed=args.retry_failed,
                   submitted_at=submitted_at, command=command)
    with _created(out, out / ".slurm", folder):
        (out / ".slurm" / ".gitignore").write_text("# submitit's pickles and logs: not results\n*\n")
        try:
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
            executor.update_parameters(**options.parameters(tasks=tasks, gpus_per_task=gpus_per_task,
                                                            name=f"reportgen-{suite.name}"))
            # submitit also prints sbatch's complaint; the UserError below says it once
            with contextlib.redirect_stderr(io.StringIO()), executor.batch():
                jobs = [executor.submit(task) for _ in range(tasks)]
        except submitit.core.utils.FailedJobError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise UserError(f"--executor slurm: sbatch refused the job: {lines[-1] if lines else exc}") from None
        except RuntimeError as exc:  # submitit: "Could not detect srun"
            raise UserError(f"--executor slurm: {exc}") from None
    array_id = jobs[0].job_id.split("_")[0]
    where = f"partition {partition}" if partition else "the default partition"
    print(f"submitted Slurm job {array_id}: {tasks} task{'s' if tasks > 1 else ''} on {where}, "
          f"{len(combos)} combinations of {name} ({device}); task logs in {folder}", flush=True)
    watch = Watch(jobs, out=out, name=name, ids=[c.id for c in combos], submitted_at=submitted_at)
    if not options.wait:
        return _no_wait(watch, array_id)
    return _wait(watch, array_id, show_run)


@contextlib.contextmanager
def _created(*paths: Path) -> Iterator[None]:
    """Make ``paths`` (nested, outermost first); on an error remove the ones made here."""
    made = [p for p in paths if not p.exists()]
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if made:
            shutil.rmtree(made[0], ignore_errors=True)
        raise


def run_dirs(out: Path, name: str) -> list[Path]:
    """The latest run directory of the suite ``name`` (``<suite>-<hash8>``) on each hardware
    under ``out`` (later runs are ``<name>-<stamp>``)."""
    found = []
    for hardware in sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else ():
        names = [n for n in run_names(hardware, name) if (hardware / n / "run.json").is_file()]
        if names:
            found.append(hardware / names[-1])
    return found


# --- watching -----------------------------------------------------------------------------

@dataclass
class Watch:
    """What the submitter sees of a job array: its tasks' states and the run directories."""

    jobs: Sequence[Any]
    out: Path
    name: str
    ids: list[str]
    submitted_at: str
    states: dict[str, str] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def poll_states(self) -> dict[str, str]:
        """Each task's Slurm state: sacct through submitit's watcher, squeue for what
        sacct does not know yet (slurmdbd hears of jobs asynchronously) or at all."""
        watcher = self.jobs[0].watcher
        submitit_log = logging.getLogger("submitit")
        level = submitit_log.level
        submitit_log.setLevel(logging.ERROR)  # no sacct (no accounting): a warning each poll; squeue answers
        try:
            watcher.update()
        finally:
            submitit_log.setLevel(level)
        states = {job.job_id: watcher.get_state(job.job_id, mode="cache") for job in self.jobs}
        if "UNKNOWN" in states.values():
            try:
                out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", self.jobs[0].job_id.split("_")[0],
                                      "-o", "%i %T"], capture_output=True, text=True, timeout=30, check=False).stdout
            except (OSError, subprocess.TimeoutExpired):
                out = ""  # asked again at the next poll
            seen = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
            late = time.monotonic() - self.t0 > UNSEEN_AFTER_S
            for job_id in [j for j, state in states.items() if state == "UNKNOWN"]:
                states[job_id] = seen.get(job_id, "ENDED (in neither squeue nor sacct)" if late else "UNKNOWN")
        for job in self.jobs:  # a result is the surest sign that a task has ended
            if self.result(job) is not None and not self._ended(states[job.job_id]):
                states[job.job_id] = "COMPLETING"
        self.states = states
        return states

    @staticmethod
    def _ended(state: str) -> bool:
        return state.split()[0] in ENDED | {"ENDED"}

    def ended(self, job: Any) -> bool:
        return self._ended(self.states.get(job.job_id, "UNKNOWN"))

    def result(self, job: Any) -> tuple[str, Any] | None:
        """submitit's ("success", task_main's dict) or ("error", traceback); None if none."""
        if not job.paths.result_pickle.exists():
            return None
        from submitit.core.utils import pickle_load

        return pickle_load(job.paths.result_pickle)  # type: ignore[no-any-return]

    def outcome(self, job: Any) -> tuple[bool, str]:
        """(ended normally, reason) of an ended task: its state, and an error's last line."""
        state, result = self.states.get(job.job_id, "UNKNOWN"), self.result(job)
        if result is None or result[0] == "success":
            return result is not None, state
        lines = [line.strip() for line in str(result[1]).splitlines() if line.strip()]
        return False, f"{state}: {lines[-1] if lines else 'error'}"

    def dirs(self) -> list[Path]:
        return run_dirs(self.out, self.name)

    def fresh_dirs(self) -> list[Path]:
        """Run directories whose run.json a task of this submission has written."""
        found = []
        for run_dir in self.dirs():
            with contextlib.suppress(Exception):
                if after(load_run(run_dir).record.get("updated"), self.submitted_at):
                    found.append(run_dir)
        return found

    def status_commands(self) -> list[str]:
        return [f"reportgen status {shlex.quote(str(d))}" for d in self.dirs()]


def _no_wait(watch: Watch, array_id: str) -> int:
    """Print how to follow the job. The run directory depends on the node's hardware, so
    give tasks that start at once a few seconds to name theirs; never wait on a queue."""
    deadline = time.monotonic() + NO_WAIT_GRACE_S
    while time.monotonic() < deadline and not watch.fresh_dirs():
        states = watch.poll_states()
        running = any(s.split()[0] in ("RUNNING", "COMPLETING") for s in states.values())
        if all(watch.ended(job) for job in watch.jobs) or (time.monotonic() - watch.t0 > 3 and not running):
            break
        time.sleep(0.5)
    for line in watch.status_commands():
        print(f"  follow: {line}")
    if not watch.fresh_dirs():
        print(f"  each task writes {watch.out}/<its node's hardware>/{watch.name}/ once it starts; list them "
              f"with: ls -d {shlex.quote(str(watch.out))}/*/{watch.name}*")
    print(f"  stop:   scancel {array_id}")
    return 0


class _Display:
    """One status line (a spinner on a terminal; on a log, a line whenever it changes) and
    a line per combination finished, like the local executor's progress."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.status: Any = None
        self.last = ""

    def __enter__(self) -> Self:
        if self.console.is_terminal:
            self.status = self.console.status("submitted")
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)

    def line(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)
        elif text != self.last:
            self.note(text)
        self.last = text

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _tally(states: Mapping[str, str]) -> str:
    words = {"PENDING": "queued", "RUNNING": "running", "COMPLETING": "running"}
    counts: dict[str, int] = {}
    for state in states.values():
        word = "ended" if Watch._ended(state) else words.get(state.split()[0], "starting")
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {word}" for word, n in counts.items())


def _wait(watch: Watch, array_id: str, show_run: Callable[[Path], None]) -> int:
    announced: set[tuple[Path, str, str]] = set()  # (run dir, combination, started)
    reported: set[str] = set()
    try:
        with _Display() as display:
            while True:
                states = watch.poll_states()
                dirs, parts = watch.dirs(), []
                for run_dir in dirs:
                    entries = plan.states(run_dir, watch.ids)
                    counts = {s: sum(1 for e in entries if e.state == s) for s in PLAN_STATES}
                    done = sum(counts[s] for s in COMBINATION_STATUSES)
                    label = f"{run_dir.parent.name}: " if len(dirs) > 1 else ""
                    parts.append(f"{label}{done}/{len(entries)} done, {counts[RUNNING]} running, "
                                 f"{counts[PENDING]} pending")
                    new = [e for e in entries if e.record is not None
                           and (run_dir, e.id, str(e.record.get("started"))) not in announced]
                    announced.update((run_dir, e.id, str((e.record or {}).get("started"))) for e in new)
                    new = [e for e in new if after((e.record or {}).get("started"), watch.submitted_at)]
                    for i, entry in enumerate(new, start=done - len(new) + 1):
                        display.note(_finished_line(f"{label}[{i}/{len(entries)}]", entry.id, entry.record or {}))
                for job in watch.jobs:
                    if watch.ended(job) and job.job_id not in reported:
                        reported.add(job.job_id)
                        normal, reason = watch.outcome(job)
                        if not normal:
                            display.note(f"task {job.job_id} ended {reason}; its log: {job.paths.stderr}")
                display.line(f"Slurm job {array_id}: tasks {_tally(states)}; "
                             + ("; ".join(parts) or "waiting for a task to start"))
                if all(watch.ended(job) for job in watch.jobs):
                    break
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(f"stopped waiting; Slurm job {array_id} goes on (scancel {array_id} stops it)", file=sys.stderr)
        for line in watch.status_commands():
            print(f"  follow: {line}", file=sys.stderr)
        raise
    return _report(watch, array_id, show_run)


def _finished_line(prefix: str, combo_id: str, record: Mapping[str, Any]) -> str:
    median = (record.get("timing") or {}).get("median")
    detail = f"{median:.4g} ms" if isinstance(median, (int, float)) else (record.get("reason") or "")
    task = plan.slurm_label((record.get("execution") or {}).get("slurm")) or "?"
    return (f"{prefix} {combo_id}: {record['status']} {detail} "
            f"({float(record.get('duration_s') or 0):.1f} s, task {task})")


def _report(watch: Watch, array_id: str, show_run: Callable[[Path], None]) -> int:
    """After every task has ended: each run directory's table; non-zero when combinations
    are left without a record, with what stopped the tasks that ended abnormally."""
    written = {Path(r[1]["run_dir"]) for job in watch.jobs if (r := watch.result(job)) and r[0] == "success"}
    dirs = sorted(set(watch.fresh_dirs()) | {d for d in written if (d / "run.json").is_file()})
    left = 0
    for run_dir in dirs:
        show_run(run_dir)
        left += sum(1 for e in plan.states(run_dir, watch.ids) if e.record is None)
    for job in watch.jobs:
        normal, reason = watch.outcome(job)
        if not normal:
            after = "the other tasks measured everything" if dirs and not left else f"its log: {job.paths.stderr}"
            print(f"task {job.job_id} ended {reason}; {after}", file=sys.stderr)
    if dirs and not left:
        return 0
    if not dirs:
        print(f"Slurm job {array_id}: no task wrote a run directory", file=sys.stderr)
    else:
        print(f"{left} combinations left without a record; rerun the same command to measure them "
              f"({', '.join(watch.status_commands())} shows them)", file=sys.stderr)
    return 1
