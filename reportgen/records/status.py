"""The status words records carry, once."""

from __future__ import annotations

# a combination record's "status"
OK = "ok"
SKIPPED = "skipped"
FAILED = "failed"
COMBINATION_STATUSES: tuple[str, ...] = (OK, SKIPPED, FAILED)
#: a combination that has no record yet (plans, tables, counts)
PENDING = "pending"

# run.json's "status"
RUNNING = "running"
COMPLETE = "complete"
INCOMPLETE = "incomplete"
INTERRUPTED = "interrupted"
RUN_STATUSES: tuple[str, ...] = (RUNNING, COMPLETE, INCOMPLETE, INTERRUPTED)
