"""Measuring in this process, one combination after another, without isolation.

Not for users' suites (one crash would take the suite with it): it is the baseline the
bench compares the supervised workers with, and runs a measure function that is not
importable by a worker (a test's closure).
"""

from __future__ import annotations

import gc
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from reportgen.errors import Skip
from reportgen.execute import rounds
from reportgen.execute.console import Progress
from reportgen.execute.job import Job, rounds_combo
from reportgen.execute.supervisor import Outcome
from reportgen.records.stamps import utc_now
from reportgen.records.status import FAILED, OK, SKIPPED


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class InlineExecutor:
    name = "inline"

    def __init__(self, measure: Callable[..., Any], preflight: Callable[..., Any] | None = None,
                 device: str = "cpu") -> None:
        self.measure = measure
        self.preflight = preflight
        self.device = device

    def run(self, job: Job, progress: Progress) -> None:
        for record in job.finish_ready():
            progress.finish(rounds_combo(job, record), "inline", record)
        ended: set[str] = set()
        queue = job.units()
        while queue:
            unit = queue.pop(0)
            if not job.unit_wanted(unit, ended):
                continue
            progress.start(unit.combo, "inline")
            started, t0 = utc_now(), time.perf_counter()
            outcome = self._one(job, unit)
            finished = job.finish_unit(unit, outcome, started=started, seconds=time.perf_counter() - t0,
                                     pending=[u.round for u in queue if u.combo.id == unit.combo.id])
            queue.extend(job.take_retries())
            if finished is None:
                progress.pause("inline")
            else:
                ended.add(unit.combo.id)
                progress.finish(unit.combo, "inline", finished)

    def _one(self, job: Job, unit: rounds.Unit) -> Outcome:
        combo = unit.combo
        preflight = None
        task = rounds.task(job, unit)
        try:
            if self.preflight is not None:
                preflight = self.preflight(combo, self.device)
                if (preflight or {}).get("reduced"):
                    from reportgen.profile.fitting import applied

                    combo = applied(combo, preflight["reduced"])
            sections = self.measure(combo, run_dir=task["run_dir"], combo_id=task["combo_id"],
                                    budget_s=task["budget_s"], seed=task["seed"],
                                    profile_iterations=task["profile_iterations"], **task.get("options", {}))
            return Outcome(OK, sections=sections, preflight=preflight)
        except Skip as exc:
            return Outcome(SKIPPED, str(exc) or "skipped", preflight=getattr(exc, "preflight", preflight))
        except Exception as exc:  # noqa: BLE001 - one failure must not stop the suite
            oom = type(exc).__name__ == "OutOfMemory"
            reason = str(exc) if oom else f"{type(exc).__name__}: {exc}"
            outcome = Outcome(FAILED, reason, traceback=traceback.format_exc(limit=20), preflight=preflight)
            _release_memory()
            return outcome
