"""Analytic FLOPs against torch.utils.flop_counter on tiny models, the inclusive ->
exclusive conversion (the peak table is tested in test_peaks.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from torch import nn

from reportgen.categories import CATEGORIES
from reportgen.profile import building, flops, modelspec
from reportgen.profile.structure import classify

_ATTN_IN_NAME = ("attention", "attn", "selfattention", "encdecattention")
_OUT_LEAVES = ("o_proj", "o", "out_proj", "c_proj", "dense")


def hand_categories(model: nn.Module) -> dict[str, str]:
    """A trivial stand-in for the categories of reportgen.profile.structure.derive, by module names of
    the few models tested here (the real one is structural)."""
    out: dict[str, str] = {}
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        in_attention = any(part in name.lower() for part in _ATTN_IN_NAME)
        if "Attention" in type(module).__name__:
            out[name] = "attention.core"
        elif isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
            if "pooler" in name or leaf == "lm_head":
                out[name] = "head"
            elif in_attention:
                out[name] = "attention.out" if leaf in _OUT_LEAVES else "attention.qkv"
            else:
                out[name] = "mlp"
    return out


def combo(model: str, mode: str = "forward", impl: str = "eager", b: int = 2, s: int = 12) -> SimpleNamespace:
    return SimpleNamespace(model=model, scale="tiny", mode=mode, dtype="fp32", attn_implementation=impl,
                           batch_size=b, seq_len=s, device="cpu")


def both(c: SimpleNamespace) -> tuple[dict[str, float], dict[str, float], list[str]]:
    built = building.build(c)
    analytic = flops.analytic(built.info, c, flops.analytic_hints(built.model, classify(built.model)))
    counted, notes = flops.counted(built.model, built.step, hand_categories(built.model), analytic=analytic)
    return analytic, counted, notes


@pytest.mark.parametrize(("model", "mode"), [
    ("llama", "forward"), ("llama", "prefill"), ("llama", "decode"),
    ("bert", "forward"), ("gpt2", "forward"), ("t5", "forward"), ("bart", "forward"), ("opt", "decode"),
])
def test_analytic_matches_counted_with_eager(model: str, mode: str) -> None:
    analytic, counted, notes = both(combo(model, mode))
    for category in ("attention.qkv", "attention.core", "attention.out", "mlp", "head"):
        assert counted[category] == pytest.approx(analytic[category]), category
        assert analytic[category] > 0
    assert sum(counted.values()) == pytest.approx(sum(analytic.values()))
    assert notes == []


def test_sdpa_core_missing_from_counter_is_noted() -> None:
    analytic, counted, notes = both(combo("llama", impl="sdpa"))
    assert counted["mlp"] == analytic["mlp"] and counted["attention.qkv"] == analytic["attention.qkv"]
    assert counted["attention.core"] == 0 < analytic["attention.core"]
    assert any("scaled_dot_product" in n for n in notes)
    assert any("attention.core" in n for n in notes)


def test_analytic_llama_numbers() -> None:
    info = {"architecture": "decoder", "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
            "num_layers": 2, "intermediate_size": 128, "vocab_size": 1024, "config": {"hidden_act": "silu"}}
    b, s = 2, 8
    out = flops.analytic(info, SimpleNamespace(batch_size=b, seq_len=s, mode="forward"))
    t = b * s
    assert out["attention.qkv"] == 2 * (2 * t * 64 * (64 + 2 * 32))
    assert out["attention.core"] == 2 * (4 * b * 4 * s * s * 16)
    assert out["attention.out"] == 2 * (2 * t * 64 * 64)
    assert out["mlp"] == 2 * (2 * t * 64 * 128 * 3)  # gated: silu read from the config
    assert out["head"] == 2 * t * 64 * 1024
    assert out["embeddings"] == out["norm"] == 0
    assert set(out) == set(CATEGORIES)
    decode = flops.analytic(info, SimpleNamespace(batch_size=b, seq_len=s, mode="decode"))
    assert decode["attention.core"] == 2 * (4 * b * 4 * 1 * (s + 1) * 16)
    assert decode["head"] == 2 * b * 64 * 1024


def test_analytic_reference_llama3_is_two_flops_per_weight() -> None:
    # with one token the score matrix is negligible: FLOPs ~ 2 x non-embedding weights
    config = modelspec.resolve("llama-3-8b").make_config()
    info = {"architecture": "decoder", "hidden_size": config.hidden_size, "num_heads": config.num_attention_heads,
            "num_kv_heads": config.num_key_value_heads, "head_dim": config.head_dim,
            "num_layers": config.num_hidden_layers, "intermediate_size": config.intermediate_size,
            "vocab_size": config.vocab_size, "config": {"hidden_act": "silu"}}
    out = flops.analytic(info, SimpleNamespace(batch_size=1, seq_len=1, mode="forward"))
    non_embedding = 8_030_261_248 - config.vocab_size * config.hidden_size - 65 * config.hidden_size  # norms
    assert sum(out.values()) - out["attention.core"] == pytest.approx(2 * non_embedding, rel=1e-6)


def test_exclusive_from_inclusive() -> None:
    inclusive = {"": 100.0, "a": 60.0, "a.b": 25.0, "a.b.c": 5.0, "a.x.y": 10.0, "d": 30.0}
    exclusive, clamped = flops._exclusive(inclusive)
    assert exclusive == {"": 10.0, "a": 25.0, "a.b": 20.0, "a.b.c": 5.0, "a.x.y": 10.0, "d": 30.0}
    assert not clamped
    assert sum(exclusive.values()) == inclusive[""]
    # a module shared between parents is named once, under one of them; the other can go
    # negative, which is clamped and flagged
    exclusive, clamped = flops._exclusive({"": 10.0, "p": 5.0, "p.q": 8.0})
    assert clamped and exclusive["p"] == 0.0


def test_category_walks_up_to_nearest_mapped_ancestor() -> None:
    cats = {"layers.0.mlp": "mlp", "layers.0.attn": "attention.core"}
    assert flops._category_of("layers.0.mlp.up.inner", cats) == "mlp"
    assert flops._category_of("layers.0.attn", cats) == "attention.core"
    assert flops._category_of("embed", cats) == "other"
    assert flops._category_of("", {"": "head"}) == "head"


def test_missing_dims_give_zeros() -> None:
    out: dict[str, Any] = flops.analytic({"architecture": "encoder"}, SimpleNamespace(batch_size=1, seq_len=4))
    assert sum(out.values()) == 0


def test_analytic_flops_of_experts_and_mixers_come_from_the_structure() -> None:
    from types import SimpleNamespace

    from reportgen.profile import building, flops

    def combo(model: str) -> SimpleNamespace:
        return SimpleNamespace(model=model, scale="tiny", mode="forward", dtype="fp32",
                               attn_implementation="eager", batch_size=1, seq_len=16, device="cpu")

    built = building.build(combo("mixtral"))
    config = built.model.config
    hints = flops.analytic_hints(built.model, classify(built.model))
    out = flops.analytic(built.info, combo("mixtral"), hints)
    # per token and layer: top-k experts of gate, up and down projections (hidden x ff each)
    per_expert = 3 * config.hidden_size * config.intermediate_size
    expected = 2 * 16 * config.num_experts_per_tok * per_expert * config.num_hidden_layers
    assert out["moe.experts"] == expected
    assert out["moe.router"] == 2 * 16 * config.hidden_size * config.num_local_experts * config.num_hidden_layers
    assert out["mlp"] == 0 and out["mixer"] == 0
    building.free(built)

    built = building.build(combo("mamba"))
    out = flops.analytic(built.info, combo("mamba"), flops.analytic_hints(built.model, classify(built.model)))
    assert out["mixer"] > 0 and out["mlp"] == 0
    assert out["attention.core"] == 0  # no softmax attention in a Mamba
    building.free(built)
