"""torch.compile as an axis: the suite key and flag, ids and hashes, attribution of
compiled forwards (CPU kernels and CUDA-graph replays), compiled beside eager on the
site, and one real inductor compile end to end through the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from reportgen import cli
from reportgen.attribution import analyse_trace, compiled_op_category
from reportgen.categories import CATEGORIES, DESCRIPTIONS
from reportgen.suite import Combination, load_suite, parse_overrides
from reportgen.vocabulary import COMPILE_MODES

ROOT = Path(__file__).resolve().parents[1]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- the axis -------------------------------------------------------------------------


def test_compile_flag_expands_and_names_the_mode_in_the_id() -> None:
    suite = load_suite("tiny", parse_overrides({"models": "gpt2", "modes": "forward", "attn": "sdpa",
                                                "seq_lens": "32", "compile": "none,default"}))
    ids = [c.id for c in suite.combinations()]
    assert ids == ["gpt2--forward--fp32--sdpa--b1--s32--tiny",
                   "gpt2--forward--fp32--sdpa--b1--s32--tiny--compile-default"]
    assert [c.compile for c in suite.combinations()] == ["none", "default"]


def test_eager_ids_and_suite_hashes_are_what_they_were() -> None:
    # the committed cpu-default run (measured in one round, before the compile axis)
    # must still be found: the same suite in one round hashes as it did then
    committed = [p.name for p in (ROOT / "runs" / "cpu-amd-epyc-2c").iterdir()
                 if p.name.startswith("cpu-default-")]
    suite = load_suite("cpu-default").with_device("cpu")
    # (cpu-default then timed for 3 s in one round, with no target of its own)
    one_round = dataclasses.replace(suite, settings=dataclasses.replace(suite.settings, rounds=1,
                                                                        budget_s=3.0, target=None))
    assert f"cpu-default-{one_round.hash[:8]}" in committed
    explicit = load_suite("cpu-default", parse_overrides({"compile": "none"})).with_device("cpu")
    assert explicit.hash == load_suite("cpu-default").with_device("cpu").hash
    combo = Combination("bert-base", "reference", "forward", "fp32", "sdpa", 1, 128, "cpu")
    assert combo.id == "bert-base--forward--fp32--sdpa--b1--s128"
    compiled = load_suite("cpu-default", parse_overrides({"compile": "default"})).with_device("cpu")
    assert compiled.hash != explicit.hash


def test_suite_file_key(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[[matrix]]\nmodels = ["gpt2"]\nseq_lens = [16]\ncompile = ["reduce-overhead"]\n')
    (combo,) = load_suite(path).combinations()
    assert combo.compile == "reduce-overhead"
    assert combo.id.endswith("--compile-reduce-overhead")


def test_unknown_mode_flag_exits_2_naming_flag_and_modes(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", "tiny", "--compile", "default,fast", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--compile" in line and "'fast'" in line and ", ".join(COMPILE_MODES) in line
    assert not out.exists()


def test_unknown_mode_in_a_suite_file_names_file_and_key(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[[matrix]]\nmodels = ["gpt2"]\nseq_lens = [16]\ncompile = "default"\n')
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", str(path), "--out", str(out), "--device", "cpu"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(path) in line and "matrix[0].compile" in line and "expected a list" in line
    assert not out.exists()


def test_compiled_category_is_described_and_coloured() -> None:
    from reportgen.render.charts import CATEGORY_COLOURS

    assert "compiled" in CATEGORIES
    assert set(DESCRIPTIONS) == set(CATEGORIES)
    assert len(CATEGORY_COLOURS) == len(CATEGORIES)


# --- attribution of compiled forwards ---------------------------------------------------


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _cpu_compiled_trace() -> list[dict[str, Any]]:
    """Two iterations of what a compiled forward looks like on the CPU (names as torch
    2.13 writes them with inductor's kernel profiling on)."""
    events = []
    for t in (0.0, 1000.0):
        events += [
            _x("user_annotation", "rg|iteration", t, 200),
            _x("cpu_op", "TorchDynamo Cache Lookup", t + 2, 8),
            _x("cpu_op", "Torch-Compiled Region: 0/0", t + 12, 180),
            _x("cpu_op", "Pregraph bytecode", t + 13, 1),
            _x("cpu_op", "## Call CompiledFxGraph fabc ##", t + 14, 170),
            _x("cpu_op", "AOTDispatcher Runtime Wrapper Prologue", t + 15, 2),
            _x("cpu_op", "graph_0_cpp_fused_embedding_native_layer_norm_0", t + 20, 30),
            _x("cpu_op", "aten::addmm", t + 55, 40),
            _x("cpu_op", "aten::copy_", t + 60, 5),          # nested: counted once
            _x("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", t + 100, 25),
            _x("cpu_op", "graph_0_cpp_fused__softmax_add_1", t + 130, 20),
            _x("cpu_op", "aten::mm", t + 155, 20),
        ]
    return events


def test_cpu_compiled_forward_names_what_it_can_and_sums_to_the_forward() -> None:
    result = analyse_trace(_cpu_compiled_trace())
    cats = result["categories"]
    assert result["forward_ms"] == pytest.approx(0.2)
    # an unfused attention call keeps its category; everything else fused or matmul is
    # compiled; wrappers and guards are overhead
    assert cats["attention.core"]["ms"] == pytest.approx(0.025)
    assert cats["compiled"]["ms"] == pytest.approx((30 + 40 + 20 + 20) / 1000)
    assert cats["overhead"]["ms"] == pytest.approx((200 - 135) / 1000)
    for name in ("embeddings", "attention.qkv", "mlp", "norm", "head", "other"):
        assert cats[name]["ms"] == 0
    assert sum(c["ms"] for c in cats.values()) == pytest.approx(result["forward_ms"])
    assert sum(c["share"] for c in cats.values()) == pytest.approx(1.0)
    names = {op["name"]: op["category"] for op in result["ops"]}
    assert names["graph_0_cpp_fused__softmax_add_1"] == "compiled"
    assert "aten::copy_" not in names
    assert "Pregraph bytecode" not in names and "Torch-Compiled Region: 0/0" not in names


def test_compiled_op_category() -> None:
    assert compiled_op_category("aten::_scaled_dot_product_efficient_attention") == "attention.core"
    assert compiled_op_category("aten::_softmax") == "attention.core"
    # a fused kernel that holds an attention op holds other work too
    assert compiled_op_category("triton_per_fused__softmax_add_0") == "compiled"
    assert compiled_op_category("aten::bmm") == "compiled"


def _cuda_graph_trace() -> dict[str, Any]:
    """One iteration of reduce-overhead on a GPU, in torch.profiler's layout: the CUDA
    graph replays three kernels under one cudaGraphLaunch (one correlation id); an
    attention library call and a triton kernel of the compiled graph launch their own."""
    host = [
        _x("user_annotation", "rg|iteration", 0, 400),
        _x("cpu_op", "TorchDynamo Cache Lookup", 2, 5),
        _x("cpu_op", "Torch-Compiled Region: 0/0", 10, 300),
        _x("cpu_op", "## Call CompiledFxGraph fxyz ##", 12, 290),
        _x("cuda_runtime", "cudaGraphLaunch", 20, 10, correlation=7),
        _x("cpu_op", "aten::_scaled_dot_product_flash_attention", 40, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 45, 5, correlation=8),
        _x("cpu_op", "triton_poi_fused_add_0", 80, 10),
        _x("cuda_runtime", "cuLaunchKernel", 82, 4, correlation=9),
        _x("cuda_runtime", "cudaDeviceSynchronize", 320, 70, correlation=10),
    ]
    device = [
        _x("kernel", "triton_poi_fused_embedding_0", 100, 20, tid=7, correlation=7),
        _x("kernel", "sm90_xmma_gemm_f32f32", 120, 50, tid=7, correlation=7),
        _x("kernel", "triton_red_fused_native_layer_norm_1", 170, 10, tid=7, correlation=7),
        _x("kernel", "pytorch_flash::flash_fwd_kernel", 200, 40, tid=7, correlation=8),
        _x("kernel", "triton_poi_fused_add_0", 250, 10, tid=7, correlation=9),
    ]
    for e in device:
        e["pid"] = 0
    return {"traceEvents": host + device}


def test_cuda_graph_replay_is_read_kernel_by_kernel() -> None:
    result = analyse_trace(_cuda_graph_trace())
    assert result["basis"] == "device"
    cats = result["categories"]
    # three graph kernels + one triton kernel: compiled; the flash kernel: attention.core
    assert cats["compiled"]["launches"] == 4
    assert cats["compiled"]["device_ms"] == pytest.approx((20 + 50 + 10 + 10) / 1000)
    assert cats["attention.core"]["launches"] == 1
    assert cats["attention.core"]["device_ms"] == pytest.approx(0.040)
    assert result["launches_per_forward"] == 5
    # device window from the iteration's host start (0) to the last kernel's end (260),
    # busy 130: idle 130 (the launches before the first kernel included) is overhead
    assert result["forward_ms"] == pytest.approx(0.260)
    assert result["device_idle_ms"] == pytest.approx(0.130)
    assert sum(c["share"] for c in cats.values()) == pytest.approx(1.0)
    assert {op["name"] for op in result["ops"]} >= {"sm90_xmma_gemm_f32f32",
                                                   "triton_red_fused_native_layer_norm_1"}


# --- the site -------------------------------------------------------------------------


def _frame_row(combo_id: str, compile_mode: str, median: float, lo: float, hi: float,
               **extra: Any) -> dict[str, Any]:
    row = {"hardware": "cpu-x", "model": "gpt2", "combo_id": combo_id, "status": "ok",
           "scale": "tiny", "mode": "forward", "dtype": "fp32", "attn": "sdpa", "batch": 1,
           "seq": 32, "compile": compile_mode, "median": median, "ci_low": lo, "ci_high": hi,
           "compile_s": math.nan, "recompiles": math.nan, "graph_breaks": math.nan,
           "basis": "cpu", "share:compiled": 0.0}
    row.update(extra)
    return row


def test_pairs_match_compiled_with_eager_and_test_the_difference() -> None:
    import pandas as pd

    from reportgen.render.compiled import pairs

    frame = pd.DataFrame([
        _frame_row("e", "none", 10.0, 9.5, 10.5),
        _frame_row("c", "default", 5.0, 4.8, 5.2, compile_s=12.5, recompiles=0.0,
                   graph_breaks=1.0, **{"share:compiled": 0.9}),
        _frame_row("m", "max-autotune", 9.8, 9.0, 10.6),
        _frame_row("lonely", "default", 3.0, 2.0, 4.0, seq=64),
    ])
    got = pairs(frame).set_index("compile")
    assert list(got.index) == ["default", "max-autotune"]
    assert got.loc["default", "speedup"] == pytest.approx(2.0)
    assert bool(got.loc["default", "significant"]) is True
    assert bool(got.loc["max-autotune", "significant"]) is False
    assert got.loc["default", "compile_s"] == 12.5
    assert got.loc["default", "eager_combo"] == "e"


def test_records_without_compile_read_as_eager() -> None:
    from reportgen.records.load import load_runs
    from reportgen.render.analysis import combinations_frame

    runs = load_runs(ROOT / "runs")
    frame = combinations_frame(runs)
    assert not frame.empty
    # runs measured before the compile axis have no compile key: they read as eager
    eager = ~frame["combo_id"].str.contains("--compile-")
    assert eager.any() and set(frame[eager]["compile"]) == {"none"}
    assert set(frame[~eager]["compile"]) <= {"default", "reduce-overhead", "max-autotune"}
    assert frame[eager]["compile_s"].isna().all() and (frame[~eager]["compile_s"] > 0).all()


# --- end to end -----------------------------------------------------------------------


@pytest.mark.slow
def test_compile_default_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import jsonschema

    from reportgen.records.schema import COMBINATION_KIND, json_schema

    out = tmp_path / "runs"
    argv = ["profile", "--models", "gpt2", "--scale", "tiny", "--seq-lens", "8", "--attn", "sdpa",
            "--modes", "forward", "--compile", "default", "--device", "cpu", "--budget-s", "0.5",
            "--out", str(out)]
    assert cli.main(argv) == 0
    (path,) = out.glob("*/*/combinations/*.json")
    record = json.loads(path.read_text())
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(record)
    assert record["status"] == "ok", record.get("traceback")
    assert record["id"] == "gpt2--forward--fp32--sdpa--b1--s8--tiny--compile-default"
    assert record["combination"]["compile"] == "default"
    section = record["compile"]
    assert section["mode"] == "default" and section["backend"] == "inductor"
    assert section["compile_s"] > 0
    assert section["graphs"] >= 1 and section["quiet"] is True
    assert section["compiled_after_warmup"] == 0
    # compilation is never a sample: the first call is far slower than any timed one
    timing = record["timing"]
    assert section["compile_s"] * 1000 > max(timing["samples"] + timing["warmup_samples"])
    attribution = record["attribution"]
    cats = attribution["categories"]
    assert cats["compiled"]["ms"] > 0
    assert sum(c["ms"] for c in cats.values()) == pytest.approx(attribution["forward_ms"])
    assert sum(c["share"] for c in cats.values()) == pytest.approx(1.0)
    # inductor's C++ kernels appear in the op table under their own names
    assert any(op["name"].startswith("graph_") and "cpp_fused" in op["name"] for op in record["ops"])
    assert attribution["per_layer"] == []


def test_claims_speak_of_eager_forwards_unless_they_name_a_compile_mode() -> None:
    import dataclasses

    from reportgen.claims.evaluate import Observation, _outside
    from reportgen.claims.registry import load_claims

    claim = load_claims(ROOT / "claims")[0]

    def obs(combination: dict[str, Any]) -> Observation:
        return Observation("r", "cpu-x", "cpu", None, "s", {"combination": combination})

    base = {"model": "gpt2", "dtype": "fp32", "seq_len": 128, "batch_size": 1}  # no compile key
    assert not any("compile" in r for r in _outside(claim, obs(base), variants=True))
    eager = _outside(claim, obs({**base, "compile": "none"}), variants=True)
    assert not any("compile" in r for r in eager)
    compiled = _outside(claim, obs({**base, "compile": "default"}), variants=True)
    assert "compile default (claim: none)" in compiled
    named = dataclasses.replace(claim, conditions={**claim.conditions, "compile": ["default"]})
    assert not any("compile" in r for r in _outside(named, obs({**base, "compile": "default"}),
                                                    variants=True))


# --- compilation bookkeeping (no compiler) ---------------------------------------------


class _FakeStep:
    """Counts calls; ``graphs_at`` says how many graphs exist after each call."""

    def __init__(self, graphs_at: list[int]) -> None:
        self.calls = 0
        self.graphs_at = graphs_at
        self.resets = 0

    def __call__(self) -> None:
        self.calls += 1

    def sync(self) -> None:
        return None

    def reset(self) -> None:
        self.resets += 1

    def counts(self) -> dict[str, Any]:
        graphs = self.graphs_at[min(self.calls, len(self.graphs_at) - 1)]
        return {"graphs": graphs, "frames": min(graphs, 1), "frames_ok": min(graphs, 1),
                "graph_breaks": 0, "graph_break_reasons": {}}


def test_warm_up_goes_on_until_nothing_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from reportgen.profile import compiling

    # the first call compiles graph 1, the second call compiles graph 2 (a new shape),
    # then nothing: 1 recompile, quiet after three more calls
    step = _FakeStep([0, 1, 2, 2])
    monkeypatch.setattr(compiling, "compiled_counts", step.counts)
    ticks = iter(range(100))
    section = compiling.compile_warm_up(step, "default", clock=lambda: float(next(ticks)))
    assert section["compile_s"] == 1.0
    assert section["recompiles"] == 1 and section["recompile_s"] == 1.0
    assert section["calls_until_quiet"] == 2 + compiling.QUIET_CALLS
    assert section["quiet"] is True and section["fallback"] is None
    assert step.resets == step.calls
    finished = compiling.finish_record(section)
    assert finished["compiled_after_warmup"] == 0 and "_counts" not in finished


def test_warm_up_says_when_nothing_compiled_and_when_it_never_settles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from reportgen.profile import compiling

    eager = _FakeStep([0])
    monkeypatch.setattr(compiling, "compiled_counts", eager.counts)
    section = compiling.compile_warm_up(eager, "max-autotune")
    assert section["fallback"] == "nothing was compiled: the forward ran eagerly"

    restless = _FakeStep(list(range(100)))
    monkeypatch.setattr(compiling, "compiled_counts", restless.counts)
    section = compiling.compile_warm_up(restless, "default")
    assert section["quiet"] is False
    assert section["calls_until_quiet"] == compiling.MAX_COMPILE_CALLS


def test_a_step_without_a_model_cannot_be_compiled() -> None:
    pytest.importorskip("torch")
    from reportgen.errors import Skip
    from reportgen.profile import compiling

    class Micro:
        device = "cpu"

    with pytest.raises(Skip, match="compile=default"):
        compiling.compile_step(Micro(), "default")  # type: ignore[arg-type]
    compiling.compile_step(Micro(), "none")  # eager: nothing to do


def test_a_compiled_step_times_the_compiled_model() -> None:
    torch = pytest.importorskip("torch")
    from reportgen.profile.modes import Step

    calls: list[str] = []

    class Model(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            calls.append("eager")
            return x

    step = Step(Model(), {"x": torch.ones(1)}, device=torch.device("cpu"), inputs_info={})
    step()
    step.compiled = lambda **kw: calls.append("compiled")
    step()
    assert calls == ["eager", "compiled"]
