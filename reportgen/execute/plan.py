"""Planning: which combinations of a run are done, claimed, pending or failed.

Coordination between measuring processes (the local executor's threads, Slurm tasks on
many nodes) is only the run directory on a shared filesystem. A combination is claimed
by creating ``claims/<id>.lock`` with ``O_CREAT | O_EXCL`` (atomic, also on NFS v3+), so
two claimers never measure the same combination. The holder refreshes the lock's mtime
while it measures (a heartbeat); a claim whose holder died is reclaimed: at once when the
holder ran on this host and its pid is gone, else once its heartbeat is older than
``STALE_AFTER_S``. Reclaiming renames the stale lock away first, so of two reclaimers
only one wins. The record is written before the lock is removed: a combination is done
exactly when its record exists.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reportgen.records.paths import combination_path
from reportgen.records.schema import load_combination
from reportgen.records.stamps import utc_now
from reportgen.records.status import PENDING, RUNNING, is_failed

if TYPE_CHECKING:
    from reportgen.records.store import RunStore
    from reportgen.suite import Combination

HEARTBEAT_S = 15.0
STALE_AFTER_S = 120.0

# SLURM_* variables that say which job and task a claim belongs to
_SLURM_IDS = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID",
              "array_task_id": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME"}


def owner(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Who claims: this host and process, and the Slurm job when there is one."""
    environ = os.environ if environ is None else environ
    slurm = {key: environ[name] for key, name in _SLURM_IDS.items() if environ.get(name)}
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "claimed": utc_now(fraction=False), "slurm": slurm or None}


def slurm_label(slurm: Any) -> str | None:
    """A claim's or record's Slurm ids (``owner``'s ``slurm``) as ``job_task``, or the job alone."""
    if not isinstance(slurm, dict):
        return None
    job = slurm.get("array_job_id") or slurm.get("job_id")
    if job is None:
        return None
    task = slurm.get("array_task_id")
    return f"{job}_{task}" if task is not None else str(job)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Claims:
    """The lock files of one run directory."""

    def __init__(self, run_dir: str | Path, *, stale_after_s: float = STALE_AFTER_S,
                 me: Mapping[str, Any] | None = None) -> None:
        self.dir = Path(run_dir) / "claims"
        self.stale_after_s = stale_after_s
        self.me = dict(me) if me is not None else owner()

    def path(self, combo_id: str) -> Path:
        return self.dir / f"{combo_id}.lock"

    def read(self, combo_id: str) -> dict[str, Any] | None:
        """The claim's owner, with ``age_s`` (seconds since its last heartbeat); None if unclaimed."""
        path = self.path(combo_id)
        try:
            text = path.read_text()
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            info = json.loads(text)
        except json.JSONDecodeError:
            info = {}  # being written right now, or torn: judged by its age alone
        return {**info, "age_s": age}

    def is_stale(self, info: Mapping[str, Any]) -> bool:
        if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
            if not _pid_alive(info["pid"]):
                return True
        return float(info.get("age_s", 0.0)) > self.stale_after_s

    def try_claim(self, combo_id: str) -> bool:
        """Claim ``combo_id`` for this process; False if a live claim holds it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path(combo_id), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                info = self.read(combo_id)
                if info is not None and not self.is_stale(info):
                    return False
                self._remove_stale(combo_id)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(self.me, handle)
                handle.flush()
                os.fsync(handle.fileno())
            return True
        return False

    def _remove_stale(self, combo_id: str) -> None:
        tomb = self.dir / f".{combo_id}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self.path(combo_id), tomb)
        except FileNotFoundError:
            return  # another reclaimer won, or the holder finished
        tomb.unlink(missing_ok=True)

    def heartbeat(self, combo_ids: Iterable[str]) -> None:
        for combo_id in combo_ids:
            try:
                os.utime(self.path(combo_id))
            except FileNotFoundError:
                pass

    def release(self, combo_id: str) -> None:
        self.path(combo_id).unlink(missing_ok=True)

    def live(self) -> dict[str, dict[str, Any]]:
        """Every claim not stale, by combination id."""
        if not self.dir.is_dir():
            return {}
        found = {}
        for path in self.dir.glob("*.lock"):
            info = self.read(path.name[: -len(".lock")])
            if info is not None and not self.is_stale(info):
                found[path.name[: -len(".lock")]] = info
        return found


@dataclass(frozen=True)
class Entry:
    """One combination's state in a run: done (ok / skipped / failed), running, pending."""

    id: str
    state: str  # ok | skipped | failed | running | pending
    reason: str | None = None
    claim: Mapping[str, Any] | None = None
    record: Mapping[str, Any] | None = None


def states(run_dir: str | Path, ids: Iterable[str]) -> list[Entry]:
    """Each combination's state, from its record, else its claim."""
    claims = Claims(run_dir).live()
    entries = []
    for combo_id in ids:
        record = read_record(run_dir, combo_id)
        if record is not None:
            entries.append(Entry(combo_id, record["status"], record.get("reason"), record=record))
        elif combo_id in claims:
            entries.append(Entry(combo_id, RUNNING, claim=claims[combo_id]))
        else:
            entries.append(Entry(combo_id, PENDING))
    return entries


def read_record(run_dir: str | Path, combo_id: str) -> dict[str, Any] | None:
    """The record of ``combo_id`` in ``run_dir``; None when there is none, or it is
    unreadable or another combination's (either way: measured again)."""
    path = combination_path(run_dir, combo_id)
    if not path.is_file():
        return None
    try:
        record = load_combination(path)
    except Exception:  # noqa: BLE001 - unreadable: measured again
        return None
    return record if record.get("id") == combo_id else None


def size_key(combo: Combination) -> tuple[int, int]:
    """Larger first: tokens through the model, then the mode's weight (a training step
    is about three forwards; a decode step reads a KV cache as long as the prompt)."""
    weight = {"train": -2, "train-nooptim": -1, "prefill": 0, "decode-nocache": 0, "forward": 1, "decode": 2}
    return (-combo.batch_size * combo.seq_len, weight.get(combo.mode, 3))


def todo(store: RunStore, combos: Iterable[Combination], *, force: bool = False,
         retry_failed: bool = False) -> list[Combination]:
    """What to measure now, largest first (so the longest combinations start early and
    devices finish together). A failed combination waits for ``retry_failed``: it may
    have killed its worker, and a plain resume must not run into the same wall again."""
    pending = []
    for combo in combos:
        record = None if force else read_record(store.run_dir, combo.id)
        if record is None or (retry_failed and is_failed(record)):
            pending.append(combo)
    return sorted(pending, key=size_key)
