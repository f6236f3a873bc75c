"""CPU workers forked from a fork server that imported torch and transformers once: each
round still gets its own process, every way a worker can end still reads as it did, and
where the server cannot start the workers are spawned as before."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from reportgen import cli
from reportgen.execute import forkserver, supervisor, worker
from reportgen.execute.runner import MEASURE, PREFLIGHT
from reportgen.suite import load_suite, parse_overrides

TESTS = Path(__file__).parent


def _combo(**overrides: str) -> Any:
    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "attn": "sdpa", "device": "cpu",
                                                "modes": "forward", "seq_lens": "16", **overrides}))
    return suite.combinations()[0]


def _task(tmp_path: Path) -> dict[str, Any]:
    combo = _combo()
    return {"combo": combo, "combo_id": combo.id, "run_dir": tmp_path, "budget_s": 1.0, "seed": 0,
            "profile_iterations": 1}


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[forkserver.ForkServer]:
    monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.delenv("REPORTGEN_FAKE_PLAN", raising=False)
    fs = forkserver.ForkServer(log_dir=tmp_path / "logs", preload={"modules": ["support.fake_measure"], "models": []})
    yield fs
    fs.close()


def _server_pid(fs: forkserver.ForkServer) -> int:
    assert fs.proc is not None
    return fs.proc.pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- what the server preloads ---------------------------------------------------------------


def test_the_preload_names_the_measuring_modules_and_each_model_once() -> None:
    suite = load_suite("tiny", parse_overrides({"models": "gpt2,bert-base,attention-micro", "attn": "sdpa",
                                                "device": "cpu", "modes": "forward", "seq_lens": "16,32"}))
    combos = suite.combinations()
    preload = forkserver.preload_for(combos, [MEASURE, PREFLIGHT, MEASURE, None])
    assert preload["modules"] == list(dict.fromkeys([MEASURE.partition(":")[0], PREFLIGHT.partition(":")[0]]))
    assert sorted(name for name, _ in preload["models"]) == ["attention-micro", "bert-base", "gpt2"]
    json.dumps(preload)  # it travels on the server's command line


def test_model_names_resolve_to_their_modeling_modules() -> None:
    types = forkserver._model_types([["bert-base", None], ["gpt2", None], ["attention-micro", None],
                                     ["no-such-model-anywhere", None]])
    assert types == ["bert", "gpt2"]  # the micro-benchmark has none; an unknown name is left to its worker
    assert forkserver.modeling_modules([*types, "not-a-model-type"]) == [
        "transformers.models.bert.modeling_bert", "transformers.models.gpt2.modeling_gpt2"]


# --- forked workers -----------------------------------------------------------------------------


@pytest.mark.slow
def test_each_worker_is_a_fresh_process_forked_from_one_server(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    spec = worker.WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
    sup = supervisor.Supervisor(spec, log_dir=tmp_path / "logs", timeout_s=60, forkserver=server)
    pids = []
    for _ in range(3):
        outcome = sup.run(_task(tmp_path))
        assert outcome.status == "ok", outcome.reason
        assert outcome.execution["worker_forked"] is True
        pids.append(outcome.execution["worker_pid"])
        sup.close()  # a round ends its worker; the next one is forked afresh
    assert len(set(pids)) == 3
    parent = _server_pid(server)
    # the workers were the server's children, each logged to its own file, and are gone
    calls = [int(line.split()[0]) for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert calls == pids
    assert not any(_alive(pid) for pid in pids)
    logs = sorted((tmp_path / "logs").glob("worker-cpu-*.log"))
    assert len(logs) == 3
    assert all(f"forked from the fork server (pid {parent})" in log.read_text() for log in logs)
    server_log = next((tmp_path / "logs").glob("forkserver-*.log")).read_text()
    assert re.search(r"fork server ready \(pid \d+\)", server_log), server_log
    assert "not preloaded" not in server_log


def test_a_forked_process_collects_garbage_though_the_server_does_not(server: forkserver.ForkServer) -> None:
    """The server imports with the collector off; what it forks has it on, as any process."""
    from reportgen.execute import fresh

    got = fresh.run("gc:isenabled", forkserver=server, timeout_s=60)
    assert got.ok and got.forked and got.value is True
    assert fresh.run("gc:get_freeze_count", forkserver=server, timeout_s=60).value > 10000


@pytest.mark.slow
@pytest.mark.parametrize(("what", "reason"), [("kill", "worker killed by SIGKILL (9)"),
                                              ("segfault", "worker killed by SIGSEGV (11)")])
def test_a_forked_worker_dies_as_a_spawned_one_does(
        server: forkserver.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, reason: str) -> None:
    server.env["REPORTGEN_FAKE_PLAN"] = json.dumps({"*": what})  # the server starts with it, its workers inherit it
    spec = worker.WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
    sup = supervisor.Supervisor(spec, log_dir=tmp_path / "logs", timeout_s=60, forkserver=server)
    outcome = sup.run(_task(tmp_path))
    sup.close()
    assert outcome.status == "failed" and outcome.reason is not None and outcome.reason.startswith(reason)
    assert outcome.execution["worker_forked"] is True and outcome.execution["worker_restarted"] is True
    assert outcome.execution["worker_exit"] == -(9 if what == "kill" else 11)
    assert f"fake measure: {_combo().id}: {what}" in (outcome.log_tail or "")
    assert _alive(_server_pid(server))  # the server outlives its workers' deaths


@pytest.mark.slow
def test_the_server_survives_sigterm_so_a_workers_sigterm_is_reported(
        server: forkserver.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm ends a task with SIGTERM to all its processes: a worker so ended must read as
    # killed by SIGTERM (the task then leaves its combination pending), not vanish
    server.env["REPORTGEN_FAKE_PLAN"] = json.dumps({"*": "hang"})
    spec = worker.WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "w.log"
    ours, theirs = socket.socketpair()
    proc = server.fork(spec.to_json(), log, theirs.fileno())
    theirs.close()
    conn = Connection(ours.detach())
    assert conn.poll(60) and conn.recv()[0] == "ready"
    conn.send(_task(tmp_path))
    deadline = time.monotonic() + 60
    while ": hang" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(_server_pid(server), signal.SIGTERM)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert _alive(_server_pid(server))
    conn.close()


@pytest.mark.slow
def test_a_server_that_cannot_start_leaves_workers_spawned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPORTGEN_FAKE_PLAN", raising=False)
    broken = forkserver.ForkServer(log_dir=tmp_path / "logs", python="/bin/false")
    spec = worker.WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
    sup = supervisor.Supervisor(spec, log_dir=tmp_path / "logs", timeout_s=60, forkserver=broken)
    for _ in range(2):
        outcome = sup.run(_task(tmp_path))
        sup.close()
        assert outcome.status == "ok" and outcome.execution["worker_forked"] is False
    assert broken.failed is not None and "did not start" in broken.failed
    logs = sorted((tmp_path / "logs").glob("worker-cpu-*.log"))
    assert all("this worker is spawned" in log.read_text() for log in logs)


def test_a_gpu_worker_is_never_forked(tmp_path: Path) -> None:
    fs = forkserver.ForkServer(log_dir=tmp_path)
    spec = worker.WorkerSpec(device="cuda", slot="cuda:0", measure="support.fake_measure:measure")
    assert supervisor.Supervisor(spec, log_dir=tmp_path, timeout_s=1, forkserver=fs).forkserver is None
    assert fs.proc is None  # nothing started


@pytest.mark.slow
def test_a_run_forks_its_rounds_and_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.execute import runner

    monkeypatch.setattr(runner, "MEASURE", "support.fake_measure:measure")
    monkeypatch.setattr(runner, "PREFLIGHT", "support.fake_measure:preflight")
    monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.delenv("REPORTGEN_FAKE_PLAN", raising=False)
    out = tmp_path / "runs"
    # flags only: the CPU suite's rounds, each in its own worker
    assert cli.main(["profile", "--models", "gpt2", "--scale", "tiny", "--attn", "sdpa", "--modes", "forward",
                     "--seq-lens", "16", "--device", "cpu", "--out", str(out)]) == 0
    (record_path,) = out.glob("*/*/combinations/*.json")
    record = json.loads(record_path.read_text())
    assert record["execution"]["worker_forked"] is True
    pids = [int(line.split()[0]) for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert len(pids) >= 3 and len(set(pids)) == len(pids)  # a process per round
    (server_log,) = record_path.parent.parent.glob("logs/forkserver-*.log")
    server_pid = int(re.search(r"fork server ready \(pid (\d+)\)", server_log.read_text()).group(1))  # type: ignore[union-attr]
    assert "not preloaded" not in server_log.read_text()
    deadline = time.monotonic() + 10
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server_pid) and not any(_alive(pid) for pid in pids)


def test_the_server_module_imports_without_torch() -> None:
    # the supervisor imports it in the profile process, which must stay light
    code = ("import sys, reportgen.execute.forkserver, reportgen.execute.supervisor; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert out.stdout.split() == ["False", "False"]


def test_a_server_started_early_forks_workers_and_logs_into_the_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Started before the run's directory is known, the server imports in the background,
    forks workers as one started on first use does, and its output (held until then) is
    in its log in the run's directory."""
    monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.delenv("REPORTGEN_FAKE_PLAN", raising=False)
    fs = forkserver.ForkServer(log_dir=None, preload={"modules": ["support.fake_measure"], "models": []})
    try:
        fs.start_soon()
        fs.wait_started()
        assert fs.failed is None and fs.proc is not None and fs.proc.poll() is None
        assert fs.log_path is None
        fs.attach_log(tmp_path / "logs")
        spec = worker.WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
        sup = supervisor.Supervisor(spec, log_dir=tmp_path / "logs", timeout_s=60, forkserver=fs)
        outcome = sup.run(_task(tmp_path))
        sup.close()
        assert outcome.status == "ok" and outcome.execution["worker_forked"] is True
        (log,) = (tmp_path / "logs").glob("forkserver-*.log")
        assert f"fork server ready (pid {fs.proc.pid})" in log.read_text()
    finally:
        fs.close()
