"""A measurement in a fresh process: its result, or the reason the process died.

Everything reportgen measures in a process of its own goes through here: the suite's
workers (``execute.supervisor``), the bench's ablation rounds, the architecture sweep and
the diagnostic scripts. A ``Child`` is one fresh process talking over a socket
(``multiprocessing.connection`` messages): a fresh interpreter (``python``, this one by
default; another one, a virtual environment with other torch and transformers
versions, runs the same measurement there), or a child forked from a fork server that
has only imported modules (``execute.forkserver``, CPU work only). ``Child.ask`` hands it
one message and waits for the answer, the process's death, or the timeout, sampling the
host's memory and following its memory cgroup meanwhile, so every ending becomes one
line: "process killed by SIGKILL (9) after 41 s, host memory 23.1 of 23.4 GiB in use:
likely out of host memory", "timed out after 120 s". ``run`` is the one-shot form: call
``module:function`` (or ``path/to/script.py:function``) with keyword arguments in a fresh
process, under an optional address-space limit and time limit, and get a ``Result``.

The process side: ``python -m reportgen.execute.fresh --fd N --parent PID --entry
module:function --arg TEXT`` (a forked child enters through ``enter`` alike) ignores
Ctrl-C (stopping is its parent's job), exits when its parent dies, applies its memory
limit and calls ``function(connection, TEXT)``, which says ``("ready", pid)`` and then
serves its parent: the worker's loop (``execute.worker.serve_spec``) or one call
(``serve_call``).

Standard library only: the profile process imports it and must stay light.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from reportgen.execute.memory import GIB, MemoryCgroup, follow, host_memory, memory_cgroup, refresh

READY_TIMEOUT_S = 300.0  # importing torch on a cold network filesystem can take minutes
POLL_S = 0.25
PARENT_POLL_S = 0.5
LOG_TAIL_LINES = 30
OOM_FRACTION = 0.9  # host memory in use, of the total, above which a SIGKILL is likely the OOM killer
CALL_ENTRY = "reportgen.execute.fresh:serve_call"
# what an allocation that hit the address-space limit raises: Python's own, and torch's
# CPU allocator's ("DefaultCPUAllocator: can't allocate memory")
_OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "not enough memory", "std::bad_alloc")


class StartError(RuntimeError):
    """A fresh process could not start (its log says why)."""


class ForkServerError(RuntimeError):
    """The fork server could not start or stopped answering (the child is spawned instead)."""


class Process(Protocol):
    """What a child's process gives: ``subprocess.Popen``, or a fork server's child."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Forker(Protocol):
    """A fork server (``execute.forkserver.ForkServer``): children of its interpreter."""

    python: str

    def fork(self, arg: str, log_path: str | Path | None, fd: int, *, entry: str,
             memory_bytes: int | None = None) -> Process: ...


# --- the environment a fresh process starts in ----------------------------------------------

def _source_root() -> str | None:
    """The directory this reportgen is imported from, where it is a source tree (an
    installed copy lives among its environment's packages, which another interpreter
    must not see)."""
    root = Path(__file__).resolve().parents[2]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def child_env(env: Mapping[str, str], python: str = sys.executable) -> dict[str, str]:
    """The environment of a process this one starts: unbuffered output, and this process's
    import path (as multiprocessing's spawn does). Another interpreter gets only this
    reportgen's source tree besides its own packages: its torch and transformers are the
    point of running there."""
    out = dict(env)
    out.setdefault("PYTHONUNBUFFERED", "1")
    if python == sys.executable:
        paths = [*sys.path, out.get("PYTHONPATH", "")]
    else:
        paths = [_source_root() or "", out.get("PYTHONPATH", "")]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return out


def wait_ready(conn: Connection, alive: Callable[[], bool], timeout_s: float, poll_s: float) -> bool:
    """Whether a started process said ``("ready", pid)`` within ``timeout_s`` while alive."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if conn.poll(poll_s):
            try:
                message = conn.recv()
            except EOFError:
                return False
            if isinstance(message, tuple) and message[:1] == ("ready",):
                return True
        if not alive():
            return False
    return False


def close_quietly(conn: Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except OSError:
            pass


def watch_parent(parent: int) -> None:
    """Exit at once when ``parent`` is no longer this process's parent (it died)."""

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(0)  # orphaned: whoever wanted the answer is gone
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# --- why a process ended ----------------------------------------------------------------------

def _rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def death_reason(returncode: int, seconds: float, memory: tuple[int, int] | None,
                 cgroup: tuple[MemoryCgroup, MemoryCgroup] | None = None, *,
                 what: str = "worker", memory_bytes: int | None = None) -> str:
    """Why a process ended without answering, in one line. ``memory`` is the host's peak
    (in use, total) while it ran; ``cgroup`` its memory cgroup before and after;
    ``memory_bytes`` the address-space limit it ran under, if any."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        reason = f"{what} killed by {name} ({signum}) after {seconds:.0f} s"
    else:
        reason = f"{what} exited with code {returncode} after {seconds:.0f} s"
    if memory_bytes is not None:
        reason += f" under a memory limit of {_gib(memory_bytes)}"
    if memory is not None:
        used, total = memory
        reason += f", host memory {used / GIB:.1f} of {total / GIB:.1f} GiB in use"
        if returncode == -signal.SIGKILL and used >= OOM_FRACTION * total:
            reason += ": likely out of host memory"
    if cgroup is not None:
        before, after = cgroup
        limit = f"limit {_gib(before.limit_bytes)}" if before.limit_bytes else "no limit of its own"
        if _rose(before.oom_kills, after.oom_kills):
            reason += f"; its memory cgroup ({limit}) recorded an OOM kill: out of memory"
        elif returncode == -signal.SIGKILL and before.limit_bytes and _rose(before.limit_hits, after.limit_hits):
            reason += f"; its memory cgroup ({limit}) hit its limit: out of memory"
    return reason


def raised_reason(kind: str, message: str, memory_bytes: int | None = None) -> str:
    """A call that raised, in one line: ``<Type>: <first line>``, said to be the memory
    limit's doing where one was set and the error is an allocation's."""
    first = (message.strip().splitlines() or [""])[0]
    text = f"{kind}: {first}" if first else kind
    if memory_bytes is not None and any(marker in text for marker in _OUT_OF_MEMORY):
        return f"out of memory: over its memory limit of {_gib(memory_bytes)} ({text})"
    return text


@dataclass(frozen=True)
class Ended:
    """A process that gave no answer: why (one line), its exit code (negative: the
    signal; None when it was killed for the timeout) and how long it was waited for."""

    reason: str
    code: int | None
    seconds: float
    timed_out: bool = False


@dataclass(frozen=True)
class Answer:
    value: Any


# --- the parent's side --------------------------------------------------------------------------

class Child:
    """One fresh process and its channel: spawned from ``python`` or forked from
    ``forkserver`` (given one, the caller has checked it runs that interpreter; where it
    cannot fork, the process is spawned), running ``entry`` with ``arg``
    under ``memory_bytes`` of address space, its output to ``log_path`` (None: this
    process's own). ``what`` names it in reasons ("worker", "process")."""

    def __init__(self, entry: str, arg: str = "", *, log_path: str | Path | None = None,
                 env: Mapping[str, str] | None = None, python: str = sys.executable,
                 forkserver: Forker | None = None, memory_bytes: int | None = None,
                 what: str = "process") -> None:
        self.entry = entry
        self.arg = arg
        self.log_path = Path(log_path) if log_path is not None else None
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.forkserver = forkserver
        self.memory_bytes = memory_bytes
        self.what = what
        self.proc: Process | None = None
        self.conn: Connection | None = None
        self.forked = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _note(self, text: str) -> None:
        if self.log_path is not None:
            with open(self.log_path, "ab") as log:
                log.write(f"--- {text}\n".encode())

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S, *,
              keep_waiting: Callable[[], bool] = lambda: True) -> None:
        """Start the process and wait until it says it is ready (``StartError`` if it
        dies first, or ``keep_waiting`` says stop)."""
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        parent_sock, child_sock = socket.socketpair()
        proc: Process | None = None
        if self.forkserver is not None:
            try:
                proc = self.forkserver.fork(self.arg, self.log_path, child_sock.fileno(), entry=self.entry,
                                            memory_bytes=self.memory_bytes)
                self.forked = True
            except ForkServerError as exc:
                # spawned instead: slower to start, measured alike
                self._note(f"{exc}; this {self.what} is spawned")
        if proc is None:
            argv = [self.python, "-m", "reportgen.execute.fresh", "--fd", str(child_sock.fileno()),
                    "--parent", str(os.getpid()), "--entry", self.entry, "--arg", self.arg]
            if self.memory_bytes is not None:
                argv += ["--memory-bytes", str(self.memory_bytes)]
            log = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115 - closed below
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT if log is not None else None,
                                        env=child_env(self.env, self.python),
                                        pass_fds=(child_sock.fileno(),), close_fds=True)
            except OSError as exc:
                child_sock.close()
                parent_sock.close()
                raise StartError(f"the {self.what} could not start: {self.python}: {exc}") from exc
            finally:
                if log is not None:
                    log.close()
        child_sock.close()
        self.proc, self.conn = proc, Connection(parent_sock.detach())
        if wait_ready(self.conn, lambda: proc.poll() is None and keep_waiting(), ready_timeout_s, POLL_S):
            return
        self.kill()
        where = f"; its log says why: {self.log_path}" if self.log_path is not None else ""
        raise StartError(f"the {self.what} did not start{where}")

    def ask(self, message: Any, timeout_s: float | None = None) -> Answer | Ended:
        """Send ``message`` and wait for one answer; or why none came: the process died
        (any signal; the host's peak memory and its memory cgroup's OOM counters say
        whether memory killed it) or ran past ``timeout_s`` (then it is killed)."""
        proc, conn = self.proc, self.conn
        if proc is None or conn is None:
            raise StartError(f"the {self.what} is not running")
        peak = host_memory()
        cgroup = memory_cgroup(proc.pid)
        t0 = time.monotonic()
        try:
            conn.send(message)
        except OSError:
            pass  # it died already: judged below like any death
        while True:
            cgroup = follow(cgroup, proc.pid, lambda: proc.poll() is None)
            try:
                if conn.poll(POLL_S):
                    return Answer(conn.recv())
            except (EOFError, OSError):
                pass  # died while answering (or was killed from another thread)
            now = host_memory()
            if now is not None and (peak is None or now[0] > peak[0]):
                peak = now
            if proc.poll() is not None:
                break
            seconds = time.monotonic() - t0
            if timeout_s is not None and seconds > timeout_s:
                self.kill()
                return Ended(f"timed out after {timeout_s:.0f} s", None, seconds, timed_out=True)
        code = proc.wait()
        cgroups = (cgroup, refresh(cgroup)) if cgroup is not None else None
        seconds = time.monotonic() - t0
        return Ended(death_reason(code, seconds, peak, cgroups, what=self.what, memory_bytes=self.memory_bytes),
                     code, seconds)

    def tail(self, offset: int = 0) -> str:
        """The last lines of its log written after ``offset``."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        with open(self.log_path, "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path is not None and self.log_path.is_file() else 0

    def kill(self) -> None:
        """Kill it now. Safe from another thread (Ctrl-C in the main thread while another
        thread waits on it)."""
        with self._lock:
            proc, conn = self.proc, self.conn
            self.proc, self.conn = None, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        close_quietly(conn)

    def close(self, grace_s: float = 10.0) -> None:
        """Ask it to exit (``None``); kill it if it does not within ``grace_s``."""
        proc, conn = self.proc, self.conn
        if proc is not None and conn is not None and proc.poll() is None:
            try:
                conn.send(None)
                proc.wait(timeout=grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


# --- one call in a fresh process --------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    """What a call in a fresh process gave: its return value (``reason`` None), or why
    there is none: it raised (``reason`` ``<Type>: <first line>``, ``traceback``), the
    process died or timed out (``ended``), or it did not start."""

    value: Any = None
    reason: str | None = None
    traceback: str | None = None
    ended: Ended | None = None
    pid: int | None = None
    forked: bool = False
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


def target_path(target: str | Callable[..., Any]) -> str:
    """``module:function`` of a function (a script's: ``path/to/script.py:function``)."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", "")
    if not module or "<" in name:
        raise ValueError(f"{target!r} is not a module-level function: a fresh process cannot import it")
    if module == "__main__":
        main = sys.modules["__main__"]
        if not getattr(main, "__file__", None):
            raise ValueError(f"{name} is defined in an interactive session: a fresh process cannot import it")
        return f"{Path(main.__file__).resolve()}:{name}"  # type: ignore[arg-type]
    return f"{module}:{name}"


def run(target: str | Callable[..., Any], kwargs: Mapping[str, Any] | None = None, *,
        python: str = sys.executable, timeout_s: float | None = None, memory_bytes: int | None = None,
        log_path: str | Path | None = None, env: Mapping[str, str] | None = None,
        forkserver: Forker | None = None, what: str = "process") -> Result:
    """Call ``target(**kwargs)`` in a fresh process and return what came of it.

    ``python``: the interpreter (another one runs the same call with its own packages);
    ``forkserver``: fork the process from it instead (where it runs ``python``; else, or
    where it cannot fork, the process is spawned);
    ``timeout_s``: kill it after that long; ``memory_bytes``: its address-space limit
    (``RLIMIT_AS``: an allocation past it raises, and the reason says so); ``log_path``:
    its output (None: this process's). The arguments and the value travel pickled."""
    path = target_path(target)
    if forkserver is not None and forkserver.python != python:
        forkserver = None  # its children run its interpreter: another one is spawned
    child = Child(CALL_ENTRY, log_path=log_path, env=env, python=python, forkserver=forkserver,
                  memory_bytes=memory_bytes, what=what)
    try:
        child.start()
    except StartError as exc:
        return Result(reason=str(exc), log_tail=child.tail())
    pid, forked = child.pid, child.forked
    try:
        answer = child.ask(("call", path, dict(kwargs or {})), timeout_s)
        if isinstance(answer, Ended):
            return Result(reason=answer.reason, ended=answer, pid=pid, forked=forked, log_tail=child.tail())
        status, *rest = answer.value
        if status == "returned":
            return Result(value=rest[0], pid=pid, forked=forked)
        kind, message, trace = rest
        return Result(reason=raised_reason(kind, message, memory_bytes), traceback=trace, pid=pid,
                      forked=forked, log_tail=child.tail())
    finally:
        child.close()


def interpreter(python: str = sys.executable, *, timeout_s: float = 120.0) -> dict[str, Any]:
    """What an interpreter measures with, asked in a fresh process of its own: its path,
    Python version, environment prefix and the torch and transformers versions it has."""
    result = run(describe, python=python, timeout_s=timeout_s)
    if not result.ok:
        raise StartError(f"{python}: {result.reason}")
    return dict(result.value)


def describe() -> dict[str, Any]:
    """This interpreter, as ``interpreter`` reports it (runs in the fresh process)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"executable": sys.executable, "python": sys.version.split()[0], "prefix": sys.prefix,
            "pid": os.getpid(), **versions}


# --- the process's side ---------------------------------------------------------------------------

def load_callable(path: str) -> Callable[..., Any]:
    """``module:function``, or ``path/to/file.py:function`` (loaded under a name of its
    own, so its ``if __name__ == "__main__"`` block does not run)."""
    module, _, name = path.rpartition(":")
    if not module or not name:
        raise ValueError(f"not a 'module:function' path: {path!r}")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"_fresh_{Path(module).stem}", module)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {module}")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        spec.loader.exec_module(loaded)
    else:
        loaded = importlib.import_module(module)
    found: Any = loaded
    for part in name.split("."):
        found = getattr(found, part)
    return found  # type: ignore[no-any-return]


def limit_memory(memory_bytes: int | None) -> None:
    if memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def serve_call(conn: Connection, arg: str) -> int:
    """One call: ``("call", path, kwargs)`` in, ``("returned", value)`` or ``("raised",
    type, message, traceback)`` out."""
    conn.send(("ready", os.getpid()))
    try:
        request = conn.recv()
    except EOFError:
        return 0
    if request is None:
        return 0
    _, path, kwargs = request
    try:
        value = load_callable(path)(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which judges it
        conn.send(("raised", type(exc).__name__, str(exc), traceback.format_exc(limit=20)))
        return 1
    conn.send(("returned", value))
    return 0


def enter(fd: int, entry: str, arg: str, parent: int, memory_bytes: int | None = None) -> int:
    """What a fresh process runs, spawned or forked: its parent watched, its memory
    limited, then ``entry(connection, arg)``."""
    watch_parent(parent)
    limit_memory(memory_bytes)  # after the watching thread has its stack
    conn = Connection(fd)
    try:
        return int(load_callable(entry)(conn, arg) or 0)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reportgen.execute.fresh")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--entry", required=True, help="module:function called with (connection, --arg)")
    parser.add_argument("--arg", default="")
    parser.add_argument("--memory-bytes", type=int, default=None)
    args = parser.parse_args(argv)
    # Ctrl-C at a terminal reaches the whole process group; stopping is the parent's job
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return enter(args.fd, args.entry, args.arg, args.parent, args.memory_bytes)


if __name__ == "__main__":
    sys.exit(main())
