"""What a model keeps in memory per sequence while it generates, layer by layer, from its
config alone (no torch: a transformers config object or a plain mapping of config.json
fields both answer).

Each layer of the main stack keeps, by the kind of its token mixer:

* **attention**: keys and values for every token, ``2 x kv_heads x head_dim`` elements
  per token (one tensor where the keys serve as values, ``attention_k_eq_v``);
* **sliding attention** (``sliding_attention``, and ``chunked_attention`` over its
  chunk): the same, capped at the window: a constant once the sequence is longer
  (transformers keeps the window less the newest token between steps: the figure here
  is the window, what a step holds while it attends);
* **latent attention** (MLA: DeepSeek-V2/V3, Kimi): one compressed latent and the rotary
  key per token, ``kv_lora_rank + qk_rope_head_dim`` elements, shared by every head;
* **indexed latent attention** (DeepSeek-V3.2's sparse attention): the latent, and the
  indexer's keys, ``index_head_dim`` more per token;
* **compressed attention** (DeepSeek-V4): a window of raw keys (one head of
  ``head_dim``, keys serving as values) and, beyond it, one compressed row per
  ``compress_rates[kind]`` tokens, with the indexer's keys at the same rate for its
  sparse kind;
* **state space** (Mamba, Mamba-2; the mixer of Jamba, Falcon-H1, Nemotron-H): a constant
  state, the convolution's last ``conv_kernel`` inputs and the SSM state
  ``inner x state_size``, whatever the sequence length;
* **linear attention** (gated delta net: Qwen3-Next, Qwen3.5; KDA: Kimi Linear): a
  constant state, the short convolution's inputs and one ``key_dim x value_dim`` matrix
  per head;
* a layer without a token mixer (Nemotron-H's MLP and MoE layers) keeps nothing.

Layers are read from the config's per-layer declarations (``layer_types``,
``layers_block_type``, a hybrid pattern or the periods that place attention), the same
facts transformers builds the layers from. Expert weights are not a cache: every expert
is resident (the weights are counted by the parameter census, all of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LayerMemory", "cache_bytes", "layer_memory", "summary"]

ATTENTION = "attention"
SLIDING = "sliding attention"
LATENT = "latent attention"
INDEXED = "indexed latent attention"
COMPRESSED = "compressed attention"
STATE_SPACE = "state space"
LINEAR = "linear attention"
NONE = "none"

_MAMBA_TYPES = ("mamba", "mamba2", "falcon_mamba")


@dataclass(frozen=True)
class LayerMemory:
    """One layer's cache: ``per_token`` elements for each token (at most ``window``
    tokens of them where the layer keeps a window), ``per_rate`` elements more for every
    ``rate`` tokens (compressed rows), and ``fixed`` elements whatever the length."""

    kind: str
    per_token: int = 0
    window: int | None = None
    fixed: int = 0
    per_rate: int = 0
    rate: int = 1

    def elements(self, tokens: int) -> int:
        kept = tokens if self.window is None else min(tokens, self.window)
        return self.per_token * kept + self.per_rate * (tokens // self.rate) + self.fixed

    @property
    def grows(self) -> bool:
        """Whether the cache keeps growing with the sequence (no window, or compressed rows)."""
        return (self.per_token > 0 and self.window is None) or self.per_rate > 0


def _get(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - transformers' per-layer attribute errors
        return None


def _first(config: Any, *names: str) -> Any:
    for name in names:
        value = _get(config, name)
        if value is not None:
            return value
    return None


def _int(config: Any, *names: str, default: int = 0) -> int:
    value = _first(config, *names)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _text(config: Any) -> Any:
    """The language model's config of a multimodal one (``text_config``), else itself."""
    text = _get(config, "text_config")
    return text if text is not None and _first(config, "num_hidden_layers", "n_layer") is None else config


def _layer_count(config: Any) -> int:
    return _int(config, "num_hidden_layers", "n_layer", "num_layers", "decoder_layers")


def _declared(config: Any, layers: int) -> list[str]:
    """Each layer's declared mixer, in the config's own words, or ``[]``."""
    for name in ("layer_types", "layers_block_type"):
        value = _get(config, name)
        if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == layers:
            return [str(v) for v in value]
    pattern = _get(config, "hybrid_override_pattern")  # Nemotron-H: M mamba, * attention, - mlp, E moe
    if isinstance(pattern, str) and len(pattern) == layers:
        return [{"M": "mamba", "*": "attention"}.get(c, "mlp") for c in pattern]
    period = _get(config, "attn_layer_period")  # Jamba
    if isinstance(period, int) and period > 0:
        offset = _int(config, "attn_layer_offset")
        return ["attention" if i % period == offset else "mamba" for i in range(layers)]
    interval = _get(config, "full_attention_interval")  # Qwen3-Next
    if isinstance(interval, int) and interval > 0 and _get(config, "linear_num_value_heads"):
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    every = _get(config, "global_attn_every_n_layers")  # ModernBERT
    if isinstance(every, int) and every > 0:
        return ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
    return []


def _attention(config: Any, *, full: bool) -> LayerMemory:
    heads = _int(config, "num_attention_heads", "n_head", "num_heads", "decoder_attention_heads")
    hidden = _int(config, "hidden_size", "d_model", "n_embd")
    kv_heads = _int(config, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _int(config, "head_dim", "d_kv", default=hidden // heads if heads else 0)
    if full:
        kv_heads = _int(config, "num_global_key_value_heads", default=kv_heads)
        head_dim = _int(config, "global_head_dim", default=head_dim)
    tensors = 1 if (full and _get(config, "attention_k_eq_v")) else 2
    return LayerMemory(ATTENTION, per_token=tensors * kv_heads * head_dim)


def _latent(config: Any, indexed: bool) -> LayerMemory:
    per_token = _int(config, "kv_lora_rank") + _int(config, "qk_rope_head_dim")
    if indexed:
        return LayerMemory(INDEXED, per_token=per_token + _int(config, "index_head_dim"))
    return LayerMemory(LATENT, per_token=per_token)


def _compressed(config: Any, kind: str) -> LayerMemory:
    head_dim = _int(config, "head_dim")
    kv_heads = _int(config, "num_key_value_heads", default=1)
    rates = _get(config, "compress_rates") or {}
    rate = int(rates.get(kind, 1)) if isinstance(rates, Mapping) else 1
    window = _int(config, "sliding_window")
    row = kv_heads * head_dim + (_int(config, "index_head_dim") if "sparse" in kind else 0)
    return LayerMemory(COMPRESSED, per_token=kv_heads * head_dim, window=window or None, per_rate=row, rate=rate)


def _state_space(config: Any) -> LayerMemory:
    hidden = _int(config, "hidden_size", "d_model")
    state = _int(config, "ssm_state_size", "state_size", "mamba_d_state", "d_state")
    kernel = _int(config, "conv_kernel", "mamba_d_conv", "d_conv", default=4)
    groups = _int(config, "n_groups", "mamba_n_groups", default=0)
    heads = _int(config, "mamba_num_heads", "mamba_n_heads", "num_heads")
    head_dim = _int(config, "mamba_head_dim", "mamba_d_head", "head_dim")
    inner = _int(config, "mamba_d_ssm")
    if not inner and groups and heads and head_dim:  # Mamba-2: heads x head width
        inner = heads * head_dim
    if not inner:
        inner = _int(config, "expand", "mamba_expand", default=2) * hidden
    conv_width = inner + 2 * groups * state  # Mamba-2 convolves x, B and C; Mamba-1 x alone
    return LayerMemory(STATE_SPACE, fixed=conv_width * kernel + inner * state)


def _linear(config: Any) -> LayerMemory:
    linear = _get(config, "linear_attn_config")
    if isinstance(linear, Mapping):  # Kimi Linear's KDA: q, k, v of heads x head_dim each
        heads, dim = int(linear.get("num_heads", 0)), int(linear.get("head_dim", 0))
        kernel = int(linear.get("short_conv_kernel_size", 4))
        return LayerMemory(LINEAR, fixed=3 * heads * dim * kernel + heads * dim * dim)
    heads = _int(config, "linear_num_heads")
    if heads:  # Kimi Linear as transformers spells it
        dim = _int(config, "linear_head_dim")
        kernel = _int(config, "linear_conv_kernel_dim", default=4)
        return LayerMemory(LINEAR, fixed=3 * heads * dim * kernel + heads * dim * dim)
    k_heads = _int(config, "linear_num_key_heads")
    v_heads = _int(config, "linear_num_value_heads")
    k_dim = _int(config, "linear_key_head_dim")
    v_dim = _int(config, "linear_value_head_dim")
    kernel = _int(config, "linear_conv_kernel_dim", default=4)
    conv = (2 * k_heads * k_dim + v_heads * v_dim) * kernel
    return LayerMemory(LINEAR, fixed=conv + v_heads * k_dim * v_dim)


def _one(config: Any, declared: str) -> LayerMemory:
    word = declared.lower()
    latent = bool(_get(config, "kv_lora_rank"))
    if word in ("mamba", "ssm", "m"):
        return _state_space(config)
    if word in ("mlp", "moe", "-", "e"):
        return LayerMemory(NONE)
    if "linear" in word:
        # transformers names a Mamba layer of a hybrid "linear_attention" too: a layer is a
        # linear attention where the config has that mixer's widths, else a state space
        linear = any(_get(config, n) for n in ("linear_attn_config", "linear_num_heads", "linear_num_value_heads"))
        return _linear(config) if linear else _state_space(config)
    if "compressed" in word:
        return _compressed(config, declared)
    if "indexed" in word:
        return _latent(config, indexed=True)
    if "sliding" in word or "chunked" in word:
        window = _int(config, "attention_chunk_size") if "chunked" in word else 0
        window = window or _int(config, "sliding_window", "local_attention")
        layer = _attention(config, full=False)
        return LayerMemory(SLIDING, per_token=layer.per_token, window=window or None)
    if latent:
        return _latent(config, indexed=False)
    return _attention(config, full=True)


def layer_memory(config: Any) -> list[LayerMemory]:
    """One entry per layer of the language model's main stack (the decoder's, for an
    encoder-decoder, with its cross-attention over the longest input). An encoder keeps
    no cache: its caller, which knows it does not generate, asks nothing here."""
    config = _text(config)
    model_type = str(_get(config, "model_type") or "")
    layers = _layer_count(config)
    if model_type in _MAMBA_TYPES:
        return [_state_space(config) for _ in range(layers)]
    if model_type.startswith("falcon_h"):  # attention and a Mamba-2 mixer side by side in every layer
        attention, ssm = _attention(config, full=True), _state_space(config)
        both = LayerMemory(f"{ATTENTION} + {STATE_SPACE}", per_token=attention.per_token, fixed=ssm.fixed)
        return [both for _ in range(layers)]
    declared = _declared(config, layers)
    if not declared:  # one kind throughout: a sliding window where the config keeps one (Mistral)
        sliding = _get(config, "sliding_window") and _get(config, "use_sliding_window") is not False
        declared = ["sliding_attention" if sliding else "full_attention"] * layers
    # transformers' per-layer configs (heterogeneous models: Gemma 4's full-attention
    # layers have their own heads and width) answer for their layer
    per_layer = _get(config, "per_layer_config")
    parts = [per_layer[i] for i in range(layers)] if per_layer is not None else [config] * layers
    cache = [_one(part, word) for part, word in zip(parts, declared, strict=True)]
    if _get(config, "is_encoder_decoder"):  # cross-attention keys and values over the encoder's output
        positions = _int(config, "max_source_positions", "n_positions", default=0)
        cache = [LayerMemory(layer.kind, per_token=layer.per_token, window=layer.window,
                             fixed=layer.fixed + layer.per_token * positions) for layer in cache]
    return cache


def cache_bytes(config: Any, tokens: int, *, batch: int = 1, bytes_per_element: int = 2) -> int:
    """Bytes of every layer's cache after ``tokens`` tokens, for ``batch`` sequences."""
    return batch * bytes_per_element * sum(layer.elements(tokens) for layer in layer_memory(config))


def summary(config: Any, *, bytes_per_element: int = 2) -> dict[str, Any]:
    """The cache in two figures, exact at any length L: ``bytes = per_token x L + bounded``
    once L exceeds every window. ``per_token``: bytes each further token adds (layers
    without a window; compressed rows averaged over their rate); ``bounded``: full
    windows and constant states. ``kinds``: layers per kind."""
    per_token = 0.0
    bounded = 0
    kinds: dict[str, int] = {}
    for layer in layer_memory(config):
        kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
        if layer.window is None:
            per_token += layer.per_token
        else:
            bounded += layer.per_token * layer.window
        per_token += layer.per_rate / layer.rate
        bounded += layer.fixed
    return {"per_token_bytes": per_token * bytes_per_element, "bounded_bytes": bounded * bytes_per_element,
            "kinds": kinds}
