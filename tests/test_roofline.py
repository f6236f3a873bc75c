"""The roofline's computations on synthetic records with known answers, the GPU branch on
the recorded synthetic H200 run (peaks looked up by the device name it carries), the CPU
branch with and without a probe, and the pages that show them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reportgen import traffic
from reportgen.render import render, roofline
from reportgen.render.roofline_pages import PAGE
from reportgen.shares import method_section

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "runs_fixture"
H200_RUN = FIXTURE / "nvidia-synthetic-h200-1x" / "synthetic-31765153"
CPU_RUN = FIXTURE / "cpu-synthetic-epyc-2c" / "synthetic-543e5456"

INFO: dict[str, Any] = {"architecture": "encoder", "hidden_size": 4, "num_heads": 2,
                        "num_kv_heads": 2, "head_dim": 2, "num_layers": 1,
                        "intermediate_size": 8, "vocab_size": 10, "config": {"hidden_act": "gelu"}}


def record(shares: dict[str, float], *, intervals: dict[str, tuple[float, float]] | None = None,
           median: float = 10.0, ci: tuple[float, float] = (9.0, 12.0)) -> dict[str, Any]:
    """A record of the one-layer encoder of test_traffic (2432 bytes, known per category)
    with the given time shares."""
    cats = {c: {"ms": s * median, "share": s} for c, s in shares.items()}
    for c, (lo, hi) in (intervals or {}).items():
        cats[c].update(share_low=lo, share_high=hi)
    combination = {"model": "m", "scale": "tiny", "mode": "forward", "dtype": "fp32",
                   "attn_implementation": "eager", "batch_size": 1, "seq_len": 3, "device": "cpu"}
    return {"id": "m", "status": "ok", "combination": combination, "model": INFO,
            "timing": {"median": median, "ci_low": ci[0], "ci_high": ci[1]},
            "attribution": {"categories": cats},
            "flops": {"analytic": {"attention.qkv": 288.0, "attention.core": 96.0,
                                   "attention.out": 96.0, "mlp": 384.0}}}


def test_attributed_time_carries_the_share_and_latency_intervals() -> None:
    rec = record({"mlp": 0.5}, intervals={"mlp": (0.4, 0.6)})
    assert roofline.category_time(rec, ["mlp"]) == pytest.approx(
        (5.0, 0.4 * 9.0, 0.6 * 12.0, "share interval x latency 95% CI"), rel=1e-12)
    ms, lo, hi, how = roofline.category_time(record({"mlp": 0.5}), ["mlp"])  # type: ignore[misc]
    assert (ms, lo, hi) == pytest.approx((5.0, 4.5, 6.0)) and how.startswith("latency")
    assert roofline.category_time({"timing": {}}, ["mlp"]) is None


def test_bandwidth_intensity_and_fraction_of_peak() -> None:
    rec = record({"mlp": 0.5, "attention.core": 0.25}, intervals={"mlp": (0.4, 0.6)})
    roof = roofline.Roof("cpu", "cpu", 1e9, 1e6, "probe", "probe", "r")
    rows = {r["category"]: r for r in roofline.category_rows(rec, roof)}
    mlp = rows["mlp"]
    assert mlp["bytes"] == 736 and mlp["flops"] == 384  # from test_traffic's hand count
    assert mlp["bandwidth"] == pytest.approx(736 / 5e-3)
    assert mlp["bandwidth_low"] == pytest.approx(736 / 7.2e-3)
    assert mlp["bandwidth_high"] == pytest.approx(736 / 3.6e-3)
    assert mlp["intensity"] == pytest.approx(384 / 736)
    assert mlp["flops_per_s"] == pytest.approx(384 / 5e-3)
    assert mlp["pct_peak_bandwidth"] == pytest.approx(100 * 736 / 5e-3 / 1e6)
    assert mlp["bytes_source"] == "recomputed"
    # norms move bytes but do no FLOPs: a bandwidth, no intensity
    assert rows["norm"]["intensity"] is None and rows["norm"]["bytes"] == 288
    assert rows["norm"]["ms"] is None  # no time share recorded for it here
    assert "head" not in rows and "overhead" not in rows


def with_iterations(rec: dict[str, Any], shares: dict[str, float], n: int = 12) -> dict[str, Any]:
    """``rec`` with a hooks method section of ``n`` iterations whose category times vary
    by a few percent around ``shares`` (so the shares have bootstrap intervals)."""
    rng = random.Random(1)
    per_iteration = [{c: s * 10.0 * rng.uniform(0.97, 1.03) for c, s in shares.items()}
                     for _ in range(n)]
    section = method_section(per_iteration, [sum(row.values()) for row in per_iteration])
    return {**rec, "attribution": {"categories": section["categories"], "headline_method": "hooks",
                                   "methods": {"hooks": section}}}


def test_attention_against_the_rest_is_called_higher_only_when_the_intervals_part() -> None:
    shares = {"attention.qkv": 0.01, "attention.core": 0.01, "attention.out": 0.01, "mlp": 0.57,
              "embeddings": 0.1, "norm": 0.1, "other": 0.2}
    out = roofline.attention_vs_rest(with_iterations(record(shares), shares))
    assert out is not None
    a, r = out["attention"], out["rest"]
    assert a["bytes"] == 384 + 480 + 160 and r["bytes"] == 2432 - a["bytes"]
    assert a["bytes_share"] == pytest.approx(a["bytes"] / 2432)
    assert a["flops_share"] == pytest.approx(480 / 864)
    assert a["interval"].startswith("share") and a["bandwidth_low"] < a["bandwidth"] < a["bandwidth_high"]
    assert out["higher"] is True and out["lower"] is False
    # without share intervals the two bandwidths would differ by their point shares alone
    untested = roofline.attention_vs_rest(record(shares))
    assert untested is not None and untested["higher"] is None and untested["lower"] is None
    # the same bandwidth on both sides: no significant difference either way
    even = {"attention.qkv": a["bytes"] / 2432, "mlp": r["bytes"] / 2432}
    out = roofline.attention_vs_rest(with_iterations(record(even), even))
    assert out is not None and out["higher"] is False and out["lower"] is False
    # the isolated attention has no rest to compare
    micro = {**record(shares), "model": {**INFO, "architecture": "attention"}}
    assert roofline.attention_vs_rest(micro) is None


def test_roof_polyline_bends_at_the_ridge() -> None:
    roof = roofline.Roof("d", "gpu", 1e12, 1e10, "s", "s")
    assert roof.ridge == 100
    rows = roofline.roof_rows(roof, 1.0, 1e4)
    assert rows == [{"intensity": 1.0, "flops_per_s": 1e10}, {"intensity": 100, "flops_per_s": 1e12},
                    {"intensity": 1e4, "flops_per_s": 1e12}]
    slope = roofline.Roof("d", "cpu", None, 1e10, "none", "s")
    assert [r["flops_per_s"] for r in roofline.roof_rows(slope, 1.0, 10.0)] == [1e10, 1e11]
    assert roofline.roof_rows(roofline.Roof("d", "cpu", None, None, "x", "x"), 1, 2) == []
    points = [{"panel": "p", "category": "mlp", "intensity": 10.0, "flops_per_s": 1e9}]
    rows = roofline.chart_rows(points, {"p": roof})
    assert [r["kind"] for r in rows] == ["category", "roof", "roof", "roof"]


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_gpu_roof_from_the_recorded_run_by_device_name() -> None:
    env = _load(H200_RUN / "run.json")["environment"]
    rec = _load(H200_RUN / "combinations" / "bert-base--forward--bf16--eager--b1--s128.json")
    roof = roofline.roof_for(rec, env, "nvidia-synthetic-h200-1x", lambda: None)
    assert roof.kind == "gpu" and roof.device == "H200"
    assert roof.flops_per_s == pytest.approx(989.5e12) and roof.bandwidth == pytest.approx(4.8e12)
    assert "H200" in roof.flops_source and "https://" in roof.flops_source
    fp32 = roofline.roof_for({**rec, "combination": {**rec["combination"], "dtype": "fp32"}}, env,
                             "h", lambda: None)
    assert fp32.flops_per_s is None and "no confirmed fp32" in fp32.flops_source
    assert fp32.bandwidth == pytest.approx(4.8e12)
    named = {**rec, "device": {"name": "NVIDIA A100-SXM4-80GB"}}
    assert roofline.roof_for(named, env, "h", lambda: None).bandwidth == pytest.approx(2.039e12)
    rows = roofline.category_rows(rec, roof)
    core = next(r for r in rows if r["category"] == "attention.core")
    want = traffic.record_bytes(rec)["analytic_bytes"]["attention.core"]  # type: ignore[index]
    assert core["bytes"] == want
    assert core["pct_peak_bandwidth"] == pytest.approx(100 * core["bandwidth"] / 4.8e12)


class _Run(SimpleNamespace):
    pass


def test_cpu_roof_from_the_latest_probe_on_that_hardware() -> None:
    probe = {"threads": 2, "copy_bandwidth_bytes_per_s": 2e10, "matmul_flops_per_s": 1e11}
    runs = [_Run(hardware="cpu-a", run_id="cpu-a/s-1", record={"updated": "2026-01-01T00:00:00Z",
                                                               "environment": {"cpu_probe": probe}}),
            _Run(hardware="cpu-a", run_id="cpu-a/s-2", record={"updated": "2026-02-01T00:00:00Z",
                                                               "environment": {}}),
            _Run(hardware="cpu-b", run_id="cpu-b/s-1", record={"updated": "2026-03-01T00:00:00Z",
                                                               "environment": {"cpu_probe": probe}})]
    found = roofline.latest_probe(runs, "cpu-a")
    assert found is not None and found[0] == "cpu-a/s-1"
    rec = record({"mlp": 0.5})
    roof = roofline.roof_for(rec, {}, "cpu-a", lambda: found)
    assert (roof.flops_per_s, roof.bandwidth, roof.run_id) == (1e11, 2e10, "cpu-a/s-1")
    assert "cpu-a/s-1" in roof.flops_source
    bf16 = {**rec, "combination": {**rec["combination"], "dtype": "bf16"}}
    roof = roofline.roof_for(bf16, {}, "cpu-a", lambda: found)
    assert roof.flops_per_s is None and roof.bandwidth == 2e10
    none = roofline.roof_for(rec, {}, "cpu-c", lambda: roofline.latest_probe(runs, "cpu-c"))
    assert none.flops_per_s is None and none.bandwidth is None and "no run" in none.flops_source


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture runs, the CPU run given a probe, rendered without SVGs."""
    runs = tmp_path_factory.mktemp("runs")
    shutil.copytree(FIXTURE, runs, dirs_exist_ok=True)
    run_json = runs / CPU_RUN.relative_to(FIXTURE) / "run.json"
    run = _load(run_json)
    run["environment"]["cpu_probe"] = {"method": "m", "threads": 2,
                                       "copy_bandwidth_bytes_per_s": 2.0e10,
                                       "matmul_flops_per_s": 6.0e10}
    run_json.write_text(json.dumps(run), encoding="utf-8")
    docs = tmp_path_factory.mktemp("docs")
    render(runs, docs, svg=False)
    return docs


def test_findings_page_scopes_the_claim_and_names_its_peaks(site: Path) -> None:
    text = (site / PAGE).read_text(encoding="utf-8")
    assert text.startswith('---\ntitle: "Memory traffic and roofline"')
    assert "No GPU run is on record" not in text  # the fixture has a GPU run
    assert "recorded with run `cpu-synthetic-epyc-2c/synthetic-543e5456`" in text
    assert "context for the GPU sentence, not a verdict" in text
    assert "[NVIDIA H200 Tensor Core GPU product page" in text
    assert "(https://www.nvidia.com/en-us/data-center/h200/)" in text
    for name in ("attention-vs-rest", "categories", "gpu-peaks"):
        for ext in ("csv", "json"):
            assert (site / "findings" / "charts" / f"memory-traffic-and-roofline--{name}.{ext}").is_file()
    verdict = json.loads((site / "findings" / "charts"
                          / "memory-traffic-and-roofline--attention-vs-rest.json").read_text())
    assert {v["hardware"].split(" · ")[0] for v in verdict} == {"CPU", "GPU"}
    assert all(v["attention_bandwidth_low"] <= v["attention_bandwidth"] <= v["attention_bandwidth_high"]
               for v in verdict)


def test_combination_pages_draw_the_roofline_with_its_roof(site: Path) -> None:
    gpu = next((site / "hardware").glob("nvidia*/bert-base.md")).read_text(encoding="utf-8")
    assert "## Memory traffic and roofline" in gpu and 'data-chart="roofline"' in gpu
    assert "NVIDIA H200 Tensor Core GPU product page" in gpu
    cpu = next((site / "hardware").glob("cpu*/bert-base.md")).read_text(encoding="utf-8")
    assert "CPU probe of run cpu-synthetic-epyc-2c/synthetic-543e5456 (2 threads)" in cpu
    spec = json.loads(next((site / "hardware").glob("cpu*/charts/bert-base--roofline-chart.json"))
                      .read_text())
    kinds = {r["kind"] for r in spec}
    assert kinds == {"category", "roof"}
    assert max(r["flops_per_s"] for r in spec if r["kind"] == "roof") == pytest.approx(6.0e10)


def test_without_a_probe_no_roof_is_drawn(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    render(FIXTURE, docs, svg=False)
    cpu = next((docs / "hardware").glob("cpu*/bert-base.md")).read_text(encoding="utf-8")
    assert "No roof is drawn" in cpu
    text = (docs / PAGE).read_text(encoding="utf-8")
    assert "No run on this hardware recorded a CPU probe" in text


def test_unmodelled_traffic_is_not_a_measured_zero() -> None:
    """Experts and a router that take time but whose bytes the formula does not model read
    "not modelled" (no bytes, no bandwidth, no fraction of peak); a dense MLP the
    attribution gave no time is left out and named, not shown moving bytes in 0 ms."""
    rec = record({"attention.core": 0.25, "mlp": 0.0, "moe.experts": 0.5, "moe.router": 0.05})
    rec["flops"]["analytic"]["moe.experts"] = 512.0
    roof = roofline.Roof("cpu", "cpu", 1e9, 1e6, "probe", "probe", "r")
    rows = {r["category"]: r for r in roofline.category_rows(rec, roof)}
    assert "mlp" not in rows and roofline.left_out(rec) == ["mlp"]
    for cat in ("moe.experts", "moe.router"):
        row = rows[cat]
        assert row["modelled"] is False and row["bytes"] is None
        assert row["bandwidth"] is None and row["pct_peak_bandwidth"] is None
        assert row["ms"] == pytest.approx(10.0 * rec["attribution"]["categories"][cat]["share"])
    assert rows["moe.experts"]["flops_per_s"] == pytest.approx(512.0 / 5e-3)
    assert rows["attention.core"]["modelled"] is True and rows["attention.core"]["bytes"] > 0
    points = roofline.chart_rows(list(rows.values()), {})
    assert {p["category"] for p in points} == {"attention.core"}  # the chart places modelled ones only
