"""The attention-micro model: every runnable variant computes the same attention."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from reportgen.errors import Skip
from reportgen.profile import dtypes, micro


def combo(variant: str, **overrides: object) -> SimpleNamespace:
    fields: dict[str, object] = {
        "model": "attention-micro",
        "mode": "forward",
        "dtype": "fp32",
        "attn_implementation": variant,
        "batch_size": 2,
        "seq_len": 24,
        "device": "cpu",
    }
    fields.update(overrides)
    return SimpleNamespace(**fields)


def build_or_skip(variant: str, **overrides: object) -> micro.MicroStep | None:
    try:
        _, _, step = micro.build(combo(variant, **overrides), "cpu")
    except Skip:
        return None
    return step


def test_module_class_is_an_attention_container() -> None:
    model, info, _ = micro.build(combo("naive"), "cpu")
    attn = model.attn
    assert "Attention" in type(attn).__name__
    assert info["config"]["attention_class"] == type(attn).__name__
    # The post's module only: no projections (and so no parameters) inside the region.
    assert list(model.parameters()) == [] and info["parameters"] == 0
    names = [type(m).__name__ for m in model.modules()]
    assert sum("Attention" in n for n in names) == 1
    assert not any(marker in n for n in names for marker in ("Head", "Pooler", "Prediction", "Classifier"))


def test_profiler_structure_sees_only_the_attention_core() -> None:
    from reportgen.profile.structure import classify

    roles = classify(micro.build(combo("naive"), "cpu")[0])
    assert roles["attn"].category == "attention.core"
    assert not [name for name, role in roles.items() if role.role == "proj"]


@pytest.mark.parametrize(("variant", "ops"), [
    # k.transpose is a view: an op on the host, no kernel on a device
    ("naive", ["aten::transpose", "aten::matmul", "aten::mul", "aten::masked_fill",
               "aten::softmax", "aten::matmul"]),
    ("naive-inplace", ["aten::transpose", "aten::matmul", "aten::mul", "aten::masked_fill_",
                       "aten::softmax", "aten::matmul"]),
    ("sdpa-math", ["aten::scaled_dot_product_attention"]),
])
def test_profiled_region_is_the_module_call(variant: str, ops: list[str], tmp_path: Path) -> None:
    # The profiled forward holds the module's own ops and nothing else: no projection,
    # no head merge, no mask construction; all of it is attention.core.
    import gzip
    import json

    from reportgen.attribution import classify_ops
    from reportgen.profile.profiling import profile_step
    from reportgen.profile.structure import classify

    model, _, step = micro.build(combo(variant, batch_size=1, seq_len=16), "cpu")
    path = tmp_path / "traces" / "m.trace.json.gz"
    result = profile_step(step, model, iterations=2, trace_path=path, labels=classify(model))
    rows = [r for r in classify_ops(json.loads(gzip.decompress(path.read_bytes())))
            if r["iteration"] == 0]
    assert [r["name"] for r in rows] == ops
    assert {r["category"] for r in rows} == {"attention.core"}
    cats = result["attribution"]["categories"]
    assert all(cats[c]["ms"] == 0 for c in cats if c not in ("attention.core", "overhead"))


def test_info_and_inputs_info_have_the_model_keys() -> None:
    module, info, step = micro.build(combo("naive-inplace"), "cpu")
    assert info["name"] == "attention-micro" and info["model_type"] == "attention-micro"
    assert info["class"] == "MicroModel"
    assert info["num_layers"] == 1 and info["intermediate_size"] is None
    assert info["vocab_size"] is None
    assert info["hidden_size"] == info["num_heads"] * info["head_dim"]
    assert info["config"]["measured_region"] == micro.MEASURED_REGION
    assert "projections" in info["config"]["outside_region"]
    assert step.inputs_info == {"seed": 0, "input_shape": [2, micro.NUM_HEADS, 24, 64],
                                "tokens": 48, "kv_len": None}
    assert step.device == torch.device("cpu")
    step.reset()
    step.sync()


@pytest.mark.parametrize("variant", [v for v in micro.VARIANTS if v != "naive"])
def test_runnable_variants_match_naive(variant: str) -> None:
    reference = build_or_skip("naive")
    assert reference is not None
    step = build_or_skip(variant)
    if step is None:
        pytest.skip(f"{variant} does not run on this CPU")
    expected = reference()
    got = step()
    assert got.shape == (2, micro.NUM_HEADS, 24, 64)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_masking_is_causal() -> None:
    _, _, step = micro.build(combo("naive", batch_size=1, seq_len=8), "cpu")
    before = step().clone()
    step.k[0, :, -1] += 1.0  # the last key and value may not change any earlier output
    step.v[0, :, -1] += 1.0
    after = step()
    torch.testing.assert_close(after[0, :, :-1], before[0, :, :-1])
    assert not torch.allclose(after[0, :, -1], before[0, :, -1])


def test_seeded_inputs_are_random_and_reproducible() -> None:
    _, _, a = micro.build(combo("naive"), "cpu")
    _, _, b = micro.build(combo("naive"), "cpu")
    assert torch.equal(a.q, b.q) and torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
    assert a.q.std() > 0.5 and not torch.equal(a.q, a.k)
    torch.testing.assert_close(a(), b())
    _, _, c = micro.build(combo("naive"), "cpu", seed=1)
    assert c.inputs_info["seed"] == 1 and not torch.equal(a.q, c.q)


@pytest.mark.parametrize("variant", ["sdpa-efficient", "sdpa-cudnn"])
def test_cuda_only_backends_skip_on_cpu_with_torch_reason(variant: str) -> None:
    with pytest.raises(Skip) as info:
        micro.build(combo(variant), "cpu")
    reason = str(info.value)
    assert variant in reason and "cpu" in reason
    assert "backend" in reason or "kernel" in reason  # torch's own words


def test_flash_runs_or_skips_with_reason() -> None:
    try:
        _, _, step = micro.build(combo("sdpa-flash"), "cpu")
    except Skip as exc:
        assert "sdpa-flash" in str(exc)
    else:
        assert step().shape == (2, micro.NUM_HEADS, 24, 64)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_reduced_precision_dtypes(dtype: str) -> None:
    _, _, step = micro.build(combo("naive-inplace", dtype=dtype), "cpu")
    assert step.q.dtype == step.k.dtype == step.v.dtype == dtypes.TORCH_DTYPES[dtype]
    assert torch.isfinite(step().float()).all()


def test_unknown_variant_and_mode_skip() -> None:
    with pytest.raises(Skip, match="no variant"):
        micro.build(combo("eager"), "cpu")
    with pytest.raises(Skip, match="forward"):
        micro.build(combo("naive", mode="generate"), "cpu")


def test_step_runs_without_autograd() -> None:
    _, _, step = micro.build(combo("sdpa-math"), "cpu")
    assert not step().requires_grad
