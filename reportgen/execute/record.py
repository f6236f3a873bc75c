"""The records written under runs/: the combination envelope and run.json."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reportgen.records.schema import (
    COMBINATION_KIND,
    RUN_KIND,
    SCHEMA_VERSION,
    SECTIONS,
)
from reportgen.records.stamps import utc_now
from reportgen.records.status import COMBINATION_STATUSES, COMPLETE, INCOMPLETE, PENDING

if TYPE_CHECKING:
    from reportgen.records.store import RunStore
    from reportgen.suite import Combination, Suite

# Sections the executor adds beside what ``measure`` returns (all optional in the schema).
EXECUTION_SECTIONS: tuple[str, ...] = ("preflight", "device", "execution")


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
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The envelope around what ``measure`` returned; envelope keys always win.

    ``extra`` holds the executor's sections (``preflight``, ``device``, ``execution``).
    """
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
    for name, value in (extra or {}).items():
        if value is not None:
            record.setdefault(name, value)
    reduced = (record.get("preflight") or {}).get("reduced")
    if isinstance(reduced, Mapping) and isinstance(record.get("depth"), Mapping):
        # measured reduced because it did not fit as asked: the depth section says why
        record["depth"] = {**record["depth"], "reason": reduced.get("reason")}
    if error_traceback is not None:
        record["traceback"] = error_traceback
    return record


def run_counts(store: RunStore, ids: list[str]) -> dict[str, int]:
    from reportgen.execute.plan import read_record

    counts = dict.fromkeys((*COMBINATION_STATUSES, PENDING), 0)
    for combo_id in ids:
        record = read_record(store.run_dir, combo_id)  # unreadable: measured again, so pending
        counts[PENDING if record is None else record["status"]] += 1
    return counts


def run_record(
    store: RunStore,
    suite: Suite,
    *,
    command: str,
    environment: Mapping[str, Any],
    started: str,
    state: str,
    finished: str | None,
    execution: Mapping[str, Any] | None = None,
    release: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """run.json; ``state`` is running, interrupted or ended (complete if nothing pending);
    ``release``: the release set a history measured (``reportgen history``)."""
    ids = [c.id for c in suite.combinations()]
    counts = run_counts(store, ids)
    record = {
        "kind": RUN_KIND,
        "schema_version": SCHEMA_VERSION,
        "run_id": store.run_id,
        "hardware": store.hardware,
        "suite": {"name": suite.name, "hash": suite.hash, "source": suite.source, "spec": suite.spec()},
        "command": command,
        "environment": dict(environment),
        "status": (COMPLETE if counts[PENDING] == 0 else INCOMPLETE) if state == "ended" else state,
        "started": started,
        "updated": utc_now(),
        "finished": finished,
        "counts": counts,
        "combinations": ids,
    }
    if execution is not None:
        record["execution"] = dict(execution)
    if release is not None:
        record["release"] = dict(release)
    return record


# What a run's records depend on beyond the suite: a run measured under other versions of
# these, or on another device, is not resumed or reused; the suite is measured as a new run.
REUSE_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("libraries", "torch")),
    ("transformers", ("libraries", "transformers")),
    ("reportgen", ("libraries", "reportgen")),
    ("device", ("device", "name")),
    ("device type", ("device", "type")),
)


def environment_differences(measured: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between the environment a run was measured in and this one, each as
    ``"torch 2.11.0 (now 2.13.0+cpu)"``; [] when its records may be resumed or reused."""
    out = []
    for label, path in REUSE_KEYS:
        before, after = _dig(measured, path), _dig(now, path)
        if before != after:
            out.append(f"{label} {before or 'unknown'} (now {after or 'unknown'})")
    return out


def _dig(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value
