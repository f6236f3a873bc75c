"""Analytic bytes per category (reportgen.traffic) on configs small enough to count by
hand, and the read-back that gives old records their bytes. Pure Python: no torch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from reportgen import traffic

# One encoder layer: d = 4, two heads of 2, MLP width 8 (gelu: not gated), vocab 10.
ENCODER: dict[str, Any] = {"architecture": "encoder", "hidden_size": 4, "num_heads": 2,
                           "num_kv_heads": 2, "head_dim": 2, "num_layers": 1,
                           "intermediate_size": 8, "vocab_size": 10,
                           "config": {"hidden_act": "gelu"}}


def combo(attn: str = "eager", mode: str = "forward", dtype: str = "fp32", b: int = 1,
          s: int = 3) -> SimpleNamespace:
    return SimpleNamespace(mode=mode, dtype=dtype, attn_implementation=attn, batch_size=b,
                           seq_len=s, compile="none")


def test_one_layer_encoder_by_hand() -> None:
    out = traffic.analytic_bytes(ENCODER, combo())
    parts = out["analytic_bytes_parts"]
    # tokens t = 3; q is 2 x 2 = 4 wide, k and v 4 each. q/k/v weights 4 x 12 = 48
    # elements; the input 3 x 4 = 12 read; q, k, v 3 x 12 = 36 written
    assert parts["attention.qkv"] == {"weights": 192, "activations_read": 48,
                                      "activations_written": 144, "scores": 0,
                                      "kv_cache_read": 0, "kv_cache_written": 0}
    # q (12) and k, v (24) read, the output (12) written; eager: the 1 x 2 x 3 x 3 scores
    # (18 elements) move 4 times = 72
    assert parts["attention.core"]["activations_read"] == 36 * 4
    assert parts["attention.core"]["activations_written"] == 12 * 4
    assert parts["attention.core"]["scores"] == 72 * 4
    # out projection 4 x 4 = 16 weights, 12 read, 12 written
    assert out["analytic_bytes"]["attention.out"] == (16 + 12 + 12) * 4
    # MLP: 2 x 4 x 8 = 64 weights; read 12 + 2 x 24, written 2 x 24 + 12
    assert out["analytic_bytes"]["mlp"] == (64 + 60 + 60) * 4
    # embeddings: 12 gathered + 12 written; norms: 2 per layer + 1, each 12 read + 12
    # written; residual adds: 2, each 24 read + 12 written; no pooler: no head
    assert out["analytic_bytes"]["embeddings"] == 24 * 4
    assert out["analytic_bytes"]["norm"] == 3 * 24 * 4
    assert out["analytic_bytes"]["other"] == 2 * 36 * 4
    assert out["analytic_bytes"]["head"] == 0
    # 96 + 120 + 40 + 184 + 24 + 72 + 72 elements
    assert out["total_analytic_bytes"] == 2432
    assert out["bytes_per_element"] == 4
    assert "head" not in parts  # only categories that move something
    assert traffic.NOTE_SCORES in out["notes"]


def test_fused_attention_keeps_its_scores_on_chip_and_half_precision_halves() -> None:
    eager = traffic.analytic_bytes(ENCODER, combo("eager"))["analytic_bytes"]
    fused = traffic.analytic_bytes(ENCODER, combo("sdpa"))
    assert fused["analytic_bytes"]["attention.core"] == 48 * 4
    assert eager["attention.core"] - fused["analytic_bytes"]["attention.core"] == 72 * 4
    assert traffic.NOTE_FUSED in fused["notes"]
    half = traffic.analytic_bytes(ENCODER, combo("eager", dtype="bf16"))
    assert half["bytes_per_element"] == 2
    assert half["total_analytic_bytes"] == 2432 / 2
    # the in-place softmax saves memory, not traffic
    assert (traffic.analytic_bytes(ENCODER, combo("naive-inplace"))["analytic_bytes"]["attention.core"]
            == eager["attention.core"])


def test_scores_grow_with_the_square_of_the_length() -> None:
    def scores(s: int) -> float:
        return traffic.analytic_bytes(ENCODER, combo(s=s))["analytic_bytes_parts"]["attention.core"]["scores"]
    assert scores(6) == 4 * scores(3)


DECODER: dict[str, Any] = {"architecture": "decoder", "hidden_size": 4, "num_heads": 2,
                           "num_kv_heads": 1, "head_dim": 2, "num_layers": 1,
                           "intermediate_size": 8, "vocab_size": 10,
                           "config": {"hidden_act": "silu"}}


def test_decode_reads_the_kv_cache_and_the_whole_head() -> None:
    out = traffic.analytic_bytes(DECODER, combo("sdpa", mode="decode", b=2, s=3))
    parts = out["analytic_bytes_parts"]
    # 2 new tokens; one KV head of 2: k and v are 4 wide. Cache of 3 + the new position.
    assert parts["attention.qkv"] == {"weights": 4 * (4 + 4) * 4, "activations_read": 2 * 4 * 4,
                                      "activations_written": 2 * 8 * 4, "scores": 0,
                                      "kv_cache_read": 0, "kv_cache_written": 0}
    core = parts["attention.core"]
    assert core["kv_cache_read"] == 2 * 4 * 4 * 4  # batch x (3 + 1) positions x 4 x 4 bytes
    assert core["kv_cache_written"] == 2 * 4 * 4
    assert core["activations_read"] == 2 * 4 * 4 and core["activations_written"] == 2 * 4 * 4
    # gated (silu) MLP: 3 x 4 x 8 weights; 4 hidden tensors of 2 x 8 written and read
    assert out["analytic_bytes"]["mlp"] == (96 + (8 + 4 * 16) + (4 * 16 + 8)) * 4
    # the LM head reads its whole 10 x 4 matrix for 2 tokens and writes 2 x 10 logits
    assert parts["head"] == {"weights": 160, "activations_read": 32, "activations_written": 80,
                             "scores": 0, "kv_cache_read": 0, "kv_cache_written": 0}
    assert traffic.NOTE_DECODE in out["notes"]


def test_prefill_logits_of_the_last_position_only() -> None:
    prefill = traffic.analytic_bytes(DECODER, combo(mode="prefill", b=2, s=3))
    forward = traffic.analytic_bytes(DECODER, combo(mode="forward", b=2, s=3))
    assert prefill["analytic_bytes_parts"]["head"]["activations_written"] == 2 * 10 * 4
    assert forward["analytic_bytes_parts"]["head"]["activations_written"] == 6 * 10 * 4


def test_attention_micro_is_the_core_alone() -> None:
    micro = {**ENCODER, "architecture": "attention"}
    out = traffic.analytic_bytes(micro, combo("naive"))
    assert {c for c, v in out["analytic_bytes"].items() if v} == {"attention.core"}
    assert out["total_analytic_bytes"] == (36 + 12 + 72) * 4


def test_encoder_decoder_counts_three_attentions_and_missing_dims_nothing() -> None:
    t5 = {**ENCODER, "architecture": "encoder-decoder", "config": {"num_decoder_layers": 1}}
    enc = traffic.analytic_bytes(ENCODER, combo())["analytic_bytes"]
    both = traffic.analytic_bytes(t5, combo())["analytic_bytes"]
    assert both["attention.qkv"] == 3 * enc["attention.qkv"]
    assert both["mlp"] == 2 * enc["mlp"]
    empty = traffic.analytic_bytes({"architecture": "encoder"}, combo())
    assert empty["total_analytic_bytes"] == 0


def _record(info: dict[str, Any], c: SimpleNamespace, analytic: dict[str, float]) -> dict[str, Any]:
    return {"model": info, "combination": dict(vars(c)), "flops": {"analytic": analytic}}


def test_old_records_get_their_bytes_recomputed_with_the_structure_read_back() -> None:
    # a fused gate/up MLP counted from the structure: 3 x 4 x 8 weight elements although
    # the config's activation (gelu) reads as ungated; its FLOPs say so: 2 x t x W
    c = combo()
    mlp_flops = 2 * 3 * 96
    rec = _record(ENCODER, c, {"mlp": float(mlp_flops), "head": 2.0 * 1 * 4 * 4})
    got = traffic.record_bytes(rec)
    assert got is not None and got["source"] == "recomputed"
    assert got["analytic_bytes_parts"]["mlp"]["weights"] == 96 * 4
    assert got["analytic_bytes_parts"]["head"]["weights"] == 16 * 4  # the pooler, from its FLOPs
    want = traffic.analytic_bytes(ENCODER, c, mlp_weight_elements=96, pooler=True)
    assert got["analytic_bytes"] == want["analytic_bytes"]
    stored = {**rec, "flops": {**rec["flops"], **want}}
    again = traffic.record_bytes(stored)
    assert again is not None and again["source"] == "recorded"
    assert again["analytic_bytes"] == want["analytic_bytes"]
    assert traffic.record_bytes({"combination": dict(vars(c))}) is None


@pytest.mark.parametrize(("arch", "mode", "t", "lq", "lk", "head"), [
    ("decoder", "decode", 2, 1, 9, 2), ("decoder", "prefill", 16, 8, 8, 2),
    ("encoder", "forward", 16, 8, 8, 16), ("decoder", "forward", 16, 8, 8, 16),
])
def test_shapes(arch: str, mode: str, t: int, lq: int, lk: int, head: int) -> None:
    assert traffic.shapes(arch, mode, 2, 8) == {"t": t, "lq": lq, "lk": lk, "head_tokens": head}
