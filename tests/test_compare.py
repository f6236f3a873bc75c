"""`reportgen compare` and the significance test, on the committed runs and copies of them
with a known change made to their samples."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from support.runs import RUN
from support.runs import scaled_copy as _scaled_copy

from reportgen import stats
from reportgen.cli import main
from reportgen.records.schema import iter_runs

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["compare", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_run_compared_with_itself_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _json(capsys, str(RUN), str(RUN))
    assert code == 0
    assert len(data["rows"]) == 24 and data["regressions"] == 0
    for row in data["rows"]:
        assert {"id", "ratio", "ci_low", "ci_high", "p_value", "significant"} <= row.keys()
        assert row["ratio"] == pytest.approx(1.0) and not row["significant"]
        assert row["ci_low"] <= 1.0 <= row["ci_high"]
    assert data["versions"] == []


def test_a_ten_percent_slowdown_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = _scaled_copy(tmp_path, 1.10, name="cpu-default-c11f32ec-20990101T0000")
    # no bench results: no measured drift, so significance alone decides
    code, data = _json(capsys, str(RUN), str(slow), "--bench", str(tmp_path / "no-bench"))
    assert code == 1 and data["noise_floor"] is None
    significant = [r for r in data["rows"] if r["significant"]]
    # every combination with enough samples for p < 0.002 is a significant slowdown
    assert significant and all(r["change"] == "slower" for r in significant)
    for row in significant:
        assert row["ratio"] == pytest.approx(1.10, rel=1e-9)
        assert row["ci_low"] <= 1.10 <= row["ci_high"]
        if row["method"].startswith("mann-whitney"):
            assert row["p_value"] < stats.ALPHA
    # the same slowdown under a 20% threshold passes
    assert main(["compare", str(RUN), str(slow), "--threshold", "20%", "--bench", str(tmp_path / "no-bench")]) == 0
    capsys.readouterr()


def test_a_change_within_the_hosts_drift_is_noise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bench re-measured this host's suite and saw 90% of its medians move by up to
    its drift floor: a change smaller than that between two runs there is within noise, a
    change well beyond it is not."""
    from reportgen.render.compare import read_drift

    hardware = RUN.parent.name
    floor = read_drift(ROOT / "bench")[hardware]["floor"]
    assert 0.01 < floor < 0.25
    small = 1.0 + 0.7 * floor
    slow = _scaled_copy(tmp_path, small, name="cpu-default-c11f32ec-20990101T0000")
    code, data = _json(capsys, str(RUN), str(slow), "--bench", str(ROOT / "bench"))
    assert code == 0 and data["noise_floor"] == floor and data["counts"]["slower"] == 0
    assert data["counts"]["within noise"] > 0
    much = _scaled_copy(tmp_path / "much", 1.0 + 2.5 * floor, name="cpu-default-c11f32ec-20990101T0001")
    code, data = _json(capsys, str(RUN), str(much), "--bench", str(ROOT / "bench"))
    assert code == 1 and data["counts"]["slower"] > 0 and data["counts"]["within noise"] == 0


def test_a_speedup_is_not_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast = _scaled_copy(tmp_path, 0.8, name="fast")
    code, data = _json(capsys, str(RUN), str(fast))
    assert code == 0 and data["counts"]["faster"] > 0 and data["counts"]["slower"] == 0


def test_filters_pair_runs_by_library_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _scaled_copy(tmp_path, 1.0, name="old", transformers="5.0.0")
    _scaled_copy(tmp_path, 1.2, name="new", transformers="5.24.0", only="gpt2--prefill")
    code, data = _json(capsys, "--runs", str(tmp_path), "transformers=5.0.0", "transformers=5.24.*")
    assert code == 1
    assert data["versions"] == [{"library": "transformers", "base": "5.0.0", "new": "5.24.0"}]
    slower = {r["id"] for r in data["rows"] if r["change"] == "slower"}
    assert slower and all("gpt2--prefill" in i for i in slower)
    # a combination filter narrows both sides
    code, data = _json(capsys, "--runs", str(tmp_path), "transformers=5.0.0,model=bert-base",
                       "transformers=5.24.0,model=bert-base")
    assert code == 0 and {r["id"].split("--")[0] for r in data["rows"]} == {"bert-base"}


def test_filters_pair_across_attention_implementations(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _json(capsys, "--runs", str(ROOT / "runs"), "suite=cpu-default,attn=eager",
                       "suite=cpu-default,attn=sdpa")
    # 12 eager/sdpa pairs per host that ran cpu-default, each paired on its own host
    hosts = {r.record["hardware"] for r in iter_runs(ROOT / "runs") if r.record["suite"]["name"] == "cpu-default"}
    assert hosts and len(data["rows"]) == 12 * len(hosts)
    for row in data["rows"]:
        assert row["base_id"].replace("--eager--", "--sdpa--") == row["id"]
    assert code in (0, 1)


def test_markdown_lists_significant_changes_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = _scaled_copy(tmp_path, 1.5, name="slow", only="bert-base")
    assert main(["compare", str(RUN), str(slow), "--format", "markdown"]) == 1
    out = capsys.readouterr().out
    changed, _, rest = out.partition("??? note \"No significant difference")
    assert "| combination | base | new | ratio [95% CI] | p | change |" in changed
    assert "bert-base--forward--fp32--eager--b1--s128" in changed
    assert "gpt2--decode--fp32--eager--b1--s128" in rest
    assert "None" not in out and "nan" not in out.lower()


@pytest.mark.parametrize("argv, fragment", [
    (["runs/nowhere", "runs/nowhere"], "neither a run directory"),
    (["--runs", "runs", "transformers=9.9.9", "transformers=5.*"], "no run under"),
    (["--runs", "runs", "colour=blue", "suite=cpu-default"], "unknown filter key 'colour'"),
    (["--runs", "runs", "suite=", "suite=cpu-default"], "is not KEY=VALUE"),
    (["--runs", "runs", "suite=attention-micro", "suite=cpu-default"], "no combination in common"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], fragment: str,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err


scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("m, n, ties, seed", [
    (3, 4, False, 0), (5, 5, False, 1), (8, 12, False, 2), (20, 30, False, 3), (50, 50, False, 4),
    (60, 70, False, 5), (6, 9, True, 6), (25, 40, True, 7), (1, 1, False, 8), (2, 9, True, 9),
])
def test_mann_whitney_matches_scipy(m: int, n: int, ties: bool, seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.gauss(10.0, 1.0) for _ in range(m)]
    b = [rng.gauss(10.4, 1.0) for _ in range(n)]
    if ties:
        a, b = [round(x * 2) / 2 for x in a], [round(x * 2) / 2 for x in b]
    u, p = stats.mann_whitney_u(a, b)
    method = "exact" if not ties and max(m, n) <= stats.EXACT_MAX_N else "asymptotic"
    expected = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method=method)
    assert u == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue, rel=1e-9, abs=1e-15)


def test_difference_uses_the_test_only_where_p_can_reach_alpha() -> None:
    few = stats.difference([1.0, 2.0, 3.0], [10.0, 11.0, 12.0])  # min p = 0.1
    assert few.method == "interval-overlap" and few.p_value is None and few.significant
    many = stats.difference([float(i) for i in range(10)], [float(i) + 100 for i in range(10)])
    assert many.method == "mann-whitney" and many.p_value < stats.ALPHA and many.significant
    same = stats.difference([float(i) for i in range(10)], [float(i) for i in range(10)])
    assert not same.significant and same.p_value == pytest.approx(1.0)
    with pytest.raises(ValueError):
        stats.difference(None, [1.0])


def test_ratio_interval_covers_the_true_shift() -> None:
    rng = random.Random(0)
    base = [rng.lognormvariate(0.0, 0.05) for _ in range(40)]
    new = [x * 1.1 for x in (rng.lognormvariate(0.0, 0.05) for _ in range(40))]
    ratio, low, high, exact = stats.ratio_ci(base, new)
    assert exact and low < 1.1 < high and low < ratio < high
    assert stats.ratio_ci([1.0, 2.0], [1.0, 2.0])[3] is False  # too few: full range


def test_thousands_of_samples_stay_quick_and_cover_the_shift() -> None:
    rng = random.Random(1)
    base = [rng.lognormvariate(0.0, 0.05) for _ in range(5000)]
    new = [x * 1.02 for x in (rng.lognormvariate(0.0, 0.05) for _ in range(3000))]
    ratio, low, high, exact = stats.ratio_ci(base, new)
    assert exact and low < 1.02 < high
    verdict = stats.difference(base, new)
    assert verdict.significant and verdict.method == "mann-whitney" and verdict.p_value < 1e-10


def _rounds_record(medians: list[float], *, excluded: int | None = None) -> dict[str, Any]:
    samples = [m * (1 + 0.001 * k) for m in medians for k in range(-10, 11)]
    ordered = sorted(samples)
    rounds = [{"round": i, "n": 21, "median": m, **({"excluded": "another process used 50% of the CPU"}
                                                       if i == excluded else {})}
              for i, m in enumerate(medians)]
    mid = stats.median(medians)
    return {"id": "x", "status": "ok", "combination": {},
            "timing": {"median": mid, "ci_low": min(medians), "ci_high": max(medians), "samples": ordered,
                       "rounds": rounds, "unit": "ms"},
            "attribution": {"categories": {}}}


def test_records_in_rounds_are_tested_on_their_round_medians() -> None:
    from reportgen.render.compare import compare_records

    base = _rounds_record([10.0, 10.4, 9.8, 10.1, 10.3, 9.9, 10.2, 10.0])
    # every sample is 3% slower, but the rounds overlap: the pooled samples (168 each) would
    # call it significant, the round medians do not
    new = _rounds_record([m * 1.03 for m in [10.0, 10.4, 9.8, 10.1, 10.3, 9.9, 10.2, 10.0]])
    assert stats.difference(base["timing"]["samples"], new["timing"]["samples"]).significant
    row = compare_records(base, new)
    assert row["method"] == "mann-whitney on round medians" and not row["significant"]
    assert row["change"] == "no significant difference"
    # rounds that moved as a whole are a change
    far = _rounds_record([m * 1.3 for m in [10.0, 10.4, 9.8, 10.1, 10.3, 9.9, 10.2, 10.0]])
    row = compare_records(base, far)
    assert row["significant"] and row["change"] == "slower" and row["p_value"] < stats.ALPHA
    # a floor of 35% (the host's drift) makes the same change noise
    assert compare_records(base, far, floor=0.35)["change"] == "within noise"
    # an excluded (contended) round is no round median
    from reportgen.render.compare import round_medians

    assert len(round_medians(_rounds_record([10.0, 50.0, 10.1], excluded=1)["timing"])) == 2


def test_a_verdict_from_intervals_below_95_percent_says_their_level(capsys: pytest.CaptureFixture[str]) -> None:
    """Four rounds a side: too few for the test on round medians, so the records' 87.5%
    intervals decide; the ratio's interval and the verdict state that level, in the row
    and in the text report, and nothing calls them 95%."""
    from reportgen.commands.compare import text
    from reportgen.render.compare import compare_records

    base = _rounds_record([10.0, 10.2, 9.9, 10.1])
    new = _rounds_record([12.0, 12.2, 11.9, 12.1])
    for record in (base, new):
        record["timing"]["confidence"] = 0.875
    row = compare_records(base, new)
    assert row["method"] == "interval-overlap" and row["change"] == "slower"
    assert row["confidence"] == row["verdict_level"] == 0.875
    report = text({"base": {"label": "b", "runs": []}, "new": {"label": "n", "runs": []}, "versions": [],
                   "rows": [{**row, "id": "x"}], "counts": {"slower": 1, "faster": 0, "within noise": 0,
                                                          "no significant difference": 0,
                                                          "not comparable": 0},
                   "noise_floor": None, "alpha": stats.ALPHA, "shares": [], "only_base": [],
                   "only_new": [], "regressions": 0, "threshold": 0.05})
    assert "87.5% CI" in report and "slower (87.5% intervals)" in report and "95%" not in report
    # at 95% (six rounds or more) neither says a level beside the interval or the verdict
    for record in (base, new):
        record["timing"]["confidence"] = 0.95
    row = compare_records(base, new)
    assert row["confidence"] == 0.95 and row["verdict_level"] == 0.95
    from reportgen.fmt import rests_on

    assert rests_on(row["verdict_level"]) == ""
