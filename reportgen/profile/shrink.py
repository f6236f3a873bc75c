"""``--scale tiny``: any transformers config shrunk in place to a tiny one of the same
architecture, through the standard attribute names and their common aliases (no model has
code of its own), and the tiny sizes themselves."""

from __future__ import annotations

import copy
from typing import Any

from reportgen.profile.experts import EXPERT_NAMES as _EXPERT_NAMES
from reportgen.profile.layers import LAYER_NAMES as _LAYER_NAMES
from reportgen.profile.layers import first as _first
from reportgen.profile.layers import get as _get
from reportgen.profile.layers import has as _has
from reportgen.profile.layers import is_int as _int
from reportgen.profile.layers import set_ as _set
from reportgen.profile.layers import tiny_layers as _shrink_layers

# --scale tiny: attribute names (canonical or transformers aliases) -> tiny value. Set only
# where the config has the attribute, so no model needs code of its own.
TINY_HIDDEN = 64
TINY_HEADS = 4
TINY_KV_HEADS = 2
TINY_FF = 128
TINY_HEAD_DIM = TINY_HIDDEN // TINY_HEADS
TINY_VOCAB = 1024
HIDDEN_NAMES = ("hidden_size", "d_model", "n_embd", "embed_dim", "word_embed_proj_dim", "embedding_size",
                 "embedding_dim")
HEAD_NAMES = ("num_attention_heads", "encoder_attention_heads", "decoder_attention_heads", "n_head",
               "num_heads")
KV_HEAD_NAMES = ("num_key_value_heads", "num_kv_heads")
FF_NAMES = ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim")
HEAD_DIM_NAMES = ("d_kv", "head_dim")
_POSITION_NAMES = ("max_position_embeddings", "n_positions", "n_ctx")
# Mixtures of experts keep several experts and more than one per token, so routing runs.
TINY_EXPERTS = 4
TINY_TOP_K = 2
# zero-compute (identity) experts the router chooses among beside the routed ones
_ZERO_EXPERT_NAMES = ("zero_expert_num",)
TOP_K_NAMES = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k")
# group-limited routing (experts in groups, top groups first): one group of all experts
_EXPERT_GROUP_NAMES = ("n_group", "topk_group", "num_expert_group")
# latent attention (MLA): the compressed ranks and the rope/no-rope split of the head
_LATENT = {"kv_lora_rank": 32, "q_lora_rank": 32, "o_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
           "v_head_dim": TINY_HEAD_DIM, "qk_head_dim": 16}
# state-space and linear-attention mixers: state, rank and width of their inner parts
_SSM_STATE_NAMES = ("state_size", "ssm_state_size", "mamba_d_state", "d_state")
_SSM_RANK_NAMES = ("time_step_rank", "mamba_dt_rank", "adapter_rank")
_SSM_CHUNK_NAMES = ("chunk_size", "mamba_chunk_size")
_SSM_EXPAND_NAMES = ("expand", "mamba_expand")
# (heads, head width) of a Mamba-2 style mixer: heads x width = expand x hidden
_SSM_HEAD_PAIRS = (("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim"),
                   ("n_mamba_heads", "mamba_headdim"))
_SSM_GROUP_NAMES = ("n_groups", "mamba_n_groups")
# a sparse attention's indexer: its heads, their width and the positions it keeps
_INDEXER = {"index_n_heads": TINY_HEADS, "index_head_dim": TINY_HEAD_DIM, "index_topk": 16}
_LINEAR_ATTENTION = {"linear_num_heads": TINY_HEADS, "linear_head_dim": TINY_HEAD_DIM,
                     "linear_num_key_heads": TINY_KV_HEADS, "linear_num_value_heads": TINY_HEADS,
                     "linear_key_head_dim": TINY_HEAD_DIM, "linear_value_head_dim": TINY_HEAD_DIM}
# widths that equal the model's own at reference (an inner attention or recurrence width)
_INNER_WIDTH_NAMES = ("attention_hidden_size", "lru_width", "mamba_d_ssm")
# a width another part of the model reads this part's input at (besides ``hidden_size_*``)
_OTHER_WIDTH_NAMES = ("cross_attention_hidden_size",)


def _shrink_experts(config: Any, dense_prefix: bool = True) -> None:
    """Several experts, more than one per token, one routing group, one leading dense layer."""
    for name in (*_EXPERT_NAMES, *_ZERO_EXPERT_NAMES):
        value = _get(config, name) if _has(config, name) else None
        if _int(value) and value > TINY_EXPERTS:
            _set(config, name, TINY_EXPERTS)
    has_experts = any(_int(_get(config, name)) for name in _EXPERT_NAMES if _has(config, name))
    for name in TOP_K_NAMES:
        value = _get(config, name) if _has(config, name) else None
        if (_int(value) and value > TINY_TOP_K) or (value is None and has_experts):
            _set(config, name, TINY_TOP_K)  # (a config that leaves it unset cannot route)
    # the leading dense layers of a model whose other layers are experts: one is kept
    for name in ("first_k_dense_replace", "first_k_dense") if dense_prefix else ():
        value = _get(config, name) if _has(config, name) else None
        if _int(value) and value > 1:
            _set(config, name, 1)
    for name in _EXPERT_GROUP_NAMES:
        value = _get(config, name) if _has(config, name) else None
        if _int(value) and value > 1:
            _set(config, name, 1)


def _shrink_mixtures(config: Any, old_hidden: Any, dense_prefix: bool = True) -> None:
    """Experts, routing, latent attention and the inner widths of state-space and
    linear-attention mixers, by their standard names."""
    for name, value in list(vars(config).items()):
        if name.endswith(("intermediate_size", "ffn_hidden_size")) and _int(value) and value > TINY_FF:
            setattr(config, name, TINY_FF)  # expert, shared-expert and dense-layer widths
        elif ((name.startswith("hidden_size_") or name in _OTHER_WIDTH_NAMES) and _int(value)
              and value > TINY_HIDDEN):
            # another part's width (a global model's, the encoder's a decoder attends to):
            # the same multiple of this part's width as at reference
            setattr(config, name, _same_multiple(value, old_hidden))
    _shrink_experts(config, dense_prefix)
    if _has(config, "qk_rope_head_dim"):
        for name, value in _LATENT.items():
            if _int(_get(config, name)):
                _set(config, name, value)
        if _int(_get(config, "head_dim")):
            _set(config, "head_dim", _LATENT["qk_rope_head_dim"])  # MLA's rotary width
    hidden = _first(config, HIDDEN_NAMES)
    expand = _first(config, _SSM_EXPAND_NAMES)
    inner = int(expand * hidden) if isinstance(expand, (int, float)) and _int(hidden) else None
    for names, value in ((_SSM_STATE_NAMES, 16), (_SSM_RANK_NAMES, 8), (_SSM_CHUNK_NAMES, 32)):
        for name in names:
            if _int(_get(config, name)) and _get(config, name) > value:
                _set(config, name, value)
    for name in _SSM_GROUP_NAMES:
        if _int(_get(config, name)):
            _set(config, name, 1)
    for heads, width in _SSM_HEAD_PAIRS:
        if _has(config, heads) and inner:
            _set(config, heads, TINY_HEADS)
            _set(config, width, inner // TINY_HEADS)
    if _has(config, "mamba_d_ssm") and inner:
        _set(config, "mamba_d_ssm", inner)
    # Mamba-2's own names: num_heads x head_dim = expand x hidden
    if _has(config, "n_groups") and _has(config, "head_dim") and inner and _has(config, "num_heads"):
        _set(config, "num_heads", TINY_HEADS)
        _set(config, "head_dim", inner // TINY_HEADS)
    for name, value in _LINEAR_ATTENTION.items():
        if _int(_get(config, name)):
            _set(config, name, value)
    for name, value in _INDEXER.items():
        if _int(_get(config, name)) and _get(config, name) > value:
            _set(config, name, value)
    for name in _INNER_WIDTH_NAMES:
        value = _get(config, name)
        if _int(value) and name != "mamba_d_ssm":
            # (Zamba-2's attention reads the hidden state beside the embeddings: twice the width)
            _set(config, name, _same_multiple(value, old_hidden))


def _same_multiple(value: int, old_hidden: Any) -> int:
    """A width tied to the model's: the same whole multiple of the tiny width as it was of
    the reference width (at least one)."""
    if not _int(old_hidden) or not old_hidden:
        return TINY_HIDDEN
    return max(1, round(value / old_hidden)) * TINY_HIDDEN


def shrink_config(config: Any, *, min_positions: int = 0, widths: bool = True, depth: bool = True) -> Any:
    """Shrink any transformers config in place to a tiny one of the same architecture,
    through the standard attribute names and their common aliases; a composite config
    (a language model with a vision or audio encoder) shrinks each of its parts. ``depth``
    False keeps the layers (``--layers`` chose them)."""
    _shrink_one(config, min_positions=min_positions, widths=widths, depth=depth)
    parts = {}
    for name in getattr(config, "sub_configs", None) or {}:
        sub = _get(config, name)
        if sub is not None and sub is not config and hasattr(sub, "to_dict"):
            shrink_config(sub, min_positions=min_positions, widths=widths, depth=depth)
            parts[name] = sub
    if widths:
        _tie_parts(parts)
    return config


def _tie_parts(parts: dict[str, Any]) -> None:
    """A part that names another's width (``hidden_size_global`` beside ``global_config``)
    gets that width: the named part takes it, with its head width where that was its width
    over its heads (BLT's local encoder feeds the global model twice its own width)."""
    for part in parts.values():
        for name, value in list(vars(part).items()):
            other = parts.get(name.removeprefix("hidden_size_") + "_config") if name.startswith(
                "hidden_size_") else None
            if other is None or not _int(value) or not _has(other, "hidden_size"):
                continue
            hidden, heads, head_dim = (_get(other, "hidden_size"), _first(other, HEAD_NAMES),
                                       _get(other, "head_dim"))
            _set(other, "hidden_size", value)
            if _int(heads) and _int(head_dim) and _int(hidden) and head_dim * heads == hidden:
                _set(other, "head_dim", value // heads)


def _shrink_one(config: Any, *, min_positions: int = 0, widths: bool = True, depth: bool = True) -> None:
    """One config's shrink; ``widths`` False keeps every width and head count (only the
    depth, the experts and the vocabulary shrink): the fallback for an architecture whose
    parts tie widths to each other in ways the names do not say.

    A heterogeneous config (transformers' ``per_layer_config``: layers that override some
    of the global attributes) shrinks its global values and each kept layer's own config by
    the same rules; the overrides are what then still differs, renumbered to the kept layers."""
    spec = vars(config).pop("_heterogeneity_spec", None)
    if spec is None:
        _shrink_uniform(config, min_positions=min_positions, widths=widths, depth=depth)
        return
    layers = {}
    for index, overrides in spec.per_layer_overrides.items():
        layers[index] = layer = copy.copy(config)
        for name, value in overrides.items():
            setattr(layer, name, value)
    kept = _shrink_uniform(config, min_positions=min_positions, widths=widths, depth=depth)
    per_layer = {}
    for new, old in enumerate(kept):
        if old not in layers:
            continue
        layer = layers[old]
        _shrink_uniform(layer, min_positions=min_positions, widths=widths, depth=False)
        names = spec.explicit_per_layer_attributes | set(spec.per_layer_overrides[old])
        per_layer[new] = {name: getattr(layer, name) for name in sorted(names)
                          if name == "skip" or getattr(layer, name) != vars(config).get(name)}
    config.per_layer_config = per_layer


def _shrink_uniform(config: Any, *, min_positions: int, widths: bool, depth: bool) -> list[int]:
    """The shrink of a config whose attributes hold for every layer; returns the reference
    indices of the layers kept."""
    old_layers = _first(config, _LAYER_NAMES)
    old_hidden = _first(config, HIDDEN_NAMES)
    old_heads = _first(config, HEAD_NAMES)
    old_kv = _first(config, KV_HEAD_NAMES)
    kept = _shrink_layers(config, old_layers) if depth else list(range(old_layers if _int(old_layers) else 0))
    if not widths:
        _shrink_experts(config)
        _shrink_vocab(config, min_positions)
        return kept
    for names, value in ((HIDDEN_NAMES, TINY_HIDDEN), (HEAD_NAMES, TINY_HEADS),
                         (FF_NAMES, TINY_FF), (HEAD_DIM_NAMES, TINY_HEAD_DIM)):
        for name in names:
            current = _get(config, name) if _has(config, name) else None
            # a width given per layer (Gemma 3n's MLP widths) stays a list, one per layer
            _set(config, name, type(current)(value for _ in current) if isinstance(current, (list, tuple))
                 else value)
    _shrink_mixtures(config, old_hidden, dense_prefix=depth)
    # a partial rotary width (gptj, codegen) may not exceed the new head width
    rotary = getattr(config, "rotary_dim", None) if _has(config, "rotary_dim") else None
    if isinstance(rotary, int) and rotary > TINY_HEAD_DIM:
        config.rotary_dim = TINY_HEAD_DIM
    if old_kv is not None:
        # keep grouped-query attention grouped, and multi-head attention multi-head
        kv = TINY_KV_HEADS if old_heads is not None and old_kv < old_heads else TINY_HEADS
        for name in KV_HEAD_NAMES:
            if _has(config, name):
                setattr(config, name, kv)
    _shrink_vocab(config, min_positions)
    return kept


def _shrink_vocab(config: Any, min_positions: int) -> None:
    for name, value in list(vars(config).items()):
        # other tables indexed by token: hashed n-gram and per-layer input embeddings
        if "vocab" in name and name != "vocab_size" and _int(value) and value > TINY_VOCAB:
            setattr(config, name, TINY_VOCAB)
    if _has(config, "vocab_size"):
        config.vocab_size = TINY_VOCAB
        if _has(config, "pad_token_id") and _get(config, "pad_token_id") is None:
            # a model that masks padding by comparing ids needs one; inputs never use id 0
            _set(config, "pad_token_id", 0)
        # special token ids feed padding_idx; out of range they would break the embedding
        for name, value in list(vars(config).items()):
            if not name.endswith("_token_id"):
                continue
            if isinstance(value, int) and value >= TINY_VOCAB:
                setattr(config, name, TINY_VOCAB - 1)
            elif isinstance(value, list):
                setattr(config, name, [v if v < TINY_VOCAB else TINY_VOCAB - 1 for v in value])
    for name in _POSITION_NAMES:
        if _has(config, name):
            current = getattr(config, name, None)
            if isinstance(current, int) and current < min_positions:
                setattr(config, name, min_positions)
