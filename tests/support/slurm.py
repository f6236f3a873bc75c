"""A real single-node Slurm cluster on this host, for end-to-end tests.

Built from Debian's packages: ``apt-get install slurm-wlm munge`` (or just
``slurmctld slurmd slurm-client munge``), and for ``sacct`` also
``slurmdbd mariadb-server``. Everything lives in one temporary
directory: the configuration, the munge key and socket, the daemons' state,
spool, pid and log files. The daemons run in the foreground under
:class:`subprocess.Popen`, so the cluster knows their pids and stops exactly
those (SIGTERM, a bounded wait, then SIGKILL); it never signals a process by
name and removes nothing outside its directory.

Typical use::

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster() as cluster:
        cluster.run(["sbatch", "--wrap", "true"])

Clients (``sbatch``, ``squeue``, ``scancel``, ``sacct`` and submitit, which
calls them through :mod:`subprocess`) find the cluster through ``SLURM_CONF``:
pass ``env=cluster.env`` to a subprocess, or call
``cluster.apply_env(monkeypatch)`` to point ``os.environ`` at it.

``sacct`` (which submitit polls for job states) needs the accounting daemon,
slurmdbd, and slurmdbd needs a MySQL server. When the programs are installed
(``apt-get install slurmdbd mariadb-server``) the cluster also runs a private
MariaDB server (Unix socket only, data in the temporary directory) and
slurmdbd, and ``cluster.accounting`` is true. Without them ``sacct`` only says
"Slurm accounting storage is disabled" (exit status 1); the cluster then writes
a job-completion log (``JobCompType=jobcomp/filetxt``) that ``sacct -c`` reads,
listing jobs once they have ended.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "sacct", "srun", "scontrol", "munge")
ACCOUNTING = ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
PARTITION = "debug"
CLUSTER_NAME = "testcluster"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
MUNGE_SOCKET_NAME = "munge.socket.2"
#: Prefixes of environment variables that steer Slurm's clients (an enclosing
#: job's SLURM_JOB_ID, a user's SBATCH_PARTITION, ...); the cluster's env drops them.
INHERITED_PREFIXES = ("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SRUN_", "SALLOC_", "SINFO_", "SCANCEL_")
_SUN_PATH_MAX = 107  # bytes a Unix socket path may hold, less the trailing NUL


# --- probing the host ---------------------------------------------------------------


def _which(name: str) -> str | None:
    """Find a program on PATH or in the sbin directories, where Debian puts the daemons."""
    path = os.environ.get("PATH", os.defpath) + os.pathsep + "/usr/sbin:/sbin:/usr/local/sbin"
    return shutil.which(name, path=path)


def skip_reason() -> str | None:
    """Why a Slurm cluster cannot be started here, or None when it can."""
    if not hasattr(os, "geteuid"):
        return "a Slurm test cluster needs a POSIX host"
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return (
            f"Slurm/munge programs not found: {', '.join(missing)} "
            "(install the Debian packages: apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        return "a Slurm test cluster must run as root (slurmd and SlurmUser=root)"
    return None


def accounting_available() -> bool:
    """Whether slurmdbd and a MariaDB server are installed (so ``sacct`` can work)."""
    return all(_which(name) for name in ACCOUNTING)


def short_hostname() -> str:
    """This host's short name, which slurmd matches against NodeName."""
    return socket.gethostname().split(".")[0]


def real_memory_mb(margin_mb: int = 512, meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal in MB less a margin; slurmd drains a node whose RealMemory exceeds its own."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            total_mb = int(line.split()[1]) // 1024
            return max(1, total_mb - max(margin_mb, total_mb // 20))
    raise RuntimeError(f"no MemTotal line in {meminfo}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports nobody is listening on now (held open together, so they are distinct)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --- configuration ------------------------------------------------------------------


def write_config(
    root: Path,
    *,
    hostname: str | None = None,
    cpus: int | None = None,
    memory_mb: int | None = None,
    ports: Sequence[int] | None = None,
    cluster_name: str = CLUSTER_NAME,
    slurmdbd_port: int | None = None,
) -> Path:
    """Write ``slurm.conf`` and ``cgroup.conf`` for a one-node cluster under ``root``.

    Returns the path of ``slurm.conf``. The plugins chosen need no cgroups and
    no systemd, so the cluster runs inside a container. With ``slurmdbd_port``
    jobs are recorded by a slurmdbd listening there (see :func:`write_slurmdbd_config`);
    without, in a job-completion log that ``sacct -c`` reads.
    """
    root = Path(root)
    hostname = hostname or short_hostname()
    cpus = cpus or os.cpu_count() or 1
    memory_mb = memory_mb or real_memory_mb()
    ctld_port, slurmd_port = ports or free_ports(2)
    for sub in ("state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    settings: list[tuple[str, Any]] = [
        ("ClusterName", cluster_name),
        # The address in brackets spares the daemons a lookup of this host's name.
        ("SlurmctldHost", f"{hostname}(127.0.0.1)"),
        ("SlurmctldPort", ctld_port),
        ("SlurmdPort", slurmd_port),
        ("SlurmUser", "root"),
        ("SlurmdUser", "root"),
        # munge, but through our own munged and socket rather than /run/munge.
        ("AuthType", "auth/munge"),
        ("AuthInfo", f"socket={root / 'munge' / MUNGE_SOCKET_NAME}"),
        ("CredType", "cred/munge"),
        # State, spool, pid and log files all inside root.
        ("StateSaveLocation", root / "state"),
        ("SlurmdSpoolDir", root / "spool"),
        ("SlurmctldPidFile", root / "run" / "slurmctld.pid"),
        ("SlurmdPidFile", root / "run" / "slurmd.pid"),
        ("SlurmctldLogFile", root / "log" / "slurmctld.log"),
        ("SlurmdLogFile", root / "log" / "slurmd.log"),
        ("SlurmctldDebug", "info"),
        ("SlurmdDebug", "info"),
        # No cgroups: track a job's processes through /proc, bind no tasks.
        ("ProctrackType", "proctrack/linuxproc"),
        ("TaskPlugin", "task/none"),
        ("JobAcctGatherType", "jobacct_gather/none"),
        ("MpiDefault", "none"),
        ("PropagateResourceLimits", "NONE"),
        # Allocate single CPUs (not whole cores, not memory): two 1-CPU jobs share a 2-CPU node.
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_CPU"),
        ("SchedulerType", "sched/backfill"),
        # Start a batch job as soon as it is submitted (batch_sched_delay defaults to 3 s).
        ("SchedulerParameters", "batch_sched_delay=0"),
        # slurmd reports the configured CPUs/memory, not what it detects (containers differ).
        ("SlurmdParameters", "config_overrides"),
        ("ReturnToService", 2),
        # Ended jobs also go to a job-completion log, which `sacct -c` reads even without slurmdbd.
        ("JobCompType", "jobcomp/filetxt"),
        ("JobCompLoc", root / "log" / "jobcomp.txt"),
        # Quick tests: kill a cancelled job's processes soon, keep ended jobs in squeue a while.
        ("KillWait", 2),
        ("MinJobAge", 600),
        ("MailProg", "/bin/true"),
    ]
    if slurmdbd_port:
        settings += [
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", "127.0.0.1"),
            ("AccountingStoragePort", slurmdbd_port),
            # For slurmdbd connections this names the munge socket (AuthInfo is not used).
            ("AccountingStoragePass", root / "munge" / MUNGE_SOCKET_NAME),
        ]
    else:
        settings += [("AccountingStorageType", "accounting_storage/none")]
    lines = [f"{key}={value}" for key, value in settings]
    lines += [
        f"NodeName={hostname} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={hostname} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    # slurmd reads cgroup.conf even with proctrack/linuxproc; autodetect on a host
    # (or container) without a usable cgroup hierarchy must not stop it.
    (root / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
    return conf


def write_slurmdbd_config(root: Path, *, port: int) -> Path:
    """Write ``slurmdbd.conf`` (mode 0600, which slurmdbd insists on) beside ``slurm.conf``
    (where slurmdbd looks for it) for a slurmdbd on 127.0.0.1:``port`` that logs into
    MariaDB as root through a Unix socket.

    slurmdbd.conf has no setting for that socket's path; the MySQL client library takes
    it from the environment variable MYSQL_UNIX_PORT, which :class:`SlurmCluster` sets.
    """
    root = Path(root)
    settings: list[tuple[str, Any]] = [
        ("AuthType", "auth/munge"),
        ("AuthInfo", f"socket={root / 'munge' / MUNGE_SOCKET_NAME}"),
        ("DbdHost", "localhost"),
        ("DbdAddr", "127.0.0.1"),
        ("DbdPort", port),
        ("SlurmUser", "root"),
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", "localhost"),  # "localhost" makes the client use the Unix socket
        ("StorageUser", "root"),
        ("StorageLoc", "slurm_acct_db"),
        ("PidFile", root / "run" / "slurmdbd.pid"),
        ("LogFile", root / "log" / "slurmdbd.log"),
        ("DebugLevel", "info"),
    ]
    path = root / "slurmdbd.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{key}={value}\n" for key, value in settings))
    return path


def write_munge_key(path: Path) -> Path:
    """A fresh 1024-byte munge key, mode 0400 (munged refuses one others can read)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    return path


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"({path}: {e.strerror})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- the cluster --------------------------------------------------------------------


class SlurmError(RuntimeError):
    """The cluster did not start, or a client command failed."""


class SlurmCluster:
    """munged, slurmctld and slurmd for one node (this host), all under one directory;
    with ``accounting`` also a private MariaDB server and slurmdbd, so ``sacct`` works.

    ``accounting``: True requires slurmdbd and MariaDB, False runs without them,
    None (the default) uses them when installed. ``root`` defaults to a fresh
    directory under /tmp (short, because socket paths must fit in 107 bytes); a
    given ``root`` is used as is and left in place on stop, a default one is removed.
    """

    def __init__(self, root: Path | str | None = None, *, accounting: bool | None = None,
                 start_timeout: float = START_TIMEOUT_S):
        if accounting is None:
            accounting = accounting_available()
        self.accounting = accounting
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="slurm-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # munged warns unless all may search the way to its socket
        self.start_timeout = start_timeout
        self.hostname = short_hostname()
        self.partition = PARTITION
        self.conf = self.root / "slurm.conf"
        self.munge_dir = self.root / "munge"
        self.munge_socket = self.munge_dir / MUNGE_SOCKET_NAME
        self.mysql_dir = self.root / "mysql"
        self.mysql_socket = self.mysql_dir / "mysqld.sock"
        self.log_dir = self.root / "log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.startup_s: float | None = None
        env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_PREFIXES)}
        env["SLURM_CONF"] = str(self.conf)
        path = env.get("PATH", os.defpath).split(os.pathsep)
        env["PATH"] = os.pathsep.join(path + [p for p in ("/usr/sbin", "/sbin") if p not in path])
        #: Environment for client commands: os.environ without inherited Slurm
        #: settings (SLURM_JOB_ID of an enclosing job, SBATCH_PARTITION, ...),
        #: plus SLURM_CONF (and /usr/sbin on PATH).
        self.env: dict[str, str] = env

    # -- lifecycle

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write the configuration, start the daemons, wait until the node is idle."""
        reason = skip_reason()
        if reason:
            raise SlurmError(reason)
        if self.accounting and not accounting_available():
            raise SlurmError(f"accounting needs {', '.join(ACCOUNTING)} "
                             "(apt-get install slurmdbd mariadb-server)")
        for sock in (self.munge_socket, self.mysql_socket):
            if len(os.fsencode(sock)) > _SUN_PATH_MAX:
                raise SlurmError(f"socket path longer than {_SUN_PATH_MAX} bytes: {sock}")
        t0 = time.monotonic()
        atexit.register(self.stop)  # should the caller never get to stop()
        try:
            ctld_port, slurmd_port, dbd_port = free_ports(3)
            write_config(self.root, ports=(ctld_port, slurmd_port),
                         slurmdbd_port=dbd_port if self.accounting else None)
            self._start_munged()
            if self.accounting:
                self._start_mariadb()
                self._start_slurmdbd(dbd_port)
            self._start_daemon("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
            self._start_daemon("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf)])
            self.wait_for_node("idle", timeout=max(1.0, self.start_timeout - (time.monotonic() - t0)))
        except BaseException as e:
            diagnostics = self.diagnostics()
            self.stop(keep_root=True)
            if not isinstance(e, Exception):  # KeyboardInterrupt and the like
                raise
            raise SlurmError(f"Slurm test cluster did not start under {self.root}\n{diagnostics}") from None
        self.startup_s = time.monotonic() - t0

    def _start_munged(self) -> None:
        self.munge_dir.mkdir(mode=0o755, exist_ok=True)  # munged warns about a socket dir others cannot search
        key = write_munge_key(self.munge_dir / "munge.key")
        self._start_daemon(
            "munged",
            [
                _which("munged"), "--foreground", "--force",  # --force: it refuses root otherwise
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--log-file={self.log_dir / 'munged.log'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
        )
        # A credential round trip proves the socket answers.
        self._wait_for(lambda: self.munge_socket.exists() and self.run(
            ["munge", "-n", "-S", str(self.munge_socket)], check=False, timeout=10).returncode == 0,
            "munged to answer", timeout=15)

    def _start_mariadb(self) -> None:
        data = self.mysql_dir / "data"
        data.mkdir(parents=True, mode=0o700, exist_ok=True)
        # Root logs in through the socket (unix_socket auth): no password anywhere.
        self.run([_which("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                  "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=60)
        self._start_daemon("mariadbd", [
            _which("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root",
            "--skip-networking", f"--socket={self.mysql_socket}",
            f"--pid-file={self.mysql_dir / 'mariadbd.pid'}",
            f"--log-error={self.log_dir / 'mariadbd.log'}",
            "--innodb-buffer-pool-size=64M", "--skip-log-bin",
        ])
        self._wait_for(lambda: self.mysql_socket.exists() and self.run(
            [_which("mariadb"), "--no-defaults", "-S", str(self.mysql_socket), "-u", "root", "-e", "SELECT 1"],
            check=False, timeout=10).returncode == 0, "MariaDB to answer", timeout=30)

    def _start_slurmdbd(self, port: int) -> None:
        write_slurmdbd_config(self.root, port=port)
        # slurmdbd takes no -f: it reads slurmdbd.conf beside $SLURM_CONF.
        self._start_daemon("slurmdbd", [_which("slurmdbd"), "-D"],
                           extra_env={"MYSQL_UNIX_PORT": str(self.mysql_socket)})
        # The cluster must exist in the database before slurmctld registers with slurmdbd.
        self._wait_for(lambda: self.run([_which("sacctmgr"), "-i", "add", "cluster", CLUSTER_NAME],
                                        check=False, timeout=15).returncode == 0,
                       "slurmdbd to register the cluster", timeout=30)

    def _wait_for(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            if ready():
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.1)

    def _start_daemon(self, name: str, argv: Sequence[str | None],
                      extra_env: dict[str, str] | None = None) -> None:
        self.log_dir.mkdir(exist_ok=True)
        with open(self.log_dir / f"{name}.out", "ab") as out:
            self.procs[name] = subprocess.Popen(
                [str(a) for a in argv],
                env={**self.env, **(extra_env or {})},
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # keep a terminal's Ctrl-C for pytest, not the daemons
            )

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise SlurmError(f"{name} exited with status {proc.returncode}")

    def wait_for_node(self, state: str = "idle", timeout: float = START_TIMEOUT_S) -> None:
        """Wait until sinfo shows the node in ``state`` (e.g. ``idle``)."""
        deadline = time.monotonic() + timeout
        seen = ""
        while True:
            self._check_alive()
            proc = subprocess.run(
                ["sinfo", "-h", "-n", self.hostname, "-o", "%T"], env=self.env,
                capture_output=True, text=True, timeout=15, check=False,
            )
            seen = proc.stdout.strip() or proc.stderr.strip()
            # Exactly: "idle*" means not responding, "idle~" powered down.
            if proc.returncode == 0 and seen == state:
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"node {self.hostname} not {state} within {timeout:.0f} s (sinfo: {seen!r})")
            time.sleep(0.25)

    def stop(self, *, keep_root: bool = False) -> None:
        """Cancel the jobs left, stop the daemons we started (by pid), remove a default root."""
        atexit.unregister(self.stop)
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                subprocess.run(["scancel", "--full", "--quiet", f"--partition={self.partition}"],
                               env=self.env, capture_output=True, timeout=10, check=False)
                self._wait_queue_empty(timeout=10)
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _terminate(proc, STOP_TIMEOUT_S)
        # slurmstepd and job processes outlive slurmd by design; they carry our SLURM_CONF.
        _terminate_pids(self.stray_pids(), STOP_TIMEOUT_S)
        if self._own_root and not keep_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _wait_queue_empty(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True,
                                 text=True, timeout=10, check=False).stdout
            if not out.strip():
                return
            time.sleep(0.25)

    def stray_pids(self) -> list[int]:
        """Processes (other than this one and its ancestors) whose environment names our slurm.conf."""
        marker = b"\0SLURM_CONF=" + os.fsencode(self.conf) + b"\0"
        spared = _ancestors(os.getpid())
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in spared:
                continue
            try:
                environ = b"\0" + (entry / "environ").read_bytes()
            except OSError:
                continue
            if marker in environ:
                found.append(int(entry.name))
        return found

    # -- clients

    def run(self, argv: Sequence[str], *, timeout: float = 30, check: bool = True,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a client command against this cluster; raise with its output when it fails."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False, **kwargs)
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc

    def sbatch(self, *args: str, timeout: float = 30) -> str:
        """Submit with ``sbatch --parsable``; return the job id."""
        out = self.run(["sbatch", "--parsable", *args], timeout=timeout).stdout.strip()
        return out.split(";")[0]

    def job_states(self, job_id: str) -> list[str]:
        """The states of a job's tasks, from slurmctld, which keeps ended jobs for
        MinJobAge seconds (so this works without accounting)."""
        proc = self.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False, timeout=15)
        return proc.stdout.split()

    def wait_job(self, job_id: str, timeout: float = 60, states: Sequence[str] = ("COMPLETED",)) -> str:
        """Wait until every task of ``job_id`` has ended; return the final state."""
        ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                 "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
        deadline = time.monotonic() + timeout
        while True:
            seen = set(self.job_states(job_id))
            if seen and seen <= ended:
                state = " ".join(sorted(seen))
                if set(states) and not seen <= set(states):
                    raise SlurmError(f"job {job_id} ended {state}\n{self.diagnostics()}")
                return state
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job_id} still {sorted(seen) or 'unknown'} after {timeout:.0f} s\n"
                                 f"{self.diagnostics()}")
            time.sleep(0.2)

    def apply_env(self, monkeypatch: Any) -> None:
        """Point this process's environment at the cluster, for code (such as submitit)
        that runs the clients without an ``env=``: set SLURM_CONF and PATH, drop the
        variables that would steer the clients elsewhere. ``monkeypatch`` undoes it."""
        for key in list(os.environ):
            if key.startswith(INHERITED_PREFIXES):
                monkeypatch.delenv(key)
        monkeypatch.setenv("SLURM_CONF", self.env["SLURM_CONF"])
        monkeypatch.setenv("PATH", self.env["PATH"])

    def diagnostics(self, lines: int = 30) -> str:
        """The tails of the daemons' logs and their exit statuses, for error messages."""
        parts = []
        for name, proc in self.procs.items():
            status = "running" if proc.poll() is None else f"exited {proc.returncode}"
            parts.append(f"{name} (pid {proc.pid}): {status}")
        for path in sorted(self.log_dir.glob("*")) if self.log_dir.is_dir() else []:
            if path.name != "jobcomp.txt":
                parts.append(f"--- {path} ---\n{_tail(path, lines)}")
        return "\n".join(parts)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60,
               cluster: SlurmCluster | None = None) -> Any:
    """Poll ``condition`` until it returns something true; fail the test after ``timeout``
    seconds, with ``cluster``'s diagnostics when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}"
                        + (f"\n{cluster.diagnostics()}" if cluster else ""))
        time.sleep(0.2)


# --- stopping processes by pid ------------------------------------------------------


def _ancestors(pid: int) -> set[int]:
    seen = {pid}
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        seen.add(pid)
    return seen


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _terminate_pids(pids: Sequence[int], timeout: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return
