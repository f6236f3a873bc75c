"""One supervised worker: start it, hand it one combination at a time, survive its death.

The supervisor turns every way a measurement can end into an outcome the executor
records: the worker's own result (ok, skipped, failed), or, when the worker dies (any
signal, the kernel's OOM killer included), runs past the timeout, or reports an error
that poisons its device, ``failed`` with a precise reason, and a fresh worker for the
next combination. While it waits, it samples the host's memory, so a SIGKILL can be told
apart: "worker killed by SIGKILL (9) after 41 s, host memory 23.1 of 23.4 GiB in use:
likely out of host memory". Starting, waiting and naming a death are ``execute.fresh``'s
(``Child``), the one way reportgen measures in a fresh process; the supervisor adds the
worker's log per start, the restart and the record's ``execution`` facts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen.execute.forkserver import ForkServer
from reportgen.execute.fresh import READY_TIMEOUT_S, Child, Ended, StartError, death_reason
from reportgen.execute.worker import ENTRY, WorkerSpec
from reportgen.records.status import FAILED

__all__ = ["READY_TIMEOUT_S", "Outcome", "Supervisor", "WorkerStartError", "death_reason"]


class WorkerStartError(RuntimeError):
    """A worker could not start (its log says why): nothing can be measured on this slot."""


@dataclass
class Outcome:
    """What became of one task: the worker's result, or what the supervisor saw."""

    status: str
    reason: str | None = None
    sections: Mapping[str, Any] | None = None
    traceback: str | None = None
    preflight: Mapping[str, Any] | None = None
    device: Mapping[str, Any] | None = None
    execution: dict[str, Any] = field(default_factory=dict)
    log_tail: str | None = None


class Supervisor:
    """Owns one worker process for one device slot: a ``fresh.Child`` entering the
    worker's loop, started again after every death."""

    def __init__(self, spec: WorkerSpec, *, log_dir: str | Path, timeout_s: float,
                 env: Mapping[str, str] | None = None, python: str = sys.executable,
                 forkserver: ForkServer | None = None) -> None:
        self.spec = spec
        # CPU workers are forked from it where one is given (GPU workers are always spawned)
        self.forkserver = forkserver if spec.device == "cpu" else None
        self.log_dir = Path(log_dir)
        self.timeout_s = timeout_s
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.child: Child | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.stopping = False
        self._lock = threading.Lock()

    # -- the worker process ---------------------------------------------------------------

    def _start(self) -> Child:
        self.starts += 1
        slot = self.spec.slot.replace(":", "")
        self.log_path = self.log_dir / f"worker-{slot}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{self.starts}.log"
        env = dict(self.env)
        if self.spec.visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.spec.visible_devices
        child = Child(ENTRY, self.spec.to_json(), log_path=self.log_path, env=env, python=self.python,
                      forkserver=self.forkserver, what="worker")
        with self._lock:
            self.child = child
        try:
            child.start(READY_TIMEOUT_S, keep_waiting=lambda: not self.stopping)
        except StartError:
            self.kill()
            raise WorkerStartError(f"the {self.spec.slot} worker did not start; its log says why: "
                                   f"{self.log_path}\n{child.tail()}") from None
        return child

    def kill(self) -> None:
        """Kill the worker now. Safe from another thread (Ctrl-C in the main thread while
        this slot's thread is waiting on the worker)."""
        with self._lock:
            child, self.child = self.child, None
        if child is not None:
            child.kill()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        with self._lock:
            child, self.child = self.child, None
        if child is not None:
            child.close()

    # -- one task ---------------------------------------------------------------------------

    def run(self, task: Mapping[str, Any]) -> Outcome:
        """Measure one combination in the worker (starting one if needed)."""
        child = self.child
        if child is None or not child.alive():
            self.kill()
            child = self._start()
        offset = child.log_size()
        execution = {"slot": self.spec.slot, "worker_pid": child.pid, "worker_start": self.starts,
                     "worker_forked": child.forked, "timeout_s": self.timeout_s}
        answer = child.ask(dict(task), self.timeout_s)
        if not isinstance(answer, Ended):
            return self._finished(child, answer.value, execution, offset)
        tail = child.tail(offset)
        self.kill()
        execution["worker_restarted"] = True
        if answer.timed_out:
            return Outcome(FAILED, f"{answer.reason}; worker restarted", execution=execution, log_tail=tail)
        execution["worker_exit"] = answer.code
        return Outcome(FAILED, answer.reason, execution=execution, log_tail=tail)

    def _finished(self, child: Child, result: Mapping[str, Any], execution: dict[str, Any],
                  offset: int) -> Outcome:
        execution["host_memory"] = result.get("host_memory")
        execution["measure_s"] = result.get("seconds")
        tail = None
        if result["status"] == FAILED:
            tail = child.tail(offset)
        if result.get("poisoned"):
            # the worker exits by itself; the next task gets a fresh process
            proc = child.proc
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                execution["worker_exit"] = proc.returncode if proc.poll() is not None else None
            self.kill()
            execution["worker_restarted"] = True
        return Outcome(result["status"], result.get("reason"), sections=result.get("sections"),
                       traceback=result.get("traceback"), preflight=result.get("preflight"),
                       device=result.get("device"), execution=execution, log_tail=tail)
