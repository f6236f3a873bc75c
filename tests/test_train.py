"""Training steps (modes train and train-nooptim): the step, both attribution methods'
forward/backward/optimizer split, backward attribution, memory, the preflight estimate,
suites, claims, pages and the bench's training checks. Tiny models built in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.records import record, write_run

torch = pytest.importorskip("torch")

from reportgen import attribution, shares, traffic  # noqa: E402
from reportgen.categories import CATEGORIES, DESCRIPTIONS, OPTIMIZER, OPTIONAL_CATEGORIES  # noqa: E402
from reportgen.render import training as training_page  # noqa: E402
from reportgen.render.shown import shown_categories  # noqa: E402
from reportgen.vocabulary import MODES, PHASES, TRAIN_MODES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def combo(model: str = "gpt2", mode: str = "train", attn: str = "eager", seq: int = 16) -> Any:
    return SimpleNamespace(model=model, scale="tiny", mode=mode, dtype="fp32", attn_implementation=attn,
                           batch_size=1, seq_len=seq, device="cpu", compile="none")


@pytest.fixture(scope="module")
def built() -> Any:
    """Tiny GPT-2 in both training modes, eager attention (its core ops are visible)."""
    from reportgen.profile import building

    out = {mode: building.build(combo(mode=mode), "cpu") for mode in TRAIN_MODES}
    yield out
    for b in out.values():
        building.free(b)


@pytest.fixture(scope="module")
def attributed(built: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Both methods on each training mode: the profiled pass, then the hooks pass."""
    from reportgen.profile.profiling import profile_step
    from reportgen.profile.regions import attribute
    from reportgen.profile.structure import derive

    out = {}
    for mode, b in built.items():
        path = tmp_path_factory.mktemp(mode) / "t.trace.json.gz"
        structure = derive(b.model, b.step)
        profiled = profile_step(b.step, b.model, iterations=2, trace_path=path, labels=structure.labels)
        out[mode] = (profiled, attribute(profiled, b.model, b.step, structure, budget_s=0.2), path)
    return out


# ---------------------------------------------------------------- vocabulary, categories


def test_modes_and_the_optimizer_category() -> None:
    assert {"train", "train-nooptim"} <= set(MODES) and set(TRAIN_MODES) == {"train", "train-nooptim"}
    assert PHASES == ("forward", "backward", "optimizer")
    assert OPTIMIZER in CATEGORIES and OPTIMIZER in DESCRIPTIONS and OPTIMIZER in OPTIONAL_CATEGORIES
    # shown only where a row has it: a forward's table keeps its columns
    assert OPTIMIZER not in shown_categories([{"mlp": {"share": 1.0}}])
    assert OPTIMIZER in shown_categories([{"optimizer": {"share": 0.2, "ms": 1.0}}])


# ---------------------------------------------------------------- the step


def test_train_step_runs_forward_backward_and_the_optimizer(built: Any) -> None:
    step = built["train"].step
    assert step.model.training and step.optimizer is not None
    assert step.inputs_info["optimizer"] == "AdamW" and "labels" in step.kwargs
    seen: list[tuple[str, bool]] = []
    step.phase_hook = lambda name, start: seen.append((name, start))
    try:
        loss = step()
    finally:
        step.phase_hook = None
    assert seen == [(p, s) for p in PHASES for s in (True, False)]
    assert torch.isfinite(loss) and not loss.requires_grad
    # the gradients are cleared by reset(), outside the timed region
    assert any(p.grad is not None for p in step.model.parameters())
    step.reset()
    assert all(p.grad is None for p in step.model.parameters())


def test_train_nooptim_has_no_optimizer_and_reset_clears_gradients(built: Any) -> None:
    step = built["train-nooptim"].step
    assert step.optimizer is None
    step()
    assert any(p.grad is not None for p in step.model.parameters())
    step.reset()
    assert all(p.grad is None for p in step.model.parameters())


def test_an_encoder_trains_its_masked_lm_head_on_labels() -> None:
    from reportgen.profile import building

    b = building.build(combo(model="bert-base", mode="train-nooptim"), "cpu")
    try:
        assert type(b.model).__name__ == "BertForMaskedLM" and "labels" in b.step.kwargs
        assert b.step.inputs_info["loss"].startswith("cross entropy")
        b.step()
        grads = [p.grad for p in b.model.parameters()]
        assert sum(g is not None for g in grads) > len(grads) // 2
    finally:
        building.free(b)


def test_a_model_without_a_loss_trains_on_its_outputs() -> None:
    from reportgen.profile.modes import training_loss

    x = torch.ones(2, 3, requires_grad=True)
    loss = training_loss((x * 2, torch.zeros(2, dtype=torch.long), x.sum()))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(2.0 + 6.0) and x.grad is not None


# ---------------------------------------------------------------- attribution


@pytest.mark.parametrize("mode", TRAIN_MODES)
def test_phase_and_category_shares_sum_to_one(attributed: Any, mode: str) -> None:
    _, section, _ = attributed[mode]
    for method in ("profiler", "hooks"):
        m = section["methods"][method]
        phases = m["phases"]
        assert list(phases) == [p for p in PHASES if p != "optimizer" or mode == "train"]
        assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0, abs=1e-9), method
        assert sum(c["share"] for c in m["categories"].values()) == pytest.approx(1.0, abs=1e-9)
        for p in phases.values():
            assert p["share_low"] <= p["share"] <= p["share_high"]
            # a phase's categories add up to the phase
            assert sum(c["ms"] for c in p["categories"].values()) == pytest.approx(p["ms"], rel=1e-6)
    # the headline's phases are stored on the attribution itself
    assert set(section["phases"]) == set(section["methods"][section["headline_method"]]["phases"])


def test_optimizer_category_only_with_the_optimizer(attributed: Any) -> None:
    for method in ("profiler", "hooks"):
        with_opt = attributed["train"][1]["methods"][method]
        without = attributed["train-nooptim"][1]["methods"][method]
        assert with_opt["categories"][OPTIMIZER]["ms"] > 0, method
        assert without["categories"][OPTIMIZER]["ms"] == 0, method
        assert with_opt["phases"]["optimizer"]["categories"][OPTIMIZER]["ms"] > 0
        # no optimizer time outside the optimizer's phase
        for phase in ("forward", "backward"):
            assert with_opt["phases"][phase]["categories"][OPTIMIZER]["ms"] == 0


def test_backward_of_the_attention_core_lands_in_attention_core(attributed: Any) -> None:
    _, section, path = attributed["train-nooptim"]
    import gzip

    trace = json.loads(gzip.decompress(path.read_bytes()))
    parsed = attribution._parse(attribution._events(trace))
    attribution._resolve(parsed)
    backward = {op.name.split(": ", 1)[1]: op.category for op in parsed.ops
                if op.backward and op.iteration is not None and op.link is not None}
    assert backward["SoftmaxBackward0"] == "attention.core"
    assert backward["EmbeddingBackward0"] == "embeddings"
    assert backward["NativeLayerNormBackward0"] == "norm"
    for method in ("profiler", "hooks"):
        cats = section["methods"][method]["phases"]["backward"]["categories"]
        assert cats["attention.core"]["ms"] > 0, method
        assert cats["mlp"]["ms"] > 0 and cats["attention.qkv"]["ms"] > 0, method


# ---------------------------------------------------------------- pure parts


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def test_trace_phases_link_backward_ops_by_sequence_number() -> None:
    rng = "user_annotation"
    events = [
        _x("rg|iteration", 0, 100, rng),
        _x("rg|phase|forward", 1, 29, rng),
        _x("rg|attn|layer.attn", 2, 20, rng),
        _x("aten::view", 3, 1, **{"Sequence number": 7}),  # records 7, creates no node
        _x("aten::softmax", 5, 10, **{"Sequence number": 7}),  # creates node 7
        _x("rg|phase|backward", 30, 40, rng),
        _x("autograd::engine::evaluate_function: SoftmaxBackward0", 31, 20, **{"Sequence number": 7}),
        _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 55, 5),
        _x("rg|phase|optimizer", 70, 25, rng),
        _x("aten::_foreach_add_", 72, 10),
    ]
    result = attribution.analyse_trace(events)
    cats = result["categories"]
    assert cats["attention.core"]["ms"] == pytest.approx((10 + 1 + 20 + 5) / 1000)
    assert cats[OPTIMIZER]["ms"] == pytest.approx(10 / 1000)
    phases = result["phases"]
    assert list(phases) == list(PHASES)
    # the phases tile the iteration: 0-30, 30-70, 70-100
    assert [phases[p]["ms"] for p in PHASES] == pytest.approx([0.030, 0.040, 0.030])
    assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0)
    assert phases["backward"]["categories"]["attention.core"] == pytest.approx(0.025)
    each: list[dict[str, Any]] = []
    attribution.profiler_iterations(events, each)
    assert len(each) == 1 and set(each[0]) == set(PHASES)


def test_hooks_backward_calls_split_like_the_forward_in_reverse() -> None:
    Call = shares.Call
    calls = [
        Call("iteration", 0, 100, None),
        Call("phase", 0, 40, 0, "forward"),
        Call("phase", 40, 90, 0, "backward"),
        Call("phase", 90, 100, 0, "optimizer"),
        # backward of one attention call: its dropout (other), out projection, core, qkv
        Call("attn", 40, 80, 2, None, True),
        Call("proj", 45, 50, 4, "attention.out", True),
        Call("proj", 70, 80, 4, "attention.qkv", True),
    ]
    out = shares.categorise(calls)
    # before the out projection (5), the backward phase's own (10), the forward phase's (40:
    # no module call in it here)
    assert out["other"] == pytest.approx(5 + 10 + 40)
    assert out["attention.out"] == 5 and out["attention.qkv"] == 10
    assert out["attention.core"] == pytest.approx(20)  # 50-70
    assert out[OPTIMIZER] == 10
    phases = shares.categorise_phases(calls)
    assert phases is not None and set(phases) == set(PHASES)
    assert sum(phases["backward"].values()) == pytest.approx(50)
    assert sum(sum(p.values()) for p in phases.values()) == pytest.approx(100)


def test_training_traffic_and_flops_count_the_backward() -> None:
    from reportgen.profile import flops

    info = {"hidden_size": 64, "num_heads": 4, "num_layers": 2, "intermediate_size": 128,
            "vocab_size": 100, "architecture": "decoder", "parameters": 1000}
    fwd = flops.analytic(info, combo(mode="forward"))
    train = flops.analytic(info, combo(mode="train"))
    assert train["attention.core"] == pytest.approx(3 * fwd["attention.core"])
    moved = traffic.analytic_bytes(info, combo(mode="train"))
    assert moved["analytic_bytes"][OPTIMIZER] == 7 * 1000 * 4
    assert traffic.analytic_bytes(info, combo(mode="train-nooptim"))["analytic_bytes"][OPTIMIZER] == 0


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("mode", TRAIN_MODES)
def test_training_memory_fields_are_positive(built: Any, mode: str) -> None:
    from reportgen.profile.structure import derive
    from reportgen.profile.training import training_memory

    b = built[mode]
    section = training_memory(b.model, b.step, derive(b.model, b.step), combo(mode=mode), b.info, rise_bytes=1024,
                              scores_per_call=4096)
    saved = section["saved_activation_bytes"]
    assert section["saved_activation_bytes_total"] == sum(saved.values()) > 0
    assert saved["attention.core"] > 0 and saved["mlp"] > 0  # eager keeps its scores
    assert section["step_peak_bytes"] > section["resident_bytes"]["parameters"] > 0
    assert section["resident_bytes"]["gradients"] > 0
    assert (section["resident_bytes"]["optimizer_state"] > 0) == (mode == "train")
    analytic = section["analytic_bytes"]
    assert analytic["parameters"] > 0 and analytic["attention_scores"] == 4096 * 2
    assert (analytic["optimizer_state"] == 2 * analytic["parameters"]) == (mode == "train")


def test_preflight_counts_gradients_and_optimizer_state() -> None:
    from reportgen.profile import preflight

    ref = {m: preflight.estimate(combo(mode=m, seq=64)) for m in ("forward", *TRAIN_MODES)}
    assert "gradients" not in ref["forward"]["parts"]
    assert ref["train"]["parts"]["optimizer_state"] == 2 * ref["train"]["parts"]["gradients"] > 0
    assert ref["train-nooptim"]["parts"]["optimizer_state"] == 0
    assert ref["train"]["estimate_bytes"] > ref["train-nooptim"]["estimate_bytes"] > ref["forward"]["estimate_bytes"]


# ---------------------------------------------------------------- suites, CLI


def test_suites_accept_train_and_the_built_in_training_suites_load() -> None:
    from reportgen.suite import load_suite

    cpu = load_suite("cpu-train").combinations()
    assert {c.mode for c in cpu} == set(TRAIN_MODES) and {c.model for c in cpu} == {"bert-base", "gpt2"}
    assert {c.seq_len for c in cpu} == {128, 256} and len(cpu) == 16
    gpu = load_suite("gpu-train")
    assert {(c.model, c.seq_len) for c in gpu.combinations()} == {("gpt2", 1024), ("bert-large", 512)}
    assert {c.attn_implementation for c in gpu.combinations()} >= {"eager", "sdpa"}
    assert {c.mode for c in load_suite("tiny", {"modes": ["train"]}).combinations()} == {"train"}


def test_an_unknown_mode_is_one_line_on_stderr() -> None:
    proc = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--models", "gpt2",
                           "--modes", "training", "--list"], capture_output=True, text=True,
                          cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown mode 'training'" in lines[0] and "train-nooptim" in lines[0]


def test_a_compiled_training_step_is_skipped(tmp_path: Path) -> None:
    from reportgen.errors import Skip
    from reportgen.profile import measure

    with pytest.raises(Skip, match="eagerly only"):
        measure.measure(SimpleNamespace(**{**vars(combo()), "compile": "default"}), run_dir=tmp_path,
                        combo_id="x", budget_s=0.1)


# ---------------------------------------------------------------- claims and pages


def test_training_claims_read_not_tested_on_a_cpu(tmp_path: Path) -> None:
    from reportgen.claims import check
    from reportgen.claims.evaluate import NOT_TESTED_HARDWARE

    records = []
    for model, seq in (("gpt2", 1024), ("bert-large", 512)):
        for attn in ("eager", "sdpa"):
            rec = record(model, attn, seq=seq)
            rec["combination"]["mode"] = "train"
            rec["id"] = rec["id"].replace("--forward--", "--train--")
            records.append(rec)
    write_run(tmp_path / "runs", "cpu-amd-epyc-2c", "cpu-train", records)
    report = check(tmp_path / "runs", ROOT / "claims")
    by_id = {r.claim.id: r for r in report.claims}
    for claim_id in ("flashattention-gpt2-training-3x", "flashattention-up-to-3x-standard-attention",
                     "flashattention2-training-225-tflops", "transformers-bert-sdpa-training-speedup"):
        result = by_id[claim_id]
        assert result.claim.conditions["setting"] == ["training"]
        assert result.claim.conditions["mode"] == ["train"]
        assert result.verdict == NOT_TESTED_HARDWARE, claim_id
    # the CPU's training steps are context for the claims on their models
    bert = by_id["transformers-bert-sdpa-training-speedup"]
    assert bert.evidence and all(not row["on_claim_hardware"] for row in bert.evidence)


def test_training_rows_for_the_combination_page() -> None:
    record = {"id": "gpt2--train--fp32--eager--b1--s16--tiny", "status": "ok",
              "combination": {"mode": "train", "attn_implementation": "eager", "dtype": "fp32",
                              "seq_len": 16, "batch_size": 1},
              "timing": {"median": 10.0, "ci_low": 9.0, "ci_high": 11.0},
              "attribution": {"headline_method": "hooks", "phases": {
                  "forward": {"ms": 3.0, "share": 0.3, "share_low": 0.25, "share_high": 0.35,
                              "categories": {"mlp": {"ms": 2.0}, "overhead": {"ms": 1.0}}},
                  "backward": {"ms": 6.0, "share": 0.6, "categories": {"attention.core": {"ms": 4.0},
                                                                        "mlp": {"ms": 2.0}}},
                  "optimizer": {"ms": 1.0, "share": 0.1, "categories": {"optimizer": {"ms": 1.0}}}}},
              "memory": {"training": {"saved_activation_bytes": {"mlp": 10, "attention.core": 30},
                                      "saved_activation_bytes_total": 40, "step_peak_bytes": 100,
                                      "resident_bytes": {"parameters": 8, "gradients": 8,
                                                         "optimizer_state": 16},
                                      "analytic_bytes": {"parameters": 8}}}}
    forward_record = {**record, "id": "f", "combination": {**record["combination"], "mode": "forward"}}
    (row,) = training_page.training_rows([(record, "r.json"), (forward_record, "f.json")])
    assert [p["phase"] for p in row["phase_list"]] == list(PHASES)
    assert row["phases"]["backward"]["top"][0] == {"category": "attention.core", "ms": 4.0,
                                                   "of_phase": pytest.approx(4 / 6)}
    assert [s["category"] for s in row["saved"]] == ["attention.core", "mlp"]
    assert row["step_peak"] == 100 and row["optimizer_state"] == 16


# ---------------------------------------------------------------- bench


def test_the_attention_stand_in_keeps_a_training_step_differentiable(built: Any) -> None:
    from reportgen.bench import ablation

    b = built["train-nooptim"]
    qkv = [m for n, m in b.model.named_modules() if n.endswith("attn.c_attn")]
    with ablation.category_stand_in(b.model) as stand_in:
        b.step()
    assert stand_in.calls == 2  # one per layer
    # the projections before the call still get gradients: only the core is gone
    assert all(m.weight.grad is not None for m in qkv)
    b.step.reset()


def test_bench_training_combinations_and_a_paired_round(built: Any) -> None:
    from reportgen.bench import training_check
    from reportgen.bench.attribution_check import paired_forwards
    from reportgen.profile.structure import derive

    combos = training_check.combinations(quick=True)
    assert {c.mode for c in combos} == set(TRAIN_MODES) and {c.scale for c in combos} == {"tiny"}
    with pytest.raises(ValueError):
        training_check.combinations(quick=True, modes=("forward",))
    # the ablation at a length where the attention core is a resolvable share of a step
    full = training_check.combinations(quick=False, seq_len=training_check.ABLATION_SEQ)
    assert {c.seq_len for c in full} == {256} and {c.scale for c in full} == {"reference"}
    assert {c.seq_len for c in training_check.combinations(quick=False)} == {128}
    b = built["train"]
    pairs = paired_forwards(b.step, b.model, derive(b.model, b.step), budget_s=0.05, min_pairs=2, warmup=1)
    assert pairs["calls"] == 2 and len(pairs["full_ms"]) >= 2
    # hooked pairs: (full step ms, its attention.core ms, stand-in ms, its attention.core ms),
    # the core clocked in the step's backward as well as its forward
    for full_ms, full_core, stub_ms, stub_core in pairs["hooked"]:
        assert full_ms > full_core > 0 and stub_ms > stub_core >= 0


def test_hooked_phases_split_the_step_by_phase_and_category(built: Any) -> None:
    from reportgen.profile import regions
    from reportgen.profile.structure import derive

    b = built["train"]
    phases: list[dict[str, dict[str, float]]] = []
    ms, cats = regions.hooked_forward(b.model, b.step, regions.device_clock(b.step),
                                      derive(b.model, b.step), phases=phases)
    b.step.reset()
    assert len(phases) == 1 and set(phases[0]) == set(PHASES)
    # the phases tile the step: their categories add up to the whole step's
    for category, total in cats.items():
        assert sum(p.get(category, 0.0) for p in phases[0].values()) == pytest.approx(total, abs=1e-6)
    assert phases[0]["backward"]["attention.core"] > 0 and phases[0]["optimizer"][OPTIMIZER] > 0
    assert sum(sum(p.values()) for p in phases[0].values()) == pytest.approx(ms, rel=1e-6)


def test_the_phase_script_places_the_drop_in_each_phase() -> None:
    script = ROOT / "scripts" / "ablation_phases.py"
    # every other pair hooked: the backward's core is about 0.1 ms of a tiny step, and the
    # median of two hooked pairs once read it below zero beside another test's load
    argv = [sys.executable, str(script), "gpt2", "--scale", "tiny", "--seq-len", "32",
            "--pairs", "16", "--hooked-every", "2", "--warmup", "1"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["combination"].startswith("gpt2--train--fp32--eager--b1--s32")
    assert (got["pairs"], got["hooked_pairs"]) == (8, 8)
    assert set(got["phases"]) == set(PHASES)
    for phase, row in got["phases"].items():
        assert row["full_ms"] > 0, phase
    # the core works in the forward and the backward; the optimizer holds none of it
    assert got["phases"]["forward"]["removable_ms"] > 0 and got["phases"]["backward"]["removable_ms"] > 0
    assert got["phases"]["optimizer"]["removable_ms"] == 0
    assert got["removable_ms"] == pytest.approx(
        sum(r["removable_ms"] for r in got["phases"].values()), rel=0.5)


def test_the_phase_script_refuses_too_few_pairs_in_one_line() -> None:
    script = ROOT / "scripts" / "ablation_phases.py"
    out = subprocess.run([sys.executable, str(script), "gpt2", "--pairs", "3"], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "--pairs 3" in out.stderr and out.stdout == ""


def test_bench_latency_compare_times_a_training_step() -> None:
    from reportgen.bench import latency

    row = latency.compare(combo(mode="train-nooptim"), rounds=2, budget_s=0.05, min_run_time=0.05)
    assert row["reportgen_ms"] > 0 and row["timer_ms"] > 0 and row["ratio"] > 0


@pytest.mark.slow
def test_profile_command_writes_training_records(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "REPORTGEN_VALIDATE_RECORDS": "1"}
    proc = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--models", "gpt2", "--scale", "tiny",
                           "--modes", "train", "--seq-lens", "16", "--attn", "eager", "--device", "cpu",
                           "--budget-s", "0.3", "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = out.rglob("combinations/*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok"
    assert set(record["attribution"]["phases"]) == set(PHASES)
    assert record["memory"]["training"]["step_peak_bytes"] > 0


def test_a_training_record_renders_its_training_step_section(tmp_path: Path) -> None:
    """The site built from a run holding a training record shows its "Training step"."""

    from reportgen.render import render

    rec = record("gpt2", "sdpa", seq=128)
    rec["combination"]["mode"] = "train"
    rec["id"] = rec["id"].replace("--forward--", "--train--")
    rec["attribution"]["phases"] = {
        "forward": {"ms": 3.0, "share": 0.3, "categories": {"mlp": {"ms": 2.0}}},
        "backward": {"ms": 6.0, "share": 0.6, "categories": {"attention.core": {"ms": 4.0}}},
        "optimizer": {"ms": 1.0, "share": 0.1, "categories": {"optimizer": {"ms": 1.0}}}}
    write_run(tmp_path / "runs", "cpu-amd-epyc-2c", "cpu-train", [rec])
    render(tmp_path / "runs", tmp_path / "docs", svg=False)
    pages = [p.read_text() for p in (tmp_path / "docs").rglob("*.md")]
    assert any("## Training step" in page for page in pages)
    assert list((tmp_path / "docs").rglob("*training*.csv"))


def test_hooked_labels_move_no_op_between_categories_in_a_step(
        built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clocked at the structure's labels, every op of a training step (its backward
    included) lands in the category it lands in when every module with a role is
    clocked; the clock counts the step's aten ops (``OpClock``; not the views the clocks'
    own identity nodes make, more of them where more calls are clocked), so the
    comparison is exact."""
    import dataclasses

    from support.clocks import DispatchOpClock as OpClock

    from reportgen.profile import regions
    from reportgen.profile.structure import derive

    b = built["train"]
    structure = derive(b.model, b.step)
    assert structure.labels != structure.roles
    identity = regions._identity_node
    counted = {}
    for key, labelled in (("all roles", dataclasses.replace(structure, labels=structure.roles)),
                          ("labels", structure)):
        clock = OpClock()
        monkeypatch.setattr(regions, "_identity_node", clock.uncounted(identity))
        with clock:
            _, cats = regions.hooked_forward(b.model, b.step, clock, labelled)
        b.step.reset()
        counted[key] = cats
    assert counted["labels"] == counted["all roles"]
    assert counted["labels"]["mlp"] > 0 and counted["labels"][OPTIMIZER] > 0
