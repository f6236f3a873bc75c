"""The pay-off analysis (render side, no torch): pairs that differ in exactly one axis,
Amdahl's prediction from the attribution against the measured speedup on synthetic and
committed records, what is not measured and the command that measures it, and both
findings pages rendered."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support import synthetic

from reportgen import stats
from reportgen.categories import CATEGORIES
from reportgen.records.load import load_runs
from reportgen.render import payoff, render
from reportgen.render.payoff import Series, amdahl, iteration_series, predict

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "runs" / "cpu-amd-epyc-2c" / "cpu-default-c11f32ec"


def test_amdahl_formula() -> None:
    assert amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl(0.0, 10.0) == 1.0
    assert amdahl(1.0, 3.0) == pytest.approx(3.0)
    assert amdahl(0.2, 0.5) == pytest.approx(1 / 1.2)  # a slower part slows the whole


def _series(iterations: list[dict[str, float]], method: str = "hooks") -> Series:
    cats = {c: tuple(row.get(c, 0.0) for row in iterations) for c in CATEGORIES}
    walls = tuple(sum(row.values()) for row in iterations)
    return Series(method, "record", walls, cats)


def test_prediction_with_known_answer() -> None:
    base = _series([{"attention.core": 40.0, "mlp": 60.0}] * 5)
    new = _series([{"attention.core": 10.0, "mlp": 60.0}] * 4)
    p = predict(base, new)
    assert p["a"] == pytest.approx(0.4) and p["s"] == pytest.approx(4.0)
    assert p["predicted"] == pytest.approx(1 / (0.6 + 0.1))
    assert p["attributed"] == pytest.approx(100 / 70)
    assert p["delta:attention.core"] == pytest.approx(-30.0) and p["delta:mlp"] == 0.0
    # identical iterations: every bootstrap draw is the point itself
    assert p["predicted_low"] == pytest.approx(p["predicted"]) == pytest.approx(p["predicted_high"])


def test_prediction_interval_follows_the_noise() -> None:
    base = _series([{"attention.core": 40.0 + d, "mlp": 60.0 - d} for d in (-2, -1, 0, 1, 2, 3)])
    new = _series([{"attention.core": 10.0 + d, "mlp": 60.0} for d in (-1, 0, 1, 0.5, -0.5, 0)])
    p = predict(base, new)
    a = sum(base.categories["attention.core"]) / sum(base.iteration_ms)
    s = (sum(base.categories["attention.core"]) / 6) / (sum(new.categories["attention.core"]) / 6)
    assert p["a"] == pytest.approx(a) and p["s"] == pytest.approx(s)
    assert p["predicted"] == pytest.approx(amdahl(a, s))
    assert p["predicted_low"] < p["predicted"] < p["predicted_high"]
    assert p["s_low"] < s < p["s_high"]


def _record(combo_id: str, attn: str, per_iteration: list[dict[str, float]], samples: list[float],
            **combination: Any) -> dict[str, Any]:
    hw = synthetic.HARDWARE[0]
    model = synthetic.MODELS[1]  # gpt2, a decoder
    rec = synthetic.combination_record(hw, model, attn, 128, "cpu-x/run-a")
    rec["id"] = combo_id
    rec["combination"].update(combination)
    walls = [sum(row.values()) for row in per_iteration]
    categories = {c: {"ms": sum(r.get(c, 0.0) for r in per_iteration) / len(walls), "share": 0.0,
                      "share_low": 0.0, "share_high": 0.0,
                      "per_iteration_ms": [r.get(c, 0.0) for r in per_iteration]} for c in CATEGORIES}
    rec["attribution"]["methods"] = {"hooks": {"iteration_ms": walls, "iterations": len(walls),
                                               "categories": categories}}
    rec["attribution"]["headline_method"] = "hooks"
    s = sorted(samples)
    rec["timing"].update(samples=samples, n=len(samples), median=stats.median(samples),
                         ci_low=stats.median_ci(s)[1], ci_high=stats.median_ci(s)[2])
    return rec


def _latencies(centre: float) -> list[float]:
    return [centre * (1 + 0.002 * ((i * 7) % 11 - 5)) for i in range(30)]


def test_disagreement_names_the_category_the_time_moved_into() -> None:
    # eager -> sdpa: attention.core 40 -> 10 ms, but the MLP grows 60 -> 80 ms; latency
    # follows the whole forward (100 -> 90 ms), not Amdahl's 100 -> 70
    base = _record("b", "eager", [{"attention.core": 40.0 + 0.1 * i, "mlp": 60.0} for i in range(6)],
                   _latencies(100.0))
    new = _record("n", "sdpa", [{"attention.core": 10.0, "mlp": 80.0 + 0.1 * i} for i in range(6)],
                  _latencies(90.0))
    row = payoff.amdahl_row({"hardware": "cpu-x", "model": "gpt2"}, base, new,
                            iteration_series(base, None), iteration_series(new, None))
    assert row["speedup"] == pytest.approx(100 / 90, rel=1e-3)
    assert row["predicted"] == pytest.approx(100.25 / 70.0)
    assert row["agree"] is False
    assert row["measured_over_predicted"] == pytest.approx(row["speedup"] / row["predicted"])
    assert row["gap"] == pytest.approx(row["predicted_low"] - row["speedup_high"])
    top = row["moved"][0]
    assert top["category"] == "mlp" and top["ms"] == pytest.approx(20.25) and top["significant"]
    assert all(m["category"] != "attention.core" for m in row["moved"])
    assert row["moved_outside"] == pytest.approx(20.25)
    assert row["attributed"] == pytest.approx(100.25 / 90.25, rel=1e-3)
    # the same switch with the MLP unchanged and the latency following: they agree
    same = _record("n2", "sdpa", [{"attention.core": 10.0, "mlp": 60.0 + 0.1 * i} for i in range(6)],
                   _latencies(70.0))
    ok = payoff.amdahl_row({"hardware": "cpu-x", "model": "gpt2"}, base, same,
                           iteration_series(base, None), iteration_series(same, None))
    assert ok["agree"] is True and ok["moved"] == [] and ok["gap"] == 0.0


def test_a_measured_interval_wider_than_the_predicted_effect_is_too_noisy_to_test() -> None:
    # attention.core 1 -> 0.5 ms of a 100 ms forward: Amdahl predicts about 1.005x, while
    # the measured latencies scatter by +-30%: their interval holds both 1x and 1.005x
    base = _record("b", "eager", [{"attention.core": 1.0 + 0.01 * i, "mlp": 99.0} for i in range(6)],
                   [100.0 * (1 + 0.3 * (((i * 7) % 11) - 5) / 5) for i in range(30)])
    new = _record("n", "sdpa", [{"attention.core": 0.5, "mlp": 99.0 + 0.01 * i} for i in range(6)],
                  [99.5 * (1 + 0.3 * (((i * 5) % 11) - 5) / 5) for i in range(30)])
    row = payoff.amdahl_row({"hardware": "cpu-x", "model": "gpt2"}, base, new,
                            iteration_series(base, None), iteration_series(new, None))
    assert row["speedup_low"] < 1.0 < row["speedup_high"]
    assert row["speedup_low"] < row["predicted"] < row["speedup_high"]
    assert row["agree"] is None and row["why"] == payoff.TOO_NOISY
    (summary,) = payoff.agreement([row])
    assert summary["noisy"] == 1 and summary["agree"] == 0 and summary["undecided"] == 0
    assert not payoff.too_noisy(1.5, 0.9, 1.2) and not payoff.too_noisy(1.1, 1.05, 1.2)
    # the prediction outside the measured interval, but nearer 1 than the interval is wide
    assert payoff.too_noisy(0.90, 0.929, 1.17) and payoff.too_noisy(1.05, 0.97, 1.04)
    assert not payoff.too_noisy(0.90, 0.97, 1.01)  # narrower than the effect: it tests it


def test_committed_records_read_from_their_traces() -> None:
    """Records written before per-iteration series were stored: the profiler method per
    iteration, read from the committed traces, reproduces the record's figures, and the
    prediction is Amdahl's law on them."""
    runs = {r.run_id: r for r in load_runs(ROOT / "runs")}
    run = runs["cpu-amd-epyc-2c/cpu-default-c11f32ec"]
    combos = {str(c.record["id"]): c for c in run.combinations}
    base = combos["gpt2--prefill--fp32--eager--b1--s128"]
    new = combos["gpt2--prefill--fp32--sdpa--b1--s128"]
    sb = iteration_series(base.record, base.trace)
    sn = iteration_series(new.record, new.trace)
    assert sb is not None and sn is not None
    assert (sb.method, sb.source, sb.n) == ("profiler", "trace", 3)
    assert list(sb.iteration_ms) == pytest.approx(base.record["profile"]["per_iteration_ms"], rel=1e-6)
    for c in CATEGORIES:
        mean = sum(sb.categories[c]) / sb.n
        stored = (base.record["attribution"]["categories"].get(c) or {}).get("ms", 0.0)  # older: no compiled
        assert mean == pytest.approx(stored, rel=1e-6, abs=1e-9), c
    row = payoff.amdahl_row({"hardware": "cpu-amd-epyc-2c", "model": "gpt2"}, base.record, new.record, sb, sn)
    core_b, core_n = sum(sb.categories["attention.core"]), sum(sn.categories["attention.core"])
    a = core_b / sum(sb.iteration_ms)
    s = (core_b / 3) / (core_n / 3)
    assert row["a"] == pytest.approx(a) and row["s"] == pytest.approx(s)
    assert row["predicted"] == pytest.approx(amdahl(a, s))
    ratio, low, high, _ = stats.ratio_ci(base.record["timing"]["samples"], new.record["timing"]["samples"])
    assert row["speedup"] == pytest.approx(1 / ratio)
    assert (row["speedup_low"], row["speedup_high"]) == pytest.approx((1 / high, 1 / low))


# --- pairs ----------------------------------------------------------------------------------


def _row(**kw: Any) -> dict[str, Any]:
    row = {"hardware": "cpu-x", "model": "gpt2", "scale": "reference", "mode": "prefill", "dtype": "fp32",
           "attn": "eager", "batch": 1, "seq": 128, "compile": "none", "status": "ok",
           "architecture": "decoder", "run_id": "cpu-x/run-a", "device": "cpu"}
    row.update(kw)
    row["combo_id"] = "--".join(str(row[k]) for k in ("model", "mode", "dtype", "attn", "seq", "compile"))
    return row


def _found(frame: pd.DataFrame) -> set[tuple[str, str, str]]:
    got = payoff.pairs(frame)
    return set(zip(got["gain"], got["base_combo"], got["new_combo"]))


def test_pairs_differ_in_exactly_one_axis_in_the_gains_direction() -> None:
    rows = [
        _row(),                                              # prefill fp32 eager
        _row(attn="sdpa"),                                   # attention
        _row(attn="sdpa-flash"),                             # attention (a backend)
        _row(dtype="bf16", run_id="cpu-x/run-b"),            # precision, from another run
        _row(dtype="bf16", attn="sdpa"),                     # two axes from the first: only with its twins
        _row(mode="decode"), _row(mode="decode-nocache"),    # the KV cache
        _row(compile="default"),                             # torch.compile
        _row(seq=256, attn="sdpa"),                          # differs in length and attention: no pair
        _row(hardware="cpu-y", attn="sdpa"),                 # other hardware: never paired
    ]
    got = _found(pd.DataFrame(rows))
    first = "gpt2--prefill--fp32--eager--128--none"
    assert got == {
        ("attention", first, "gpt2--prefill--fp32--sdpa--128--none"),
        ("attention", first, "gpt2--prefill--fp32--sdpa-flash--128--none"),
        ("attention", "gpt2--prefill--bf16--eager--128--none", "gpt2--prefill--bf16--sdpa--128--none"),
        ("precision", first, "gpt2--prefill--bf16--eager--128--none"),
        ("precision", "gpt2--prefill--fp32--sdpa--128--none", "gpt2--prefill--bf16--sdpa--128--none"),
        ("kv-cache", "gpt2--decode-nocache--fp32--eager--128--none", "gpt2--decode--fp32--eager--128--none"),
        ("compile", first, "gpt2--prefill--fp32--eager--128--default"),
    }
    frame = payoff.pairs(pd.DataFrame(rows))
    precision = frame[(frame["gain"] == "precision") & (frame["base_combo"] == first)].iloc[0]
    assert (precision["base_run"], precision["new_run"]) == ("cpu-x/run-a", "cpu-x/run-b")
    assert precision["setting"] == "prefill, eager, batch 1"


def test_compiled_attention_switches_are_not_predicted() -> None:
    matched = payoff.pairs(pd.DataFrame([_row(compile="default"), _row(compile="default", attn="sdpa")]))
    assert list(matched["gain"]) == ["attention"]
    assert payoff.amdahl_rows(matched, {}, {}) == []  # no attention boundary in a compiled graph


def test_pairs_leave_out_what_ran_on_neither_side_and_the_attention_benchmark() -> None:
    rows = [_row(status="skipped", attn="sdpa-cudnn"), _row(status="skipped", attn="sdpa-cudnn", dtype="bf16"),
            _row(status="skipped", attn="sdpa-efficient"),
            _row(model="attention-micro", architecture="attention", attn="sdpa-math"),
            _row(model="attention-micro", architecture="attention", attn="sdpa-math", dtype="bf16"),
            _row(attn="sdpa", status="failed")]
    assert _found(pd.DataFrame(rows)) == set()  # no eager row; the rest ran on neither side
    rows.append(_row())
    # a failed side is kept (shown as not comparable); a skipped one cannot run here
    assert _found(pd.DataFrame(rows)) == {
        ("attention", "gpt2--prefill--fp32--eager--128--none", "gpt2--prefill--fp32--sdpa--128--none")}
    timing = {"median": 10.0, "ci_low": 9.0, "ci_high": 11.0, "samples": [9.0, 10.0, 11.0]}
    shown = payoff.payoff(payoff.pairs(pd.DataFrame(rows)), {
        ("cpu-x", r["combo_id"]): {"id": r["combo_id"], "status": r["status"], "timing": timing,
                                   "reason": None if r["status"] == "ok" else "boom"} for r in rows})
    assert shown[0]["verdict"] == "not comparable" and shown[0]["speedup"] is None
    assert shown[0]["reason"] == "new: failed (boom)"


def test_missing_gains_name_the_command_that_measures_them() -> None:
    rows = [_row(), _row(attn="sdpa"), _row(model="bert-base", architecture="encoder", mode="forward"),
            _row(model="opt", architecture="decoder", mode="decode")]
    frame = pd.DataFrame(rows)
    absent = {(r["model"], r["gain"]): r for r in payoff.missing(frame, payoff.pairs(frame))}
    assert ("gpt2", "attention") not in absent
    assert absent[("gpt2", "kv-cache")]["command"] == "reportgen profile --suite cpu-payoff"
    assert absent[("bert-base", "kv-cache")]["status"] == "not applicable"
    assert absent[("opt", "precision")]["command"] == (
        "reportgen profile --device cpu --models opt --scale reference --seq-lens 128 --batch-sizes 1 "
        "--modes decode --dtypes fp32,bf16 --attn eager --compile none")
    assert absent[("opt", "kv-cache")]["command"].endswith("--modes decode-nocache,decode --dtypes fp32 "
                                                            "--attn eager --compile none")


def test_payoff_suites_measure_every_gain_they_promise() -> None:
    """The pay-off suites read without validation (render never imports torch) give the
    same combinations as the validated suites, and cover all four gains."""
    from reportgen.suite import load_suite

    for name, models in (("cpu-payoff", {"gpt2", "llama-small"}), ("gpu-payoff", {"gpt2", "llama-1b"})):
        covered = payoff.suite_pairs(name)
        combos = load_suite(name).combinations()
        frame = pd.DataFrame([{"hardware": c.device, "model": c.model, "scale": c.scale, "mode": c.mode,
                               "dtype": c.dtype, "attn": c.attn_implementation, "batch": c.batch_size,
                               "seq": c.seq_len, "compile": c.compile, "combo_id": c.id, "run_id": name}
                              for c in combos])
        assert covered == {(m, g) for m, g in zip(payoff.pairs(frame)["model"], payoff.pairs(frame)["gain"])}
        assert {g for _, g in covered} == {g.name for g in payoff.GAINS}
        assert {m for m, _ in covered} == models
    assert len(load_suite("cpu-payoff").combinations()) == 15


def test_measured_gain_inverts_the_compared_ratio() -> None:
    base = _record("b", "eager", [{"mlp": 1.0}], _latencies(100.0))
    new = _record("n", "sdpa", [{"mlp": 1.0}], _latencies(80.0))
    g = payoff.measured_gain(base, new)
    ratio, low, high, _ = stats.ratio_ci(base["timing"]["samples"], new["timing"]["samples"])
    assert g["speedup"] == pytest.approx(1 / ratio) == pytest.approx(1.25, rel=1e-3)
    assert (g["speedup_low"], g["speedup_high"]) == pytest.approx((1 / high, 1 / low))
    assert g["verdict"] == "faster" and g["significant"] and g["test"] == "mann-whitney"
    same = payoff.measured_gain(base, copy.deepcopy(base))
    assert same["verdict"] == "no significant difference" and not same["significant"]


# --- pages ----------------------------------------------------------------------------------


def _write(root: Path, run: str, records: list[dict[str, Any]]) -> None:
    d = root / "cpu-x" / run
    (d / "combinations").mkdir(parents=True)
    for rec in records:
        rec["run_id"] = f"cpu-x/{run}"
        (d / "combinations" / f"{rec['id']}.json").write_text(json.dumps(rec))
    (d / "run.json").write_text(json.dumps({
        "kind": "reportgen.run", "schema_version": 1, "run_id": f"cpu-x/{run}", "hardware": "cpu-x",
        "suite": {"name": run.split("-")[0], "hash": "0" * 64, "source": "test", "spec": {}},
        "command": "reportgen profile", "environment": {}, "status": "complete",
        "started": "2026-12-02T13:00:00Z", "updated": "2026-12-02T13:00:00Z",
        "finished": "2026-12-02T13:00:00Z", "counts": {"ok": len(records)},
        "combinations": [r["id"] for r in records]}))


def test_both_pages_rendered(tmp_path: Path) -> None:
    def rec(attn: str, mode: str, dtype: str, core: float, latency: float) -> dict[str, Any]:
        combo_id = f"gpt2--{mode}--{dtype}--{attn}--b1--s128"
        return _record(combo_id, attn, [{"attention.core": core + 0.1 * i, "mlp": 60.0} for i in range(6)],
                       _latencies(latency), mode=mode, dtype=dtype, attn_implementation=attn)

    _write(tmp_path / "runs", "alpha-1", [rec("eager", "prefill", "fp32", 40.0, 100.0),
                                          rec("sdpa", "prefill", "fp32", 10.0, 70.0),
                                          rec("eager", "decode", "fp32", 5.0, 30.0)])
    _write(tmp_path / "runs", "beta-2", [rec("eager", "decode-nocache", "fp32", 40.0, 90.0),
                                         rec("eager", "prefill", "bf16", 40.0, 60.0)])
    docs = tmp_path / "docs"
    render(tmp_path / "runs", docs, svg=False)
    speedups = (docs / "findings" / "speedups.md").read_text(encoding="utf-8")
    assert "1 of 1 switches agree with the prediction" in speedups
    assert "| prefill, fp32, batch 1 | 128 | eager → sdpa | 40.1%" in speedups
    table = pd.read_csv(docs / "findings" / "charts" / "speedups--speedups.csv")
    assert table["predicted"].iloc[0] == pytest.approx(100.25 / 70.25, rel=1e-3)
    assert bool(table["agree"].iloc[0])
    page = (docs / "findings" / "payoff.md").read_text(encoding="utf-8")
    # the verdict and the gain first, the setting after them; commands below the table
    for line in ("| attention implementation | **faster** (p = 2.9e-11) | 1.43x ",
                 "| eager → sdpa | prefill, fp32, batch 1 | 128 |",
                 "| lower precision | **faster** (p = 2.9e-11) | 1.67x ",
                 "| fp32 → bf16 | prefill, eager, batch 1 | 128 |",
                 "| KV cache | **faster** (p = 2.9e-11) | 3.00x ",
                 "| decode-nocache → decode | fp32, eager, batch 1 | 128 |",
                 "| torch.compile | not measured | – | the command below the table |",
                 "reportgen profile --suite cpu-payoff"):
        assert line in page, line
    assert "cpu-x/<wbr>beta-2 | cpu-x/<wbr>alpha-1" in page  # each side names its run
    assert "**faster** (p = " in page
    gains = json.loads((docs / "findings" / "charts" / "payoff--gains.json").read_text(encoding="utf-8"))
    assert {g["gain"] for g in gains} == {"attention", "precision", "kv-cache"}
    assert all(math.isfinite(g["speedup"]) for g in gains)
    chart = pd.read_csv(docs / "findings" / "charts" / "payoff--payoff-cpu-x-chart.csv")
    assert set(chart["series"]) == {"attention implementation", "lower precision", "KV cache"}


def test_a_pair_measured_in_one_run_is_taken_from_that_run() -> None:
    # sdpa measured by two runs; eager only by run-a: the pair comes from run-a alone
    frame = pd.DataFrame([_row(attn="sdpa", run_id="cpu-x/run-b"), _row(attn="eager"),
                          _row(attn="sdpa")])
    got = payoff.pairs(frame)
    assert list(got["base_run"]) == ["cpu-x/run-a"] and list(got["new_run"]) == ["cpu-x/run-a"]
    # measured only in different runs: still paired, across them
    split = payoff.pairs(pd.DataFrame([_row(attn="eager"), _row(attn="sdpa", run_id="cpu-x/run-b")]))
    assert list(split["new_run"]) == ["cpu-x/run-b"]
