"""One supervised worker: start it, hand it one combination at a time, survive its death.

The supervisor turns every way a measurement can end into an outcome the executor
records: the worker's own result (ok, skipped, failed), or, when the worker dies (any
signal, the kernel's OOM killer included), runs past the timeout, or reports an error
that poisons its device, ``failed`` with a precise reason, and a fresh worker for the
next combination. While it waits, it samples the host's memory, so a SIGKILL can be told
apart: "worker killed by SIGKILL (9) after 41 s, host memory 23.1 of 23.4 GiB in use:
likely out of host memory".
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from reportgen.execute.forkserver import ForkedProcess, ForkServer, ForkServerError
from reportgen.execute.memory import (
    GIB,
    MemoryCgroup,
    follow,
    host_memory,
    memory_cgroup,
    refresh,
)
from reportgen.execute.worker import WorkerSpec, child_env, close_quietly, wait_ready
from reportgen.records.status import FAILED

READY_TIMEOUT_S = 300.0  # importing torch on a cold network filesystem can take minutes
POLL_S = 0.25
LOG_TAIL_LINES = 30
OOM_FRACTION = 0.9  # host memory in use, of the total, above which a SIGKILL is likely the OOM killer


class WorkerStartError(RuntimeError):
    """A worker could not start (its log says why): nothing can be measured on this slot."""


def _rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before


def death_reason(returncode: int, seconds: float, memory: tuple[int, int] | None,
                 cgroup: tuple[MemoryCgroup, MemoryCgroup] | None = None) -> str:
    """Why a worker ended without answering, in one line. ``memory`` is the host's peak
    (in use, total) while it ran; ``cgroup`` its memory cgroup before and after."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        reason = f"worker killed by {name} ({signum}) after {seconds:.0f} s"
    else:
        reason = f"worker exited with code {returncode} after {seconds:.0f} s"
    if memory is not None:
        used, total = memory
        reason += f", host memory {used / GIB:.1f} of {total / GIB:.1f} GiB in use"
        if returncode == -signal.SIGKILL and used >= OOM_FRACTION * total:
            reason += ": likely out of host memory"
    if cgroup is not None:
        before, after = cgroup
        limit = f"limit {before.limit_bytes / GIB:.1f} GiB" if before.limit_bytes else "no limit of its own"
        if _rose(before.oom_kills, after.oom_kills):
            reason += f"; its memory cgroup ({limit}) recorded an OOM kill: out of memory"
        elif returncode == -signal.SIGKILL and before.limit_bytes and _rose(before.limit_hits, after.limit_hits):
            reason += f"; its memory cgroup ({limit}) hit its limit: out of memory"
    return reason


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
    """Owns one worker process for one device slot."""

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
        self.proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self.conn: Connection | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.stopping = False
        self._kill_lock = threading.Lock()

    # -- the worker process ---------------------------------------------------------------

    def _start(self) -> None:
        self.starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        slot = self.spec.slot.replace(":", "")
        self.log_path = self.log_dir / f"worker-{slot}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{self.starts}.log"
        parent_sock, child_sock = socket.socketpair()
        env = child_env(self.env)
        if self.spec.visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.spec.visible_devices
        self.proc = None
        if self.forkserver is not None:
            try:
                self.proc = self.forkserver.fork(self.spec.to_json(), self.log_path, child_sock.fileno())
            except ForkServerError as exc:
                # spawned instead, as without a fork server: slower to start, measured alike
                with open(self.log_path, "ab") as log:
                    log.write(f"--- {exc}; this worker is spawned\n".encode())
        if self.proc is None:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.python, "-m", "reportgen.execute.worker", "--fd", str(child_sock.fileno()),
                     "--spec", self.spec.to_json(), "--parent", str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                    pass_fds=(child_sock.fileno(),), close_fds=True,
                )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        proc = self.proc
        if wait_ready(self.conn, lambda: proc.poll() is None and not self.stopping, READY_TIMEOUT_S, POLL_S):
            return
        self.kill()
        raise WorkerStartError(f"the {self.spec.slot} worker did not start; its log says why: "
                               f"{self.log_path}\n{self._tail(0)}")

    def kill(self) -> None:
        """Kill the worker now. Safe from another thread (Ctrl-C in the main thread while
        this slot's thread is waiting on the worker)."""
        with self._kill_lock:
            proc, conn = self.proc, self.conn
            self.proc, self.conn = None, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        close_quietly(conn)

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        proc, conn = self.proc, self.conn
        if proc is not None and conn is not None and proc.poll() is None:
            try:
                conn.send(None)
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _tail(self, offset: int) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        with open(self.log_path, "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    # -- one task ---------------------------------------------------------------------------

    def run(self, task: Mapping[str, Any]) -> Outcome:
        """Measure one combination in the worker (starting one if needed)."""
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self._start()
        assert self.proc is not None and self.conn is not None and self.log_path is not None
        proc = self.proc
        offset = self.log_path.stat().st_size
        execution = {"slot": self.spec.slot, "worker_pid": self.proc.pid, "worker_start": self.starts,
                     "worker_forked": isinstance(self.proc, ForkedProcess), "timeout_s": self.timeout_s}
        peak = host_memory()
        cgroup = memory_cgroup(self.proc.pid)
        t0 = time.monotonic()
        self.conn.send(dict(task))
        while True:
            elapsed = time.monotonic() - t0
            cgroup = follow(cgroup, self.proc.pid, lambda: proc.poll() is None)
            if self.conn.poll(POLL_S):
                try:
                    result = self.conn.recv()
                except (EOFError, OSError):
                    break  # died while answering: judged below like any death
                return self._finished(result, execution, offset)
            now = host_memory()
            if now is not None and (peak is None or now[0] > peak[0]):
                peak = now
            if self.proc.poll() is not None:
                break
            if elapsed > self.timeout_s:
                self.kill()
                execution["worker_restarted"] = True
                return Outcome(FAILED, f"timed out after {self.timeout_s:.0f} s; worker restarted",
                               execution=execution, log_tail=self._tail(offset))
        code = self.proc.wait()
        seconds = time.monotonic() - t0
        tail = self._tail(offset)
        self.kill()
        execution["worker_restarted"] = True
        execution["worker_exit"] = code
        cgroups = (cgroup, refresh(cgroup)) if cgroup is not None else None
        return Outcome(FAILED, death_reason(code, seconds, peak, cgroups), execution=execution, log_tail=tail)

    def _finished(self, result: Mapping[str, Any], execution: dict[str, Any], offset: int) -> Outcome:
        execution["host_memory"] = result.get("host_memory")
        execution["measure_s"] = result.get("seconds")
        tail = None
        if result["status"] == FAILED:
            tail = self._tail(offset)
        if result.get("poisoned"):
            # the worker exits by itself; the next task gets a fresh process
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                execution["worker_exit"] = self.proc.returncode if self.proc.poll() is not None else None
            self.kill()
            execution["worker_restarted"] = True
        return Outcome(result["status"], result.get("reason"), sections=result.get("sections"),
                       traceback=result.get("traceback"), preflight=result.get("preflight"),
                       device=result.get("device"), execution=execution, log_tail=tail)
