"""The status words records carry, once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

# a study's "status" (``studies.<name>``), and each instrument's or tool's within it:
# ``ok`` and ``failed`` as a combination's; a study or instrument the device or the
# combination cannot run is ``not applicable``, a study this install has no code for
# ``not available``; a tool's reading is ``measured`` or ``missing``
NOT_APPLICABLE = "not applicable"
NOT_AVAILABLE = "not available"
MEASURED = "measured"
MISSING = "missing"
STUDY_STATUSES: tuple[str, ...] = (OK, NOT_APPLICABLE, NOT_AVAILABLE, FAILED)

#: a combination's state in a run (``execute.plan.states``): its record's status, else
#: ``running`` while claimed, else ``pending``
PLAN_STATES: tuple[str, ...] = (*COMBINATION_STATUSES, RUNNING, PENDING)


def is_ok(record: Mapping[str, Any]) -> bool:
    """Whether a combination record holds its measurements (status ``ok``)."""
    return record.get("status") == OK


def is_failed(record: Mapping[str, Any]) -> bool:
    """Whether a combination record's measuring failed (status ``failed``)."""
    return record.get("status") == FAILED
