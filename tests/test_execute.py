"""Supervised workers, claims and planning: every way a measurement can end costs that
combination only, and every other combination of the suite ends ``ok``."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support import fake_measure
from support.cgroups import CGROUP_OOM, limited_memory_cgroup
from support.fake_nvml import FakeNvml, load

from reportgen import cli
from reportgen.errors import UserError
from reportgen.execute import devices, memory, plan, runner, supervisor, worker
from reportgen.execute.record import combination_record
from reportgen.records.schema import COMBINATION_KIND, iter_runs, json_schema
from reportgen.suite import load_suite, parse_overrides

ROOT = Path(__file__).parent.parent
TESTS = Path(__file__).parent
# 2 models x 1 mode x 2 seq lens: small enough to run often, large enough to see "the others"
ARGS = ["--suite", "tiny", "--models", "bert-base,gpt2", "--attn", "sdpa", "--modes", "forward",
        "--device", "cpu"]
IDS = [f"{model}--forward--fp32--sdpa--b1--s{seq}--tiny" for model in ("bert-base", "gpt2") for seq in (16, 32)]
VALIDATOR = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))


@pytest.fixture
def use_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Workers import tests/support/fake_measure.py; returns its call log."""
    monkeypatch.setattr(runner, "MEASURE", "support.fake_measure:measure")
    monkeypatch.setattr(runner, "PREFLIGHT", "support.fake_measure:preflight")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(log))
    yield log


def _plan(monkeypatch: pytest.MonkeyPatch, plan_: Mapping[str, str]) -> None:
    monkeypatch.setenv("REPORTGEN_FAKE_PLAN", json.dumps(plan_))


def _profile(out: Path, *extra: str) -> int:
    return cli.main(["profile", *ARGS, "--out", str(out), *extra])


def _run_dir(out: Path) -> Path:
    (run,) = list(iter_runs(out))
    return run.path


def _records(out: Path) -> dict[str, dict[str, Any]]:
    directory = _run_dir(out) / "combinations"
    return {p.stem: json.loads(p.read_text()) for p in directory.glob("*.json")}


def _calls(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    return [(int(pid), combo_id) for pid, combo_id in (line.split() for line in log.read_text().splitlines())]


def _others_ok(records: Mapping[str, Mapping[str, Any]], bad: str) -> None:
    assert sorted(records) == sorted(IDS)
    for combo_id, record in records.items():
        VALIDATOR.validate(record)
        if combo_id != bad:
            assert record["status"] == "ok", (combo_id, record["reason"])


# --- each way a worker can end ---------------------------------------------------------------


@pytest.mark.slow
def test_worker_killed_by_sigkill_costs_one_combination(
        use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = IDS[1]
    _plan(monkeypatch, {bad: "kill"})
    assert _profile(tmp_path / "runs") == 0
    records = _records(tmp_path / "runs")
    _others_ok(records, bad)
    failed = records[bad]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("worker killed by SIGKILL (9) after ")
    assert " GiB in use" in failed["reason"]
    assert failed["execution"]["worker_restarted"] is True and failed["execution"]["worker_exit"] == -9
    # the worker's own output (not the console) holds what it printed; the console shows its tail
    assert f"fake measure: {bad}: kill" in failed["execution"]["log_tail"]
    err = capsys.readouterr().err
    assert f"| fake measure: {bad}: kill" in err
    assert "fake measure: " + IDS[0] not in err  # a healthy combination's output stays in the log
    # the next combination ran in a fresh worker
    pids = {combo_id: pid for pid, combo_id in _calls(use_fake)}
    after = [c for c in IDS if records[c]["started"] > failed["started"]]
    assert after and all(pids[c] != pids[bad] for c in after)
    # a plain rerun leaves the failure alone and says how to retry it
    use_fake.unlink()
    assert _profile(tmp_path / "runs") == 0
    assert _calls(use_fake) == []
    assert "--retry-failed" in capsys.readouterr().err
    _plan(monkeypatch, {})
    assert _profile(tmp_path / "runs", "--retry-failed") == 0
    assert [c for _, c in _calls(use_fake)] == [bad]
    assert _records(tmp_path / "runs")[bad]["status"] == "ok"


@pytest.mark.slow
def test_segfault_is_named(use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = IDS[2]
    _plan(monkeypatch, {bad: "segfault"})
    assert _profile(tmp_path / "runs") == 0
    records = _records(tmp_path / "runs")
    _others_ok(records, bad)
    assert records[bad]["reason"].startswith("worker killed by SIGSEGV (11) after ")


@pytest.mark.slow
def test_hang_past_the_timeout(use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = IDS[0]
    _plan(monkeypatch, {bad: "hang"})
    assert _profile(tmp_path / "runs", "--timeout", "3") == 0
    records = _records(tmp_path / "runs")
    _others_ok(records, bad)
    assert records[bad]["reason"] == "timed out after 3 s; worker restarted"
    # the hung worker (its measure sleeps an hour) was killed, not waited for
    (hung,) = [pid for pid, combo_id in _calls(use_fake) if combo_id == bad]
    assert not _alive(hung)
    assert records[bad]["execution"]["timeout_s"] == 3.0


@pytest.mark.slow
def test_poisoned_device_restarts_the_worker(use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad, oom = IDS[1], IDS[2]
    _plan(monkeypatch, {bad: "poison", oom: "oom"})
    assert _profile(tmp_path / "runs") == 0
    records = _records(tmp_path / "runs")
    assert records[oom]["status"] == "failed"
    assert records[bad]["reason"] == ("RuntimeError: CUDA error: an illegal memory access was encountered; "
                                      "worker restarted")
    assert records[bad]["execution"]["worker_exit"] == worker.POISONED_EXIT
    assert "illegal memory access" in records[bad]["traceback"]
    # a clean out-of-memory keeps its worker; the poisoning error does not
    assert "worker_restarted" not in records[oom]["execution"]
    pids = {combo_id: pid for pid, combo_id in _calls(use_fake)}
    later = [c for c in IDS if records[c]["started"] > records[bad]["started"]]
    assert all(pids[c] != pids[bad] for c in later)
    for combo_id in set(IDS) - {bad, oom}:
        assert records[combo_id]["status"] == "ok"


@pytest.mark.slow
def test_preflight_skip_is_recorded_with_the_estimate(
        use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = IDS[3]
    _plan(monkeypatch, {bad: "too-big"})
    assert _profile(tmp_path / "runs") == 0
    records = _records(tmp_path / "runs")
    _others_ok(records, bad)
    assert records[bad]["status"] == "skipped"
    assert records[bad]["reason"] == "needs ~27.0 GiB, 21.9 GiB available"
    assert records[bad]["preflight"]["fits"] is False
    assert bad not in [c for _, c in _calls(use_fake)]  # measure never ran
    for combo_id in set(IDS) - {bad}:
        assert records[combo_id]["preflight"]["fits"] is True  # every record carries it


@pytest.mark.slow
def test_real_out_of_memory_kill_in_a_memory_cgroup(
        use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with limited_memory_cgroup("reportgen-test") as group:
        bad = IDS[1]
        _plan(monkeypatch, {bad: f"alloc:{group}"})
        assert _profile(tmp_path / "runs") == 0
        records = _records(tmp_path / "runs")
        _others_ok(records, bad)
        reason = records[bad]["reason"]
        assert reason.startswith("worker killed by SIGKILL (9) after ")
        assert CGROUP_OOM.search(reason), reason


# --- the parent ------------------------------------------------------------------------------

SCRIPT = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["REPORTGEN_FAKE_PLAN"] = json.dumps({"*": "sleep:1.0"})
os.environ["REPORTGEN_FAKE_LOG"] = sys.argv[2]
from reportgen.execute import runner
runner.MEASURE = "support.fake_measure:measure"
runner.PREFLIGHT = "support.fake_measure:preflight"
from reportgen.cli import main
raise SystemExit(main(sys.argv[3:]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow
def test_parent_sigkill_leaves_no_worker_and_resume_finishes(tmp_path: Path) -> None:
    out, log = tmp_path / "runs", tmp_path / "calls.log"
    script = tmp_path / "profile.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(script), str(TESTS), str(log), "profile", *ARGS, "--out", str(out)]
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as parent:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/*/combinations/*.json")):
            assert time.monotonic() < deadline and parent.poll() is None, "no record appeared"
            time.sleep(0.05)
        while len(_calls(log)) < 2:  # the worker is inside its second combination
            time.sleep(0.05)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    workers = {pid for pid, _ in _calls(log)}
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a worker outlived its parent"
    finished = set(_records(out))
    assert 1 <= len(finished) < len(IDS)
    claims = list((_run_dir(out) / "claims").glob("*.lock"))
    assert len(claims) == 1  # the combination in flight, claimed by a dead process

    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as again:
        _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    records = _records(out)
    assert sorted(records) == sorted(IDS) and all(r["status"] == "ok" for r in records.values())
    measured = [combo_id for _, combo_id in _calls(log)]
    # finished ones are not measured again; only the one in flight at the kill ran twice
    assert all(measured.count(c) == 1 for c in finished)
    assert sum(measured.count(c) - 1 for c in IDS) <= 1
    assert not list((_run_dir(out) / "claims").glob("*.lock"))


# --- pure parts ----------------------------------------------------------------------------------

MEMINFO = "MemTotal:       24534328 kB\nMemFree:  100 kB\nMemAvailable:     321000 kB\n"


def test_death_reasons() -> None:
    full = memory.host_memory(MEMINFO)
    assert full == ((24534328 - 321000) * 1024, 24534328 * 1024)
    assert supervisor.death_reason(-9, 41.2, full) == (
        "worker killed by SIGKILL (9) after 41 s, host memory 23.1 of 23.4 GiB in use: likely out of host memory")
    roomy = (2 * 1024**3, 24 * 1024**3)
    assert supervisor.death_reason(-9, 3, roomy) == ("worker killed by SIGKILL (9) after 3 s, "
                                                     "host memory 2.0 of 24.0 GiB in use")
    assert supervisor.death_reason(-11, 3, None) == "worker killed by SIGSEGV (11) after 3 s"
    assert supervisor.death_reason(1, 0.4, None) == "worker exited with code 1 after 0 s"
    group = memory.MemoryCgroup(Path("/x"), 2, 4 * 1024**3, 0)
    reason = supervisor.death_reason(-9, 5, roomy, (group, memory.MemoryCgroup(Path("/x"), 2, 4 * 1024**3, 1)))
    assert reason.endswith("; its memory cgroup (limit 4.0 GiB) recorded an OOM kill: out of memory")
    assert "OOM" not in supervisor.death_reason(-9, 5, roomy, (group, group))
    # the OOM-kill counter did not move, but the usage hit the limit before the SIGKILL
    hit = (memory.MemoryCgroup(Path("/x"), 1, 4 * 1024**3, 0, 3), memory.MemoryCgroup(Path("/x"), 1, 4 * 1024**3, 0, 9))
    assert supervisor.death_reason(-9, 5, roomy, hit).endswith(
        "; its memory cgroup (limit 4.0 GiB) hit its limit: out of memory")
    assert "memory cgroup" not in supervisor.death_reason(-11, 5, roomy, hit)  # not a SIGKILL
    unlimited = tuple(memory.MemoryCgroup(Path("/x"), 1, None, 0, n) for n in (3, 9))
    assert "memory cgroup" not in supervisor.death_reason(-9, 5, roomy, unlimited)


def test_memory_cgroup_reads_v1_and_v2(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("4:memory:/job_12/step_0\n0::/job_12/step_0\n")
    root = tmp_path / "cg"
    v1 = root / "memory" / "job_12" / "step_0"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(8 * 1024**3))
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (v1 / "memory.failcnt").write_text("17\n")
    found = memory.memory_cgroup(7, proc=proc, root=root)
    assert found == memory.MemoryCgroup(v1, 1, 8 * 1024**3, 2, 17)

    (proc / "8").mkdir()
    (proc / "8" / "cgroup").write_text("0::/system.slice/job.scope\n")
    v2 = root / "system.slice" / "job.scope"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert memory.memory_cgroup(8, proc=proc, root=root) == memory.MemoryCgroup(v2, 2, None, 1, 3)
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    assert memory.refresh(memory.MemoryCgroup(v2, 2, None, 1)).oom_kills == 2
    assert memory.memory_cgroup(9, proc=proc, root=root) is None


def test_a_dead_worker_is_not_followed_to_the_root_cgroup(tmp_path: Path) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "7").mkdir(parents=True)
    for path in ("", "job"):
        (root / "memory" / path).mkdir(parents=True, exist_ok=True)
        (root / "memory" / path / "memory.limit_in_bytes").write_text(str(1 << 62))
        (root / "memory" / path / "memory.oom_control").write_text("oom_kill 0\n")
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text(str(256 * 1024**2))
    (proc / "7" / "cgroup").write_text("4:memory:/job\n")
    (proc / "7" / "stat").write_text("7 (python (worker)) S 1 7 7 0 -1\n")
    job = memory.follow(None, 7, lambda: True, proc=proc, root=root)
    assert job == memory.MemoryCgroup(root / "memory" / "job", 1, 256 * 1024**2, 0, None)
    # killed, not yet reaped: /proc names the root, which must not replace the job's cgroup
    (proc / "7" / "cgroup").write_text("4:memory:/\n")
    assert memory.follow(job, 7, lambda: False, proc=proc, root=root) is job
    # killed, and the fork server that reaps it has not said so yet: the zombie state tells
    (proc / "7" / "stat").write_text("7 (python (worker)) Z 1 7 7 0 -1\n")
    assert memory.follow(job, 7, lambda: True, proc=proc, root=root) is job
    (proc / "7" / "stat").unlink()
    assert memory.follow(job, 7, lambda: True, proc=proc, root=root) is job
    # killed and exiting, still running: its flags say PF_EXITING
    (proc / "7" / "stat").write_text("7 (python (worker)) R 1 7 7 0 -1 4194308 0 0\n")
    assert memory.follow(job, 7, lambda: True, proc=proc, root=root) is job
    # alive and moved: followed
    (proc / "7" / "stat").write_text("7 (python (worker)) R 1 7 7 0 -1 4194304 0 0\n")
    assert memory.follow(job, 7, lambda: True, proc=proc, root=root).path == root / "memory"


@pytest.mark.parametrize(("message", "poisoned"), [
    ("CUDA error: an illegal memory access was encountered", True),
    ("CUDA error: device-side assert triggered", True),
    ("CUDA error: misaligned address", True),
    ("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx", True),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ("shape mismatch: [2, 3] vs [3, 2]", False),
])
def test_which_errors_poison_the_device(message: str, poisoned: bool) -> None:
    assert worker.is_poisoning(RuntimeError(message)) is poisoned


def test_named_exception_types() -> None:
    AcceleratorError = type("AcceleratorError", (RuntimeError,), {})
    OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})
    assert worker.is_poisoning(AcceleratorError("anything"))
    assert not worker.is_poisoning(OutOfMemoryError("CUDA error: out of memory"))


# claims ------------------------------------------------------------------------------------


def test_a_claim_is_exclusive_and_released(tmp_path: Path) -> None:
    first, second = plan.Claims(tmp_path), plan.Claims(tmp_path, me={"host": "elsewhere", "pid": 1})
    assert first.try_claim("a")
    assert not second.try_claim("a")
    assert set(first.live()) == {"a"} and first.live()["a"]["pid"] == os.getpid()
    first.release("a")
    assert second.try_claim("a")


def test_a_dead_holder_on_this_host_is_reclaimed_at_once(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)
    import socket

    plan.Claims(tmp_path, me={"host": socket.gethostname(), "pid": dead}).try_claim("a")
    assert plan.Claims(tmp_path).try_claim("a")


def test_a_claim_from_another_host_is_reclaimed_when_its_heartbeat_stops(tmp_path: Path) -> None:
    remote = plan.Claims(tmp_path, me={"host": "node-7", "pid": 1})
    assert remote.try_claim("a")
    mine = plan.Claims(tmp_path, stale_after_s=60)
    assert not mine.try_claim("a")
    old = time.time() - 120
    os.utime(remote.path("a"), (old, old))
    assert not mine.live()
    remote.heartbeat(["a"])  # a heartbeat makes it live again
    assert not mine.try_claim("a")
    os.utime(remote.path("a"), (old, old))
    assert mine.try_claim("a") and json.loads(mine.path("a").read_text())["pid"] == os.getpid()


def _race(directory: str, ids: list[str], out: Any) -> None:
    claims = plan.Claims(directory)
    out.put([combo_id for combo_id in ids if claims.try_claim(combo_id)])


def test_racing_processes_never_claim_the_same_combination(tmp_path: Path) -> None:
    ids = [f"c{i}" for i in range(200)]
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), ids, queue)) for _ in range(4)]
    for proc in procs:
        proc.start()
    won = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    claimed = [combo_id for part in won for combo_id in part]
    assert sorted(claimed) == sorted(ids)  # each exactly once


def test_todo_is_largest_first_and_leaves_failures_to_retry(tmp_path: Path) -> None:
    from reportgen.records.store import RunStore

    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "attn": "sdpa", "device": "cpu",
                                                "modes": "forward,decode"}))
    store = RunStore(tmp_path, "host", suite)
    order = [c.id for c in plan.todo(store, suite.combinations())]
    assert order == ["gpt2--forward--fp32--sdpa--b1--s32--tiny", "gpt2--decode--fp32--sdpa--b1--s32--tiny",
                     "gpt2--forward--fp32--sdpa--b1--s16--tiny", "gpt2--decode--fp32--sdpa--b1--s16--tiny"]
    statuses = dict(zip(order, ("ok", "failed", "skipped", "failed")))
    for combo in suite.combinations():
        status = statuses[combo.id]
        store.write_combination(combination_record(
            combo, run_id=store.run_id, status=status, reason=None if status == "ok" else status,
            started="2026-12-02T00:00:00Z",
            finished="2026-12-02T00:00:01Z", duration_s=1.0, git={"commit": None, "dirty": None},
            sections={"timing": {"median": 1.0, "ci_low": 0.9, "ci_high": 1.1, "n": 3}}
            if status == "ok" else None))
    assert plan.todo(store, suite.combinations()) == []
    assert [c.id for c in plan.todo(store, suite.combinations(), retry_failed=True)] == [order[1], order[3]]
    assert len(plan.todo(store, suite.combinations(), force=True)) == 4
    states = {e.id: e.state for e in plan.states(store.run_dir, [c.id for c in suite.combinations()])}
    assert sorted(states.values()) == ["failed", "failed", "ok", "skipped"]


# devices -----------------------------------------------------------------------------------------


def test_devices_are_checked_against_the_host() -> None:
    assert devices.parse_devices(None, device="cuda", gpu_count=8) is None
    assert devices.parse_devices("all", device="cuda", gpu_count=3) == [0, 1, 2]
    assert devices.parse_devices("0,3,5", device="cuda", gpu_count=8) == [0, 3, 5]
    cases = {
        ("9", "cuda", 8): "--devices: no GPU 9; this host has GPUs 0-7",
        ("0,0", "cuda", 8): "--devices: GPU 0 is named twice",
        ("x", "cuda", 8): "--devices: 'x' is not a GPU index; give 'all' or indices like 0,3,5",
        ("all", "cuda", 0): "--devices: this host has no CUDA GPU",
    }
    for (text, device, count), message in cases.items():
        with pytest.raises(UserError) as caught:
            devices.parse_devices(text, device=device, gpu_count=count)
        assert str(caught.value) == message
    with pytest.raises(UserError, match="share its cores"):
        devices.parse_devices("all", device="cpu", gpu_count=0)


def test_one_worker_per_gpu_pinned_through_cuda_visible_devices() -> None:
    specs = devices.worker_specs("cuda", [0, 2], gpu_count=3, environ={"CUDA_VISIBLE_DEVICES": "4,5,7"})
    assert [(s.slot, s.visible_devices, s.physical_index) for s in specs] == [
        ("cuda:0", "4", 4), ("cuda:2", "7", 7)]
    (only,) = devices.worker_specs("cuda", None, gpu_count=2, environ={})
    assert (only.slot, only.visible_devices) == ("cuda:0", "0")
    (cpu,) = devices.worker_specs("cpu", None)
    assert cpu.slot == "cpu" and cpu.visible_devices is None
    uuid = devices.worker_specs("cuda", [0], gpu_count=1, environ={"CUDA_VISIBLE_DEVICES": "GPU-8f2e"})[0]
    assert uuid.visible_devices == "GPU-8f2e" and uuid.physical_index is None


def test_a_worker_spec_round_trips() -> None:
    spec = worker.WorkerSpec(device="cuda", slot="cuda:3", measure="m:f", visible_devices="3", physical_index=3)
    assert worker.WorkerSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(("extra", "message"), [
    (["--devices", "0"], "reportgen: error: --devices: measuring on the cpu, which gets one worker: "
                         "two measurements would share its cores (--devices is for the GPUs of a CUDA host)"),
    (["--timeout", "soon"], "reportgen: error: --timeout: 'soon' is not a number of seconds"),
    (["--timeout", "0"], "reportgen: error: --timeout: must be more than 0 seconds, not 0"),
    (["--executor", "ray"], "reportgen: error: --executor: unknown executor 'ray'; choose from local, slurm"),
    (["--force", "--retry-failed"],
     "reportgen: error: --retry-failed: contradicts --force, which measures every combination again"),
])
def test_bad_execution_flags(extra: list[str], message: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert cli.main(["profile", *ARGS, "--out", str(out), *extra]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not out.exists()


# the GPU path on recorded NVML readings ----------------------------------------------------------


def test_a_gpu_worker_records_its_device_and_readings_around_the_measurement(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from reportgen.profile import nvml

    raw = load()
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(raw))
    spec = worker.WorkerSpec(device="cuda", slot="cuda:1", measure="support.fake_measure:measure", visible_devices="1",
                             physical_index=1)
    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "attn": "sdpa", "device": "cpu",
                                                "modes": "forward", "seq_lens": "16"}))
    (combo,) = suite.combinations()
    task = {"combo": combo, "combo_id": combo.id, "run_dir": tmp_path, "budget_s": 1.0, "seed": 0,
            "profile_iterations": 1}
    result = worker.run_task(task, spec, fake_measure.measure, None)
    assert result["status"] == "ok"
    device = result["device"]
    assert device["slot"] == "cuda:1" and device["index"] == 1
    assert device["uuid"] == nvml.uuid_hash(raw["devices"][1]["nvmlDeviceGetUUID"])
    before, after = device["nvml_before"], device["nvml_after"]
    assert before["throttled"] is True and {"sw_power_cap", "sw_thermal_slowdown"} <= set(before["throttle_reasons"])
    assert after["sm_clock_mhz"] == before["sm_clock_mhz"]
    assert device["nvml_delta"]["throttled"] is True
    # a CPU worker takes no readings
    cpu = worker.run_task(task, worker.WorkerSpec(device="cpu", slot="cpu", measure="m:f"), fake_measure.measure, None)
    assert "device" not in cpu and cpu["host_memory"]["rss_before_bytes"] > 0


def test_a_worker_freezes_what_outlives_a_combination_and_still_frees_the_next() -> None:
    """release_memory freezes the libraries' objects (collections then skip them) but not
    what a later combination creates: its cyclic garbage is still collected."""
    code = r'''
import gc, weakref
from reportgen.execute import worker

class Node:
    pass

kept = [Node() for _ in range(1000)]  # the libraries' objects, alive before a task
worker.release_memory()
assert gc.get_freeze_count() >= len(kept), gc.get_freeze_count()
frozen = gc.get_freeze_count()

node = Node()
node.self = node  # a cycle: only the collector frees it
ref = weakref.ref(node)
del node
worker.release_memory()  # the next task's start
assert ref() is None, "garbage of a combination was frozen instead of freed"
assert gc.get_freeze_count() >= frozen
print("ok")
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
