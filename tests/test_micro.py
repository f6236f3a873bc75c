"""The attention-micro model: every runnable variant computes the same attention."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from reportgen.errors import Skip
from reportgen.profile import micro, models


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
    assert isinstance(attn.qkv, torch.nn.Linear) and attn.qkv.weight.dim() == 2
    assert isinstance(attn.out, torch.nn.Linear) and attn.out.weight.dim() == 2
    assert attn.qkv.out_features == 3 * attn.qkv.in_features
    # No module but the attention container may look like a head or an attention module.
    names = [type(m).__name__ for m in model.modules()]
    assert sum("Attention" in n for n in names) == 1
    assert not any(marker in n for n in names for marker in ("Head", "Pooler", "Prediction", "Classifier"))


def test_profiler_structure_sees_attention_projections() -> None:
    from reportgen.profile.structure import classify

    roles = classify(micro.build(combo("naive"), "cpu")[0])
    assert roles["attn"].category == "attention.core"
    assert roles["attn.qkv"].category == "attention.qkv"
    assert roles["attn.qkv"].container == roles["attn.out"].container == "attn"


def test_info_and_inputs_info_have_the_model_keys() -> None:
    module, info, step = micro.build(combo("naive-inplace"), "cpu")
    assert info["name"] == "attention-micro" and info["model_type"] == "attention-micro"
    assert info["parameters"] == sum(p.numel() for p in module.parameters())
    assert info["class"] == "MicroModel"
    assert info["num_layers"] == 1 and info["intermediate_size"] is None
    assert info["vocab_size"] is None
    assert info["hidden_size"] == info["num_heads"] * info["head_dim"]
    assert step.inputs_info == {"seed": 0, "input_shape": [2, 24, micro.HIDDEN_SIZE],
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
    assert got.shape == (2, 24, micro.HIDDEN_SIZE)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_masking_is_causal() -> None:
    _, _, step = micro.build(combo("naive", batch_size=1, seq_len=8), "cpu")
    before = step().clone()
    step.hidden[0, -1] += 1.0  # the last position may not change any earlier output
    after = step()
    torch.testing.assert_close(after[0, :-1], before[0, :-1])
    assert not torch.allclose(after[0, -1], before[0, -1])


def test_seeded_inputs_are_random_and_reproducible() -> None:
    _, _, a = micro.build(combo("naive"), "cpu")
    _, _, b = micro.build(combo("naive"), "cpu")
    assert torch.equal(a.hidden, b.hidden)
    assert a.hidden.std() > 0.5
    torch.testing.assert_close(a(), b())
    _, _, c = micro.build(combo("naive"), "cpu", seed=1)
    assert c.inputs_info["seed"] == 1 and not torch.equal(a.hidden, c.hidden)


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
        assert step().shape == (2, 24, micro.HIDDEN_SIZE)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_reduced_precision_dtypes(dtype: str) -> None:
    module, _, step = micro.build(combo("naive-inplace", dtype=dtype), "cpu")
    assert step.hidden.dtype == module.attn.qkv.weight.dtype == models.TORCH_DTYPES[dtype]
    assert torch.isfinite(step().float()).all()


def test_unknown_variant_and_mode_skip() -> None:
    with pytest.raises(Skip, match="no variant"):
        micro.build(combo("eager"), "cpu")
    with pytest.raises(Skip, match="forward"):
        micro.build(combo("naive", mode="generate"), "cpu")


def test_step_runs_without_autograd() -> None:
    _, _, step = micro.build(combo("sdpa-math"), "cpu")
    assert not step().requires_grad
