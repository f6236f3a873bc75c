"""The tools study: reportgen's breakdown beside torch key_averages, HTA and Nsight Systems
on a tiny model (CPU), the nsys report parser on a recorded report, the comparison's
arithmetic, the record schema and the "Compared with other tools" page."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from reportgen import fmt, toolcompare
from reportgen.categories import CATEGORIES
from reportgen.records.schema import COMBINATION_KIND, json_schema

DATA = Path(__file__).parent / "data"
NSYS_FIXTURE = DATA / "nsys" / "nvtx_gpu_proj_sum.csv"
GOLDEN = DATA / "schema" / "v1" / "combination-ok.json"
HTA_INSTALLED = importlib.util.find_spec("hta") is not None
# Where key_averages and reportgen read the same events (the ops inside a module's
# ranges), they agree to this share of the forward: both sum the same profiler events,
# key_averages from the profiler's nanosecond records, reportgen from the exported trace.
SAME_EVENTS_TOLERANCE = 0.005
# The module ranges of the tiny BERT in the fixture (tests/data/nsys).
BERT_MODULES = {
    "encoder.layer.0.attention.self.query": "attention.qkv",
    "encoder.layer.0.attention.self.key": "attention.qkv",
    "encoder.layer.0.attention.self.value": "attention.qkv",
    "encoder.layer.0.attention.output.dense": "attention.out",
    "encoder.layer.0.intermediate.dense": "mlp",
    "encoder.layer.0.output.dense": "mlp",
}


def _validate(record: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(record)


# pure parts ----------------------------------------------------------------------------
def test_nsys_report_parser_reads_the_recorded_report() -> None:
    rows = toolcompare.parse_nvtx_gpu_proj_sum(NSYS_FIXTURE.read_text(encoding="utf-8"))
    assert len(rows) == 16  # the preamble line is skipped
    first = rows[0]
    assert first == {"range": "rg|iteration", "style": "PushPop", "proj_ns": 2_000_000.0,
                     "range_ns": 2_600_000.0, "instances": 2}
    assert rows[-1]["range"] == "cudnn:cudnnConvolutionForward"  # a domain is kept


def test_nsys_parser_refuses_other_reports() -> None:
    with pytest.raises(ValueError, match="no nvtx_gpu_proj_sum header"):
        toolcompare.parse_nvtx_gpu_proj_sum("Time (%),Total Time (ns),Instances\n1,2,3\n")
    with pytest.raises(ValueError, match="lacks the columns"):
        toolcompare.parse_nvtx_gpu_proj_sum("Range,Style,Total Proj Time (ns)\n:a,PushPop,1\n")


def test_nsys_entry_folds_the_report_into_categories() -> None:
    from reportgen.profile.tools import nsys_entry

    rows = toolcompare.parse_nvtx_gpu_proj_sum(NSYS_FIXTURE.read_text(encoding="utf-8"))
    entry = nsys_entry(rows, BERT_MODULES, 2, version="2025.3.1")
    assert entry["status"] == "measured" and entry["basis"] == "device"
    totals = entry["totals"]
    # per forward (2 iterations), in ms: exclusive time of each range by its module
    expected = {"embeddings": (0.2 - 0.04) / 2, "norm": (0.04 + 0.04 + 0.05) / 2,
                "attention.qkv": 0.3 / 2, "attention.out": 0.12 / 2,
                "attention.core": (0.7 - 0.3 - 0.12 - 0.04) / 2,
                "mlp": ((0.3 - 0.26) + (0.4 - 0.3 - 0.05) + 0.26 + 0.3) / 2,
                "other": ((1.6 - 0.7 - 0.3 - 0.4) + (2.0 - 0.2 - 1.6)) / 2,
                "head": 0.0, "compiled": 0.0}
    for category, ms in expected.items():
        assert totals[category] == pytest.approx(ms, abs=1e-12), category
    assert totals["overhead"] is None
    assert entry["forward_ms"] == pytest.approx(1.0)
    assert sum(v for v in totals.values() if v is not None) == pytest.approx(1.0)
    wrong = nsys_entry(rows, BERT_MODULES, 3, version=None)
    assert wrong["status"] == "failed" and "expected 3" in wrong["reason"]


def test_nsys_is_not_applicable_on_a_cpu_and_missing_without_nsys() -> None:
    from reportgen.profile.tools import nsys_availability

    exe, entry = nsys_availability("cpu", lambda _: "/usr/bin/nsys")
    assert exe is None and entry is not None and entry["status"] == "not applicable"
    assert "CPU" in entry["reason"] and entry["totals"] is None
    exe, entry = nsys_availability("cuda", lambda _: None)
    assert exe is None and entry is not None and entry["status"] == "missing"
    assert "not on PATH" in entry["reason"]
    exe, entry = nsys_availability("cuda", lambda _: "/opt/nsys/bin/nsys")
    assert exe == "/opt/nsys/bin/nsys" and entry is None


FAKE_NSYS = """#!/bin/sh
# stands in for nsys: records its arguments, writes the recorded report for "stats"
echo "$@" >> "$(dirname "$0")/calls.log"
case "$1" in
  --version) echo "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0";;
  profile) exit 0;;
  stats)
    while [ "$#" -gt 0 ]; do
      if [ "$1" = "--output" ]; then out="$2"; fi
      shift
    done
    cp "$(dirname "$0")/report.csv" "${out}_nvtx_gpu_proj_sum.csv";;
esac
"""


def test_nsys_runs_the_forward_under_nsys_and_reads_its_report(tmp_path: Path) -> None:
    from reportgen.profile.tools import nsys_tool

    fake = tmp_path / "nsys"
    fake.write_text(FAKE_NSYS, encoding="utf-8")
    fake.chmod(0o755)
    shutil.copyfile(NSYS_FIXTURE, tmp_path / "report.csv")
    combo = SimpleNamespace(**{**vars(_combo("bert")), "device": "cuda"})
    entry = nsys_tool(combo, BERT_MODULES, 2, seed=7, which=lambda _: str(fake))
    assert entry["status"] == "measured", entry["reason"]
    assert entry["version"].endswith("2025.3.1.90-253135822126v0")
    assert entry["totals"]["attention.qkv"] == pytest.approx(0.15)
    calls = (tmp_path / "calls.log").read_text(encoding="utf-8").splitlines()
    profile = next(c for c in calls if c.startswith("profile"))
    assert "--trace=cuda,nvtx" in profile and "-m reportgen.profile.tools --nsys-child" in profile
    assert '"model": "bert"' in profile and "--iterations 2 --seed 7" in profile
    stats = next(c for c in calls if c.startswith("stats"))
    assert "--report nvtx_gpu_proj_sum --format csv" in stats
    (tmp_path / "report.csv").write_text("Range,Style\n", encoding="utf-8")
    broken = nsys_tool(combo, BERT_MODULES, 2, seed=7, which=lambda _: str(fake))
    assert broken["status"] == "failed" and "lacks the columns" in broken["reason"]
    assert broken["totals"] is None


def test_fold_ranges_with_self_times_moves_them_to_overhead() -> None:
    totals = {"rg|iteration": 20.0, "rg|norm|ln": 4.0, "rg|attn|a": 10.0,
              "rg|proj|a.q": 3.0, "ProfilerStep#1": 99.0}
    selfs = {"rg|iteration": 1.0, "rg|norm|ln": 0.5, "rg|attn|a": 2.0, "rg|proj|a.q": 0.0}
    folded = toolcompare.fold_ranges(totals, {"a.q": "attention.qkv"}, iterations=2,
                                     self_times=selfs)
    t = folded["totals"]
    assert t["norm"] == pytest.approx((4.0 - 0.5) / 2)
    assert t["attention.qkv"] == pytest.approx(3.0 / 2)
    assert t["attention.core"] == pytest.approx((10.0 - 3.0 - 2.0) / 2)
    assert t["other"] == pytest.approx((20.0 - 14.0 - 1.0) / 2)
    assert t["overhead"] == pytest.approx((1.0 + 0.5 + 2.0) / 2)
    assert sum(t.values()) == pytest.approx(folded["forward_ms"]) == 10.0
    assert folded["outside_ranges_ms"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="rg\\|iteration"):
        toolcompare.fold_ranges({"rg|norm|ln": 1.0}, {}, iterations=1)


def test_comparison_explains_what_it_can_and_shows_the_rest() -> None:
    ours = {c: 0.0 for c in CATEGORIES}
    ours.update({"attention.core": 4.0, "mlp": 3.0, "other": 1.0, "overhead": 2.0})
    reportgen = {"status": "measured", "basis": "cpu", "forward_ms": 10.0, "totals": ours}
    ka = dict(ours, **{"attention.core": 4.5, "other": 0.5})  # the tail: explained
    hta = dict(ours, mlp=3.6, overhead=None, other=1.0)  # 0.6 of which 0.1 is a gap
    tools = {"reportgen": reportgen,
             "key_averages": {"status": "measured", "totals": ka},
             "hta": {"status": "measured", "totals": hta},
             "nsys": {"status": "missing", "totals": None}}
    evidence = {"tails": {"attention.core": 0.5}, "gaps": {"mlp": 0.1}, "rounding": {}}
    table = toolcompare.compare(reportgen, tools, evidence=evidence)
    assert table["threshold_ms"] == pytest.approx(0.2)
    rows = {r["category"]: r for r in table["rows"]}
    core = rows["attention.core"]["differences"]
    assert [d["tool"] for d in core] == ["key_averages"]
    assert core[0]["explained"] and core[0]["ms"] == pytest.approx(0.5)
    assert "output projection" in core[0]["reasons"][0]["reason"]
    mlp = rows["mlp"]["differences"]
    assert [d["tool"] for d in mlp] == ["hta"] and not mlp[0]["explained"]
    assert [r["reason"] for r in mlp[0]["reasons"]][-1] == "unexplained"
    assert mlp[0]["reasons"][-1]["ms"] == pytest.approx(0.5)
    assert rows["overhead"]["hta"] is None and rows["overhead"]["differences"] == []
    assert rows["mlp"]["nsys"] is None  # a missing tool has no figures


def _pass(forward: float, core: float, ka_core: float, nsys: bool) -> dict[str, Any]:
    ours = {c: 0.0 for c in CATEGORIES}
    ours.update({"attention.core": core, "mlp": forward - core - 1.0, "overhead": 1.0})
    ka = dict(ours, **{"attention.core": ka_core})
    tools = {"reportgen": {"status": "measured", "basis": "cpu", "forward_ms": forward, "totals": ours},
             "key_averages": {"status": "measured", "forward_ms": forward, "totals": ka},
             "hta": {"status": "missing", "totals": None, "reason": "not installed"},
             "nsys": ({"status": "measured", "forward_ms": forward, "totals": dict(ours, mlp=0.5)}
                      if nsys else {"status": toolcompare.NOT_RUN, "totals": None})}
    return {"tools": tools, "evidence": {"tails": {}, "gaps": {}, "rounding": {}}}


def test_passes_show_the_median_pass_with_intervals_over_all_of_them() -> None:
    forwards = [10.0, 12.0, 11.0, 9.0, 13.0, 10.5]
    cores = [4.0, 5.0, 4.4, 3.6, 5.2, 4.2]
    ka_cores = [c + 0.5 + 0.1 * i for i, c in enumerate(cores)]  # key_averages: a steady excess
    passes = [_pass(f, c, k, nsys=(i == 0)) for i, (f, c, k) in enumerate(zip(forwards, cores, ka_cores))]
    out = toolcompare.aggregate(passes)
    # the median pass by reportgen's forward (lower middle of six: 10.5 ms, pass 5)
    assert out["pass"] == 5
    ours = out["tools"]["reportgen"]
    assert ours["forward_ms"] == 10.5 and ours["totals"]["attention.core"] == 4.2
    assert ours["passes"] == 6
    core = ours["intervals"]["attention.core"]
    # six passes: [min, max], which bounds the median with 96.9%, stated at 95%
    assert (core["low"], core["high"], core["confidence"]) == (3.6, 5.2, 0.95)
    assert core["median"] == pytest.approx((4.2 + 4.4) / 2)
    assert ours["forward_interval"]["low"] == 9.0 and ours["forward_interval"]["high"] == 13.0
    # a tool run once keeps its one pass and says so: no interval can come from it
    nsys = out["tools"]["nsys"]
    assert nsys["status"] == "measured" and nsys["passes"] == 1
    assert nsys["intervals"]["mlp"]["confidence"] == 0
    rows = {r["category"]: r for r in out["comparison"]["rows"]}
    assert out["comparison"]["passes"] == 6
    (ka,) = [d for d in rows["attention.core"]["differences"] if d["tool"] == "key_averages"]
    # the difference shown is the median pass's; its interval pairs the tools pass by pass
    assert ka["ms"] == pytest.approx(ka_cores[5] - cores[5])
    excess = [k - c for k, c in zip(ka_cores, cores)]
    assert ka["interval"]["low"] == pytest.approx(min(excess))
    assert ka["interval"]["high"] == pytest.approx(max(excess))
    assert rows["attention.core"]["intervals"]["key_averages"]["high"] == pytest.approx(max(ka_cores))
    (ns,) = [d for d in rows["mlp"]["differences"] if d["tool"] == "nsys"]
    assert ns["interval"]["confidence"] == 0  # nsys's pass 0 against reportgen's pass 0
    assert ns["interval"]["median"] == pytest.approx(0.5 - (forwards[0] - cores[0] - 1.0))
    with pytest.raises(ValueError):
        toolcompare.aggregate([])


# the study on a tiny model --------------------------------------------------------------
def _combo(model: str) -> SimpleNamespace:
    return SimpleNamespace(model=model, scale="tiny", mode="forward", dtype="fp32",
                           attn_implementation="sdpa", batch_size=1, seq_len=32, device="cpu",
                           compile="none")


@pytest.fixture(scope="module")
def bert_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    from reportgen.profile import building
    from reportgen.profile.structure import derive
    from reportgen.profile.tools import study

    run_dir = tmp_path_factory.mktemp("run")
    built = building.build(_combo("bert"), "cpu", seed=0)
    try:
        result = study(built, derive(built.model, built.step), _combo("bert"), run_dir=run_dir, combo_id="bert-tiny",
                       budget_s=1.0)
    finally:
        building.free(built)
    return result, run_dir


def test_study_writes_its_trace_and_every_tool_says_what_it_is(
        bert_study: tuple[dict[str, Any], Path]) -> None:
    result, run_dir = bert_study
    assert result["status"] == "ok" and result["iterations"] == 3
    assert result["passes"] == toolcompare.PASSES
    assert result["trace"] == "traces/bert-tiny.tools.trace.json.gz"
    assert (run_dir / result["trace"]).stat().st_size == result["trace_bytes"] > 0
    tools = result["tools"]
    assert set(tools) == {"reportgen", "key_averages", "hta", "nsys"}
    assert tools["nsys"]["status"] == "not applicable" and tools["nsys"]["totals"] is None
    for name in ("reportgen", "key_averages"):
        t = tools[name]
        assert t["status"] == "measured" and t["basis"] == "cpu" and t["version"]
        # the median pass's figures: its categories add up to its forward
        assert sum(t["totals"].values()) == pytest.approx(t["forward_ms"], rel=1e-9)
        assert t["passes"] == toolcompare.PASSES
        for category, value in t["totals"].items():
            interval = t["intervals"][category]
            assert interval["confidence"] == 0.95
            assert interval["low"] <= value <= interval["high"], (name, category)


def test_key_averages_agrees_with_reportgen_where_they_read_the_same_ops(
        bert_study: tuple[dict[str, Any], Path]) -> None:
    result, _ = bert_study
    ours = result["tools"]["reportgen"]
    theirs = result["tools"]["key_averages"]
    forward = ours["forward_ms"]
    tolerance = SAME_EVENTS_TOLERANCE * forward
    assert theirs["forward_ms"] == pytest.approx(forward, abs=tolerance)
    tails = result["evidence"]["tails"]
    assert tails.get("attention.core", 0) > 0  # bert's attention adds the residual after its projection
    for category in CATEGORIES:
        # key_averages counts a container's ops after its output projection in the container
        shift = tails.get(category, 0.0) - (sum(tails.values()) if category == "other" else 0.0)
        assert theirs["totals"][category] - shift == pytest.approx(
            ours["totals"][category], abs=tolerance), category
    assert ours["totals"]["norm"] > 0 and ours["totals"]["attention.qkv"] > 0
    for row in result["comparison"]["rows"]:
        for d in row["differences"]:
            if d["tool"] == "key_averages":
                assert d["explained"], row


def test_hta_reads_the_saved_trace_or_says_it_is_missing(
        bert_study: tuple[dict[str, Any], Path]) -> None:
    result, _ = bert_study
    hta = result["tools"]["hta"]
    if not HTA_INSTALLED:
        assert hta["status"] == "missing" and "reportgen[tools]" in hta["reason"]
        assert hta["totals"] is None
        return
    assert hta["status"] == "measured", hta["reason"]
    assert hta["version"] and hta["basis"] == "cpu" and hta["idle_ms"] is None
    assert any("get_temporal_breakdown" in n for n in hta["notes"])  # no idle time on a CPU
    assert hta["kernel_types_ms"] is None
    ka = result["tools"]["key_averages"]["totals"]
    gaps = result["evidence"]["gaps"]
    rounding = result["evidence"]["rounding"]
    forward = result["tools"]["reportgen"]["forward_ms"]
    # HTA: a range's whole duration, rounded inward to whole microseconds = key_averages' ops
    # plus the range's self time (its gaps) and what the rounding changes
    for category in CATEGORIES:
        if category == "overhead":
            assert hta["totals"][category] is None
            continue
        expected = ka[category] + gaps.get(category, 0.0) + rounding.get(category, 0.0)
        assert hta["totals"][category] == pytest.approx(
            expected, abs=SAME_EVENTS_TOLERANCE * forward), category
    assert hta["forward_ms"] == pytest.approx(forward, abs=0.002)  # 2 us: rounded inward


def test_study_record_matches_the_schema(bert_study: tuple[dict[str, Any], Path]) -> None:
    result, _ = bert_study
    record = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record["studies"] = {"tools": json.loads(json.dumps(result))}
    _validate(record)
    bad = copy.deepcopy(record)
    bad["studies"]["tools"]["tools"]["hta"]["status"] = "installed"
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad)
    faked = copy.deepcopy(record)  # a tool that did not run cannot carry figures
    faked["studies"]["tools"]["tools"]["nsys"]["totals"] = {"mlp": 1.0}
    with pytest.raises(jsonschema.ValidationError):
        _validate(faked)


def test_a_compiled_forward_is_not_studied(tmp_path: Path) -> None:
    from reportgen.profile.tools import study

    result = study(SimpleNamespace(step=None, model=None), None,
                   SimpleNamespace(**{**vars(_combo("bert")), "compile": "default"}),
                   run_dir=tmp_path, combo_id="x", budget_s=1.0)
    assert result["status"] == "not applicable" and "module boundaries" in result["reason"]
    record = json.loads(GOLDEN.read_text(encoding="utf-8"))
    record["studies"] = {"tools": result}
    _validate(record)


# the page ------------------------------------------------------------------------------------
def _runs_with_study(tmp_path: Path, study: dict[str, Any], trace: Path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(DATA / "runs_fixture", root)
    record_path = next(p for p in sorted(root.glob("*/*/combinations/*.json"))
                       if json.loads(p.read_text(encoding="utf-8"))["status"] == "ok")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record["studies"] = {"tools": study}
    record_path.write_text(json.dumps(record), encoding="utf-8")
    target = record_path.parent.parent / study["trace"]
    shutil.copyfile(trace, target)
    return root


def test_tools_page_from_a_record(bert_study: tuple[dict[str, Any], Path],
                                  tmp_path: Path) -> None:
    from reportgen.render import render

    result, run_dir = bert_study
    root = _runs_with_study(tmp_path, json.loads(json.dumps(result)), run_dir / result["trace"])
    docs = tmp_path / "docs"
    render(root, docs, svg=False)
    page = (docs / "tools.md").read_text(encoding="utf-8")
    assert page.startswith("---\ntitle: \"Compared with other tools\"\n---\n# Compared with other tools")
    assert "| Nsight Systems | not applicable |" in page
    assert "Nsight Systems projects CUDA work" in page
    assert f"| {fmt.markdown_cell('torch key_averages')} | measured |" in page
    status = "measured" if HTA_INSTALLED else "missing"
    assert f"| HolisticTraceAnalysis | {status} |" in page
    norm = result["comparison"]["rows"][CATEGORIES.index("norm")]
    median, low, high = (norm["intervals"]["reportgen"][k] for k in ("median", "low", "high"))
    ka_median = norm["intervals"]["key_averages"]["median"]
    (row,) = [line for line in page.splitlines() if line.startswith("| norm | ")]
    assert row.startswith(f"| norm | {fmt.markdown_cell(fmt.num(median) + ' ' + fmt.ci(low, high))}")
    assert f" | {fmt.markdown_cell(fmt.num(ka_median) + ' [')}" in row
    assert "the median over 6 passes of 3 profiled forwards each" in page
    differences = [d for r in result["comparison"]["rows"] for d in r["differences"]]
    for d in differences:  # each difference over 2% is on the page with its reasons
        for reason in d["reasons"]:
            assert fmt.markdown_cell(reason["reason"]) in page
    charts = sorted((docs / "charts").glob("tools--*"))
    assert {p.suffix for p in charts} == {".csv", ".json"}
    table = next(p for p in charts if p.name.endswith("-chart.csv"))
    assert "key_averages" in table.read_text(encoding="utf-8")
    assert 'data-chart="tools-' in page
    traces = list(docs.glob("data/**/*.tools.trace.json.gz"))
    assert len(traces) == 1
    assert "rg-download" in page


_POINT = re.compile(r"(-?[\d,.]+)(?: ms)? &#91;(-?[\d,.]+), (-?[\d,.]+)&#93;")


def test_every_figure_on_the_tools_page_is_the_median_its_interval_is_of() -> None:
    """Each figure beside an interval is the median over the passes that interval is of,
    so it lies inside it, never at an edge the interval does not share (one pass's figure
    beside the interval of all of them sat at the edge wherever that pass was the
    extreme); checked on the page made from the committed runs."""
    from reportgen.records.load import load_runs
    from reportgen.render.pages import SiteBuilder
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment
    from reportgen.render.tools import page

    (tools,) = page(SiteBuilder(load_runs(Path(__file__).resolve().parents[1] / "runs")))
    text = render_page(environment(), tools)
    shown = [(m.group(0), *(float(v.replace(",", "")) for v in m.groups()))
             for m in _POINT.finditer(text)]
    assert len(shown) > 50
    outside = [s for s, x, lo, hi in shown if not lo <= x <= hi or (lo < hi and x in (lo, hi))]
    assert not outside, outside
    # the page says where the parts of a difference come from: the median pass, beside it
    assert "; in the median pass " in text


def test_no_tools_page_without_a_study(tmp_path: Path) -> None:
    from reportgen.render import render

    docs = tmp_path / "docs"
    render(DATA / "runs_fixture", docs, svg=False)
    assert not (docs / "tools.md").exists()


def test_each_study_names_its_run_and_the_model_pages_figure_beside_it(tmp_path: Path) -> None:
    """The tools page says which run, date and load its figures come from and, where the
    model page shows the combination from another run, that figure with its own run and
    date, flagged where the two disagree beyond their intervals."""
    from reportgen.records.load import load_runs
    from reportgen.render.pages import SiteBuilder
    from reportgen.render.tools import page

    root = Path(__file__).resolve().parents[1] / "runs"
    b = SiteBuilder(load_runs(root))
    (tools,) = page(b)
    entries = [c for s in tools.context["sections"] for c in s["combinations"]]
    assert entries and all(c["source"]["run_id"] and c["source"]["when"] for c in entries)
    other = [c for c in entries if c["page"] is not None]
    for c in other:
        assert c["page"]["run_id"] != c["source"]["run_id"]
        shown = b.shown_latency(c["page"]["run_id"].split("/")[0], c["combo_id"])
        assert shown is not None and shown["when"] == c["page"]["when"]
