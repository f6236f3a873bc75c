"""``decode-nocache`` on tiny models: it computes the very token ``decode`` computes (same
prefix, same new token, the whole sequence without a cache), and its inputs, FLOPs,
memory estimate, attribution and id follow."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reportgen.categories import CATEGORIES
from reportgen.errors import Skip
from reportgen.profile import building, flops, preflight
from reportgen.profile.measure import measure
from reportgen.suite import Combination
from reportgen.traffic import attention_activation_bytes
from reportgen.vocabulary import MODES

SEQ = 16


def combo(model: str, mode: str, impl: str = "eager", **kw: Any) -> SimpleNamespace:
    fields = {"model": model, "scale": "tiny", "mode": mode, "dtype": "fp32", "attn_implementation": impl,
              "batch_size": 1, "seq_len": SEQ, "device": "cpu"}
    fields.update(kw)
    return SimpleNamespace(**fields)


def _logits(model: str, mode: str, impl: str) -> tuple[torch.Tensor, dict[str, Any], dict[str, Any]]:
    built = building.build(combo(model, mode, impl), "cpu", seed=3)
    try:
        built.step.reset()
        out = built.step()
        return out.logits[:, -1].clone(), dict(built.step.inputs_info), dict(built.step.kwargs)  # type: ignore[attr-defined]
    finally:
        building.free(built)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_nocache_computes_the_token_decode_computes(model: str, impl: str) -> None:
    cached, cached_info, _ = _logits(model, "decode", impl)
    full, info, kwargs = _logits(model, "decode-nocache", impl)
    assert torch.allclose(cached, full, atol=1e-4, rtol=1e-4)
    assert cached_info["kv_len"] == SEQ and cached_info["tokens"] == 1
    assert info == {"seed": 3, "input_shape": [1, SEQ + 1], "tokens": SEQ + 1, "kv_len": None}
    assert kwargs["use_cache"] is False and kwargs["input_ids"].shape == (1, SEQ + 1)
    assert "past_key_values" not in kwargs and "cache" not in kwargs


def test_nocache_applies_to_causal_lms_only(tmp_path: Path) -> None:
    with pytest.raises(Skip, match="decode-nocache applies to causal LMs"):
        measure(combo("bert", "decode-nocache"), run_dir=tmp_path, combo_id="x", budget_s=0.1)


def test_nocache_end_to_end(tmp_path: Path) -> None:
    c = combo("gpt2", "decode-nocache")
    record = measure(c, run_dir=tmp_path, combo_id="nc", budget_s=0.2, seed=0, profile_iterations=2)
    assert record["inputs"]["tokens"] == SEQ + 1 and record["inputs"]["kv_len"] is None
    info = record["model"]
    layers, heads, hd, d = info["num_layers"], info["num_heads"], info["head_dim"], info["hidden_size"]
    fl = record["flops"]
    # the whole prefix and the new token attend to each other: (S+1)^2 scores per head
    assert fl["analytic"]["attention.core"] == layers * 4 * 1 * heads * (SEQ + 1) ** 2 * hd
    assert fl["analytic"]["head"] == 2 * 1 * d * info["vocab_size"]  # last position's logits only
    for category in ("attention.qkv", "attention.out", "mlp"):
        assert fl["counted"][category] == pytest.approx(fl["analytic"][category]), category
    assert record["memory"]["attention_activation_bytes"]["analytic"] == 1 * heads * (SEQ + 1) ** 2 * 4 * 2
    attribution = record["attribution"]
    assert attribution["headline_method"] == "hooks"
    assert attribution["categories"]["attention.core"]["ms"] > 0
    assert sum(attribution["categories"][k]["share"] for k in CATEGORIES) == pytest.approx(1.0)


def test_nocache_flops_against_decode_and_prefill() -> None:
    info = {"hidden_size": 64, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "num_layers": 2,
            "intermediate_size": 128, "vocab_size": 1000, "architecture": "decoder", "config": {}}
    cached = flops.analytic(info, combo("gpt2", "decode"))
    full = flops.analytic(info, combo("gpt2", "decode-nocache"))
    prefill_longer = flops.analytic(info, combo("gpt2", "prefill", seq_len=SEQ + 1))
    # recomputing is a prefill of the prefix and the new token; the cache saves all but one token's work
    assert full == prefill_longer
    assert full["mlp"] == (SEQ + 1) * cached["mlp"]
    assert full["attention.core"] == (SEQ + 1) * cached["attention.core"]
    assert full["head"] == cached["head"]


def test_nocache_memory_estimate_has_no_cache() -> None:
    cached = preflight.estimate(combo("llama-small", "decode", "sdpa"))
    full = preflight.estimate(combo("llama-small", "decode-nocache", "sdpa"))
    assert cached["parts"]["kv_cache"] > 0 and full["parts"]["kv_cache"] == 0
    eager = combo("llama-small", "decode-nocache", "eager")
    assert attention_activation_bytes({"num_heads": 4}, eager) == 4 * (SEQ + 1) ** 2 * 4 * 2


def test_nocache_is_a_mode_with_its_own_id() -> None:
    assert "decode-nocache" in MODES
    c = Combination("gpt2", "reference", "decode-nocache", "fp32", "sdpa", 1, 128, "cpu")
    assert c.id == "gpt2--decode-nocache--fp32--sdpa--b1--s128"
