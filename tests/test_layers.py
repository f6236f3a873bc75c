"""Layer kinds, the choice of layers ``--layers N`` measures and the configs cut to them:
small configs of several families, built on the meta device (no memory, no weights)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import CONFIG_MAPPING

from reportgen.errors import UserError
from reportgen.profile import autoclass, layers

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "vocab_size": 256}


def meta(config: Any) -> torch.nn.Module:
    with torch.device("meta"):
        return autoclass.auto_class(config, autoclass.architecture(config)).from_config(config)


def config_of(model_type: str, **overrides: Any) -> Any:
    return CONFIG_MAPPING[model_type](**overrides)


def kinds_of(model_type: str, **overrides: Any) -> list[str]:
    return layers.layer_kinds(meta(config_of(model_type, **overrides)))


# (model type, overrides, the kinds expected layer by layer)
FAMILIES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("llama", {**SMALL, "num_hidden_layers": 4}, ["attention + mlp"] * 4),
    ("gemma3_text", {**SMALL, "num_hidden_layers": 8, "sliding_window": 32},
     ["sliding attention + mlp"] * 5 + ["attention + mlp"] + ["sliding attention + mlp"] * 2),
    ("qwen3_moe", {**SMALL, "num_hidden_layers": 6, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "mlp_only_layers": [0, 3]},
     ["attention + mlp", "attention + moe", "attention + moe"] * 2),
    ("qwen3_moe", {**SMALL, "num_hidden_layers": 6, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "decoder_sparse_step": 3},
     ["attention + mlp", "attention + mlp", "attention + moe"] * 2),
    ("deepseek_v3", {**SMALL, "num_hidden_layers": 6, "first_k_dense_replace": 2, "n_routed_experts": 4,
                     "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "moe_intermediate_size": 32,
                     "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                     "v_head_dim": 16},
     ["latent attention + mlp"] * 2 + ["latent attention + moe"] * 4),
    ("nemotron_h", {**SMALL, "layers_block_type": ["mamba", "mlp", "mamba", "attention", "mamba", "moe"],
                    "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 1,
                    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                    "moe_shared_expert_intermediate_size": 32},
     ["mamba", "mlp", "mamba", "attention", "mamba", "moe"]),
    ("qwen3_next", {**SMALL, "num_hidden_layers": 8, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                    "linear_value_head_dim": 16},
     (["linear attention + moe"] * 3 + ["attention + moe"]) * 2),
    # a lightning (linear) attention held in a module named for attention, told by the
    # declared layer type
    ("minimax", {**SMALL, "num_hidden_layers": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "layer_types": ["linear_attention", "full_attention"] * 2},
     ["linear attention + moe", "attention + moe"] * 2),
    ("jamba", {**SMALL, "num_hidden_layers": 8, "num_experts": 4, "num_experts_per_tok": 2,
               "mamba_d_state": 8, "mamba_dt_rank": 8, "use_mamba_kernels": False},
     ["mamba + mlp", "mamba + moe", "mamba + mlp", "mamba + moe", "attention + mlp", "mamba + moe",
      "mamba + mlp", "mamba + moe"]),
    ("falcon_h1", {**SMALL, "num_hidden_layers": 3, "mamba_d_ssm": 128, "mamba_n_heads": 4, "mamba_d_head": 32,
                   "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_chunk_size": 16},
     ["attention + mamba + mlp"] * 3),
    ("gpt_neo", {"hidden_size": 64, "num_heads": 4, "num_layers": 4, "vocab_size": 256,
                 "attention_types": [[["global", "local"], 2]], "window_size": 16},
     ["attention + mlp", "sliding attention + mlp"] * 2),
]


def family(name: str) -> tuple[str, dict[str, Any], list[str]]:
    """The layer-kind table's entry for one model type (by name: entries are added in any order)."""
    return next(entry for entry in FAMILIES if entry[0] == name)


@pytest.mark.parametrize(("model_type", "overrides", "expected"), FAMILIES,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(FAMILIES)])
def test_layer_kinds_of_each_family(model_type: str, overrides: dict[str, Any], expected: list[str]) -> None:
    assert kinds_of(model_type, **overrides) == expected


@pytest.mark.parametrize(("model_type", "overrides", "expected"), FAMILIES,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(FAMILIES)])
def test_every_kind_survives_the_smallest_reduction(model_type: str, overrides: dict[str, Any],
                                                    expected: list[str]) -> None:
    """The fewest layers that hold every kind: the cut config builds with exactly the
    chosen layers, kind for kind (reduce_depth checks it, and so does this test)."""
    config = config_of(model_type, **overrides)
    n = len(set(expected))
    depth = layers.reduce_depth(config, n, meta)
    assert depth.kinds == tuple(expected)
    assert layers.layer_count(config) == n
    reduced = layers.layer_kinds(meta(config))
    assert sorted(reduced) == sorted(set(expected))
    assert reduced == [expected[i] for i in depth.chosen]
    assert depth.measured == {kind: 1 for kind in dict.fromkeys(expected)}
    assert depth.full == layers.count_kinds(expected)


def test_reduction_keeps_a_periodic_pattern() -> None:
    """Jamba places attention and experts by period and offset: layers 0, 1 and 4 of
    eight keep their kinds only with both refitted."""
    _, overrides, expected = family("jamba")
    config = config_of("jamba", **overrides)
    depth = layers.reduce_depth(config, 5, meta)
    assert layers.layer_kinds(meta(config)) == [expected[i] for i in depth.chosen]


def test_deepseek_dense_prefix_counts_the_kept_dense_layers() -> None:
    config = config_of("deepseek_v3", **family("deepseek_v3")[1])
    depth = layers.reduce_depth(config, 4, meta)
    assert depth.measured == {"latent attention + mlp": 1, "latent attention + moe": 3}
    assert config.first_k_dense_replace == 1 and config.num_hidden_layers == 4


def test_sparse_step_becomes_a_list_of_dense_layers() -> None:
    config = config_of("qwen3_moe", **family("qwen3_moe")[1])
    depth = layers.reduce_depth(config, 3, meta)
    assert config.decoder_sparse_step == 1
    assert layers.layer_kinds(meta(config)) == [family("qwen3_moe")[2][i] for i in depth.chosen]


def test_gemma3_layer_types_are_cut_with_the_layers() -> None:
    config = config_of("gemma3_text", **family("gemma3_text")[1])
    depth = layers.reduce_depth(config, 4, meta)
    assert depth.chosen == (0, 2, 4, 5)
    assert config.layer_types == ["sliding_attention"] * 3 + ["full_attention"]


def test_per_layer_flags_are_cut_not_renumbered() -> None:
    """Llama 4 keeps one 0/1 flag per layer (no_rope_layers) beside a list of its expert
    layers' indices (moe_layers): the flags are cut to the kept layers, the indices renumbered."""
    config = config_of("llama4_text", **SMALL, num_hidden_layers=8, num_local_experts=4, intermediate_size_mlp=128)
    full = layers.layer_kinds(meta(config))
    assert full == (["chunked attention + moe"] * 3 + ["attention + moe"]) * 2
    depth = layers.reduce_depth(config, 3, meta)
    assert len(config.no_rope_layers) == 3 and config.moe_layers == [0, 1, 2]
    assert layers.layer_kinds(meta(config)) == [full[i] for i in depth.chosen]


def test_window_alone_makes_a_kind() -> None:
    """Same classes and shapes, different windows: different kinds."""
    kinds = kinds_of("qwen2", **SMALL, num_hidden_layers=4, use_sliding_window=True, sliding_window=16,
                     max_window_layers=2)
    assert kinds == ["attention + mlp"] * 2 + ["sliding attention + mlp"] * 2


def test_choose_layers_keeps_proportions_and_spreads() -> None:
    kinds = (["sliding"] * 5 + ["global"]) * 8  # 48 layers, 40:8
    chosen = layers.choose_layers(kinds, 6)
    picked = [kinds[i] for i in chosen]
    assert picked.count("sliding") == 5 and picked.count("global") == 1
    assert chosen[0] == 0 and chosen[-1] > 24  # spread over the depth, not the first six
    assert layers.choose_layers(kinds, 48) == list(range(48))
    assert [kinds[i] for i in layers.choose_layers(kinds, 12)].count("global") == 2


@pytest.mark.parametrize(("n", "words"), [
    (0, "--layers 0: no layers to measure; choose between 2 and 6"),
    (1, "--layers 1: the model has 2 kinds of layer (a, b), one of each is measured; choose between 2 and 6"),
    (7, "--layers 7: the model has 6 layers; choose between 2 and 6"),
])
def test_choose_layers_refuses_with_the_smallest_valid_count(n: int, words: str) -> None:
    with pytest.raises(UserError) as err:
        layers.choose_layers(["a", "a", "b", "a", "a", "b"], n)
    assert str(err.value) == words and "\n" not in str(err.value)


def test_tiny_depth_is_unchanged() -> None:
    """--scale tiny keeps the first layer of each kind a per-layer list names, through
    the same cutting."""
    config = config_of("gemma3_text", **{**family("gemma3_text")[1], "num_hidden_layers": 12})
    layers.tiny_layers(config, 12)
    assert config.num_hidden_layers == 2 and config.layer_types == ["sliding_attention", "full_attention"]
