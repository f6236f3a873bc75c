"""measure(): one combination end to end on tiny models (real profiling and structure),
its own arithmetic with the profiled pass faked, and its error contract."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import torch

from reportgen import stats, traffic
from reportgen.categories import CATEGORIES
from reportgen.errors import Skip
from reportgen.profile import building
from reportgen.profile import measure as measure_mod
from reportgen.profile.measure import OutOfMemory, measure
from reportgen.records.schema import COMBINATION_KIND, json_schema
from reportgen.traffic import attention_activation_bytes

SECTIONS = {"model", "inputs", "timing", "profile", "attribution", "ops", "memory", "flops"}


def combo(model: str, mode: str = "forward", impl: str = "sdpa", **kw: Any) -> SimpleNamespace:
    fields = {"model": model, "scale": "tiny", "mode": mode, "dtype": "fp32", "attn_implementation": impl,
              "batch_size": 1, "seq_len": 16, "device": "cpu"}
    fields.update(kw)
    return SimpleNamespace(**fields)


@pytest.mark.parametrize(("model", "mode", "impl"), [
    ("bert", "forward", "eager"),
    ("gpt2", "decode", "sdpa"),
    ("t5", "forward", "sdpa"),
    ("llama", "prefill", "eager"),
])
def test_measure_end_to_end(tmp_path: Path, model: str, mode: str, impl: str) -> None:
    c = combo(model, mode, impl)
    record = measure(c, run_dir=tmp_path, combo_id="combo-x", budget_s=0.2, seed=7, profile_iterations=2)
    assert set(record) == SECTIONS
    json.dumps(record)  # the record is plain JSON

    assert record["model"]["model_type"] == model and record["model"]["hidden_size"] == 64
    assert record["inputs"]["seed"] == 7

    timing = record["timing"]
    assert timing["method"] == "host-clock" and timing["n"] == len(timing["samples"]) >= 3
    # 0.2 s cannot hold the 10000 samples of max_samples; converged must mean it.
    assert timing["stop_reason"] in ("converged", "budget")
    if timing["stop_reason"] == "converged":
        assert stats.rel_halfwidth(timing["samples"], 0.95) <= timing["target_rel_halfwidth"]
    assert timing["ci_low"] <= timing["median"] <= timing["ci_high"]

    profile = record["profile"]
    assert profile["iterations"] == 2 and len(profile["per_iteration_ms"]) == 2
    assert profile["overhead_ratio"] == pytest.approx(profile["median_ms"] / timing["median"])
    trace = tmp_path / profile["trace"]
    assert trace == tmp_path / "traces" / "combo-x.trace.json.gz"
    assert json.loads(gzip.decompress(trace.read_bytes()))

    memory = record["memory"]
    # a CPU has no allocator statistics: the peak comes from the profiler's memory events
    assert memory["peak_allocated_bytes"] > 0
    assert memory["peak_reserved_bytes"] is None
    assert memory["attention_activation_bytes"]["measured"] == memory["by_category_bytes"]["attention.core"]
    expected = 1 * 4 * 16 * 16 * 4 * 2 if impl == "eager" else 0
    assert memory["attention_activation_bytes"]["analytic"] == expected

    fl = record["flops"]
    assert set(fl["analytic"]) == set(CATEGORIES) - {"overhead"}
    assert fl["total_analytic"] == pytest.approx(sum(fl["analytic"].values()))
    assert fl["total_analytic"] > 0
    assert fl["total_counted"] > 0
    for category in ("attention.qkv", "attention.out", "mlp"):
        assert fl["counted"][category] == pytest.approx(fl["analytic"][category]), category
    assert fl["achieved_flops_per_s"] == pytest.approx(fl["total_analytic"] / (timing["median"] / 1e3))
    assert fl["peak_flops_per_s"] is None and fl["percent_of_peak"] is None
    assert fl["notes"][0] == "attention.core counts the full Lq x Lk score matrix, not halved for causal masks"
    # the bytes moved, stored with the record, are what the render side recomputes from it
    assert fl["bytes_per_element"] == 4 and fl["total_analytic_bytes"] > 0
    assert set(fl["analytic_bytes"]) == set(CATEGORIES) - {"overhead"}
    assert fl["total_analytic_bytes"] == pytest.approx(sum(fl["analytic_bytes"].values()))
    assert fl["analytic_bytes"]["mlp"] > 0 and fl["analytic_bytes"]["attention.core"] > 0
    scores = fl["analytic_bytes_parts"]["attention.core"]["scores"]
    assert (scores > 0) == (impl == "eager")
    assert (fl["analytic_bytes_parts"]["attention.core"]["kv_cache_read"] > 0) == (mode == "decode")
    assert traffic.NOTE_MODEL in fl["notes"]
    without = {**record, "flops": {k: v for k, v in fl.items()
                                   if k not in ("analytic_bytes", "analytic_bytes_parts",
                                                "total_analytic_bytes", "bytes_per_element")}}
    recomputed = traffic.record_bytes({**without, "combination": dict(vars(c))})
    assert recomputed is not None and recomputed["analytic_bytes"] == fl["analytic_bytes"]

    # both attribution methods, the headline (module-boundary clocks on a CPU) in categories
    attribution = record["attribution"]
    assert attribution["headline_method"] == "hooks"
    hooks, prof = attribution["methods"]["hooks"], attribution["methods"]["profiler"]
    assert prof["iterations"] == 2 and hooks["iterations"] >= 6
    for i, wall in enumerate(hooks["iteration_ms"]):
        parts = [hooks["categories"][c]["per_iteration_ms"][i] for c in CATEGORIES]
        assert min(parts) >= 0 and sum(parts) == pytest.approx(wall)
    assert attribution["categories"]["mlp"]["share"] == hooks["categories"]["mlp"]["share"]
    schema = json_schema(COMBINATION_KIND)
    jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/attribution"}
                                    ).validate(attribution)


@pytest.mark.parametrize(("model", "mode", "studies"), [
    ("gpt2", "train", ()),  # the training step's memory reads the structure too
    ("mixtral", "forward", ("instrumentation",)),  # experts, their load, a study
])
def test_a_measurement_derives_the_structure_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  model: str, mode: str, studies: tuple[str, ...]) -> None:
    """Every part of one measurement that reads the model's structure (the profiled
    pass's labels, both attribution methods, the FLOP count, a training step's memory,
    the experts' load, the studies) is handed the one `structure.Structure`: the module
    walk and the recorded forward run once each. Counted where the walk makes the root's
    role and where the forward is recorded (names `structure.py` looks up in its own
    module when it runs, whatever name a caller imported the functions under)."""
    from reportgen.profile import structure

    walks = {"classify": 0, "recorded forward": 0}
    role, recorded = structure.ModuleRole, structure.record

    def counted_role(fqn: str, *rest: Any) -> Any:
        walks["classify"] += fqn == ""
        return role(fqn, *rest)

    def counted_record(*args: Any) -> Any:
        walks["recorded forward"] += 1
        return recorded(*args)

    monkeypatch.setattr(structure, "ModuleRole", counted_role)
    monkeypatch.setattr(structure, "record", counted_record)
    record = measure(combo(model, mode), run_dir=tmp_path, combo_id="c", budget_s=0.1,
                     profile_iterations=1, studies=studies, study_budget_s=0.2)
    assert walks == {"classify": 1, "recorded forward": 1}
    assert record["attribution"]["methods"]["hooks"]["categories"]["mlp" if mode == "train" else "moe.experts"]
    assert ("moe" in record) == (model == "mixtral") and ("training" in record["memory"]) == (mode == "train")
    assert all(record["studies"][name]["status"] == "ok" for name in studies)


@pytest.mark.parametrize(("model", "mode", "impl"), [
    ("bert", "forward", "eager"), ("gpt2", "decode", "eager"), ("llama", "prefill", "sdpa"), ("t5", "forward", "eager"),
    ("llama", "train", "eager"),
])
def test_the_flops_counted_in_the_structures_forward_are_those_of_a_forward_of_their_own(
        model: str, mode: str, impl: str) -> None:
    """The FLOP counter counts the forward the structure is recorded in: the same counts
    and notes as a forward counted alone, and the same structure as one recorded alone."""
    from reportgen.profile import flops
    from reportgen.profile.structure import derive

    built = building.build(combo(model, mode, impl))
    structure, count = measure_mod._derive_counting(built)
    assert isinstance(count, flops.FlopCount)
    alone = derive(built.model, built.step)
    assert structure == alone
    analytic = flops.analytic(built.info, combo(model, mode, impl), flops.analytic_hints(built.model, alone.roles))
    together = count.result(built.model, structure.categories, analytic=analytic)
    separate = flops.counted(built.model, built.step, alone.categories, analytic=analytic)
    assert together == separate and sum(together[0].values()) > 0


def test_a_failing_flop_counter_costs_the_count_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the counter breaks the forward it counts, the structure is recorded again
    without it and the FLOP section says why it has no count."""
    import contextlib

    from torch.utils._python_dispatch import TorchDispatchMode

    from reportgen.profile import flops
    from reportgen.profile.structure import derive

    class Refuses(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            raise RuntimeError("no formula today")

    @contextlib.contextmanager
    def counting(self: Any) -> Any:
        with Refuses():
            yield

    monkeypatch.setattr(flops.FlopCount, "counting", counting)
    c = combo("llama", impl="eager")
    built = building.build(c)
    structure, count = measure_mod._derive_counting(built)
    assert isinstance(count, RuntimeError) and structure == derive(built.model, built.step)
    section = measure_mod._flops_section(built, structure, c, 10.0, torch.device("cpu"), count)
    assert section["counted"] is None and section["total_analytic"] > 0
    assert "flop_counter failed: RuntimeError: no formula today" in section["notes"]


def test_measure_skips_what_does_not_apply(tmp_path: Path) -> None:
    with pytest.raises(Skip, match="decode applies to causal LMs"):
        measure(combo("bert", "decode"), run_dir=tmp_path, combo_id="x", budget_s=0.1)
    with pytest.raises(Skip, match="CUDA"):
        measure(combo("llama", impl="flash_attention_2"), run_dir=tmp_path, combo_id="x", budget_s=0.1)


def _fake_profile(monkeypatch: pytest.MonkeyPatch, median_ms: float = 12.0) -> list[dict[str, Any]]:
    import reportgen.profile.profiling

    calls: list[dict[str, Any]] = []

    def profile_step(step: Any, model: Any, *, iterations: int, trace_path: Path, **kw: Any) -> dict[str, Any]:
        calls.append({"iterations": iterations, "trace_path": trace_path, "first": kw.get("first"),
                      "labels": kw.get("labels"), "warmup": kw.get("warmup", 1)})
        if kw.get("first") is not None:
            kw["first"]()  # the warm-up forward: the structure's, which resets the step itself
        else:
            step()
            step.reset()
        return {"profile": {"iterations": iterations, "per_iteration_ms": [median_ms] * iterations,
                            "median_ms": median_ms, "trace": f"traces/{trace_path.name}", "trace_bytes": 1},
                "attribution": {"basis": "cpu"}, "ops": [],
                "memory": {"by_category_bytes": {"mlp": 5}},
                "per_iteration": [(median_ms, {"mlp": median_ms})] * iterations}

    monkeypatch.setattr(reportgen.profile.profiling, "profile_step", profile_step)
    return calls


def test_measure_composition_with_fake_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_profile(monkeypatch)
    seen: dict[str, Any] = {}

    def fake_time_step(step: Any, *, budget_s: float, prior_warmup: list[float], **_: Any) -> dict[str, Any]:
        seen["budget_s"] = budget_s
        seen["prior_warmup"] = prior_warmup
        return {"median": 10.0, "samples": [10.0], "n": 1, "stop_reason": "budget"}

    monkeypatch.setattr(measure_mod, "time_step", fake_time_step)
    c = combo("llama", impl="eager")
    record = measure(c, run_dir=tmp_path, combo_id="abc", budget_s=1.5, profile_iterations=4)
    assert seen["budget_s"] == 1.5
    # the build's trial iteration, timed, is the warm-up's first sample
    assert len(seen["prior_warmup"]) == 1 and seen["prior_warmup"][0] > 0
    assert [{k: call[k] for k in ("iterations", "trace_path")} for call in calls] == [
        {"iterations": 4, "trace_path": tmp_path / "traces" / "abc.trace.json.gz"}]
    # the structure is recorded as the build's trial iteration (no forward of its own),
    # the FLOP counter counting that forward; the profiled forwards carry its labels, and
    # on a CPU the profiler takes no warm-up forward of its own (the model is warm)
    assert calls[0]["first"] is None and calls[0]["labels"] and calls[0]["warmup"] == 0
    # a GPU keeps the profiler's warm-up forward (CUPTI starts in it), as does a step whose
    # structure is recorded there
    assert measure_mod.profiler_warmup(torch.device("cuda"), False) == 1
    assert measure_mod.profiler_warmup(torch.device("cpu"), True) == 1
    assert record["flops"]["total_counted"] and record["flops"]["counted"]["mlp"] > 0
    assert record["profile"]["overhead_ratio"] == pytest.approx(1.2)
    assert record["memory"]["by_category_bytes"] == {"mlp": 5}
    methods = record["attribution"]["methods"]
    assert methods["profiler"]["categories"]["mlp"]["share"] == 1.0
    assert methods["profiler"]["iterations"] == 4
    assert record["attribution"]["headline_method"] == "hooks"
    assert record["attribution"]["forward_ms"] == methods["hooks"]["forward_ms"]
    assert record["memory"]["attention_activation_bytes"] == {"analytic": 1 * 4 * 16 * 16 * 4 * 2, "measured": None}
    assert record["flops"]["achieved_flops_per_s"] == pytest.approx(record["flops"]["total_analytic"] / 0.010)


def test_out_of_memory_becomes_a_failure_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(*_: Any, **__: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore detail")

    monkeypatch.setattr(building, "build", build)
    with pytest.raises(OutOfMemory) as err:
        measure(combo("llama"), run_dir=tmp_path, combo_id="x", budget_s=0.1)
    assert str(err.value) == "out of memory: CUDA out of memory. Tried to allocate 20.00 GiB"
    assert err.value.__context__ is None  # raised after the handler: no frames pinned


def test_other_errors_propagate_and_model_is_freed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    freed: list[Any] = []
    real_free = building.free

    def free(result: Any, **kw: Any) -> None:
        freed.append(result)
        real_free(result, **kw)

    def broken_time_step(*_: Any, **__: Any) -> Any:
        raise ValueError("boom")

    monkeypatch.setattr(building, "free", free)
    monkeypatch.setattr(measure_mod, "time_step", broken_time_step)
    with pytest.raises(ValueError, match="boom"):
        measure(combo("gpt2"), run_dir=tmp_path, combo_id="x", budget_s=0.1)
    assert len(freed) == 1 and freed[0] is not None and freed[0].model is None


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The models instantiated (each a fresh build), with nothing kept before or after."""
    made: list[Any] = []
    real = building._instantiate

    def instantiate(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    building._drop_kept()
    monkeypatch.setattr(building, "_instantiate", instantiate)
    yield made
    building._drop_kept()


def test_a_worker_takes_the_model_it_kept_for_the_same_model_only(tmp_path: Path, builds: list[Any]) -> None:
    """BERT at 16 and 32 tokens is one model: the second combination takes the first's
    (its own step, inputs and trial iteration); another model drops it and is built."""
    first = measure(combo("bert", seq_len=16), run_dir=tmp_path, combo_id="a", budget_s=0.1, keep_model=True)
    assert len(builds) == 1 and building.kept_model() is builds[0]
    second = measure(combo("bert", seq_len=32), run_dir=tmp_path, combo_id="b", budget_s=0.1,
                     profiled=False, keep_model=True)
    assert len(builds) == 1 and building.kept_model() is builds[0]
    assert second["inputs"]["input_shape"] == [1, 32] and second["timing"]["warmup_samples"]
    assert second["model"] == first["model"]
    # another attention implementation is another model: built, and the kept one dropped
    measure(combo("bert", impl="eager"), run_dir=tmp_path, combo_id="c", budget_s=0.1, profiled=False,
            keep_model=True)
    assert len(builds) == 2 and building.kept_model() is builds[1]
    measure(combo("gpt2"), run_dir=tmp_path, combo_id="d", budget_s=0.1, profiled=False, keep_model=True)
    assert len(builds) == 3 and building.kept_model() is builds[2]


def test_only_a_model_as_built_is_taken(builds: list[Any]) -> None:
    built = building.build(combo("bert"), reuse=True)
    handle = built.model.encoder.register_forward_hook(lambda *_: None)
    building.free(built, keep=True)
    again = building.build(combo("bert"), reuse=True)
    assert again.model is builds[1] and len(builds) == 2  # a hook left on it: built afresh
    handle.remove()
    building.free(again)
    assert building.kept_model() is None


@pytest.mark.parametrize(("keep", "c"), [
    (False, combo("bert")),  # measure's default: nothing stays in the caller's process
    (True, combo("gpt2", mode="train")),  # a training step changes its weights
])
def test_nothing_is_kept_unless_asked_for_a_model_left_as_built(tmp_path: Path, builds: list[Any], keep: bool,
                                                                  c: Any) -> None:
    measure(c, run_dir=tmp_path, combo_id="x", budget_s=0.1, profiled=False, keep_model=keep)
    assert len(builds) == 1 and building.kept_model() is None


def test_a_failed_measurement_keeps_nothing(tmp_path: Path, builds: list[Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_time_step(*_: Any, **__: Any) -> Any:
        raise ValueError("boom")

    monkeypatch.setattr(measure_mod, "time_step", broken_time_step)
    with pytest.raises(ValueError, match="boom"):
        measure(combo("bert"), run_dir=tmp_path, combo_id="x", budget_s=0.1, keep_model=True)
    assert len(builds) == 1 and building.kept_model() is None


@pytest.mark.parametrize(("impl", "mode", "expected"), [
    ("eager", "forward", 2 * 4 * 16 * 16 * 2 * 2),
    ("sdpa-math", "forward", 2 * 4 * 16 * 16 * 2 * 2),
    ("eager", "decode", 2 * 4 * 1 * 17 * 2 * 2),
    ("naive-inplace", "forward", 2 * 4 * 16 * 16 * 2),
    ("sdpa", "forward", 0),
    ("sdpa-flash", "forward", 0),
    ("flash_attention_2", "forward", 0),
])
def test_attention_activation_bytes(impl: str, mode: str, expected: int) -> None:
    c = SimpleNamespace(attn_implementation=impl, mode=mode, batch_size=2, seq_len=16, dtype="fp16")
    assert attention_activation_bytes({"num_heads": 4}, c) == expected
