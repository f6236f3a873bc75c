"""analyse_trace on hand-built traces with numbers worked out by hand (no torch)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from reportgen.attribution import (
    UnlinkedDeviceTrace,
    analyse_trace,
    classify_ops,
    is_core_op,
    split_attention,
    split_mlp,
)
from reportgen.categories import CATEGORIES

DATA = Path(__file__).parent / "data"
US = 1e-3  # one microsecond in ms
TOL = 1e-9
GEMM_NAME = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1"


class TraceBuilder:
    """Host events in the layout torch.profiler exports (complete events, microseconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.ext = 0

    def _x(self, cat: str, name: str, start: float, end: float, tid: int = 1) -> None:
        self.ext += 1
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid,
                            "ts": start, "dur": end - start,
                            "args": {"External id": self.ext, "Record function id": 0}})

    def range(self, label: str, start: float, end: float) -> None:
        self._x("user_annotation", label, start, end)

    def op(self, name: str, start: float, end: float, tid: int = 1) -> None:
        self._x("cpu_op", name, start, end, tid)

    def memory(self, ts: float, size: int, total: int) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t",
                            "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                            "args": {"Total Reserved": 0, "Total Allocated": total,
                                     "Bytes": size, "Device Id": -1, "Device Type": 0}})


def _cpu_iteration(b: TraceBuilder, t: float, length: float, mem_base: int) -> None:
    b.range("rg|iteration", t, t + length)
    b.range("rg|embed|emb", t + 1, t + 9)
    b.op("aten::embedding", t + 2, t + 8)
    b.op("aten::index_select", t + 3, t + 7)            # nested: not counted again
    b.range("rg|block|layers.0", t + 10, t + 90)
    b.range("rg|attn|layers.0.attn", t + 12, t + 60)
    b.range("rg|proj|layers.0.attn.q", t + 13, t + 20)
    b.op("aten::linear", t + 14, t + 19)
    b.op("aten::addmm", t + 15, t + 18)
    b.range("rg|proj|layers.0.attn.k", t + 21, t + 26)
    b.op("aten::linear", t + 22, t + 25)
    b.op("aten::matmul", t + 27, t + 33)
    b.op("aten::bmm", t + 28, t + 32)
    b.op("aten::softmax", t + 34, t + 37)
    b.op("aten::matmul", t + 38, t + 42)
    b.range("rg|proj|layers.0.attn.o", t + 44, t + 50)
    b.op("aten::linear", t + 45, t + 49)
    b.op("aten::add", t + 52, t + 55)                   # residual after o: other
    b.range("rg|norm|layers.0.ln", t + 61, t + 66)
    b.op("aten::layer_norm", t + 62, t + 65)
    b.range("rg|mlp|layers.0.mlp", t + 67, t + 88)
    b.range("rg|proj|layers.0.mlp.fc1", t + 68, t + 74)
    b.op("aten::linear", t + 69, t + 73)
    b.op("aten::relu", t + 75, t + 77)                  # between projections: mlp
    b.range("rg|proj|layers.0.mlp.fc2", t + 78, t + 84)
    b.op("aten::linear", t + 79, t + 83)
    b.op("aten::add", t + 85, t + 87)                   # after the last projection: other
    b.op("aten::add", t + 92, t + 94)                   # in no range: other
    b.op("aten::mm", t + 40, t + 60, tid=2)             # another thread: ignored
    b.memory(t + 3, 256, mem_base + 256)
    b.memory(t + 30, 1024, mem_base + 1280)
    b.memory(t + 36, 512, mem_base + 1792)
    b.memory(t + 40, -1024, mem_base + 768)
    b.memory(t + 91, 100, mem_base + 868)


@pytest.fixture
def cpu_trace() -> dict[str, Any]:
    b = TraceBuilder()
    b.range("ProfilerStep#1", -1, 101)
    _cpu_iteration(b, 0.0, 100.0, 10_000)
    _cpu_iteration(b, 1000.0, 120.0, 10_868)
    b.op("aten::copy_", 1100, 1110)                     # only in iteration 2: other
    b.op("aten::zero_", 1200, 1300)                     # outside iterations: ignored
    return {"traceEvents": b.events}


def test_cpu_categories_exact(cpu_trace: dict[str, Any]) -> None:
    r = analyse_trace(cpu_trace)
    assert r["basis"] == "cpu"
    assert r["iteration_ms"] == pytest.approx([0.100, 0.120], abs=TOL)
    assert r["forward_ms"] == pytest.approx(0.110, abs=TOL)
    # Per iteration: outermost ops 6 embeddings, 5+3 qkv, 6+3+4 core, 4 out, 3 norm,
    # 4+2+4 mlp, 3+2+2 other (+10 in the second); overhead is the rest of 100 / 120.
    expected_us = {"embeddings": 6, "attention.qkv": 8, "attention.core": 13,
                   "attention.out": 4, "mlp": 10, "norm": 3, "head": 0, "other": 12,
                   "overhead": 54}
    cats = r["categories"]
    assert list(cats) == list(CATEGORIES)
    for cat, us in expected_us.items():
        assert cats[cat]["ms"] == pytest.approx(us * US, abs=TOL), cat
        assert cats[cat]["cpu_ms"] == pytest.approx(us * US, abs=TOL), cat
        assert cats[cat]["share"] == pytest.approx(us / 110, abs=TOL), cat
        assert cats[cat]["device_ms"] is None and cats[cat]["launches"] is None
    assert r["launches_per_forward"] is None and r["device_idle_ms"] is None


def test_cpu_per_layer_and_ops(cpu_trace: dict[str, Any]) -> None:
    r = analyse_trace(cpu_trace)
    assert [row["layer"] for row in r["per_layer"]] == ["layers.0"]
    layer = r["per_layer"][0]["categories"]
    expected_us = {"embeddings": 0, "attention.qkv": 8, "attention.core": 13,
                   "attention.out": 4, "mlp": 10, "norm": 3, "head": 0, "other": 5,
                   "overhead": 80 - 43}
    for cat, us in expected_us.items():
        assert layer[cat] == pytest.approx(us * US, abs=TOL), cat
    rows = {(o["name"], o["category"]): o for o in r["ops"]}
    assert rows[("aten::matmul", "attention.core")]["calls"] == 2
    assert rows[("aten::matmul", "attention.core")]["total_ms"] == pytest.approx(0.010, abs=TOL)
    assert rows[("aten::matmul", "attention.core")]["mean_ms"] == pytest.approx(0.005, abs=TOL)
    assert rows[("aten::add", "other")]["calls"] == 3
    assert rows[("aten::copy_", "other")]["calls"] == 0.5
    assert rows[("aten::copy_", "other")]["mean_ms"] == pytest.approx(0.010, abs=TOL)
    assert rows[("aten::linear", "attention.out")]["share"] == pytest.approx(4 / 110, abs=TOL)
    assert ("aten::bmm", "attention.core") not in rows          # nested under matmul
    assert not any(name == "aten::mm" for name, _ in rows)      # other thread
    assert not any(name == "aten::zero_" for name, _ in rows)   # outside the iterations
    totals = [o["total_ms"] for o in r["ops"]]
    assert totals == sorted(totals, reverse=True)


def test_cpu_memory(cpu_trace: dict[str, Any]) -> None:
    mem = analyse_trace(cpu_trace)["memory"]
    assert mem["peak_allocated_bytes"] == 1792
    assert mem["by_category_bytes"] == {**{c: 0 for c in CATEGORIES}, "embeddings": 256,
                                        "attention.core": 1536, "other": 100}


def test_classify_ops_labels(cpu_trace: dict[str, Any]) -> None:
    rows = [r for r in classify_ops(cpu_trace) if r["iteration"] == 0]
    by_fqn = {(r["fqn"], r["name"]): r["category"] for r in rows}
    assert by_fqn[("layers.0.attn.q", "aten::linear")] == "attention.qkv"
    assert by_fqn[("layers.0.attn.o", "aten::linear")] == "attention.out"
    assert by_fqn[("layers.0.attn", "aten::add")] == "other"
    assert by_fqn[("layers.0.mlp", "aten::relu")] == "mlp"
    assert by_fqn[("layers.0.mlp", "aten::add")] == "other"
    assert {r["layer"] for r in rows if r["fqn"] and r["fqn"].startswith("layers.0")} == {
        "layers.0"}


def test_no_iteration_ranges() -> None:
    with pytest.raises(ValueError, match="rg\\|iteration"):
        analyse_trace({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm",
                                        "pid": 1, "tid": 1, "ts": 0, "dur": 1}]})


def test_split_attention_rules() -> None:
    # q, k, core, v?, core, o, add: a projection between core ops still feeds attention.
    items = [("proj", 0, 1), ("proj", 2, 3), ("core", 4, 5), ("proj", 6, 7), ("core", 8, 9),
             ("op", 9.5, 9.8), ("proj", 10, 11), ("op", 11, 12), ("op", 12, 13)]
    assert split_attention(items) == [
        "attention.qkv", "attention.qkv", "attention.core", "attention.qkv",
        "attention.core", "attention.core", "attention.out", "other", "other"]
    # No core op at all: the last projection is the output one.
    assert split_attention([("proj", 0, 1), ("op", 1, 2), ("proj", 2, 3), ("op", 3, 4)]) == [
        "attention.qkv", "attention.core", "attention.out", "other"]
    assert split_mlp([("proj", 0, 1), ("op", 1, 2), ("proj", 2, 3), ("op", 3, 4)]) == [
        "mlp", "mlp", "mlp", "other"]
    assert split_mlp([("op", 0, 1)]) == ["mlp"]


def test_core_op_names() -> None:
    for name in ("aten::scaled_dot_product_attention", "aten::_softmax", "aten::bmm",
                 "aten::baddbmm", "aten::matmul", "__matmul__", "flash_attn_func"):
        assert is_core_op(name), name
    for name in ("aten::linear", "aten::addmm", "aten::add", "aten::mm"):
        assert not is_core_op(name), name


# --- the recorded-format CUDA trace (tests/data/make_gpu_trace.py) -------------------

@pytest.fixture(scope="module")
def gpu_trace() -> dict[str, Any]:
    return json.loads((DATA / "gpu_trace.json").read_text())


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_gpu_trace", DATA / "make_gpu_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_gpu_trace"] = module
    spec.loader.exec_module(module)
    return module


def test_gpu_fixture_is_generated_output(gpu_trace: dict[str, Any]) -> None:
    assert _generator().build() == gpu_trace


def test_gpu_kernels_to_categories(gpu_trace: dict[str, Any]) -> None:
    r = analyse_trace(gpu_trace)
    assert r["basis"] == "device"
    # Device window: from the iteration's host start (+0 us; the first kernel only starts
    # at +30, a launch-bound start) to the memcpy's end at +454 us.
    assert r["forward_ms"] == pytest.approx(0.454, abs=TOL)
    # Kernel time by launching op; the side-stream memset (embeddings, 60-70) overlaps
    # the layer-norm kernel (66-72): the 4 us overlap is split 2/2.
    device_us = {"embeddings": 8 + 10 - 2, "norm": 6 - 2, "attention.qkv": 20,
                 "attention.core": 30, "attention.out": 10, "other": 4 + 4,
                 "mlp": 25 + 5 + 25, "compiled": 0, "head": 15 + 3, "overhead": 454 - 161}
    # Kernels apart from memory copies and sets (the memset under the embedding, the
    # memcpy under the head).
    launches = {"embeddings": 1, "norm": 1, "attention.qkv": 1, "attention.core": 1,
                "attention.out": 1, "other": 2, "mlp": 3, "compiled": 0, "head": 1, "overhead": 0}
    memory_ops = {c: 0 for c in CATEGORIES} | {"embeddings": 1, "head": 1}
    # Host time of the outermost ops; host overhead is the rest of the 500 us iteration.
    cpu_us = {"embeddings": 18, "norm": 15, "attention.qkv": 21, "attention.core": 45 + 5,
              "attention.out": 21, "other": 15 + 15, "mlp": 24 + 11 + 26, "compiled": 0, "head": 46,
              "overhead": 500 - 262}
    # this dense model has no token mixer other than attention and no experts
    none = {"attention.indexer": 0, "mixer": 0, "moe.router": 0, "moe.experts": 0, "moe.shared": 0, "residual": 0,
            "optimizer": 0}
    device_us |= none
    launches |= none
    cpu_us |= none
    cats = r["categories"]
    assert list(cats) == list(CATEGORIES)
    for cat in CATEGORIES:
        assert cats[cat]["ms"] == pytest.approx(device_us[cat] * US, abs=TOL), cat
        assert cats[cat]["device_ms"] == pytest.approx(device_us[cat] * US, abs=TOL), cat
        assert cats[cat]["share"] == pytest.approx(device_us[cat] / 454, abs=TOL), cat
        assert cats[cat]["launches"] == launches[cat], cat
        assert cats[cat]["memory_ops"] == memory_ops[cat], cat
        assert cats[cat]["cpu_ms"] == pytest.approx(cpu_us[cat] * US, abs=TOL), cat
    assert r["launches_per_forward"] == 11 and isinstance(r["launches_per_forward"], int)
    assert r["memory_ops_per_forward"] == 2
    assert r["unlinked_device_events"] == 0 and r["unlinked_device_ms"] == 0.0
    assert r["device_idle_ms"] == pytest.approx(0.293, abs=TOL)
    assert r["iteration_ms"] == pytest.approx([0.5, 0.5], abs=TOL)


def test_gpu_per_layer_kernel_table_memory(gpu_trace: dict[str, Any]) -> None:
    r = analyse_trace(gpu_trace)
    assert [row["layer"] for row in r["per_layer"]] == ["model.layers.0"]
    layer = r["per_layer"][0]["categories"]
    for cat, us in {"norm": 4, "attention.qkv": 20, "attention.core": 30,
                    "attention.out": 10, "other": 8, "mlp": 55, "embeddings": 0,
                    "head": 0}.items():
        assert layer[cat] == pytest.approx(us * US, abs=TOL), cat
    gemm = [o for o in r["ops"] if o["name"].startswith("sm90_xmma_gemm")]
    assert {o["category"]: o["calls"] for o in gemm} == {
        "mlp": 2, "attention.qkv": 1, "head": 1, "attention.out": 1}
    top = r["ops"][0]
    assert (top["category"], top["calls"]) == ("mlp", 2)
    assert top["total_ms"] == pytest.approx(0.050, abs=TOL)
    assert top["mean_ms"] == pytest.approx(0.025, abs=TOL)
    assert top["share"] == pytest.approx(50 / 454, abs=TOL)
    assert not any(o["name"] == "FillFunctor" for o in r["ops"])  # launched by the reset
    # CUDA allocations only (the CPU one is another device); the free does not count.
    assert r["memory"]["by_category_bytes"] == {**{c: 0 for c in CATEGORIES},
                                                "embeddings": 4096, "attention.core": 8192,
                                                "head": 16000}
    assert r["memory"]["peak_allocated_bytes"] == 4096 + 16000


def test_gpu_ignores_device_side_annotations(gpu_trace: dict[str, Any]) -> None:
    # gpu_user_annotation mirrors of the rg| ranges must not count as host ranges.
    mirrored = [e for e in gpu_trace["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    assert mirrored
    renamed = {**gpu_trace, "traceEvents": [
        e for e in gpu_trace["traceEvents"] if e.get("cat") != "gpu_user_annotation"]}
    assert analyse_trace(renamed)["categories"] == analyse_trace(gpu_trace)["categories"]


def test_gpu_external_id_fallback(gpu_trace: dict[str, Any]) -> None:
    # Without runtime events, kernels still map to their op through "External id".
    stripped = {**gpu_trace, "traceEvents": [
        e for e in gpu_trace["traceEvents"] if e.get("cat") != "cuda_runtime"]}
    cats = analyse_trace(stripped)["categories"]
    assert cats["attention.core"]["device_ms"] == pytest.approx(0.030, abs=TOL)
    assert cats["mlp"]["launches"] == 3
    assert cats["head"]["memory_ops"] == 1


# --- several host threads and streams (tests/data/make_gpu_trace.py, build_threads) ----

@pytest.fixture(scope="module")
def threads_trace() -> dict[str, Any]:
    return json.loads((DATA / "gpu_trace_threads.json").read_text())


def test_threads_fixture_is_generated_output(threads_trace: dict[str, Any]) -> None:
    assert _generator().build_threads() == threads_trace


# Per iteration (microseconds from its host start at 0; it ends at 300 on the host):
#   main thread  embedding 40-50 s7, qkv GEMM 80-100 s7, flash 120-160 s7, o_proj GEMM
#                175-185 s7 (all inside its rg| ranges), add 264-268 s7 (outside any range)
#   worker       lm_head GEMM 140-170 s8, launched inside rg|head on the worker thread;
#                overlaps flash by 20 us, split 10/10
#   helper       memcpy 210-216 s8 and fill 240-244 s8, no ranges: other
#   no launch    nccl kernel 250-262 s9: other, unlinked
# Busy union 10+20+50+10+6+4+12+4 = 116 us in a window 0-268: 152 us idle. Left out: the
# worker's fill launched at 321 (after the iteration) and the unlinked kernel at 400.
THREAD_DEVICE_US = {"embeddings": 10, "attention.qkv": 20, "attention.core": 30,
                    "attention.out": 10, "head": 20, "other": 6 + 4 + 12 + 4, "mlp": 0,
                    "norm": 0, "overhead": 152}


def test_threads_every_launching_thread_and_stream_counts(threads_trace: dict[str, Any]) -> None:
    r = analyse_trace(threads_trace)
    assert r["basis"] == "device"
    assert r["forward_ms"] == pytest.approx(0.268, abs=TOL)
    assert r["device_idle_ms"] == pytest.approx(0.152, abs=TOL)
    cats = r["categories"]
    for cat, us in THREAD_DEVICE_US.items():
        assert cats[cat]["device_ms"] == pytest.approx(us * US, abs=TOL), cat
        assert cats[cat]["share"] == pytest.approx(us / 268, abs=TOL), cat
    busy = sum(cats[c]["device_ms"] for c in CATEGORIES if c != "overhead")
    assert busy == pytest.approx(0.116, abs=TOL)           # the union, not the sum (136)
    launches = {c: 0 for c in CATEGORIES} | {"embeddings": 1, "attention.qkv": 1,
                                             "attention.core": 1, "attention.out": 1,
                                             "head": 1, "other": 3}
    assert {c: cats[c]["launches"] for c in CATEGORIES} == launches
    assert {c: cats[c]["memory_ops"] for c in CATEGORIES} == {c: 0 for c in CATEGORIES} | {
        "other": 1}
    assert r["launches_per_forward"] == 8 and r["memory_ops_per_forward"] == 1
    assert r["unlinked_device_events"] == 1
    assert r["unlinked_device_ms"] == pytest.approx(0.012, abs=TOL)
    # Host figures stay those of the forward's own thread: 18 + 16 + 40 + 26 + 10 us of ops.
    assert cats["head"]["cpu_ms"] == 0.0
    assert cats["overhead"]["cpu_ms"] == pytest.approx(0.190, abs=TOL)


def test_threads_layers_and_kernel_table(threads_trace: dict[str, Any]) -> None:
    r = analyse_trace(threads_trace)
    layer = r["per_layer"][0]
    assert layer["layer"] == "model.layers.0"
    assert {c: v for c, v in layer["categories"].items() if v} == pytest.approx(
        {"attention.qkv": 0.020, "attention.core": 0.030, "attention.out": 0.010}, abs=TOL)
    rows = {(o["name"], o["category"]): o for o in r["ops"]}
    assert rows[("FillFunctor", "other")]["calls"] == 1      # the helper's; not the late one
    assert rows[(GEMM_NAME, "head")]["total_ms"] == pytest.approx(0.030, abs=TOL)
    nccl = [o for o in r["ops"] if o["name"].startswith("ncclDevKernel")]
    assert [(o["category"], o["calls"]) for o in nccl] == [("other", 1)]


def test_threads_flow_events_link_without_correlation(threads_trace: dict[str, Any]) -> None:
    # Device events stripped of correlation and External id: the ac2g arrows still link
    # each to its launch; the kernel without a launch stays unlinked.
    def strip(e: dict[str, Any]) -> dict[str, Any]:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            return e
        args = {k: v for k, v in e["args"].items() if k not in ("correlation", "External id")}
        return {**e, "args": args}

    stripped = {**threads_trace, "traceEvents": [strip(e) for e in threads_trace["traceEvents"]]}
    assert analyse_trace(stripped)["categories"] == analyse_trace(threads_trace)["categories"]


def test_threads_unlinkable_trace_fails(threads_trace: dict[str, Any]) -> None:
    # No launch records at all: the device events cannot be attributed, and the host basis
    # must not stand in for them.
    def bare(e: dict[str, Any]) -> dict[str, Any]:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            return e
        return {**e, "args": {k: v for k, v in e["args"].items() if k != "External id"}}

    events = [bare(e) for e in threads_trace["traceEvents"]
              if e.get("cat") not in ("cuda_runtime", "ac2g")]
    assert any(e.get("cat") == "kernel" for e in events)
    with pytest.raises(UnlinkedDeviceTrace, match="none is linked to a launch"):
        analyse_trace({**threads_trace, "traceEvents": events})


def test_attribution_does_not_import_torch() -> None:
    import subprocess

    code = ("import sys, reportgen.attribution; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent
                          ).returncode == 0
