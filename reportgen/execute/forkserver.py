"""CPU workers forked from a process that has already imported torch and transformers.

Each round of a combination runs in a fresh worker process (``rounds``), and a fresh
interpreter spends seconds importing torch, transformers and the model's modeling code
before it measures anything: on a 2-core host about 4.5 s, paid again by every round,
so a flags-only run of one tiny combination spent most of its time importing.

The fork server is one fresh interpreter per run (spawned like a worker, with the
workers' environment) that imports those modules once, runs nothing else (no model, no
tensor work) and then forks a worker on request. A forked worker is a fresh process as
far as a measurement is concerned: its own model, inputs, allocator growth, warm-up and
OpenMP threads (created by its first parallel operation), in its own log file. It is
used for CPU workers only: a GPU worker is always spawned, so no CUDA state can ever be
inherited.

Protocol over a ``multiprocessing.connection`` socket, one request at a time:

* ``("fork", entry, arg, log_path, memory_bytes)`` followed by the child's socket (passed
  as a file descriptor) -> ``("forked", pid)`` or ``("error", text)``; the child enters
  ``entry`` as a spawned one would (``execute.fresh.enter``: a worker's loop, or one call);
* ``("poll", pid)`` -> the worker's exit code as ``subprocess.Popen.returncode`` has it
  (negative for a signal), or None while it runs;
* ``None`` -> the server exits (its workers, watching it, follow).

The server exits by itself when its parent dies, and every forked worker when the server
dies (each checks its parent twice a second), so nothing outlives the ``profile`` process.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path
from typing import Any

from reportgen.execute import worker
from reportgen.execute.fresh import (
    READY_TIMEOUT_S,
    ForkServerError,
    child_env,
    close_quietly,
    enter,
    wait_ready,
)

POLL_S = 0.5
# always imported: what every CPU worker needs before its first combination (its task's
# combination is a reportgen.suite object)
BASE_MODULES = ("torch", "transformers", "transformers.modeling_utils", "reportgen.suite")


__all__ = ["ForkServer", "ForkServerError", "ForkedProcess", "modeling_modules", "preload_for"]


# --- which modules a run's workers will import ------------------------------------------

def modeling_modules(model_types: Iterable[str]) -> list[str]:
    """The transformers modeling modules of these model types (those that exist)."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    out: list[str] = []
    for model_type in model_types:
        try:
            name = model_type_to_module_name(model_type)
            module = f"transformers.models.{name}.modeling_{name}"
            if importlib.util.find_spec(module) is not None and module not in out:
                out.append(module)
        except (ImportError, ValueError, AttributeError):
            continue  # not a transformers model (the micro-benchmark, remote code): built as before
    return out


def preload_for(combos: Iterable[Any], measure_paths: Iterable[str | None]) -> dict[str, Any]:
    """What a fork server for these combinations imports: the measuring functions' modules
    and each model's modeling module (the server resolves the models: this process need
    not import transformers)."""
    modules = [path.partition(":")[0] for path in measure_paths if path]
    models = [[c.model, getattr(c, "source", None)] for c in combos]
    unique = [json.loads(m) for m in dict.fromkeys(json.dumps(m, sort_keys=True) for m in models)]
    return {"modules": [*dict.fromkeys(modules)], "models": unique}


def _model_types(models: Sequence[Sequence[Any]]) -> list[str]:
    """The transformers model types of (name, Hub source) pairs. A model that cannot be
    resolved here is left out: its worker imports it as a spawned one would."""
    from reportgen.profile.modelspec import ModelSpec, resolve

    types: list[str] = []
    for name, source in models:
        try:
            spec = ModelSpec.from_hub(name, source) if source else resolve(name)
        except Exception:  # noqa: BLE001 - the worker reports a bad model; preloading is only an optimisation
            continue
        if spec.source != "micro" and not spec.remote_code and spec.model_type not in types:
            types.append(spec.model_type)
    return types


# --- the server process -----------------------------------------------------------------

def _import_all(modules: Sequence[str]) -> list[str]:
    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the worker imports it again and reports
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def _child(fd: int, entry: str, arg: str, log_path: str | None, memory_bytes: int | None,
           control: Connection) -> None:
    """The forked child: its own log, then what a spawned one runs (``fresh.enter``)."""
    code = 1
    try:
        gc.enable()  # the server's imports ran without it (`serve`); a worker collects as any process does
        control.close()  # the server's channel to its client is not the child's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a child ends on SIGTERM, as a spawned one does
        if log_path is not None:
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        print(f"--- forked from the fork server (pid {os.getppid()})", flush=True)
        code = enter(fd, entry, arg, os.getppid(), memory_bytes)
    except BaseException:  # noqa: BLE001 - whatever happens, this process must never return to the server's loop
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = os.waitstatus_to_exitcode(status)


def serve(conn: Connection, parent: int, preload: Mapping[str, Any]) -> int:
    # no collection while the server imports (the first fork freezes what it imported):
    # the collector's passes over torch and transformers' growing heap were about a sixth
    # of their import time on a 2-core host, which every run waits for; each forked child
    # turns it back on
    gc.disable()
    modules = [*BASE_MODULES, *(preload.get("modules") or [])]
    failed = _import_all(modules)
    # what the measuring functions import only when they run (a module's WORKER_IMPORTS):
    # imported here once, not again in every round's worker
    failed += _import_all([name for module in modules
                           for name in getattr(sys.modules.get(module), "WORKER_IMPORTS", ())])
    try:
        failed += _import_all(modeling_modules(_model_types(preload.get("models") or [])))
    except Exception as exc:  # noqa: BLE001 - workers then import their models themselves
        failed.append(f"models: {type(exc).__name__}: {exc}")
    for line in failed:
        print(f"fork server: not preloaded: {line}", flush=True)
    print(f"fork server ready (pid {os.getpid()}): {len(sys.modules)} modules imported", flush=True)
    conn.send(("ready", os.getpid()))
    codes: dict[int, int] = {}
    while True:
        # no thread watches the parent here: a forked worker inherits no thread, and
        # forking a multi-threaded process could copy a lock some thread holds
        if os.getppid() != parent:
            return 0
        _reap(codes)
        try:
            if not conn.poll(POLL_S):
                continue
            request = conn.recv()
        except (EOFError, OSError):
            return 0
        if request is None:
            return 0
        kind = request[0]
        if kind == "poll":
            _reap(codes)
            conn.send(codes.pop(request[1], None))
        elif kind == "fork":
            _, entry, arg, log_path, memory_bytes = request
            fd = recv_handle(conn)
            sys.stdout.flush()
            sys.stderr.flush()
            # imported objects stay untouched by the workers' collections (fewer copied
            # pages); frozen without a collection first, which on torch and transformers'
            # few hundred thousand objects takes a quarter of a second on a 2-core host and
            # finds a few dozen garbage objects (the first fork waits for it)
            gc.freeze()
            try:
                pid = os.fork()
            except OSError as exc:
                os.close(fd)
                conn.send(("error", f"fork failed: {exc}"))
                continue
            if pid == 0:
                _child(fd, entry, arg, log_path, memory_bytes, conn)
            os.close(fd)
            conn.send(("forked", pid))
        else:
            conn.send(("error", f"unknown request {kind!r}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reportgen.execute.forkserver")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--preload", default="{}", help='JSON {"modules": [...], "models": [[name, source], ...]}')
    args = parser.parse_args(argv)
    # Ctrl-C at a terminal (and Slurm's SIGTERM) reach the whole process group: stopping is
    # the parent's job, and the server must outlive its workers to report how they ended
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return serve(Connection(args.fd), args.parent, json.loads(args.preload))


# --- the supervisor's side --------------------------------------------------------------

class ForkServer:
    """The client: starts the server on first use (or early, `start_soon`), forks workers,
    reports their exits. Safe to share between supervisor threads (one request at a time).

    ``log_dir`` None: the server is started before the run's directory is known (its
    imports overlap the parent's own); its output is held here and written to its log
    from the moment `attach_log` names the directory."""

    def __init__(self, *, log_dir: str | Path | None, env: Mapping[str, str] | None = None,
                 preload: Mapping[str, Any] | None = None, python: str = sys.executable) -> None:
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.env = dict(os.environ if env is None else env)
        self.preload = dict(preload or {})
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.log_path: Path | None = None
        self.failed: str | None = None  # why it is not used (then workers are spawned)
        self._lock = threading.RLock()
        self._early: threading.Thread | None = None
        self._held: list[bytes] = []  # output before the log's directory is known
        self._out_lock = threading.Lock()

    def _log_name(self) -> str:
        return f"forkserver-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"

    def _start(self) -> None:
        parent_sock, child_sock = socket.socketpair()
        env = child_env(self.env, self.python)
        command = [self.python, "-m", "reportgen.execute.forkserver", "--fd", str(child_sock.fileno()),
                   "--parent", str(os.getpid()), "--preload", json.dumps(self.preload)]
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.log_path = self.log_dir / self._log_name()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(  # spawned like a worker: no state of this process
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                    pass_fds=(child_sock.fileno(),), close_fds=True)
        else:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env, pass_fds=(child_sock.fileno(),),
                                         close_fds=True)
            threading.Thread(target=self._drain, args=(self.proc,), name="forkserver-output", daemon=True).start()
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        proc = self.proc
        if wait_ready(self.conn, lambda: proc.poll() is None, READY_TIMEOUT_S, 0.25):
            return
        self.close()
        where = self.log_path or "(its output was: " + b"".join(self._held).decode(errors="replace")[-400:] + ")"
        raise ForkServerError(f"the fork server did not start; its log says why: {where}")

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        """The server's output while its log's directory may not be known yet."""
        assert proc.stdout is not None
        with proc.stdout as output:  # closed here, at the server's end
            for line in output:
                with self._out_lock:
                    if self.log_path is None:
                        self._held.append(line)
                        continue
                    with open(self.log_path, "ab") as log:
                        log.write(line)

    def attach_log(self, log_dir: str | Path) -> None:
        """The run's log directory: the server's output held so far, and all that follows,
        goes to its log there."""
        with self._out_lock:
            if self.log_path is not None:
                return
            self.log_dir = Path(log_dir)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.log_path = self.log_dir / self._log_name()
            with open(self.log_path, "ab") as log:
                log.write(b"".join(self._held))
            self._held.clear()

    def start_soon(self) -> None:
        """Start the server now, in the background (its imports take seconds the parent
        can spend on its own work); the first fork waits for it. A server that cannot
        start leaves the workers spawned, as one that fails on first use does."""

        def start() -> None:
            with self._lock:
                if self.failed is not None or self.proc is not None:
                    return
                try:
                    self._start()
                except (OSError, ForkServerError) as exc:
                    self.failed = f"the fork server failed: {exc}"

        self._early = threading.Thread(target=start, name="forkserver-start", daemon=True)
        self._early.start()

    def wait_started(self) -> None:
        """Return once a server started by `start_soon` is ready (or has failed)."""
        if self._early is not None:
            self._early.join()

    def fork(self, arg: str, log_path: str | Path | None, fd: int, *, entry: str = worker.ENTRY,
             memory_bytes: int | None = None) -> ForkedProcess:
        """A child forked from the server, entering ``entry`` with ``arg`` (by default a
        worker for the spec ``arg``) and talking over ``fd`` (the caller's copy stays open)."""
        with self._lock:
            if self.failed is not None:
                raise ForkServerError(self.failed)
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.close()
                    self._start()
                assert self.conn is not None and self.proc is not None
                self.conn.send(("fork", entry, arg, None if log_path is None else str(log_path), memory_bytes))
                send_handle(self.conn, fd, self.proc.pid)
                reply = self.conn.recv()
            except (OSError, EOFError, ForkServerError) as exc:
                self.failed = f"the fork server failed: {exc}"
                self.close()
                raise ForkServerError(self.failed) from exc
            if reply[0] != "forked":
                raise ForkServerError(str(reply[1]))
            return ForkedProcess(self, int(reply[1]))

    def exit_code(self, pid: int) -> int | None:
        """The worker's exit code once the server has reaped it; None while it runs.
        With the server gone, a worker that no longer exists reads as killed (SIGKILL)."""
        with self._lock:
            if self.conn is not None:
                try:
                    self.conn.send(("poll", pid))
                    return self.conn.recv()  # type: ignore[no-any-return]
                except (OSError, EOFError):
                    self.close()
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        except PermissionError:
            pass
        return None

    def close(self) -> None:
        with self._lock:
            proc, conn = self.proc, self.conn
            self.proc, self.conn = None, None
            if conn is not None:
                try:
                    conn.send(None)
                except OSError:
                    pass
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            close_quietly(conn)


class ForkedProcess:
    """A forked worker with the part of ``subprocess.Popen`` the supervisor uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    code = main()
    # out without the interpreter's teardown, which with torch and transformers imported
    # takes about a second the closing run would wait for (`ForkServer.close`)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
