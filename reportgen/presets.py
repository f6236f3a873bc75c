"""The model presets a suite may name, as data (no torch: suite validation reads the names,
``profile.modelspec`` resolves a name from the table)."""

from __future__ import annotations

from typing import Any

# The widths of two published checkpoints (their config.json, named in PRESET_FULL_LAYERS
# below), which the presets below take whole and with 4 of their layers.
_GRANITE_1B_A400M: dict[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 512, "num_attention_heads": 16, "num_key_value_heads": 8,
    "num_local_experts": 32, "num_experts_per_tok": 8, "vocab_size": 49155, "tie_word_embeddings": True,
    "embedding_multiplier": 12.0, "attention_multiplier": 0.015625, "logits_scaling": 6.0,
    "residual_multiplier": 0.22, "max_position_embeddings": 4096, "rope_theta": 10000.0}
_FALCON_H1_05B: dict[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 64, "mamba_d_ssm": 1536, "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_d_state": 128,
    "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 128,
    "vocab_size": 32784, "tie_word_embeddings": False, "max_position_embeddings": 16384}

# name -> (transformers model_type, config overrides). Everything not overridden keeps the
# config class default, which for these types is already the named checkpoint's shape.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "bert-base": ("bert", {}),
    "bert-large": ("bert", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                            "intermediate_size": 4096}),
    "gpt2": ("gpt2", {}),
    "gpt2-medium": ("gpt2", {"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    "t5-small": ("t5", {}),
    "t5-base": ("t5", {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_decoder_layers": 12,
                       "num_heads": 12, "d_kv": 64}),
    "llama-small": ("llama", {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                              "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 32000,
                              "head_dim": 64}),
    "llama-1b": ("llama", {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                           "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                           "head_dim": 64, "tie_word_embeddings": True, "rope_theta": 500000.0,
                           "max_position_embeddings": 131072, "bos_token_id": 128000,
                           "eos_token_id": 128001}),
    "llama-3-8b": ("llama", {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                             "head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 8192,
                             "bos_token_id": 128000, "eos_token_id": 128001}),
    # Today's architectures at their published widths, whole and with a few of their layers
    # (shrink layers, not widths: a CPU measures them at reference-like scale).
    # ibm-granite/granite-3.0-1b-a400m: 32 experts, 8 per token, 24 layers
    "granitemoe-1b-a400m": ("granitemoe", {**_GRANITE_1B_A400M, "num_hidden_layers": 24}),
    "granitemoe-1b-a400m-4l": ("granitemoe", {**_GRANITE_1B_A400M, "num_hidden_layers": 4}),
    # tiiuae/Falcon-H1-0.5B: attention 8/2 heads of 64 beside a Mamba-2 mixer of 24 heads of
    # 64, state 128, in every layer; 4 of its 36 (the whole model is the catalog's
    # falcon-h1-0.5b)
    "falcon-h1-0.5b-4l": ("falcon_h1", {**_FALCON_H1_05B, "num_hidden_layers": 4}),
    "mistral-7b": ("mistral", {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
                               "head_dim": 128}),
}


# Presets that keep some of their checkpoint's layers (at its widths): the checkpoint's own
# layer count (num_hidden_layers of its config.json, named above each preset), so a page
# says "4 of 24 layers" and never calls the preset the full-size model.
PRESET_FULL_LAYERS: dict[str, int] = {
    "granitemoe-1b-a400m-4l": 24,  # ibm-granite/granite-3.0-1b-a400m-base config.json
    "falcon-h1-0.5b-4l": 36,  # tiiuae/Falcon-H1-0.5B-Base config.json
}


def preset_names() -> tuple[str, ...]:
    """The preset names (any transformers model type, config.json path or Hub id also resolves)."""
    return tuple(PRESETS)
