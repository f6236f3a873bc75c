"""Run a validated suite: plan what is left, hand it to an executor, keep run.json current.

Resume is the default: a combination with a readable record is not measured again
(``retry_failed`` measures the failed ones again: a failed record holds no measurement).
A finished run is never modified: ``force`` measures the whole suite again as a new run
(``<suite>-<hash8>-<UTC stamp>``), leaving the earlier ones as they are. The executor
measures (``reportgen.execute``): by default one supervised worker process per device,
so a crash, hang or poisoned device costs one combination, recorded ``failed`` with its
reason. Ctrl-C stops between writes: finished records stay, run.json says
``interrupted``, and the KeyboardInterrupt goes up to the CLI (exit 130).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reportgen.execute import plan
from reportgen.execute.console import Progress
from reportgen.execute.devices import MEASURE, PREFLIGHT, worker_specs
from reportgen.execute.job import Job
from reportgen.execute.record import environment_differences, git_of, run_record
from reportgen.records.stamps import utc_now
from reportgen.records.status import FAILED, INTERRUPTED, RUNNING
from reportgen.records.store import RunStore
from reportgen.suite import Settings, Suite

# A combination's worker is stopped after this long; at least TIMEOUT_FLOOR_S, else this
# many times the suite's timing budget (build, warm-up, timing, profiled pass, FLOPs).
TIMEOUT_FLOOR_S = 900.0
TIMEOUT_BUDGETS = 120.0


def default_timeout(settings: Settings) -> float:
    return max(TIMEOUT_FLOOR_S, TIMEOUT_BUDGETS * settings.budget_s)


class Executor(Protocol):
    name: str

    def run(self, job: Job, progress: Progress) -> None: ...


def resolve_device(requested: str) -> str:
    """``auto`` -> cuda or cpu; ``cuda`` without a GPU is a UserError."""
    if requested == "cpu":
        return "cpu"  # no torch import needed to know that
    from reportgen.profile.env import resolve_device as env_resolve

    return env_resolve(requested)


def collect_environment(device: str, before_probe: Callable[[], None] | None = None) -> dict[str, Any]:
    from reportgen.profile import env

    return env.collect(device, before_probe=before_probe)


def hardware_slug(environment: Mapping[str, Any]) -> str:
    from reportgen.profile import env

    return env.hardware_slug(environment)


@dataclass
class RunResult:
    store: RunStore
    records: list[dict[str, Any]] = field(default_factory=list)  # this invocation's
    resumed: list[str] = field(default_factory=list)  # ids already done before
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(1 for r in self.records if r["status"] == status)


def local_executor(suite: Suite, *, devices: list[int] | None = None, gpu_count: int = 0,
                   timeout_s: float | None = None, python: str = sys.executable) -> Executor:
    """Supervised workers on this host, each importing ``MEASURE`` and ``PREFLIGHT``
    ("module:function" paths; tests point them at fakes), run by ``python`` (another
    interpreter: a virtual environment with other torch and transformers releases)."""
    from reportgen.execute.local import LocalExecutor

    specs = worker_specs(suite.settings.device, devices, gpu_count=gpu_count, measure=MEASURE,
                         preflight=PREFLIGHT)
    return LocalExecutor(specs, timeout_s=timeout_s or default_timeout(suite.settings), python=python)


def run_suite(
    suite: Suite,
    *,
    out: str | Path,
    force: bool = False,
    retry_failed: bool = False,
    command: str = "",
    executor: Executor | None = None,
    measure: Callable[..., Any] | None = None,
    environment: Mapping[str, Any] | None = None,
    hardware: str | None = None,
    show_progress: bool = True,
    release: Mapping[str, str] | None = None,
) -> RunResult:
    """Measure every combination of ``suite`` not yet done under ``out``.

    ``executor`` defaults to the local one (supervised workers); ``measure`` (a callable)
    runs in this process instead, without isolation. ``suite`` must be validated;
    ``auto`` is resolved here if the caller has not. ``release`` (a history's release
    set, ``{"torch": ..., "transformers": ...}``): the run is its own series
    (``<suite>-<hash8>-torch<version>-transformers<version>``) and its run.json says which
    release set it measured, so runs of several releases never pool.
    """
    if suite.settings.device == "auto":
        suite = suite.with_device(resolve_device("auto"))
    combos = suite.combinations()
    if executor is None:
        if measure is not None:
            from reportgen.execute.inline import InlineExecutor

            executor = InlineExecutor(measure, device=suite.settings.device)
        else:
            executor = local_executor(suite)
    # the workers' fork server imports torch and the models while this process collects
    # its environment; the CPU probe waits for it, so that it measures a quiet CPU
    start_early = getattr(executor, "start_early", None)
    if start_early is not None:
        start_early(combos)
    try:
        return _run(suite, combos, executor, out=out, force=force, retry_failed=retry_failed, command=command,
                    environment=environment, hardware=hardware, show_progress=show_progress, release=release)
    finally:
        release_early = getattr(executor, "release", None)
        if release_early is not None:
            release_early()


def _run(suite: Suite, combos: list[Any], executor: Executor, *, out: str | Path, force: bool,
         retry_failed: bool, command: str, environment: Mapping[str, Any] | None, hardware: str | None,
         show_progress: bool, release: Mapping[str, str] | None) -> RunResult:
    if environment is None:
        environment = collect_environment(suite.settings.device, getattr(executor, "wait_started", None))
    environment = {**environment, "seeds": {"suite": suite.settings.seed}}
    base = None
    if release is not None:
        from reportgen.records.releases import run_base

        base = run_base(suite.name, suite.hash, release)
    store = RunStore(out, hardware or hardware_slug(environment), suite, base=base)
    if force and store.read_run() is not None:
        store = store.new_run()
    elif (earlier := store.read_run()) is not None:
        # only what this environment measured is resumed or reused
        differs = environment_differences(earlier.get("environment") or {}, environment)
        if differs:
            earlier_id, store = store.run_id, store.new_run()
            if show_progress:
                print(f"{earlier_id} was measured under {', '.join(differs)}: measuring a new run, "
                      f"{store.run_id}", file=sys.stderr)
    previous = store.read_run()
    started = previous.get("started", utc_now()) if previous else utc_now()
    execution = {"executor": executor.name,
                 "workers": [spec.slot for spec in getattr(executor, "specs", [])] or None}

    def write_run(state: str, finished: str | None) -> None:
        store.write_run(run_record(store, suite, command=command, environment=environment, started=started,
                                   state=state, finished=finished, execution=execution, release=release))

    result = RunResult(store=store)
    todo = plan.todo(store, combos, force=force, retry_failed=retry_failed)
    waiting = {c.id for c in todo}
    result.resumed = [c.id for c in combos if c.id not in waiting]
    if previous and not todo:
        # nothing measured now: the run keeps the environment its records were measured in
        if show_progress:
            failed = sum(1 for e in plan.states(store.run_dir, [c.id for c in combos]) if e.state == FAILED)
            hint = f"; {failed} failed (--retry-failed measures them again)" if failed else ""
            print(f"nothing to measure: all {len(combos)} combinations of {store.run_id} are done{hint} "
                  "(a finished run is kept as it is; --force measures the suite again as a new run)",
                  file=sys.stderr)
        return result
    write_run(RUNNING, None)
    job = Job(store=store, todo=todo, settings=suite.settings, git=git_of(environment),
              retry_failed=retry_failed, force=force, executor=executor.name, records=result.records)
    with Progress(len(combos), len(todo), len(result.resumed), enabled=show_progress) as progress:
        try:
            executor.run(job, progress)
        except KeyboardInterrupt:
            result.interrupted = True
            write_run(INTERRUPTED, utc_now())
            raise
    write_run("ended", utc_now())
    return result
