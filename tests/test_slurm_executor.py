"""``reportgen profile --executor slurm`` on a real one-node Slurm cluster (tests/support/slurm.py):
a job array end to end, a cancelled task and a resubmission, the real measure through one
task; and bad input, which needs no cluster."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.slurm import SlurmCluster, wait_until

from reportgen import cli
from reportgen.execute import runner
from reportgen.execute.plan import size_key, slurm_label
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, iter_runs, json_schema
from reportgen.suite import load_suite, parse_overrides

ROOT = Path(__file__).parent.parent
TESTS = Path(__file__).parent
# bert-base and gpt2, forward, sdpa, at 16 and 32 tokens: 4 combinations
SMALL = ["--suite", "tiny", "--models", "bert-base,gpt2", "--attn", "sdpa", "--modes", "forward",
         "--device", "cpu"]
CLI_TIMEOUT_S = 240.0


def run_cli(argv: list[str], cluster: SlurmCluster, timeout: float = CLI_TIMEOUT_S) -> int:
    """``cli.main(argv)`` within ``timeout`` seconds: the waiting display has no deadline of
    its own, so it runs in a thread, and the jobs are cancelled should it overrun."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(cli.main(argv)), daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        cluster.run(["scancel", f"--partition={cluster.partition}"], check=False)
        thread.join(30)
        pytest.fail(f"reportgen {' '.join(argv)} still running after {timeout:.0f} s\n{cluster.diagnostics()}")
    assert result, "cli.main raised (see the captured output)"
    return int(result[0])


class Fake:
    """tests/support/fake_measure.py in the Slurm tasks' workers: the tasks inherit this process's
    environment (sbatch exports it), so the plan, the log and PYTHONPATH reach them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path, plan: dict[str, str]) -> None:
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("REPORTGEN_FAKE_PLAN", json.dumps(plan))
        self.use_log(log)
        monkeypatch.setattr(runner, "MEASURE", "support.fake_measure:measure")
        monkeypatch.setattr(runner, "PREFLIGHT", "support.fake_measure:preflight")

    def use_log(self, log: Path) -> None:
        self.log = log
        self.monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(log))

    def calls(self, log: Path | None = None) -> list[str]:
        log = log or self.log
        return [line.split()[1] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SlurmCluster:
    """The cluster's clients for this process (submitit runs sbatch, sacct, squeue), tests/
    importable by the tasks' workers, and a working directory of the test's own."""
    slurm_cluster.apply_env(monkeypatch)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [str(TESTS), str(ROOT),
                                                                 os.environ.get("PYTHONPATH", "")] if p))
    monkeypatch.chdir(tmp_path)
    return slurm_cluster


def run_dir_of(out: Path) -> Path:
    runs = list(iter_runs(out))
    assert len(runs) == 1, [r.path for r in runs]
    return runs[0].path


def records(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "combinations").glob("*.json")}


def status_json(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["status", str(run_dir), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_job_array_measures_the_suite(cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # 3 s each, so both tasks (one CPU each) start before the first has measured everything
    fake = Fake(monkeypatch, tmp_path / "calls.log", {"*": "sleep:3"})
    out = tmp_path / "runs"
    argv = ["profile", *SMALL, "--out", str(out), "--executor", "slurm", "--slurm-tasks", "2",
            "--slurm-cpus-per-task", "1", "--slurm-time", "10"]
    assert run_cli(argv, cluster) == 0
    printed = capsys.readouterr()
    job = re.search(r"submitted Slurm job (\d+): 2 tasks on partition debug", printed.out)
    assert job, printed.out
    run_dir = run_dir_of(out)
    assert run_dir.parent.parent == out and run_dir.name.startswith("custom-")

    found = records(run_dir)
    assert len(found) == 4 and all(r["status"] == "ok" for r in found.values())
    validator = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))
    for record in found.values():
        validator.validate(record)
        assert record["execution"]["executor"] == "slurm"
        assert record["execution"]["slurm"]["array_job_id"] == job[1]
    tasks = {slurm_label(r["execution"]["slurm"]) for r in found.values()}
    assert tasks == {f"{job[1]}_0", f"{job[1]}_1"}
    assert sorted(fake.calls()) == sorted(found)  # each measured once

    run = json.loads((run_dir / "run.json").read_text())
    jsonschema.Draft202012Validator(json_schema(RUN_KIND)).validate(run)
    assert run["status"] == "complete" and run["counts"] == {"ok": 4, "skipped": 0, "failed": 0, "pending": 0}
    assert run["execution"]["executor"] == "slurm" and run["execution"]["job_id"] == job[1]
    assert run["command"].endswith("--executor slurm --slurm-time 10 --slurm-tasks 2 --slurm-cpus-per-task 1")
    # the waiting display: one line per combination, with the task that measured it
    assert re.search(rf"\[\d/4\] gpt2--forward--fp32--sdpa--b1--s32--tiny: ok .* task {job[1]}_[01]\)",
                     printed.err), printed.err
    assert run["run_id"] in printed.out  # the summary table

    status = status_json(run_dir, capsys)
    assert status["counts"]["ok"] == 4 and status["counts"]["running"] == status["counts"]["pending"] == 0
    assert status["slurm_jobs"] == sorted(tasks)
    # submitit's pickles and logs stay out of the run directories, and out of git
    assert (out / ".slurm" / run_dir.name).is_dir() and (out / ".slurm" / ".gitignore").is_file()

    # --force: the two tasks measure every combination again, each exactly once, into a
    # new run; the finished one is left as it was
    fake.use_log(tmp_path / "force.log")
    assert run_cli([*argv, "--force"], cluster) == 0
    assert sorted(fake.calls()) == sorted(found)
    (new_dir,) = [r.path for r in iter_runs(out) if r.path != run_dir]
    again = records(new_dir)
    assert sorted(again) == sorted(found)
    assert all(again[i]["started"] > found[i]["started"] for i in found)
    assert records(run_dir) == found
    assert json.loads((new_dir / "run.json").read_text())["status"] == "complete"


@pytest.mark.slow
def test_a_task_that_fails_leaves_combinations_pending_and_says_why(
        cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    Fake(monkeypatch, tmp_path / "calls.log", {})
    monkeypatch.setattr(runner, "MEASURE", "no_such_module:measure")  # the worker cannot start
    out = tmp_path / "runs"
    argv = ["profile", *SMALL, "--out", str(out), "--executor", "slurm", "--slurm-time", "10"]
    assert run_cli(argv, cluster) == 1
    err = capsys.readouterr().err
    job = re.search(r"task (\d+) ended FAILED: .*No module named 'no_such_module'; its log: (\S+)", err)
    assert job, err
    assert Path(job[2]).is_file() and "WorkerStartError" in Path(job[2]).read_text()
    assert "4 combinations left without a record; rerun the same command to measure them" in err
    run = json.loads((run_dir_of(out) / "run.json").read_text())
    assert run["status"] == "incomplete" and run["counts"]["pending"] == 4


@pytest.mark.slow
def test_a_cancelled_task_then_a_resubmission_measures_only_what_is_missing(
        cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = Fake(monkeypatch, tmp_path / "first.log", {"*": "sleep:3"})
    out = tmp_path / "runs"
    # 8 combinations, 2 tasks
    argv = ["profile", *SMALL, "--attn", "sdpa,eager", "--out", str(out), "--executor", "slurm",
            "--slurm-tasks", "2", "--slurm-cpus-per-task", "1", "--slurm-time", "10"]
    assert run_cli([*argv, "--no-wait"], cluster, timeout=60) == 0
    printed = capsys.readouterr().out
    job = re.search(r"submitted Slurm job (\d+)", printed)
    assert job, printed
    job_id = job[1]
    assert f"scancel {job_id}" in printed

    wait_until(lambda: list(out.glob("*/*/combinations/*.json")), "a first record", 120, cluster)
    run_dir = run_dir_of(out)
    assert f"reportgen status {run_dir}" in printed  # the task had started: its directory is named

    # Both tasks measure; the queue is largest first, the same in both. Cancel the task whose
    # combination comes first: the other task has already passed it, so it stays pending.
    suite = load_suite("tiny", parse_overrides({"models": "bert-base,gpt2", "attn": "sdpa,eager",
                                                "modes": "forward", "device": "cpu"}))
    order = [c.id for c in sorted(suite.combinations(), key=size_key)]

    def two_claims() -> dict[str, str] | None:
        held = {}
        for lock in (run_dir / "claims").glob("*.lock"):
            try:
                held[lock.name[: -len(".lock")]] = json.loads(lock.read_text())["slurm"]["array_task_id"]
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return held if len(set(held.values())) == 2 else None

    held = wait_until(two_claims, "both tasks to hold a claim", 60, cluster)
    interrupted = min(held, key=order.index)
    cancelled = f"{job_id}_{held[interrupted]}"
    cluster.run(["scancel", cancelled])
    assert cluster.wait_job(job_id, timeout=120, states=["COMPLETED", "CANCELLED"])
    states = dict(line.split() for line in cluster.run(
        ["squeue", "-h", "-r", "-t", "all", "-j", job_id, "-o", "%i %T"]).stdout.splitlines())
    assert states[cancelled] == "CANCELLED"

    first = records(run_dir)
    assert first and all(r["status"] == "ok" for r in first.values())  # never "failed" for a cancel
    status = status_json(run_dir, capsys)
    assert status["counts"]["running"] == 0  # the cancelled task's claim is no longer live
    by_id = {row["id"]: row for row in status["combinations"]}
    assert by_id[interrupted]["state"] == ("ok" if interrupted in first else "pending")
    run_status = json.loads((run_dir / "run.json").read_text())["status"]
    if len(first) == len(order):  # the cancelled task had finished its last combination
        assert run_status == "complete"
    else:
        assert run_status in ("incomplete", "interrupted")

    fake.use_log(tmp_path / "second.log")
    assert run_cli(argv, cluster) == 0
    second = fake.calls()
    assert sorted(second) == sorted(set(order) - set(first))  # exactly what was missing
    final = records(run_dir)
    assert sorted(final) == sorted(order) and all(r["status"] == "ok" for r in final.values())
    assert all(final[i] == first[i] for i in first)  # nothing measured twice
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete"

    # The fake logs "<worker pid> <id>" as each measurement starts. A start without a record
    # from that worker was interrupted by the cancel: at most one (the cancelled task measures
    # one combination at a time), measured again later by the other task or the resubmission.
    # Every other id is logged exactly once: nothing measured twice.
    starts = [line.split() for line in (tmp_path / "first.log").read_text().splitlines()]
    cut = {i for pid, i in starts if not (i in first and first[i]["execution"]["worker_pid"] == int(pid))}
    assert len(cut) <= 1 and (interrupted in first or cut == {interrupted})
    logged = Counter([i for _, i in starts] + second)
    assert set(logged) == set(order)
    assert all(n == (2 if i in cut else 1) for i, n in logged.items()), logged
    if interrupted not in first:  # the usual case: the other task had passed it in the queue
        assert interrupted in second and final[interrupted]["execution"]["slurm"]["array_job_id"] != job_id


@pytest.mark.slow
def test_the_real_measure_through_one_task(cluster: SlurmCluster, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import reportgen.profile.measure  # noqa: F401 - an import error must fail, not skip
    out = tmp_path / "runs"
    argv = ["profile", "--suite", "tiny", "--models", "gpt2", "--seq-lens", "16", "--attn", "sdpa",
            "--modes", "forward", "--device", "cpu", "--out", str(out), "--executor", "slurm",
            "--slurm-time", "20"]
    assert run_cli(argv, cluster, timeout=600) == 0
    assert "1 task on partition debug" in capsys.readouterr().out  # a CPU suite: one task by default
    ((combo_id, record),) = records(run_dir_of(out)).items()
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["timing"]["median"] > 0 and record["execution"]["slurm"]["job_id"]
    assert combo_id == "gpt2--forward--fp32--sdpa--b1--s16--tiny"


# --- bad input: one line, exit 2, nothing written, nothing submitted ------------------------

FAKE_SINFO = "#!/bin/sh\nprintf 'debug*\\ngpu\\n'\n"
BROKEN_SINFO = ("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller "
                "(connect failure)' >&2\nexit 1\n")


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH of fake Slurm clients: sinfo lists two partitions, sbatch notes that it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"sinfo": FAKE_SINFO, "srun": "#!/bin/sh\nexit 0\n",
               "sbatch": f"#!/bin/sh\n/usr/bin/touch {tmp_path / 'submitted'}\necho 'Submitted batch job 1'\n"}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


BAD = [
    (["--executor", "slurm", "--slurm-tasks", "0"], "--slurm-tasks: must be at least 1, not 0"),
    (["--executor", "slurm", "--slurm-gpus-per-task", "-1"], "--slurm-gpus-per-task: must be at least 1"),
    (["--executor", "slurm", "--slurm-cpus-per-task", "two"], "--slurm-cpus-per-task: 'two' is not a whole number"),
    (["--executor", "slurm", "--slurm-time", "0"], "--slurm-time: must be more than 0"),
    (["--executor", "slurm", "--slurm-time", "1:2:3:4"], "--slurm-time: '1:2:3:4' is not minutes or a Slurm time"),
    (["--executor", "slurm", "--slurm-mem", "0"], "--slurm-mem: must be more than 0"),
    (["--executor", "slurm", "--slurm-mem", "lots"], "--slurm-mem: 'lots' is not a size"),
    (["--executor", "slurm", "--slurm-sbatch", "array=0-3"], "--slurm-sbatch: array has its own flag: --slurm-tasks"),
    (["--executor", "slurm", "--slurm-sbatch", "=x"], "--slurm-sbatch: '=x' is not FLAG=VALUE"),
    (["--executor", "slurm", "--slurm-gpus-per-task", "1"], "--slurm-gpus-per-task: the suite measures on the cpu"),
    (["--executor", "slurm", "--devices", "0"], "--devices: Slurm allocates the GPUs; use --slurm-gpus-per-task"),
    (["--executor", "slurm", "--slurm-partition", "nope"],
     "--slurm-partition: no partition 'nope'; sinfo lists: debug, gpu"),
    (["--slurm-tasks", "2"], "--slurm-tasks: only with --executor slurm"),
    (["--no-wait"], "--no-wait: only with --executor slurm"),
    (["--slurm-exclusive", "--executor", "local"], "--slurm-exclusive: only with --executor slurm"),
]


def _refused(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp_path / "runs"
    capsys.readouterr()
    assert cli.main(["profile", *SMALL, "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("reportgen: error: "), err
    assert not out.exists() and not (tmp_path / "submitted").exists()
    return err


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flags_are_refused_before_anything_is_submitted(
        argv: list[str], message: str, fake_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _refused(argv, tmp_path, capsys)


def test_without_submitit(fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    err = _refused(["--executor", "slurm"], tmp_path, capsys)
    assert "--executor slurm: needs submitit: pip install 'reportgen[slurm]'" in err


def test_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "no Slurm cluster here: sinfo is not on PATH" in _refused(["--executor", "slurm"], tmp_path, capsys)


def test_with_an_unreachable_cluster(fake_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fake_bin / "sinfo").write_text(BROKEN_SINFO)
    err = _refused(["--executor", "slurm"], tmp_path, capsys)
    assert ("no reachable Slurm cluster: sinfo: slurm_load_partitions: Unable to contact slurm controller "
            "(connect failure)") in err


def test_a_job_sbatch_refuses_leaves_nothing(fake_bin: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (fake_bin / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Invalid qos specification' >&2\nexit 1\n")
    err = _refused(["--executor", "slurm", "--slurm-sbatch", "qos=nope"], tmp_path, capsys)
    assert "--executor slurm: sbatch refused the job: sbatch: error: Invalid qos specification" in err


def test_the_flags_reach_sbatch(fake_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What sbatch is given, on a GPU suite (no GPU needed: the device is the nodes')."""
    script = tmp_path / "script.sh"
    (fake_bin / "sbatch").write_text(f"#!/bin/sh\n/bin/cp \"$1\" {script}\necho 'Submitted batch job 42'\n")
    out = tmp_path / "runs"
    argv = ["profile", "--suite", "tiny", "--models", "gpt2", "--modes", "forward", "--attn", "sdpa,eager",
            "--device", "cuda", "--out", str(out), "--executor", "slurm", "--slurm-partition", "gpu",
            "--slurm-account", "proj", "--slurm-time", "1-12", "--slurm-gpus-per-task", "2",
            "--slurm-constraint", "h100", "--slurm-exclusive", "--slurm-cpus-per-task", "8", "--slurm-mem", "64G",
            "--slurm-sbatch", "qos=high", "--slurm-sbatch", "requeue", "--no-wait"]
    assert cli.main(argv) == 0
    flags = {line.split()[1] for line in script.read_text().splitlines() if line.startswith("#SBATCH")}
    assert {"--partition=gpu", "--account=proj", "--time=2160", "--gpus-per-task=2", "--constraint=h100",
            "--exclusive", "--cpus-per-task=8", "--mem=64G", "--qos=high", "--requeue",
            "--array=0-3%4", "--job-name=reportgen-custom"} <= flags, flags  # 4 combinations: 4 tasks
    printed = capsys.readouterr().out
    assert "submitted Slurm job 42: 4 tasks on partition gpu, 4 combinations of custom-" in printed
    assert "(cuda)" in printed and "scancel 42" in printed and f"ls -d {out}/*/custom-" in printed
