"""Measuring in rounds: the hierarchical interval and its achieved confidence, rounds in
fresh workers, rounds persisted as they arrive and resumed after a kill."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reportgen import cli, intervals, stats
from reportgen.execute import rounds, runner
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, iter_runs, json_schema

ROOT = Path(__file__).parent.parent
TESTS = Path(__file__).parent
VALIDATOR = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))
RUN_VALIDATOR = jsonschema.Draft202012Validator(json_schema(RUN_KIND))
IDS = [f"{model}--forward--fp32--sdpa--b1--s{seq}--tiny" for model in ("bert-base", "gpt2") for seq in (16, 32)]


# --- the interval -----------------------------------------------------------------------------

def _rounds(rng: random.Random, *, count: int, n: int, between: float, within: float = 1.0,
            centre: float = 100.0) -> list[list[float]]:
    return [[centre + effect + rng.gauss(0.0, within) for _ in range(n)]
            for effect in (rng.gauss(0.0, between) for _ in range(count))]


def test_between_round_variation_widens_the_interval() -> None:
    rng = random.Random(1)
    noise = [[100.0 + rng.gauss(0.0, 1.0) for _ in range(20)] for _ in range(5)]
    # the same within-round noise, each round shifted by its own offset
    shifted = [[x + offset for x in r] for r, offset in zip(noise, (-4.0, -2.0, 0.0, 2.0, 4.0))]
    calm = intervals.hierarchical_median_ci(noise)
    moved = intervals.hierarchical_median_ci(shifted)
    assert moved["ci_high"] - moved["ci_low"] > 3 * (calm["ci_high"] - calm["ci_low"])
    # the pooled samples' own order-statistic interval ignores the rounds and stays narrow
    _, low, high = stats.median_ci([x for r in shifted for x in r])
    assert moved["ci_high"] - moved["ci_low"] > 2 * (high - low)
    assert moved["ci_method"] == "hierarchical-bootstrap" and moved["rounds"] == 5


def test_the_interval_is_seeded() -> None:
    rng = random.Random(2)
    data = _rounds(rng, count=3, n=10, between=1.0)
    assert intervals.hierarchical_median_ci(data) == intervals.hierarchical_median_ci(data)
    other = intervals.hierarchical_median_ci(data, seed=7)
    assert other["median"] == intervals.hierarchical_median_ci(data)["median"]


@pytest.mark.parametrize("count,nominal_ok", [(10, True), (3, False)])
def test_coverage_with_round_effects_is_near_what_is_stated(count: int, nominal_ok: bool) -> None:
    """Simulated suites with round effects as large as the noise: the interval covers the
    true median at least as often as its stated confidence says, and not absurdly more."""
    rng = random.Random(3)
    trials, hits, stated = 300, 0, set()
    for _ in range(trials):
        data = _rounds(rng, count=count, n=8, between=1.0)
        ci = intervals.hierarchical_median_ci(data, replicates=300, seed=rng.randrange(1 << 30))
        stated.add(ci["confidence"])
        hits += ci["ci_low"] <= 100.0 <= ci["ci_high"]
    (confidence,) = stated
    assert (confidence == 0.95) == nominal_ok
    if not nominal_ok:
        assert confidence == 0.75  # three rounds: [min, max] of their medians
    assert confidence - 0.05 <= hits / trials <= 1.0
    assert hits / trials <= confidence + 0.05 or count == 3  # three rounds: widened to the range


def test_within_rounds_alone_undercovers() -> None:
    """Why rounds matter: pooled samples with round effects, summarised as if they came
    from one process, miss the true median far more often than 5%."""
    rng = random.Random(4)
    trials, hits = 300, 0
    for _ in range(trials):
        pooled = [x for r in _rounds(rng, count=3, n=8, between=1.0) for x in r]
        _, low, high = stats.median_ci(pooled)
        hits += low <= 100.0 <= high
    assert hits / trials < 0.8


@pytest.mark.parametrize("n,expected", [(1, 0.0), (2, 0.5), (3, 0.75), (5, 0.9375), (6, 0.95), (30, 0.95)])
def test_achieved_confidence_for_small_n(n: int, expected: float) -> None:
    assert intervals.achieved_confidence(n) == pytest.approx(expected)
    if n > 1:
        assert stats.summarize([float(i) for i in range(n)])["confidence"] == pytest.approx(expected)
        single = intervals.hierarchical_median_ci([[float(i) for i in range(n)]])
        assert single["confidence"] == pytest.approx(expected) and single["ci_method"] == "order-statistic"


def test_rounds_interval_never_claims_more_than_its_rounds() -> None:
    data = [[10.0, 10.1, 10.2, 10.3] * 20, [10.0, 10.1, 10.2, 10.3] * 20]
    ci = intervals.hierarchical_median_ci(data)
    assert ci["confidence"] == 0.5


# --- the order of units -----------------------------------------------------------------------

def test_units_are_round_major_and_shuffled_per_round(tmp_path: Path) -> None:
    from reportgen.suite import load_suite

    combos = load_suite("cpu-default").with_device("cpu").combinations()
    units = rounds.order(combos, 3, 0, tmp_path)
    assert [u.round for u in units] == [0] * 24 + [1] * 24 + [2] * 24
    orders = [[u.combo.id for u in units if u.round == r] for r in range(3)]
    assert all(sorted(o) == sorted(c.id for c in combos) for o in orders)
    assert len({tuple(o) for o in orders}) == 3  # each round its own order
    assert rounds.order(combos, 3, 0, tmp_path) == units  # seeded
    assert [u.combo.id for u in rounds.order(combos, 1, 0, tmp_path)] == [c.id for c in combos]


# --- rounds in workers ------------------------------------------------------------------------

def _suite_file(tmp_path: Path, rounds_: int = 3) -> Path:
    path = tmp_path / "rounds.toml"
    path.write_text(f"""
name = "rounds"
[settings]
scale = "tiny"
budget_s = 0.3
rounds = {rounds_}
device = "cpu"
[[matrix]]
models = ["bert-base", "gpt2"]
modes = ["forward"]
seq_lens = [16, 32]
batch_sizes = [1]
dtypes = ["fp32"]
attn = ["sdpa"]
""")
    return path


def _calls(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    return [(int(pid), cid) for pid, cid in (line.split() for line in log.read_text().splitlines())]


def _run_dir(out: Path) -> Path:
    (run,) = list(iter_runs(out))
    return run.path


def _records(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "combinations").glob("*.json")}


@pytest.fixture
def use_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(runner, "MEASURE", "support.fake_measure:measure")
    monkeypatch.setattr(runner, "PREFLIGHT", "support.fake_measure:preflight")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("REPORTGEN_FAKE_LOG", str(log))
    return log


def test_each_round_runs_in_a_fresh_worker_and_the_record_pools_them(
        use_fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPORTGEN_FAKE_PLAN", json.dumps({"*": "ok", IDS[3]: "error"}))
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", str(_suite_file(tmp_path)), "--out", str(out)]) == 0
    calls = _calls(use_fake)
    # round-major: every round-0 call precedes every round-1 call; the failing combination
    # is measured once and its rounds left are not
    assert sum(cid == IDS[3] for _, cid in calls) == 1
    assert len(calls) == 3 * 3 + 1
    pids = [pid for pid, _ in calls]
    round_pids = [set(pids[:4]), set(pids[4:7]), set(pids[7:])]
    assert all(len(p) == 1 for p in round_pids) and len(set.union(*round_pids)) == 3
    run_dir = _run_dir(out)
    records = _records(run_dir)
    RUN_VALIDATOR.validate(json.loads((run_dir / "run.json").read_text()))
    assert json.loads((run_dir / "run.json").read_text())["suite"]["spec"]["settings"]["rounds"] == 3
    for combo_id, record in records.items():
        VALIDATOR.validate(record)
        if combo_id == IDS[3]:
            assert record["status"] == "failed"
            continue
        timing = record["timing"]
        assert [r["round"] for r in timing["rounds"]] == [0, 1, 2]
        assert len({r["worker_pid"] for r in timing["rounds"]}) == 3
        assert timing["n"] == len(timing["samples"]) == sum(r["n"] for r in timing["rounds"])
        assert timing["ci_method"] == "hierarchical-bootstrap" and timing["confidence"] == 0.75
        assert timing["budget_s"] == pytest.approx(0.3)
        # every round stops at the suite's target (the fake's samples converge at once)
        assert {r["stop_reason"] for r in timing["rounds"]} == {"converged"}
        assert record["profile"] is not None and record["execution"]["rounds"] == 3
        assert sorted(rounds.read_rounds(run_dir, combo_id)) == [0, 1, 2]
        # only round 0 carries the profiled pass
        saved = rounds.read_rounds(run_dir, combo_id)
        assert saved[0]["sections"].get("profile") and not saved[1]["sections"].get("profile")


@pytest.mark.slow
def test_rounds_survive_a_kill_and_the_rerun_measures_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    suite = _suite_file(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
           "REPORTGEN_FAKE_PLAN": json.dumps({"*": "sleep:0.4"})}
    code = ("import sys; from reportgen import cli; from reportgen.execute import runner; "
            "runner.MEASURE = 'support.fake_measure:measure'; runner.PREFLIGHT = 'support.fake_measure:preflight'; "
            "sys.exit(cli.main(sys.argv[1:]))")
    args = [sys.executable, "-c", code, "profile", "--suite", str(suite), "--out", str(out)]
    first = tmp_path / "first.log"
    child = subprocess.Popen(args, env={**env, "REPORTGEN_FAKE_LOG": str(first)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    # kill in the middle of round 1: round 0 all saved, no record written yet
    while time.monotonic() < deadline:
        saved = list(out.glob("*/*/rounds/*/round-1.json"))
        if saved:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    run_dir = _run_dir(out)
    before = {cid: sorted(rounds.read_rounds(run_dir, cid)) for cid in IDS}
    assert all(0 in done for done in before.values()), before
    assert not _records(run_dir)
    measured = len(_calls(first))

    second = tmp_path / "second.log"
    done = subprocess.run(args, env={**env, "REPORTGEN_FAKE_LOG": str(second)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    again = [cid for _, cid in _calls(second)]
    # each missing round measured once; nothing saved measured again
    assert sorted(again) == sorted(cid for cid in IDS for r in range(3) if r not in before[cid])
    assert measured >= sum(len(v) for v in before.values())
    records = _records(run_dir)
    assert sorted(records) == sorted(IDS)
    for record in records.values():
        VALIDATOR.validate(record)
        assert [r["round"] for r in record["timing"]["rounds"]] == [0, 1, 2]


def test_a_record_is_finished_from_saved_rounds_without_measuring(use_fake: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("REPORTGEN_FAKE_PLAN", json.dumps({"*": "ok"}))
    out = tmp_path / "runs"
    suite = str(_suite_file(tmp_path))
    assert cli.main(["profile", "--suite", suite, "--out", str(out)]) == 0
    run_dir = _run_dir(out)
    first = _records(run_dir)[IDS[0]]
    (run_dir / "combinations" / f"{IDS[0]}.json").unlink()  # killed between the last round and the record
    use_fake.unlink()
    assert cli.main(["profile", "--suite", suite, "--out", str(out)]) == 0
    assert _calls(use_fake) == []
    again = _records(run_dir)[IDS[0]]
    assert again["timing"] == first["timing"]
    # --force forgets the saved rounds and measures every round again
    assert cli.main(["profile", "--suite", suite, "--out", str(out), "--force"]) == 0
    assert len(_calls(use_fake)) == 4 * 3


# --- the bench's checks -----------------------------------------------------------------------

def _timed(combo_id: str, samples: list[float], warmup: list[float], duration_s: float,
           low: float = 0.0, high: float = 0.0, confidence: float = 0.75) -> dict[str, Any]:
    return {"id": combo_id, "status": "ok", "duration_s": duration_s,
            "timing": {"samples": samples, "warmup_samples": warmup, "median": stats.median(samples),
                       "ci_low": low, "ci_high": high, "confidence": confidence,
                       "ci_method": "hierarchical-bootstrap", "budget_s": 3.0, "n": len(samples),
                       "stop_reason": "budget"}}


def test_harness_efficiency_is_timed_samples_over_suite_wall_time() -> None:
    from reportgen.bench import efficiency

    records = [_timed("a", [100.0] * 20, [100.0] * 6, 4.0), _timed("b", [50.0] * 10, [], 2.0),
               {"id": "c", "status": "skipped", "duration_s": 0.5, "timing": None}]
    run = efficiency.SuiteRun(suite=None, records=records, run_dir=Path("."), wall_s=10.0)
    figs = efficiency.figures(run, reference_size=True)
    eff = figs["harness_efficiency"]
    assert eff["value"] == pytest.approx(2.5 / 10.0)  # 2.0 s + 0.5 s of samples in 10 s
    assert eff["warmup_s"] == pytest.approx(0.6)
    # shown without a verdict: rounds stop at their target, so samples fill no budget
    assert eff["status"] == "info"
    total = figs["suite_time"]
    assert total["value"] == 10.0 and total["status"] == "pass"  # goal: within 6 minutes
    run.wall_s = 400.0
    assert efficiency.figures(run, reference_size=True)["suite_time"]["status"] == "fail"
    assert efficiency.figures(run, reference_size=False)["suite_time"]["status"] == "info"


def test_coverage_asks_whether_two_runs_agree_and_counts_those_inside_the_first_interval() -> None:
    from reportgen.bench import coverage

    first = [_timed("a", [10.0, 11.0, 12.0], [], 1.0, low=9.0, high=13.0),
             _timed("b", [10.0, 11.0, 12.0], [], 1.0, low=10.5, high=11.5),
             _timed("d", [10.0, 11.0, 12.0], [], 1.0, low=10.5, high=11.5),
             {"id": "c", "status": "failed", "timing": None}]
    second = [_timed("a", [12.0, 12.5, 13.0], [], 1.0, low=12.0, high=13.0),
              _timed("b", [12.0, 12.5, 13.0], [], 1.0, low=12.0, high=13.0),
              _timed("d", [11.0, 12.0, 13.0], [], 1.0, low=11.0, high=13.0),
              _timed("c", [1.0], [], 1.0)]
    table = coverage.rows(first, second)
    # a: 1.5 apart, reach sqrt(2^2 + 0.5^2) = 2.06; b: 1.5 apart, reach sqrt(0.5^2 + 0.5^2) = 0.71;
    # d: outside the first interval, but 1.0 apart with reach sqrt(0.5^2 + 1^2) = 1.12
    assert [(r["combination"], r["inside"], r["agree"]) for r in table] == [
        ("a", True, True), ("b", False, False), ("d", False, True)]
    fig = coverage.summarise(table)
    assert fig["value"] == pytest.approx(2 / 3) and fig["status"] == "fail"
    notes = " ".join(fig["notes"])
    assert "2 of 3 re-measured medians agree" in notes and "Disagree: b (+13.6%)" in notes
    assert "1 of 3 re-measured medians fall inside" in notes and "75.0%" in notes
    assert coverage.summarise(coverage.rows(first[:1], second))["status"] == "pass"
    assert coverage.summarise([])["status"] == "not measured"
    # rows measured before the second run's interval was kept: judged by the first interval alone
    old = [{k: v for k, v in r.items() if k != "agree"} for r in table]
    assert coverage.summarise(old)["value"] == pytest.approx(1 / 3)
    assert "inside the first run's interval" in coverage.summarise(old)["goal"]


def test_coverage_rows_are_read_again_only_from_the_runs_they_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.bench import coverage

    first = [_timed("a", [10.0, 11.0, 12.0], [], 1.0, low=9.0, high=13.0)]
    second = [_timed("a", [12.0, 12.5, 13.0], [], 1.0, low=12.0, high=13.0)]
    on_disk = {Path("first"): first, Path("again"): second}
    monkeypatch.setattr(coverage, "first_records", lambda run_dir: on_disk[Path(run_dir)])
    stored = [{k: v for k, v in r.items() if k != "agree"} for r in coverage.rows(first, second)]
    again = coverage.rows_from_runs(Path("first"), Path("again"), stored)
    assert again is not None and again[0]["agree"] is True
    # other medians: not the runs these rows came from
    assert coverage.rows_from_runs(Path("again"), Path("first"), stored) is None


def test_coverage_names_a_shift_common_to_every_combination() -> None:
    from reportgen.bench import coverage

    # the host 10% slower in the second run: each combination is outside, yet each
    # falls inside once the others' shift is divided out
    table = [{"combination": c, "median_ms": m, "ci_low_ms": 0.95 * m, "ci_high_ms": 1.05 * m,
              "remeasured_ms": 1.1 * m * (1 + e), "inside": False, "rel_shift": 1.1 * (1 + e) - 1}
             for c, m, e in (("a", 10.0, 0.0), ("b", 20.0, 0.01), ("c", 30.0, -0.01), ("d", 40.0, 0.2))]
    shift = coverage.common_shift(table)
    assert shift is not None and shift["lower"] == 0 and shift["higher"] == 4
    assert shift["median_shift"] == pytest.approx(0.1, abs=0.012)
    # d moved 20% more than the rest: the common shift does not explain it
    assert shift["inside_without_shift"] == 3
    fig = coverage.summarise(table)
    assert fig["common_shift"] == shift
    assert "3 of 4 re-measured medians fall inside" in " ".join(fig["notes"])
    assert coverage.common_shift(table[:2]) is None


def test_latency_interval_states_what_its_rounds_give() -> None:
    from reportgen.bench.latency import paired_ratio_interval

    ours, timer = [33.7, 35.5, 34.0, 38.0], [31.8, 30.9, 30.1, 32.5]
    ratio, low, high, confidence = paired_ratio_interval(ours, timer)
    ratios = sorted(a / b for a, b in zip(ours, timer))
    assert (low, high) == (ratios[0], ratios[-1]) and confidence == 0.875
    assert ratio == pytest.approx(stats.median(ours) / stats.median(timer))
    assert paired_ratio_interval(ours + [33.0, 34.0], timer + [33.0, 34.0])[3] == 0.95  # six: their range
