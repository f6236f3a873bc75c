"""The runner: records, skip/fail, resume, --force, Ctrl-C and SIGKILL, with a fake measure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.runner import GOLDEN, InProcessMeasure

from reportgen import cli
from reportgen.execute import runner
from reportgen.records.schema import (
    COMBINATION_KIND,
    RUN_KIND,
    SECTIONS,
    iter_runs,
    json_schema,
)

ROOT = Path(__file__).parent.parent
# The tiny suite cut to sdpa; --models replaces both entries' models, so both models get
# every mode: 2 models x 3 modes x 2 seq lens.
SMALL = ["--suite", "tiny", "--models", "bert-base,gpt2", "--attn", "sdpa", "--device", "cpu"]
SMALL_COUNT = 12


class FakeMeasure:
    """The worker-side fake (tests/support/fake_measure.py) told to behave like the real measure
    would on SMALL: bert's decode-less modes are skipped, gpt2's decode at 32 fails like an
    out-of-memory; ``calls`` lists the combinations the workers were given, in order."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: Mapping[str, str] | None = None) -> None:
        self.log = tmp_path / "fake-calls.log"
        if plan is None:
            plan = {f"bert-base--{mode}--fp32--sdpa--b1--s{seq}--tiny": "skip"
                    for mode in ("prefill", "decode") for seq in (16, 32)}
            plan["gpt2--decode--fp32--sdpa--b1--s32--tiny"] = "oom"
        monkeypatch.setenv("REPORTGEN_FAKE_PLAN", json.dumps(plan))
        monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(self.log))
        monkeypatch.setattr(runner, "MEASURE", "support.fake_measure:measure")
        monkeypatch.setattr(runner, "PREFLIGHT", "support.fake_measure:preflight")

    @property
    def calls(self) -> list[str]:
        return [line.split()[1] for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def clear(self) -> None:
        self.log.unlink(missing_ok=True)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeMeasure:
    return FakeMeasure(tmp_path, monkeypatch)


def _run_dir(out: Path) -> Path:
    runs = list(iter_runs(out))
    assert len(runs) == 1
    return runs[0].path


def _records(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "combinations").glob("*.json")}


def test_profile_writes_valid_records_and_goes_on_after_a_failure(
    fake: FakeMeasure, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    assert cli.main(["profile", *SMALL, "--out", str(out)]) == 0
    run_dir = _run_dir(out)
    run = json.loads((run_dir / "run.json").read_text())
    jsonschema.Draft202012Validator(json_schema(RUN_KIND)).validate(run)
    assert run["status"] == "complete"
    assert run["counts"] == {"ok": 7, "skipped": 4, "failed": 1, "pending": 0}
    assert run["command"].startswith("reportgen profile --suite tiny --models bert-base,gpt2")
    assert run["environment"]["seeds"] == {"suite": 0}
    # --models replaced the matrix: the run is named and described for what it measured
    assert run_dir.name.startswith("custom-") and run_dir.parent.parent == out
    assert run["suite"]["name"] == "custom"
    assert run["suite"]["spec"]["description"] == "tiny with --models bert-base,gpt2 --attn sdpa"

    records = _records(run_dir)
    assert sorted(records) == sorted(run["combinations"]) and len(records) == SMALL_COUNT
    validator = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))
    for record in records.values():
        validator.validate(record)
        assert record["run_id"] == run["run_id"]
    failed = records["gpt2--decode--fp32--sdpa--b1--s32--tiny"]
    assert failed["status"] == "failed"
    assert failed["reason"] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    survivor = records["gpt2--forward--fp32--sdpa--b1--s32--tiny"]
    assert failed["execution"]["worker_pid"] == survivor["execution"]["worker_pid"]
    assert "worker_restarted" not in failed["execution"]  # a clean out-of-memory keeps the worker
    assert failed["timing"] is None and "RuntimeError" in failed["traceback"]
    ok = records["bert-base--forward--fp32--sdpa--b1--s16--tiny"]
    # the measured timing as the worker gave it, with the budget the suite set for it
    assert ok["timing"] == {**GOLDEN["timing"], "budget_s": 0.25} and ok["combination"]["device"] == "cpu"
    # The end-of-run table lists every combination.
    printed = capsys.readouterr().out
    assert run["run_id"] in printed and "failed" in printed


def test_skip_is_recorded_with_its_reason(fake: FakeMeasure, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    argv = ["profile", "--suite", "tiny", "--models", "bert-base", "--modes", "decode", "--seq-lens", "16",
            "--attn", "sdpa", "--device", "cpu", "--out", str(out)]
    assert cli.main(argv) == 0
    (record,) = _records(_run_dir(out)).values()
    assert record["status"] == "skipped" and record["reason"] == "bert-base cannot run decode here"
    assert all(record[name] is None for name in SECTIONS)


def test_rerun_resumes_and_force_remeasures(fake: FakeMeasure, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    argv = ["profile", *SMALL, "--out", str(out)]
    assert cli.main(argv) == 0
    assert len(fake.calls) == SMALL_COUNT
    run_dir = _run_dir(out)
    started = json.loads((run_dir / "run.json").read_text())["started"]
    run_bytes = (run_dir / "run.json").read_bytes()

    fake.clear()
    assert cli.main(argv) == 0
    assert fake.calls == []
    # nothing measured: the run record (its environment) is left as it was
    assert (run_dir / "run.json").read_bytes() == run_bytes

    removed = "gpt2--prefill--fp32--sdpa--b1--s16--tiny"
    (run_dir / "combinations" / f"{removed}.json").unlink()
    fake.clear()
    assert cli.main(argv) == 0
    assert fake.calls == [removed]

    fake.clear()
    finished = {p.name: p.read_bytes() for p in run_dir.rglob("*.json")}
    assert cli.main([*argv, "--force"]) == 0
    assert len(fake.calls) == SMALL_COUNT
    # a new run beside the finished one, which is left exactly as it was
    runs = sorted(r.path for r in iter_runs(out))
    assert len(runs) == 2 and runs[0] == run_dir
    assert runs[1].name.startswith(run_dir.name + "-")
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*.json")} == finished
    assert json.loads((run_dir / "run.json").read_text())["started"] == started


def test_inline_executor_keyboard_interrupt_keeps_finished_records(tmp_path: Path) -> None:
    from reportgen.suite import load_suite, parse_overrides

    suite = load_suite("tiny", parse_overrides({"models": "bert-base,gpt2", "attn": "sdpa", "device": "cpu"}))
    measure = InProcessMeasure(interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        runner.run_suite(suite, out=tmp_path, measure=measure, environment={"git": None},
                         hardware="test-host", show_progress=False)
    run_dir = _run_dir(tmp_path)
    assert sorted(_records(run_dir)) == sorted(measure.calls[:2])
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted" and run["counts"]["pending"] == SMALL_COUNT - 2
    assert run["execution"]["executor"] == "inline"

    resumed = InProcessMeasure()
    runner.run_suite(suite, out=tmp_path, measure=resumed, environment={"git": None},
                     hardware="test-host", show_progress=False)
    assert set(resumed.calls).isdisjoint(measure.calls[:2])
    assert len(_records(run_dir)) == SMALL_COUNT
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"


def test_run_suite_takes_an_injected_measure(tmp_path: Path) -> None:
    from reportgen.suite import load_suite, parse_overrides

    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "seq_lens": "16", "attn": "eager",
                                                "modes": "forward", "device": "cpu"}))
    measure = InProcessMeasure()
    result = runner.run_suite(suite, out=tmp_path, measure=measure, environment={"git": None},
                              hardware="test-host", show_progress=False)
    assert measure.calls == ["gpt2--forward--fp32--eager--b1--s16--tiny"]
    assert result.count("ok") == 1 and not result.interrupted
    assert result.store.run_dir.parent == tmp_path / "test-host"
    record = result.records[0]
    assert record["git"] == {"commit": None, "dirty": None}
    assert list(record)[:11] == ["kind", "schema_version", "id", "run_id", "combination", "status", "reason",
                                 "started", "finished", "duration_s", "git"]


def test_a_run_measured_under_other_versions_is_not_resumed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen.suite import load_suite, parse_overrides

    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "seq_lens": "16", "attn": "eager",
                                                "modes": "forward", "device": "cpu"}))
    before = {"git": None, "libraries": {"torch": "2.11.0", "transformers": "5.17.0", "reportgen": "0.1.0"},
              "device": {"type": "cpu", "name": "AMD EPYC"}}
    first = runner.run_suite(suite, out=tmp_path, measure=InProcessMeasure(), environment=before,
                             hardware="test-host", show_progress=False)
    # the same environment: a finished run measures nothing
    again = InProcessMeasure()
    runner.run_suite(suite, out=tmp_path, measure=again, environment=before, hardware="test-host",
                     show_progress=False)
    assert again.calls == []
    now = {**before, "libraries": {**before["libraries"], "torch": "2.13.0+cpu"}}
    fresh = InProcessMeasure()
    result = runner.run_suite(suite, out=tmp_path, measure=fresh, environment=now, hardware="test-host",
                              show_progress=True)
    assert fresh.calls == ["gpt2--forward--fp32--eager--b1--s16--tiny"]
    assert result.store.run_dir != first.store.run_dir and first.store.run_dir.is_dir()
    err = capsys.readouterr().err
    assert (f"{first.store.run_id} was measured under torch 2.11.0 (now 2.13.0+cpu): measuring a new run, "
            f"{result.store.run_id}") in err


# --- in a real process: SIGKILL and SIGINT ----------------------------------------------

FAKE_SCRIPT = """
import json, os, sys
sys.path.insert(0, sys.argv[1])  # tests/: the workers import fake_measure from there
os.environ["REPORTGEN_FAKE_PLAN"] = json.dumps({"*": "sleep:" + sys.argv[2]})
os.environ["REPORTGEN_FAKE_LOG"] = sys.argv[3]
from reportgen.execute import runner
runner.MEASURE = "support.fake_measure:measure"
runner.PREFLIGHT = "support.fake_measure:preflight"
from reportgen.cli import main
raise SystemExit(main(sys.argv[4:]))
"""


def _start(tmp_path: Path, out: Path, delay: float, log: Path) -> subprocess.Popen[str]:
    script = tmp_path / "fake_profile.py"
    script.write_text(FAKE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(script), str(Path(__file__).parent), str(delay), str(log), "profile", *SMALL,
         "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        # a test run started in the background inherits SIGINT ignored (POSIX, no job
        # control), and Python then never raises KeyboardInterrupt: Ctrl-C as a terminal sends it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_first_record(out: Path, child: subprocess.Popen[str], deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if any(out.glob("*/*/combinations/*.json")):
            return
        if child.poll() is not None:
            pytest.fail(f"profile exited early ({child.returncode}): {child.stderr.read() if child.stderr else ''}")
        time.sleep(0.05)
    child.kill()
    pytest.fail("no combination record appeared")


def _logged(log: Path) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow
def test_sigkill_then_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with _start(tmp_path, out, delay=1.0, log=tmp_path / "first.log") as child:
        _wait_for_first_record(out, child)
        child.send_signal(signal.SIGKILL)
        child.wait()
    run_dir = _run_dir(out)
    finished = set(_records(run_dir))
    assert 1 <= len(finished) < SMALL_COUNT
    for record in _records(run_dir).values():
        assert record["status"] == "ok"  # whole records only

    with _start(tmp_path, out, delay=0.0, log=tmp_path / "second.log") as child:
        _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    measured_again = set(_logged(tmp_path / "second.log"))
    assert measured_again.isdisjoint(finished)
    assert set(_records(run_dir)) == finished | measured_again
    assert len(_records(run_dir)) == SMALL_COUNT


@pytest.mark.slow
def test_sigint_stops_cleanly_with_exit_130(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    # 3 s per combination: on a loaded host the whole suite must not finish before the
    # first record is seen and the signal sent
    with _start(tmp_path, out, delay=3.0, log=tmp_path / "first.log") as child:
        _wait_for_first_record(out, child)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    run_dir = _run_dir(out)
    records = _records(run_dir)
    assert records and all(r["status"] == "ok" for r in records.values())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted"
    assert run["counts"]["ok"] == len(records)
    # Only a combination that was running when Ctrl-C came may lack a record (the signal
    # can also land between one record's write and the next measure).
    started = _logged(tmp_path / "first.log")
    assert set(records) <= set(started)
    assert len(started) - len(records) in (0, 1)


@pytest.mark.slow
def test_real_measure_on_the_tiny_suite(tmp_path: Path) -> None:
    import reportgen.profile.measure  # noqa: F401 - an import error must fail, not skip
    out = tmp_path / "runs"
    argv = ["profile", "--suite", "tiny", "--models", "gpt2", "--seq-lens", "16", "--attn", "sdpa",
            "--modes", "forward,decode", "--device", "cpu", "--out", str(out)]
    assert cli.main(argv) == 0
    run_dir = _run_dir(out)
    validator = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))
    records = _records(run_dir)
    assert len(records) == 2
    for record in records.values():
        validator.validate(record)
        assert record["status"] == "ok", record["reason"]
        assert record["timing"]["median"] > 0


class _EarlyExecutor:
    """An executor that starts something early (as the local one starts its fork server)
    and records when each of its steps comes."""

    name = "local"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def start_early(self, combos: list[Any]) -> None:
        self.events.append(f"start {len(combos)}")

    def wait_started(self) -> None:
        self.events.append("wait")

    def release(self) -> None:
        self.events.append("release")

    def run(self, job: Any, progress: Any) -> None:
        self.events.append("run")


def test_the_fork_server_starts_before_the_environment_and_the_probe_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor starts its workers' server before this process collects its
    environment; the CPU probe waits until that server is ready; a server no run took
    (nothing left to measure) is stopped."""
    from reportgen.suite import load_suite, parse_overrides

    events: list[str] = []

    def collect(device: str, before_probe: Any = None) -> dict[str, Any]:
        events.append("collect")
        if before_probe is not None:
            before_probe()
        events.append("probe")
        return {"git": None}

    monkeypatch.setattr(runner, "collect_environment", collect)
    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "seq_lens": "16", "attn": "eager",
                                                "modes": "forward", "device": "cpu"}))
    executor = _EarlyExecutor(events)
    runner.run_suite(suite, out=tmp_path, executor=executor, hardware="test-host", show_progress=False)
    assert events == ["start 1", "collect", "wait", "probe", "run", "release"]
    events.clear()
    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("no environment")

    monkeypatch.setattr(runner, "collect_environment", broken)
    with pytest.raises(RuntimeError, match="no environment"):
        runner.run_suite(suite, out=tmp_path, executor=executor, hardware="test-host", show_progress=False)
    assert events == ["start 1", "release"]


def test_a_local_executor_hands_its_early_server_to_the_run_or_stops_it(tmp_path: Path) -> None:
    from reportgen.execute.local import LocalExecutor
    from reportgen.execute.worker import WorkerSpec

    spec = WorkerSpec(device="cpu", slot="cpu", measure="support.fake_measure:measure")
    local = LocalExecutor([spec], timeout_s=60, python="/bin/false")  # a server that cannot start
    local.start_early([])
    local.wait_started()
    assert local.early is not None and local.early.failed is not None and "did not start" in local.early.failed
    local.release()
    assert local.early is None
    gpu = LocalExecutor([WorkerSpec(device="cuda", slot="cuda:0", measure="support.fake_measure:measure")],
                        timeout_s=60)
    gpu.start_early([])
    assert gpu.early is None  # GPU workers are spawned: nothing to start
