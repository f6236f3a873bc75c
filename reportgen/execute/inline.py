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
from reportgen.execute.console import Progress
from reportgen.execute.local import Job, outcome_record
from reportgen.execute.record import utc_now
from reportgen.execute.supervisor import Outcome


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
        for combo in job.todo:
            progress.start(combo, "inline")
            started, t0 = utc_now(), time.perf_counter()
            outcome = self._one(job, combo)
            record = outcome_record(job, combo, outcome, started=started, seconds=time.perf_counter() - t0)
            job.store.write_combination(record)
            job.records.append(record)
            progress.finish(combo, "inline", record)

    def _one(self, job: Job, combo: Any) -> Outcome:
        preflight = None
        try:
            if self.preflight is not None:
                preflight = self.preflight(combo, self.device)
            sections = self.measure(combo, **{k: v for k, v in job.task(combo).items() if k != "combo"})
            return Outcome("ok", sections=sections, preflight=preflight)
        except Skip as exc:
            return Outcome("skipped", str(exc) or "skipped", preflight=getattr(exc, "preflight", preflight))
        except Exception as exc:  # noqa: BLE001 - one failure must not stop the suite
            oom = type(exc).__name__ == "OutOfMemory"
            reason = str(exc) if oom else f"{type(exc).__name__}: {exc}"
            outcome = Outcome("failed", reason, traceback=traceback.format_exc(limit=20), preflight=preflight)
            _release_memory()
            return outcome
