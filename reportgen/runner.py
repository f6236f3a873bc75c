"""Run a validated suite: one record per combination, written the moment it finishes.

Resume is the default: a combination with a readable record is not measured again
(``force`` re-measures). A ``Skip`` from ``measure`` is recorded as ``skipped``; any other
exception (a CUDA out-of-memory included) as ``failed`` with ``"{type}: {message}"``, and
the suite goes on. Ctrl-C stops between writes: finished records stay, run.json says
``interrupted``, and the KeyboardInterrupt goes up to the CLI (exit 130).
"""

from __future__ import annotations

import datetime as _dt
import gc
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reportgen.errors import Skip
from reportgen.schema import (
    COMBINATION_KIND,
    RUN_KIND,
    SCHEMA_VERSION,
    SECTIONS,
    load_combination,
)
from reportgen.store import RunStore
from reportgen.suite import Combination, Suite


class MeasureFn(Protocol):
    def __call__(
        self,
        combo: Combination,
        *,
        run_dir: Path,
        combo_id: str,
        budget_s: float,
        seed: int,
        profile_iterations: int,
    ) -> Mapping[str, Any]: ...


def load_measure() -> MeasureFn:
    """The real measurement (imports torch); tests replace it."""
    from reportgen.profile.measure import measure

    return measure  # type: ignore[no-any-return]


def resolve_device(requested: str) -> str:
    """``auto`` -> cuda or cpu; ``cuda`` without a GPU is a UserError."""
    if requested == "cpu":
        return "cpu"  # no torch import needed to know that
    from reportgen.profile.env import resolve_device as env_resolve

    return env_resolve(requested)


def collect_environment(device: str) -> dict[str, Any]:
    from reportgen.profile import env

    return env.collect(device)


def hardware_slug(environment: Mapping[str, Any]) -> str:
    from reportgen.profile import env

    return env.hardware_slug(environment)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def git_of(environment: Mapping[str, Any]) -> dict[str, Any]:
    git = environment.get("git") or {}
    return {"commit": git.get("commit"), "dirty": git.get("dirty")}


def combination_record(
    combo: Combination,
    *,
    run_id: str,
    status: str,
    reason: str | None,
    started: str,
    finished: str,
    duration_s: float,
    git: Mapping[str, Any],
    sections: Mapping[str, Any] | None = None,
    error_traceback: str | None = None,
) -> dict[str, Any]:
    """The envelope around what ``measure`` returned; envelope keys always win."""
    record: dict[str, Any] = {
        "kind": COMBINATION_KIND,
        "schema_version": SCHEMA_VERSION,
        "id": combo.id,
        "run_id": run_id,
        "combination": combo.as_dict(),
        "status": status,
        "reason": reason,
        "started": started,
        "finished": finished,
        "duration_s": duration_s,
        "git": dict(git),
    }
    sections = sections or {}
    for name in SECTIONS:
        record[name] = sections.get(name)
    for name, value in sections.items():
        record.setdefault(name, value)  # extra sections measure may add later
    if error_traceback is not None:
        record["traceback"] = error_traceback
    return record


@dataclass
class RunResult:
    store: RunStore
    records: list[dict[str, Any]] = field(default_factory=list)  # this invocation's
    resumed: list[str] = field(default_factory=list)  # ids already done before
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(1 for r in self.records if r["status"] == status)


def _release_memory() -> None:
    # After an out-of-memory failure the next combination needs the cached blocks back.
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_one(
    combo: Combination, store: RunStore, suite: Suite, measure: MeasureFn, git: Mapping[str, Any]
) -> dict[str, Any]:
    started = utc_now()
    t0 = time.perf_counter()
    sections: Mapping[str, Any] | None = None
    reason: str | None = None
    error_traceback: str | None = None
    try:
        sections = measure(
            combo,
            run_dir=store.run_dir,
            combo_id=combo.id,
            budget_s=suite.settings.budget_s,
            seed=suite.settings.seed,
            profile_iterations=suite.settings.profile_iterations,
        )
        status = "ok"
    except Skip as exc:
        status, reason = "skipped", str(exc) or "skipped"
    except Exception as exc:  # noqa: BLE001 - one failure must not stop the suite
        # an out-of-memory already says what it is; anything else is named by its type
        oom = type(exc).__name__ == "OutOfMemory"
        status, reason = "failed", str(exc) if oom else f"{type(exc).__name__}: {exc}"
        error_traceback = traceback.format_exc(limit=20)
        _release_memory()
    return combination_record(
        combo,
        run_id=store.run_id,
        status=status,
        reason=reason,
        started=started,
        finished=utc_now(),
        duration_s=time.perf_counter() - t0,
        git=git,
        sections=sections,
        error_traceback=error_traceback,
    )


def run_record(
    store: RunStore,
    suite: Suite,
    *,
    command: str,
    environment: Mapping[str, Any],
    started: str,
    state: str,
    finished: str | None,
) -> dict[str, Any]:
    """run.json; ``state`` is running, interrupted or ended (complete if nothing pending)."""
    ids = [c.id for c in suite.combinations()]
    counts = {"ok": 0, "skipped": 0, "failed": 0, "pending": 0}
    for combo_id in ids:
        path = store.combination_path(combo_id)
        if not path.is_file():
            counts["pending"] += 1
            continue
        try:
            counts[load_combination(path)["status"]] += 1
        except Exception:  # noqa: BLE001 - an unreadable record is re-measured later
            counts["pending"] += 1
    return {
        "kind": RUN_KIND,
        "schema_version": SCHEMA_VERSION,
        "run_id": store.run_id,
        "hardware": store.hardware,
        "suite": {"name": suite.name, "hash": suite.hash, "source": suite.source, "spec": suite.spec()},
        "command": command,
        "environment": dict(environment),
        "status": ("complete" if counts["pending"] == 0 else "incomplete") if state == "ended" else state,
        "started": started,
        "updated": utc_now(),
        "finished": finished,
        "counts": counts,
        "combinations": ids,
    }


def run_suite(
    suite: Suite,
    *,
    out: str | Path,
    force: bool = False,
    command: str = "",
    measure: MeasureFn | None = None,
    environment: Mapping[str, Any] | None = None,
    hardware: str | None = None,
    show_progress: bool = True,
) -> RunResult:
    """Measure every combination of ``suite`` not yet done under ``out``.

    ``suite`` must be validated; ``auto`` is resolved here if the caller has not.
    """
    if suite.settings.device == "auto":
        suite = suite.with_device(resolve_device("auto"))
    combos = suite.combinations()
    if environment is None:
        environment = collect_environment(suite.settings.device)
    environment = {**environment, "seeds": {"suite": suite.settings.seed}}
    store = RunStore(out, hardware or hardware_slug(environment), suite)
    measure = measure or load_measure()
    git = git_of(environment)

    previous = store.read_run()
    started = previous.get("started", utc_now()) if previous else utc_now()

    def write_run(state: str, finished: str | None) -> None:
        store.write_run(
            run_record(store, suite, command=command, environment=environment,
                       started=started, state=state, finished=finished)
        )

    result = RunResult(store=store)
    todo = [c for c in combos if force or not store.done(c.id)]
    result.resumed = [c.id for c in combos if c not in todo]
    if previous and not todo:
        # nothing measured now: the run keeps the environment its records were measured in
        if show_progress:
            print(f"nothing to measure: all {len(combos)} combinations of {store.run_id} are done "
                  "(--force measures them again)", file=sys.stderr)
        return result
    write_run("running", None)
    with _Progress(len(combos), len(todo), len(result.resumed), enabled=show_progress) as progress:
        try:
            for combo in todo:
                progress.start(combo)
                record = measure_one(combo, store, suite, measure, git)
                store.write_combination(record)
                result.records.append(record)
                progress.finish(combo, record)
        except KeyboardInterrupt:
            result.interrupted = True
            write_run("interrupted", utc_now())
            raise
    write_run("ended", utc_now())
    return result


class _Progress:
    """A rich progress bar on a terminal; one line per combination otherwise (CI logs)."""

    def __init__(self, total: int, todo: int, resumed: int, *, enabled: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.total, self.todo, self.resumed = total, todo, resumed
        self.index = resumed
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        if not self.enabled:
            return self
        if self.resumed:
            self.note(f"resuming: {self.resumed} of {self.total} combinations already done")
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            # The bar counts only this invocation's work, so resumed ones don't skew ETA.
            self.bar = Progress(
                TextColumn("[bold]{task.fields[position]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("", total=self.todo, position="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False, highlight=False)

    def start(self, combo: Combination) -> None:
        self.index += 1
        if self.bar is not None:
            self.bar.update(self.task, description=combo.id, position=f"{self.index}/{self.total}")

    def finish(self, combo: Combination, record: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        timing = record.get("timing") or {}
        median = timing.get("median")
        detail = f"{median:.4g} ms" if isinstance(median, (int, float)) else (record.get("reason") or "")
        line = f"[{self.index}/{self.total}] {combo.id}: {record['status']} {detail} ({record['duration_s']:.1f} s)"
        if self.bar is not None:
            self.bar.advance(self.task)
            if record["status"] == "failed":
                self.bar.console.print(line, markup=False, highlight=False)
        else:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
