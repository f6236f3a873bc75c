"""The bench's pure parts: results file, statistics, stand-in, trace reader, page."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from reportgen.bench import results as R
from reportgen.bench.trace_check import (
    compare_totals,
    load_trace,
    op_totals,
    ops_table_totals,
)
from reportgen.paired import interleave
from reportgen.records import bench as B
from reportgen.render.validation import chart_specs, render_validation
from reportgen.stats import bootstrap_ratio


def _doc(**figures: dict[str, Any]) -> dict[str, Any]:
    return R.results_document(figures, environment={"hardware": "cpu-test-2c", "cpu": "Test CPU",
                                                    "threads": 2, "torch": "x", "transformers": "y"},
                              created="2026-12-02T13:00:00Z", quick=True, duration_s=1.5,
                              command="python scripts/bench.py --quick")


def _all_figures() -> dict[str, dict[str, Any]]:
    ratio = {"kind": "ratio_within", "target": 0.03}
    return {
        "latency_agreement": R.figure(
            "Latency agreement", "q", value=1.01, unit="ratio", interval=[0.99, 1.02],
            goal="within 3%", goal_spec=ratio,
            rows=[{"combination": "a|b", "ratio": 1.01, "ratio_low": 0.99, "ratio_high": 1.02}]),
        "instrumentation_overhead": R.figure(
            "Instrumentation", "q", value=1.05, unit="ratio", goal="< 1.03",
            goal_spec={"kind": "below", "target": 1.03},
            rows=[{"combination": "a", "ratio": 1.05, "ratio_low": 1.0, "ratio_high": 1.1}]),
        "attribution_ablation": R.figure(
            "Ablation", "q", value=-0.04, unit="fraction", goal="within 10%",
            goal_spec={"kind": "rel_within", "target": 0.1},
            rows=[{"combination": "bert", "drop_ms": 1.0, "attributed_ms": 1.04}]),
        "flops_agreement": R.figure(
            "FLOPs", "q", value=1.0, unit="share", goal="all explained", goal_spec={"kind": "all"},
            rows=[{"combination": "a", "category": "attention.core", "analytic": 4.0,
                   "counted": 0.0, "rel_diff": -1.0, "explanation": "no formula"}]),
        "render_scaling": R.not_measured("Render scaling", "q", "linear", "no mkdocs.yml yet"),
        "harness_efficiency": R.figure("Efficiency", "q", value=0.4, unit="share", goal="shown",
                                       goal_spec=None, rows=[{"combination": "a", "share": 0.4}]),
    }


# ---------------------------------------------------------------- results file


def test_verdicts() -> None:
    assert R.verdict({"kind": "ratio_within", "target": 0.03}, 1.029) == "pass"
    assert R.verdict({"kind": "ratio_within", "target": 0.03}, 0.96) == "fail"
    assert R.verdict({"kind": "below", "target": 1.03}, 1.03) == "fail"
    assert R.verdict({"kind": "rel_within", "target": 0.1}, -0.09) == "pass"
    assert R.verdict({"kind": "at_least", "target": 12}, 12) == "pass"
    assert R.verdict({"kind": "all"}, 0.99) == "fail"
    assert R.verdict(None, 3.0) == "info"
    assert R.verdict({"kind": "below", "target": 1}, None) == "not measured"


def test_results_round_trip(tmp_path: Path) -> None:
    doc = _doc(**_all_figures())
    assert doc["kind"] == B.KIND and doc["schema_version"] == B.SCHEMA_VERSION
    assert list(doc["figures"])[0] == "latency_agreement"  # display order, not insertion order
    assert doc["summary"] == {"pass": 3, "fail": 1, "info": 1, "not measured": 1}
    path = R.write_results(tmp_path / "bench" / "cpu-test.json", doc)
    loaded = B.load_results(path)
    assert loaded == json.loads(path.read_text())
    assert loaded["figures"]["render_scaling"]["notes"] == ["no mkdocs.yml yet"]
    for fig in loaded["figures"].values():
        assert {"title", "question", "status", "value", "unit", "interval", "goal",
                "goal_spec", "notes", "rows"} <= set(fig)
    assert B.bench_files(tmp_path / "bench") == [(path, loaded)]


def test_results_nan_becomes_null(tmp_path: Path) -> None:
    fig = R.figure("x", "q", value=float("nan"), unit="ratio", goal="g", goal_spec=None,
                   rows=[{"v": float("inf")}])
    path = R.write_results(tmp_path / "r.json", _doc(x=fig))
    loaded = B.load_results(path)
    assert loaded["figures"]["x"]["value"] is None
    assert loaded["figures"]["x"]["rows"] == [{"v": None}]


@pytest.mark.parametrize("change, message", [
    ({"schema_version": B.SCHEMA_VERSION + 1}, "newer"),
    ({"kind": "reportgen.run"}, "kind"),
    ({"figures": None}, "figures"),
])
def test_results_refused(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    doc = {**_doc(**_all_figures()), **change}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(B.ResultsError, match=message):
        B.load_results(path)


def test_bootstrap_ratio() -> None:
    a = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3]
    b = [x / 1.02 for x in a]  # a constant 2% apart, round by round
    point, lo, hi = bootstrap_ratio(a, b, paired=True)
    assert point == pytest.approx(1.02)
    assert lo == pytest.approx(1.02) and hi == pytest.approx(1.02)  # pairing removes drift
    assert all(math.isnan(x) for x in bootstrap_ratio([], [1.0]))


def test_interleave_alternates_order() -> None:
    calls: list[str] = []
    out = interleave({"a": lambda: calls.append("a") or 1.0,
                      "b": lambda: calls.append("b") or 2.0}, rounds=4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert out == {"a": [1.0] * 4, "b": [2.0] * 4}


# ---------------------------------------------------------------- the page


def test_page_renders_from_results_file(tmp_path: Path) -> None:
    path = R.write_results(tmp_path / "r.json", _doc(**_all_figures()))
    md = render_validation(B.load_results(path))
    assert md.startswith("# Validation")
    for title in ("Latency agreement", "Instrumentation", "Ablation", "FLOPs", "Render scaling"):
        assert f"## {title}" in md
    # the verdict beside the figure's name, where a narrow screen still shows it; each
    # interval says what it is
    assert ('| [Latency agreement](#latency-agreement) | <span class="rg-badge rg-badge-pass">pass</span> '
            '| 1.0100 | [0.9900, 1.0200] <small>95% CI</small> |') in md
    assert "no mkdocs.yml yet" in md and "not measured" in md
    assert "a&#124;b" in md  # table cells escape pipes
    assert md.count('class="rg-spec"') == len(chart_specs(B.load_results(path)))


def test_chart_specs_are_vega_lite() -> None:
    doc = _doc(**_all_figures())
    specs = chart_specs(doc)
    assert {"latency_agreement", "instrumentation_overhead", "attribution_ablation",
            "flops_agreement", "harness_efficiency"} <= set(specs)
    for name, spec in specs.items():
        assert "vega-lite" in spec["$schema"]
        json.dumps(spec, allow_nan=False)
        # the rows a chart draws are its top-level data: what its CSV and JSON offer
        assert spec["data"]["values"], name
    drawn = specs["latency_agreement"]["data"]["values"]
    assert [r["combination"] for r in drawn] == [r["combination"] for r in doc["figures"]["latency_agreement"]["rows"]]


def test_chart_labels_keep_what_tells_rows_apart() -> None:
    from reportgen.render.validation import short_labels

    ids = ["bert-base--forward--fp32--eager--b1--s128", "bert-base--forward--fp32--eager--b1--s256",
           "gpt2--prefill--fp32--sdpa--b1--s128"]
    assert short_labels(ids) == {ids[0]: "bert-base--forward--eager--s128",
                                 ids[1]: "bert-base--forward--eager--s256",
                                 ids[2]: "gpt2--prefill--sdpa--s128"}
    assert short_labels(["a--b", "c"]) == {"a--b": "a--b", "c": "c"}  # unlike shapes: kept whole


def test_interval_header_says_what_a_range_is() -> None:
    fig = R.figure("Profiler overhead", "q", value=1.2, unit="ratio", interval=[0.9, 1.6],
                   interval_kind="range over combinations (not a confidence interval)",
                   goal="shown", goal_spec=None, rows=[])
    md = render_validation(_doc(profiler_overhead=fig))
    assert "[0.9000, 1.6000] <small>range over combinations</small>" in md
    assert "(range over combinations (not a confidence interval): [0.9000, 1.6000])" in md
    assert "95% interval [0.9000" not in md


def test_the_page_summarises_every_other_host_and_loads_them_newest_first(tmp_path: Path) -> None:
    from reportgen.records.bench import load_benches

    older = R.results_document(
        {"latency_agreement": _all_figures()["latency_agreement"],
         "attribution_ablation": R.figure("Ablation", "q", value=0.2, unit="fraction", interval=[0.1, 0.3],
                                          goal="within 10%", goal_spec={"kind": "rel_within", "target": 0.1},
                                          rows=[])},
        environment={"hardware": "cpu-other-2c", "cpu": "Other CPU", "threads": 2, "torch": "x",
                     "transformers": "y"},
        created="2026-12-01T09:00:00Z", quick=False, duration_s=3.0, command="python scripts/bench.py")
    R.write_results(tmp_path / "cpu-other-2c.json", older)
    R.write_results(tmp_path / "cpu-test-2c.json", _doc(**_all_figures()))
    (tmp_path / "notes.json").write_text('{"kind": "something else"}')
    found = load_benches(tmp_path)
    assert [d["environment"]["hardware"] for d in found] == ["cpu-test-2c", "cpu-other-2c"]
    assert load_benches(tmp_path / "none") == []
    md = render_validation(found[0], others=found[1:])
    section = md[md.index("Other hosts"):md.index("## Latency agreement")]
    assert "described" not in section and "as measured on **cpu-test-2c**" in section
    assert "**cpu-other-2c**: measured 2026-12-01T09:00:00Z" in section
    # the other host's verdict, value and interval, unlinked (this page's sections are the newest host's)
    assert ('| Ablation | <span class="rg-badge rg-badge-fail">miss</span> | 20.00% | [10.00%, 30.00%] '
            '<small>95% CI</small> | 2026-12-01T09:00:00Z |') in section
    assert "](#" not in section
    assert "Other hosts" not in render_validation(found[0])


def test_the_readme_gives_each_host_its_own_table(tmp_path: Path) -> None:
    from reportgen.render import readme

    R.write_results(tmp_path / "bench" / "cpu-test-2c.json", _doc(**_all_figures()))
    one = readme.blocks(tmp_path / "runs", tmp_path / "bench")["bench"]
    assert "#### `cpu-test-2c`" in one and "Each host" not in one
    other = {**_doc(**_all_figures()), "created": "2026-12-03T00:00:00Z",
             "environment": {"hardware": "cpu-new-2c"}}
    R.write_results(tmp_path / "bench" / "cpu-new-2c.json", other)
    both = readme.blocks(tmp_path / "runs", tmp_path / "bench")["bench"]
    assert "Each host keeps its own figures" in both
    assert both.index("#### `cpu-new-2c`") < both.index("#### `cpu-test-2c`")
    assert both.count("| figure | value | interval | goal | status |") == 2


def test_page_refuses_newer_results() -> None:
    doc = {**_doc(**_all_figures()), "schema_version": B.SCHEMA_VERSION + 1}
    with pytest.raises(B.ResultsError):
        render_validation(doc)


# ---------------------------------------------------------------- the trace reader


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_reader_on_a_hand_made_trace(tmp_path: Path) -> None:
    events = [
        _x("rg|iteration", 0.0, 100.0, cat="user_annotation"),
        _x("aten::linear", 10.0, 40.0),
        _x("aten::addmm", 20.0, 25.0),          # nested: self time of linear is 15
        _x("aten::add", 60.0, 5.0),
        _x("rg|iteration", 200.0, 100.0, cat="user_annotation"),
        _x("aten::linear", 210.0, 30.0),
        _x("aten::addmm", 215.0, 20.0),
        _x("aten::add", 150.0, 5.0),            # between the iterations: not counted
        _x("aten::mul", 20.0, 3.0, tid=2),      # another thread without iterations
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 1, "ts": 12.0},
    ]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    trace = load_trace(path)

    def window(e: dict[str, Any]) -> bool:
        return e["name"] == "rg|iteration"

    totals = op_totals(trace, window=window)
    assert totals.windows == 2
    assert totals.top_level_us == {"aten::linear": 70.0, "aten::add": 5.0}
    assert totals.self_us == {"aten::linear": 25.0, "aten::addmm": 45.0, "aten::add": 5.0}
    assert totals.calls == {"aten::linear": 2, "aten::addmm": 2, "aten::add": 1}
    everything = op_totals(trace)
    assert everything.top_level_us["aten::add"] == 10.0 and everything.top_level_us["aten::mul"] == 3.0

    table = [{"name": "aten::linear", "category": "mlp", "total_ms": 0.030},
             {"name": "aten::linear", "category": "attention.qkv", "total_ms": 0.005},
             {"name": "aten::add", "category": "other", "total_ms": 0.0025}]
    cmp = compare_totals(totals.as_ms("top"), ops_table_totals(table), scale=2.0)
    assert cmp["weighted_rel_diff"] == pytest.approx(0.0)
    assert cmp["reader_total_ms"] == pytest.approx(0.075)


def _device_record(tmp_path: Path) -> dict[str, Any]:
    """A record made by reportgen from the several-threads, several-streams CUDA trace."""
    from reportgen.attribution import ATTRIBUTION_KEYS, analyse_trace

    raw = (Path(__file__).parent / "data" / "gpu_trace_threads.json").read_bytes()
    (tmp_path / "traces").mkdir()
    with gzip.open(tmp_path / "traces" / "t.trace.json.gz", "wb") as fh:
        fh.write(raw)
    result = analyse_trace(json.loads(raw))
    return {"id": "threads", "status": "ok",
            "profile": {"iterations": 2, "trace": "traces/t.trace.json.gz"},
            "attribution": {k: result[k] for k in ATTRIBUTION_KEYS}, "ops": result["ops"]}


def test_trace_reader_reads_every_thread_and_stream(tmp_path: Path) -> None:
    from reportgen.bench.trace_check import (
        check_record,
        device_totals,
        iteration_window,
    )

    record = _device_record(tmp_path)
    totals = device_totals(load_trace(tmp_path / "traces" / "t.trace.json.gz"),
                           iteration_window)
    # Per forward: 8 kernels (one from the worker thread, two from the unlabelled helper
    # and one without a launch record among them) and one copy; busy 116 us of 268.
    assert (totals.windows, totals.kernels, totals.memory_ops, totals.unlinked) == (2, 16, 2, 2)
    assert totals.busy_us == pytest.approx(2 * 116) and totals.span_us == pytest.approx(2 * 268)
    assert totals.events == 2 * 9 + 2 * 2  # plus the late fill and the late nccl kernel
    row = check_record(record, tmp_path)
    assert row["weighted_rel_diff"] < 1e-9
    assert row["count_mismatches"] == [] and row["only_reader"] == []
    assert row["reader_busy_ms"] == pytest.approx(0.116)


def test_trace_reader_catches_a_dropped_thread(tmp_path: Path) -> None:
    from reportgen.bench.trace_check import check_record

    record = _device_record(tmp_path)
    # What a reader of the forward's own thread alone would store: no lm_head GEMM from
    # the worker thread, one kernel fewer.
    record["ops"] = [o for o in record["ops"] if o["category"] != "head"]
    record["attribution"]["launches_per_forward"] -= 1
    row = check_record(record, tmp_path)
    assert row["count_mismatches"] == ["kernels"]
    assert row["weighted_rel_diff"] > 0.1


@pytest.mark.slow
def test_reader_agrees_with_reportgen_on_a_tiny_profile(tmp_path: Path) -> None:
    from reportgen.bench.trace_check import check_record
    from reportgen.profile import building, profiling
    from reportgen.profile.structure import classify
    from reportgen.suite import Combination

    combo = Combination(model="gpt2", scale="tiny", mode="forward", dtype="fp32",
                        attn_implementation="eager", batch_size=1, seq_len=16, device="cpu")
    built = building.build(combo, "cpu")
    try:
        result = profiling.profile_step(built.step, built.model, iterations=2,
                                        trace_path=tmp_path / "traces" / "t.trace.json.gz",
                                        labels=classify(built.model))
    finally:
        building.free(built)
    record = {"id": combo.id, "status": "ok", "profile": result["profile"], "ops": result["ops"]}
    row = check_record(record, tmp_path)
    assert row["iterations"] == 2
    assert row["weighted_rel_diff"] < 1e-9
    assert row["only_reader"] == [] and row["only_reportgen"] == []


# ---------------------------------------------------------------- the ablation stand-in


@pytest.mark.parametrize("model, attn", [("bert-base", "sdpa"), ("llama-small", "eager"),
                                         ("t5-small", "sdpa")])
def test_stand_in_returns_the_right_shape(model: str, attn: str) -> None:
    import torch

    from reportgen.bench.ablation import attention_stand_in
    from reportgen.profile import building
    from reportgen.suite import Combination

    combo = Combination(model=model, scale="tiny", mode="forward", dtype="fp32",
                        attn_implementation=attn, batch_size=2, seq_len=8, device="cpu")
    built = building.build(combo, "cpu")
    try:
        before = built.step()[0]
        with attention_stand_in(built.model) as stand_in:
            ablated = built.step()[0]
        after = built.step()[0]
    finally:
        building.free(built)
    assert stand_in.calls > 0  # the model really called it
    assert ablated.shape == before.shape
    assert not torch.equal(ablated, before)  # the core really was replaced
    assert torch.equal(after, before)  # and put back


def test_paired_forwards_alternate_and_count_the_stand_in() -> None:
    from reportgen.bench import attribution_check
    from reportgen.profile import building
    from reportgen.profile.structure import derive
    from reportgen.suite import Combination

    combo = Combination(model="bert-base", scale="tiny", mode="forward", dtype="fp32",
                        attn_implementation="sdpa", batch_size=1, seq_len=16, device="cpu")
    built = building.build(combo, "cpu")
    try:
        got = attribution_check.paired_forwards(built.step, built.model, derive(built.model, built.step),
                                                budget_s=0.0, min_pairs=5,
                                                hooked_every=3)
        layers = int(built.model.config.num_hidden_layers)
    finally:
        building.free(built)
    full, stub, hooked = got["full_ms"], got["ablated_ms"], got["hooked"]
    # pairs 0, 1, 3, 4, 6 unprofiled; 2 and 5 hooked (at least two, whatever the budget)
    assert len(full) == len(stub) == 5 and len(hooked) == 2
    assert all(ms > 0 for ms in full + stub)
    assert got["calls"] == layers  # one core call per layer per forward
    for full_ms, core_ms, stub_ms, left_ms in hooked:
        # the hooks saw the core inside each forward (at this tiny size what the stand-in
        # leaves, the reshapes around the call, costs about what the call did)
        assert 0 < core_ms < full_ms and 0 <= left_ms < stub_ms


@pytest.mark.slow
def test_an_ablation_round_runs_in_a_fresh_process_and_gives_a_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.bench import ablation as ablation_rules
    from reportgen.bench import attribution_check
    from reportgen.bench.ablation import verdict
    from reportgen.suite import Combination

    combo = Combination(model="llama-small", scale="tiny", mode="prefill", dtype="fp32",
                        attn_implementation="sdpa", batch_size=1, seq_len=32, device="cpu")
    logged: list[str] = []
    # this tiny core is near the 5% resolution, and a row below it needs no more rounds:
    # with no threshold the rule for adding rounds is tested whatever share this host measures
    monkeypatch.setattr(ablation_rules, "RESOLUTION", 0.0)
    # one round asked for, a second added because no interval can be within 1e-9
    fig = attribution_check.ablation([combo], rounds=1, max_rounds=2, precision=1e-9, min_pairs=4,
                                     budget_s=0.0, iterations=2, log=logged.append)
    (row,) = fig["rows"]
    # every eighth pair hooked, at least two of them: fourteen unprofiled pairs and two hooked
    assert row["rounds"] == 2 and row["pairs"] == 28 and row["pairs_per_round"] == [14, 14]
    assert row["hooked_pairs"] == 4 and len(row["hooks_round_rel_diffs"]) == 2
    assert row["pair_drop_sd"] > 0
    assert row["headline_method"] == "hooks" and {"hooks_verdict", "profiler_verdict"} <= set(row)
    assert row["verdict"] == verdict(row["attributed_share"], row["rel_diff"], row["rel_diff_low"],
                                     row["rel_diff_high"])
    assert row["drop_low_ms"] <= row["drop_ms"] <= row["drop_high_ms"]
    assert row["rel_diff_low"] <= row["rel_diff_high"]
    assert any("2 rounds (at least 1, then more" in n for n in fig["notes"])
    assert any("2 rounds, the most allowed" in n for n in fig["notes"])
    assert sum("ablation round" in line for line in logged) == 2
    assert any("after 1 rounds: widest interval" in line for line in logged)
    assert row["own_process"] and len(set(row["round_pids"])) == 2
    assert not any("shared one process" in n for n in fig["notes"])


@pytest.mark.slow
def test_each_combination_of_an_ablation_round_gets_a_process_of_its_own() -> None:
    """A model measured earlier in the same process changes what the stand-in saves, so
    no two combinations, and no two rounds, share one."""
    from reportgen.bench import attribution_check
    from reportgen.suite import Combination

    combos = [Combination(model=m, scale="tiny", mode="forward", dtype="fp32",
                          attn_implementation="sdpa", batch_size=1, seq_len=16, device="cpu")
              for m in ("bert-base", "gpt2")]
    fig = attribution_check.ablation(combos, rounds=2, min_pairs=2, budget_s=0.0, iterations=1,
                                     log=lambda _: None)
    rows = fig["rows"]
    assert len(rows) == 2 and all(r["own_process"] and r["rounds"] == 2 for r in rows)
    pids = [p for r in rows for p in r["round_pids"]]
    assert len(pids) == 4 and len(set(pids)) == 4 and os.getpid() not in pids


def _row(verdict: str, low: float, high: float) -> dict[str, object]:
    return {"verdict": verdict, "rel_diff_low": low, "rel_diff_high": high}


@pytest.mark.parametrize(("rows", "combinations", "expected"), [
    ([_row("pass", -0.04, 0.05), _row("fail", 0.02, 0.11)], 2, (True, 0.045)),
    # a failing row whose interval is narrow stops the rounds as well: widths only
    ([_row("fail", 0.12, 0.20)], 1, (True, 0.04)),
    ([_row("pass", -0.04, 0.05), _row("pass", -0.07, 0.08)], 2, (False, 0.075)),
    # a combination below resolution has no say; a missing row or interval keeps going
    ([_row("below resolution", -0.9, 0.9), _row("pass", -0.01, 0.01)], 2, (True, 0.01)),
    ([_row("pass", -0.01, 0.01)], 2, (False, 0.01)),
    ([_row("fail", float("nan"), 0.01)], 1, (False, float("inf"))),
])
def test_ablation_adds_rounds_until_the_intervals_are_narrow(rows, combinations, expected) -> None:
    from reportgen.bench.attribution_check import precise

    enough, widest = precise(rows, combinations, 0.05)
    assert enough is expected[0] and widest == pytest.approx(expected[1])
    assert precise(rows, combinations, None)[0] is (len(rows) >= combinations)


def test_the_ablation_stops_by_the_suites_rounds_rule() -> None:
    from reportgen.bench.attribution_check import ablation_policy
    from reportgen.execute.rounds import Policy

    # the suite's combinations: six rounds at least, then until the interval is within 2%
    suite = Policy(rounds=8)
    assert suite.settled(6, 0.01) and not suite.settled(6, 0.03) and not suite.settled(5, 0.0)
    assert suite.settled(8, 0.03) and not Policy(rounds=8, target=None).settled(6, 0.0)
    # the ablation's: at least `rounds`, then up to `max_rounds` until within `precision`
    policy = ablation_policy(1, 2, 0.05)
    assert (policy.rounds, policy.floor, policy.target, policy.retry_cap) == (2, 1, 0.05, 0)
    assert policy.settled(1, 0.04) and not policy.settled(1, 0.06) and policy.settled(2, 0.06)
    assert not policy.settled(1, None)  # a combination without a row yet
    # without a precision any interval will do, once every combination has one
    loose = ablation_policy(5)
    assert loose.rounds == 5 and loose.settled(5, None) and not loose.settled(4, 1e9)
    assert ablation_policy(3, 6).settled(3, math.inf) and not ablation_policy(3, 6).settled(3, None)


def test_stand_in_output_is_cached_zeros() -> None:
    import torch

    from reportgen.bench.ablation import StandIn

    stand_in = StandIn()
    q = torch.randn(2, 4, 8, 16)  # batch, heads, q_len, head_dim
    v = torch.randn(2, 4, 10, 12)
    out, weights = stand_in(torch.nn.Identity(), q, v, v, None)
    assert out.shape == (2, 8, 4, 12) and out.is_contiguous() and weights is None
    assert not out.any()
    assert stand_in(torch.nn.Identity(), q, v, v, None)[0] is out
    assert stand_in.calls == 2


# ---------------------------------------------------------------- stand-ins for experts and mixers


def _tiny(model: str, batch_size: int = 2, seq_len: int = 16) -> Any:
    from reportgen.suite import Combination

    return Combination(model=model, scale="tiny", mode="forward", dtype="fp32",
                       attn_implementation="eager", batch_size=batch_size, seq_len=seq_len,
                       device="cpu")


def _hooked_ops(built: Any, category: str, stand_in: bool) -> tuple[float, float]:
    """What the hooks method attributes to (the category, moe.router) in one forward, with
    or without the category's stand-in, read with a clock that counts aten ops."""
    import contextlib

    from support.clocks import counting_ops

    from reportgen.bench.ablation import category_stand_in
    from reportgen.profile import regions
    from reportgen.profile.structure import derive

    proj = derive(built.model, built.step)
    with (category_stand_in(built.model, category, roles=proj.roles) if stand_in else contextlib.nullcontext(),
          counting_ops() as clock):
        _, cats = regions.hooked_forward(built.model, built.step, clock, proj)
    built.step.reset()
    return cats.get(category, 0.0), cats.get("moe.router", 0.0)


@pytest.mark.parametrize("model, category", [("mixtral", "moe.experts"), ("mamba", "mixer")])
def test_module_stand_in_replaces_the_category_and_is_put_back(model: str, category: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from reportgen.bench.ablation import category_stand_in
    from reportgen.profile import building, structure

    built = building.build(_tiny(model), "cpu")
    try:
        layers = int(built.model.config.num_hidden_layers)
        roles = structure.derive(built.model, built.step).roles
        before = built.step()[0]

        def derived_again(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the stand-in derived the structure again")

        # the stand-in reads the structure it is handed, derived once above
        with monkeypatch.context() as patch:
            patch.setattr(structure, "classify", derived_again)
            patch.setattr(structure, "derive", derived_again)
            with category_stand_in(built.model, category, roles=roles) as stand_in:
                ablated = built.step()[0]
                again = built.step()[0]
        after = built.step()[0]
        full_ops, full_router = _hooked_ops(built, category, stand_in=False)
        stub_ops, stub_router = _hooked_ops(built, category, stand_in=True)
        own_forwards = [n for n, m in built.model.named_modules() if "forward" in m.__dict__]
    finally:
        building.free(built)
    assert stand_in.calls == 2 * layers  # one replaced module per layer, two forwards
    assert len(stand_in.patched) == layers
    assert ablated.shape == before.shape
    assert not torch.equal(ablated, before)  # the work really was replaced
    assert torch.equal(again, ablated)  # by the same zeros every time
    assert torch.equal(after, before) and own_forwards == []  # and put back
    # what the hooks method attributes to the category all but disappears with it in place:
    # the stand-in's few ops against the category's own
    assert full_ops > 0 and stub_ops < 0.25 * full_ops
    if category == "moe.experts":
        assert full_router > 0 and stub_router > 0  # the router is kept


def test_paired_forwards_read_the_target_category(monkeypatch: pytest.MonkeyPatch) -> None:
    import statistics

    from support.clocks import counting_ops

    from reportgen.bench import attribution_check
    from reportgen.profile import building, regions
    from reportgen.profile.structure import derive

    built = building.build(_tiny("mixtral", batch_size=1), "cpu")
    try:
        # the hooked pairs read aten op counts (the unprofiled ones still the host clock)
        with counting_ops() as clock:
            monkeypatch.setattr(regions, "device_clock", lambda step: clock)
            got = attribution_check.paired_forwards(built.step, built.model, derive(built.model, built.step),
                                                    budget_s=0.0, min_pairs=3,
                                                    hooked_every=2, category="moe.experts")
        layers = int(built.model.config.num_hidden_layers)
    finally:
        building.free(built)
    assert got["category"] == "moe.experts" and got["calls"] == layers
    assert len(got["full_ms"]) == 3 and len(got["hooked"]) == 2
    full_experts = [h[1] for h in got["hooked"]]
    left_experts = [h[3] for h in got["hooked"]]
    # with the experts' stand-in in place few of the ops the hooks count as moe.experts are
    # left (read for attention.core, which the stand-in leaves alone, all of them would be)
    assert all(ops > 0 for ops in full_experts)
    assert len(set(full_experts)) == 1 and len(set(left_experts)) == 1  # counts: the same every pair
    assert max(left_experts) < 0.5 * statistics.median(full_experts)


def test_module_stand_in_for_a_list_of_experts_and_a_shared_one() -> None:
    import torch
    from torch import nn

    from reportgen.bench.ablation import category_stand_in
    from reportgen.profile.structure import classify

    class Expert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 6)  # the last projection sets the output width

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(torch.relu(self.up(x)))

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
            return self.down(torch.relu(self.up(x))), None

    class Moe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(8, 3)
            self.experts = nn.ModuleList([Expert() for _ in range(3)])
            self.shared_expert = Shared()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pick = self.gate(x).argmax(-1)
            out = torch.zeros(*x.shape[:-1], 6)
            for i, expert in enumerate(self.experts):
                rows = pick == i
                out[rows] = expert(x[rows])
            shared, _ = self.shared_expert(x)
            out[..., :6] += shared[..., :6]  # in place onto the sum: the zeros stay zeros
            return out

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = Moe()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mlp(x)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Layer()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers[0](x)

    model = Model().eval()
    x = torch.randn(2, 10, 8)
    with torch.inference_mode():
        before = model(x)
        roles = classify(model)
        with category_stand_in(model, "moe.experts", roles=roles) as stand_in, \
                category_stand_in(model, "moe.shared", roles=roles) as shared_stand_in:
            first = model(x)
            experts_out = model.layers[0].mlp.experts[0](torch.randn(4, 8))
            shared_out = model.layers[0].mlp.shared_expert(x)[0]
            shared_out += 1.0  # a caller that writes into the output it was handed
            again = model.layers[0].mlp.shared_expert(x)[0]
        after = model(x)
    # the routed experts are moe.experts, the shared one moe.shared
    assert {p.split(" ")[0] for p in stand_in.patched} == {
        "layers.0.mlp.experts.0", "layers.0.mlp.experts.1", "layers.0.mlp.experts.2"}
    assert {p.split(" ")[0] for p in shared_stand_in.patched} == {"layers.0.mlp.shared_expert"}
    assert experts_out.shape == (4, 6) and not experts_out.any()
    assert again is shared_out and not again.any()  # zeroed again before it is handed out
    assert not first.any() and torch.equal(after, before)
    assert stand_in.calls >= 3 and shared_stand_in.calls >= 1


def test_module_stand_in_refuses_a_model_without_the_category() -> None:
    from torch import nn

    from reportgen.bench.ablation import category_stand_in
    from reportgen.profile.structure import classify

    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no 'experts' module"):
        with category_stand_in(model, "moe.experts", roles=classify(model)):
            pass
    with pytest.raises(ValueError, match="needs the model's module roles"):
        category_stand_in(model, "moe.experts")
    with pytest.raises(ValueError, match="no stand-in for 'mlp'"):
        category_stand_in(nn.Linear(2, 2), "mlp")


def _method_section(per_iteration: list[dict[str, float]], forward_ms: list[float]) -> dict[str, Any]:
    from reportgen import shares

    return shares.method_section(per_iteration, forward_ms, clock="torch.profiler", basis="cpu")


def test_agreement_reads_the_target_category() -> None:
    from reportgen.bench import ablation
    from reportgen.bench.attribution_check import ablation_row

    # forward 100 ms: attention.core 10 ms, the experts 40 ms, of which the stand-in leaves
    # 1 ms (its own calls); the stubbed forward is 61 ms. Read for moe.experts the drop (39)
    # equals the removable time (39); read for attention.core nothing would be removable.
    full_cats = {"attention.core": 10.0, "moe.experts": 40.0, "moe.router": 5.0, "mlp": 0.0}
    stub_cats = {"attention.core": 10.0, "moe.experts": 1.0, "moe.router": 5.0}
    pair = ablation.hooked_pair(100.0, full_cats, 61.0, stub_cats, "moe.experts")
    assert pair == (100.0, 40.0, 61.0, 1.0)
    assert ablation.hooked_pair(100.0, full_cats, 61.0, stub_cats) == (100.0, 10.0, 61.0, 10.0)
    full_ms = [100.0, 100.5, 99.5, 100.0]
    ablated_ms = [61.0, 61.3, 60.7, 61.0]
    profiled_full = _method_section([full_cats] * 3, [100.0] * 3)
    profiled_left = _method_section([stub_cats] * 3, [61.0] * 3)
    profiler = (ablation.category_series(profiled_full, "moe.experts"),
                ablation.category_series(profiled_left, "moe.experts"))
    assert profiler[0] == ([40.0] * 3, [100.0] * 3)
    rounds = [ablation.Round(full_ms, ablated_ms, [pair] * 3, "moe.experts") for _ in range(3)]
    methods = ablation.agreement(rounds, profiler)
    for name in ("hooks", "profiler"):
        got = methods[name]
        assert got["category"] == "moe.experts"
        assert got["share"] == pytest.approx(0.40)
        assert got["removable_ms"] == pytest.approx(39.0, rel=1e-3)
        assert got["rel_diff"] == pytest.approx(0.0, abs=1e-3)
        assert got["verdict"] == "pass"
    # the same forwards judged on attention.core: nothing the stand-in removes is attributed
    core = ablation.agreement([ablation.Round(full_ms, ablated_ms, [(100.0, 10.0, 61.0, 10.0)] * 3)] * 3)
    assert core["hooks"]["category"] == "attention.core" and core["hooks"]["verdict"] == "fail"
    with pytest.raises(ValueError, match="different target categories"):
        ablation.agreement([rounds[0], ablation.Round(full_ms, ablated_ms, [pair] * 3)])

    # a combination's row from its rounds' units names the category once, at the top
    unit = {"combination": "granitemoe--forward", "category": "moe.experts", "full_ms": full_ms,
            "ablated_ms": ablated_ms, "hooked": [list(pair)] * 3, "calls": 4,
            "patched": ["model.layers.0.mlp.experts (X)"], "wall_s": 1.0,
            "profiler": {"full": profiler[0], "left": profiler[1]}}
    row = ablation_row([unit, {**unit, "profiler": None}])
    assert row["category"] == "moe.experts" and "hooks_category" not in row
    assert row["attributed_share"] == pytest.approx(0.40) and row["verdict"] == "pass"
    legacy = {k: v for k, v in unit.items() if k != "category"}  # units before the category
    legacy["hooked"] = [[100.0, 39.0, 61.0, 0.0]] * 3
    assert ablation_row([legacy])["category"] == "attention.core"


@pytest.mark.slow
def test_an_experts_ablation_round_gives_a_row_of_its_category(monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.bench import ablation as ablation_rules
    from reportgen.bench import attribution_check
    from reportgen.bench.ablation import verdict
    from reportgen.suite import Combination

    combo = Combination(model="mixtral", scale="tiny", mode="forward", dtype="fp32",
                        attn_implementation="eager", batch_size=1, seq_len=32, device="cpu")
    target = attribution_check.Target(combo, "moe.experts")
    logged: list[str] = []
    # the tiny experts' share lies near the 5% resolution on some hosts (3.2% measured once),
    # and a row below it needs no more rounds: the round rule is tested whatever share it gets
    monkeypatch.setattr(ablation_rules, "RESOLUTION", 0.0)
    fig = attribution_check.ablation([target], rounds=1, max_rounds=2, precision=1e-9, min_pairs=4,
                                     budget_s=0.0, iterations=2, log=logged.append)
    (row,) = fig["rows"]
    assert row["category"] == "moe.experts" and row["combination"] == combo.id
    assert row["stand_in_calls"] == 2  # the experts of each of the 2 tiny layers, once
    assert all("experts" in p for p in row["stand_in_patched"])
    assert row["rounds"] == 2 and row["pairs"] == 28 and row["hooked_pairs"] == 4
    assert row["headline_method"] == "hooks" and {"hooks_verdict", "profiler_verdict"} <= set(row)
    assert 0.0 < row["attributed_share"] < 1.0  # the experts were found and timed
    assert row["verdict"] == verdict(row["attributed_share"], row["rel_diff"], row["rel_diff_low"],
                                     row["rel_diff_high"])
    assert row["hooks_verdict"] == verdict(row["hooks_share"], row["hooks_rel_diff"],
                                           row["hooks_rel_low"], row["hooks_rel_high"])
    assert row["drop_low_ms"] <= row["drop_ms"] <= row["drop_high_ms"]
    assert fig["title"] == "Ablation" and "moe.experts" in fig["goal"]
    assert any(f"{combo.id} [moe.experts]" in line for line in logged)


def _ablation_row(combination: str, category: str | None, rel: float, verdict: str) -> dict[str, Any]:
    row: dict[str, Any] = {"combination": combination, "verdict": verdict, "rel_diff": rel,
                           "rel_diff_low": rel - 0.02, "rel_diff_high": rel + 0.02, "drop_ms": 10.0,
                           "removable_ms": 10.0, "headline_method": "hooks", "hooks_verdict": verdict,
                           "attributed_share": 0.3, "forward_ms": 40.0}
    if category is not None:
        row["category"] = category
    return row


def test_ablation_rows_of_other_combinations_are_kept_on_a_partial_run() -> None:
    from reportgen.bench.attribution_check import ablation_summary, merge_ablation

    previous = ablation_summary([_ablation_row("bert", None, 0.03, "pass"),  # before categories
                                 _ablation_row("granite", "moe.experts", 0.30, "fail")],
                                rounds=4, min_pairs=12, budget_s=60.0)
    previous["measured_at"] = "2026-12-01T10:00:00Z"
    assert previous["title"] == "Ablation" and previous["status"] == "fail"
    current = ablation_summary([_ablation_row("granite", "moe.experts", 0.04, "pass"),
                                _ablation_row("falcon", "mixer", -0.05, "pass")],
                               ["round 1: something failed"], rounds=2, min_pairs=12, budget_s=60.0)
    merged = merge_ablation(previous, current)
    assert [(r["combination"], r.get("category")) for r in merged["rows"]] == [
        ("bert", None), ("granite", "moe.experts"), ("falcon", "mixer")]
    assert merged["rows"][0]["measured_at"] == "2026-12-01T10:00:00Z"
    assert "measured_at" not in merged["rows"][1]
    assert merged["status"] == "pass"  # the re-measured granite row replaced the failing one
    assert merged["value"] == pytest.approx(-0.05)
    assert any("Kept from an earlier measurement" in n and "bert" in n for n in merged["notes"])
    assert "round 1: something failed" in merged["notes"]
    assert any(n.startswith("Measurement: 2 rounds") for n in merged["notes"])
    assert merge_ablation({"rows": []}, current) is current
    # the attention-only figure reads as it did before rows named their category
    attention = ablation_summary([_ablation_row("bert", None, 0.03, "pass")], rounds=4,
                                 min_pairs=12, budget_s=60.0)
    assert attention["title"] == "Attention ablation"
    assert attention["goal"].startswith("where the attributed attention.core is at least 5%")


def test_validation_page_shows_the_ablation_category() -> None:
    rows = [_ablation_row("bert", None, 0.03, "pass"), _ablation_row("granite", "moe.experts", 0.04, "pass")]
    fig = R.figure("Ablation", "q", value=0.04, unit="fraction", goal="within 10%",
                   goal_spec={"kind": "rel_within", "target": 0.1}, rows=rows)
    md = render_validation(_doc(attribution_ablation=fig))
    assert "| combination | category | forward&#95;ms |" in md
    assert "| bert | attention.core | 40 |" in md  # a row from before: the attention core
    assert "| granite | moe.experts | 40 |" in md
    spec = chart_specs(_doc(attribution_ablation=fig))["attribution_ablation"]
    assert "granite [moe.experts]" in json.dumps(spec)


def test_bench_selects_the_ablation_combinations() -> None:
    from reportgen.bench import orchestrate
    from reportgen.profile import modelspec

    plan = orchestrate.plan(quick=False)
    chosen = orchestrate.ablation_targets(plan, {"moe", "hybrid"})
    assert [(t.combo.model, t.category) for t in chosen] == [
        ("granitemoe-1b-a400m-4l", "moe.experts"), ("falcon-h1-0.5b-4l", "mixer")]
    assert all(t.combo.seq_len == 512 and t.combo.attn_implementation == "eager"
               and t.combo.mode == "forward" and t.combo.scale == "reference" for t in chosen)
    assert all(modelspec.resolve(t.combo.model).source == "preset" for t in chosen)  # no network
    everything = orchestrate.ablation_targets(plan)
    assert len(everything) == 6 and sum(t.category == "attention.core" for t in everything) == 4
    with pytest.raises(SystemExit):
        orchestrate.main(["--only", "ablation", "--ablation-models", "moe,dense"])


# ---------------------------------------------------------------- figures from records


def _record(cid: str, median: float, profiled: float, samples: list[float],
            duration_s: float) -> dict[str, Any]:
    return {"id": cid, "status": "ok", "duration_s": duration_s,
            "timing": {"median": median, "samples": samples, "warmup_samples": [5.0],
                       "n": len(samples), "budget_s": 1.0, "stop_reason": "converged"},
            "profile": {"median_ms": profiled, "overhead_ratio": profiled / median}}


def test_figures_from_suite_records() -> None:
    from reportgen.bench.efficiency import SuiteRun, figures
    from reportgen.bench.overhead import profiler_overhead

    records = [_record("a", 10.0, 11.0, [10.0] * 100, 4.0),
               _record("b", 20.0, 30.0, [20.0] * 50, 3.0),
               {"id": "c", "status": "skipped", "duration_s": 0.5, "timing": None, "profile": None}]
    prof = profiler_overhead(records)
    assert prof["status"] == "info" and [r["ratio"] for r in prof["rows"]] == [1.1, 1.5]
    assert prof["interval"] == [1.1, 1.5]
    run = SuiteRun(suite=None, records=records, run_dir=Path("."), wall_s=10.0)
    out = figures(run, reference_size=True)
    eff = out["harness_efficiency"]
    assert eff["value"] == pytest.approx(2.0 / 10.0)  # 1 s + 1 s of samples in 10 s
    assert eff["warmup_s"] == pytest.approx(0.01)
    assert out["suite_time"]["status"] == "pass" and out["suite_time"]["value"] == 10.0


def test_flops_explanations_name_the_missing_ops() -> None:
    from reportgen.bench.flops_check import explain, missing_formulas

    census = {"aten.mm": 3, "aten.addmm": 2, "aten.scaled_dot_product_attention": 2,
              "aten.view": 9, "aten.softmax": 1}
    missing = missing_formulas(census)
    assert missing == ["aten.scaled_dot_product_attention", "aten.softmax"]
    text = explain("attention.core", 100.0, 0.0, missing=missing, notes=[])
    assert text is not None and "aten.scaled_dot_product_attention" in text
    assert explain("mlp", 100.0, 120.0, missing=missing, notes=[]) is None  # nothing named
    note = "flop_counter counted no FLOPs in head (analytic 5)"
    assert explain("head", 5.0, 0.0, missing=[], notes=[note]) == f"reportgen notes: {note}"


def test_latency_verdict_counts_only_significant_misses() -> None:
    from reportgen.bench.latency import summarise

    def row(name: str, ratio: float, lo: float, hi: float) -> dict[str, Any]:
        return {"combination": name, "ratio": ratio, "ratio_low": lo, "ratio_high": hi,
                "rounds": 4}

    noisy = [row("a", 1.00, 0.99, 1.01), row("b", 1.06, 0.95, 1.20), row("c", 0.99, 0.98, 1.0)]
    fig = summarise(noisy, rounds=4, budget_s=0.6, min_run_time=0.4)
    assert fig["status"] == "pass" and fig["value"] == 1.0  # b is outside only by its point
    assert fig["significant_misses"] == 0 and fig["worst_ratio"] == 1.06
    off = [*noisy, row("d", 1.10, 1.05, 1.15)]
    assert summarise(off, rounds=4, budget_s=0.6, min_run_time=0.4)["status"] == "fail"
    assert summarise([], rounds=4, budget_s=0.6, min_run_time=0.4)["status"] == "not measured"


def test_instrumentation_verdict() -> None:
    from reportgen.bench.overhead import instrumentation_summary

    def row(ratio: float, lo: float, hi: float) -> dict[str, Any]:
        return {"combination": f"c{ratio}", "mode": "forward", "ratio": ratio, "ratio_low": lo,
                "ratio_high": hi, "modules": 10, "bare_ms": 1.0}

    rows = [row(1.01, 1.0, 1.02), row(1.02, 1.0, 1.05), row(1.05, 0.98, 1.1)]
    assert instrumentation_summary(rows, rounds=4, budget_s=0.5)["status"] == "pass"
    rows.append(row(1.08, 1.05, 1.1))  # significantly over the goal
    assert instrumentation_summary(rows, rounds=4, budget_s=0.5)["status"] == "fail"
    # rows measured before the count of labelled modules was kept read as before
    assert "10 modules, bare forward" in instrumentation_summary(rows, rounds=4, budget_s=0.5)["notes"][0]
    rows[-1]["labelled"] = 7
    assert "10 modules, 7 with a range, bare forward" in \
        instrumentation_summary(rows, rounds=4, budget_s=0.5)["notes"][0]
    # a failure says its cause from the row's own measurements: what each range cost, and
    # what the same ranges at that cost are of the same model's longer step
    step = {"combination": "m--decode--fp32--sdpa--b1--s128", "mode": "decode", "ratio": 1.08,
            "ratio_low": 1.04, "ratio_high": 1.11, "modules": 163, "bare_ms": 22.0, "instrumented_ms": 23.76}
    longer = {**step, "combination": "m--prefill--fp32--sdpa--b1--s128", "mode": "prefill", "ratio": 1.01,
              "ratio_low": 0.99, "ratio_high": 1.02, "bare_ms": 110.0, "instrumented_ms": 111.0}
    other_attn = {**longer, "combination": "m--prefill--fp32--eager--b1--s128", "bare_ms": 100.0}
    fig = instrumentation_summary([step, longer, other_attn], rounds=4, budget_s=0.5)
    cause = [n for n in fig["notes"] if n.startswith("Why ")]
    assert fig["status"] == "fail" and cause == [
        "Why m--decode--fp32--sdpa--b1--s128 is over: its instrumented step took 1.76 ms more than the bare "
        "one (22.00 ms), 10.8 µs for each of its 163 module ranges (every module wrapped); a range costs the "
        "same whatever the step computes, and a decode step runs every module for little arithmetic: at that "
        "cost the same ranges are 1.6% of its prefill (110.0 ms), which measured 1.010."]
    assert not [n for n in instrumentation_summary([longer], rounds=4, budget_s=0.5)["notes"] if n.startswith("Why")]


def test_render_scaling_copy_of_the_config_finds_the_repositorys_hooks(tmp_path: Path) -> None:
    from reportgen.bench.render_scaling import _absolute_hooks

    config = "site_name: x\nhooks:\n  - reportgen/render/mkdocs_hooks.py\nnav:\n  - index.md\n"
    out = _absolute_hooks(config, tmp_path)
    assert f"  - {(tmp_path / 'reportgen/render/mkdocs_hooks.py').resolve()}\n" in out
    assert "nav:\n  - index.md\n" in out  # only the hooks section is rewritten


def test_a_figure_measured_by_an_earlier_method_says_so_where_its_verdict_is_shown() -> None:
    """An instrumentation figure whose rows carry no count of labelled modules was measured
    with a clock at every module; an ablation whose rows shared a process, before each
    combination got its own: both say so beside their verdict, on this host's section and
    on another host's summary. Today's rows say nothing."""
    from reportgen.render.validation import earlier_method

    old_rows = [{"combination": "llama-small--decode", "mode": "decode", "ratio": 1.08, "ratio_low": 1.04,
                 "ratio_high": 1.11, "modules": 163, "bare_ms": 22.0}]
    new_rows = [{**old_rows[0], "labelled": 124}]
    old = R.figure("Instrumentation overhead", "q", value=1.02, unit="ratio", interval=[1.01, 1.03],
                   goal="< 1.03", goal_spec={"kind": "below", "target": 1.03}, rows=old_rows)
    new = R.figure("Instrumentation overhead", "q", value=1.0, unit="ratio", interval=[0.99, 1.01],
                   goal="< 1.03", goal_spec={"kind": "below", "target": 1.03}, rows=new_rows)
    why = earlier_method("instrumentation_overhead", old)
    assert why is not None and "every module of the model (up to 163 a forward)" in why
    assert earlier_method("instrumentation_overhead", new) is None
    assert earlier_method("instrumentation_overhead", {**old, "rows": []}) is None
    shared = {"rows": [{"own_process": True}, {"own_process": False}]}
    assert "shared one process" in (earlier_method("training_ablation", shared) or "")
    assert earlier_method("training_ablation", {"rows": [{"own_process": True}]}) is None

    this_host = render_validation(_doc(instrumentation_overhead=old))
    assert "This figure was measured with a clock at every module" in this_host
    other = R.results_document({"instrumentation_overhead": old},
                               environment={"hardware": "cpu-other-2c", "cpu": "Other CPU", "threads": 2,
                                            "torch": "x", "transformers": "y"},
                               created="2026-12-01T09:00:00Z", quick=False, duration_s=3.0,
                               command="python scripts/bench.py")
    md = render_validation(_doc(instrumentation_overhead=new), others=[other])
    section = md[md.index("Other hosts"):]
    assert "- *Instrumentation overhead* on this host: measured with a clock at every module" in section
    assert "This figure was" not in md


def _failing_row(key: str, verdict: str, rel: float, low: float, high: float, drop: float, removable: float,
                  neighbours: float | None, spread: list[float]) -> dict[str, Any]:
    return {"combination": key, "category": "attention.core", "headline_method": "hooks", "verdict": verdict,
            "rel_diff": rel, "rel_diff_low": low, "rel_diff_high": high, "drop_ms": drop, "drop_low_ms": drop,
            "drop_high_ms": drop, "removable_ms": removable, "rounds": 10, "pairs": 200,
            "hooks_neighbours_ms": neighbours, "hooks_round_rel_diffs": spread, "hooks_verdict": verdict}


def test_a_failing_ablation_row_says_what_its_measurements_show_caused_it() -> None:
    from reportgen.bench.ablation_figure import CAUSE_PREFIX, ablation_summary, failure_causes, with_causes

    # the AMD host's training rows: one past the bound by less than its neighbours sped up,
    # one whose estimate agrees and whose interval does not, one passing, one unexplained
    rows = [_failing_row("bert eager", "fail", 0.115, 0.033, 0.256, 138.28, 124.02, 54.57, [0.02, 0.3]),
            _failing_row("bert sdpa", "fail", 0.049, -0.044, 0.129, 142.26, 135.61, 32.9, [-0.06, 0.01, 0.2]),
            _failing_row("gpt2 sdpa", "pass", 0.028, -0.038, 0.091, 137.06, 133.36, 5.4, []),
            _failing_row("llama", "fail", 0.2, 0.1, 0.3, 120.0, 100.0, 5.0, [])]
    causes = failure_causes(rows)
    assert causes == [
        "Why bert eager fails: the drop exceeds the removable attributed time by 14.3 ms, and in the same hooked "
        "pairs the rest of the step ran 54.6 ms faster with the stand-in in place (hooks_neighbours_ms): the "
        "stand-in's saving reaches past attention.core into the code after it (caches, the threads' state), time "
        "no exclusive attribution of attention.core can count.",
        "Why bert sdpa fails: its estimate agrees (+4.9%) but its interval [-4.4%, +12.9%] reaches past ±10% after "
        "10 rounds, its rounds' own estimates spreading from -6.0% to +20.0%: the variation between rounds, not "
        "the attribution's estimate.",
        "Why llama fails: the drop exceeds the removable attributed time by 20.0 ms; its cause is not measured."]
    fig = ablation_summary(rows, rounds=10, min_pairs=12, budget_s=60.0)
    at = next(i for i, n in enumerate(fig["notes"]) if n.startswith("Verdicts by method"))
    assert fig["notes"][at + 1:at + 4] == causes
    # said again from the rows, never twice
    stale = {**fig, "notes": [n for n in fig["notes"] if not n.startswith(CAUSE_PREFIX)] + ["Why old fails: x"]}
    again = with_causes(stale)
    assert [n for n in again["notes"] if n.startswith(CAUSE_PREFIX)] == causes
    assert with_causes(again) == again
