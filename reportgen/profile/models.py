"""Model presets, building from transformers configs with random weights, ``--scale tiny``,
seeded inputs, and `Step` objects (one measured iteration) for each mode.

Nothing here downloads weights: every model comes from a config (a preset's overrides, a
transformers model type's defaults, a local config.json, or a Hub model's config.json,
fetched alone by `reportgen.profile.hub`) and ``from_config``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from reportgen.errors import Skip, UserError
from reportgen.presets import PRESETS, preset_names
from reportgen.profile.dtypes import TORCH_DTYPES
from reportgen.profile.layers import LAYER_NAMES as _LAYER_NAMES
from reportgen.profile.layers import TINY_LAYERS as TINY_LAYERS  # (the tiny depth, named here too)
from reportgen.profile.layers import TINY_MAX_LAYERS as TINY_MAX_LAYERS
from reportgen.profile.layers import Depth, layer_stack, reduce_depth
from reportgen.profile.layers import first as _first
from reportgen.profile.layers import get as _get
from reportgen.profile.layers import has as _has
from reportgen.profile.layers import is_int as _int
from reportgen.profile.layers import set_ as _set
from reportgen.profile.layers import tiny_layers as _shrink_layers
from reportgen.profile.step import StepLike
from reportgen.profile.structure import is_attention, is_projection
from reportgen.vocabulary import (
    ATTENTION_MICRO,
    ATTN_IMPLEMENTATIONS,
    DECODE_NOCACHE,
    DTYPES,
    MICRO_ONLY,
    MODES,
    SCALES,
    SDPA_BACKENDS,
    TRAIN,
    TRAIN_MODES,
    positions_needed,
)

MICRO = ATTENTION_MICRO

# --scale tiny: attribute names (canonical or transformers aliases) -> tiny value. Set only
# where the config has the attribute, so no model needs code of its own.
TINY_HIDDEN = 64
TINY_HEADS = 4
TINY_KV_HEADS = 2
TINY_FF = 128
TINY_HEAD_DIM = TINY_HIDDEN // TINY_HEADS
TINY_VOCAB = 1024
_HIDDEN_NAMES = ("hidden_size", "d_model", "n_embd", "embed_dim", "word_embed_proj_dim", "embedding_size",
                 "embedding_dim")
_HEAD_NAMES = ("num_attention_heads", "encoder_attention_heads", "decoder_attention_heads", "n_head",
               "num_heads")
_KV_HEAD_NAMES = ("num_key_value_heads", "num_kv_heads")
_FF_NAMES = ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim")
_HEAD_DIM_NAMES = ("d_kv", "head_dim")
_POSITION_NAMES = ("max_position_embeddings", "n_positions", "n_ctx")
# Mixtures of experts keep several experts and more than one per token, so routing runs.
TINY_EXPERTS = 4
TINY_TOP_K = 2
_EXPERT_NAMES = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_NAMES = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k")
# group-limited routing (experts in groups, top groups first): one group of all experts
_EXPERT_GROUP_NAMES = ("n_group", "topk_group", "num_expert_group")
# latent attention (MLA): the compressed ranks and the rope/no-rope split of the head
_LATENT = {"kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
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
_LINEAR_ATTENTION = {"linear_num_heads": TINY_HEADS, "linear_head_dim": TINY_HEAD_DIM,
                     "linear_num_key_heads": TINY_KV_HEADS, "linear_num_value_heads": TINY_HEADS,
                     "linear_key_head_dim": TINY_HEAD_DIM, "linear_value_head_dim": TINY_HEAD_DIM}
# widths that equal the model's own at reference (an inner attention or recurrence width)
_INNER_WIDTH_NAMES = ("attention_hidden_size", "lru_width", "mamba_d_ssm")


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A resolved model name: where its config comes from."""

    name: str
    model_type: str
    source: str  # "preset" | "model_type" | "config_file" | "hub" | "micro"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    hub: Mapping[str, Any] | None = None  # source="hub": what `hub.resolve` returned

    @classmethod
    def from_hub(cls, name: str, hub: Mapping[str, Any]) -> ModelSpec:
        overrides = {k: v for k, v in hub["config"].items() if k != "model_type"}
        return cls(name=name, model_type=hub["model_type"], source="hub", overrides=overrides, hub=hub)

    @property
    def remote_code(self) -> bool:
        return bool(self.hub and self.hub.get("remote_code"))

    def make_config(self, scale: str = "reference", min_positions: int = 0, layers: int | None = None) -> Any:
        """The transformers config at ``scale``; ``min_positions`` is the longest sequence
        the model will see (tiny configs grow their position tables to fit it); ``layers``
        keeps that many of the model's layers, chosen by kind (`depth_config`)."""
        return self.depth_config(scale, min_positions, layers)[0]

    def depth_config(self, scale: str = "reference", min_positions: int = 0,
                     layers: int | None = None) -> tuple[Any, DepthPlan | None]:
        """`make_config`, and with ``layers`` the plan of the cut: which layers of which
        kinds, and the config of the whole model at the same widths."""
        if self.source == "micro":
            raise UserError(f"{MICRO} has no transformers config")
        if scale not in SCALES:
            raise UserError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
        from transformers import CONFIG_MAPPING

        if self.remote_code:
            from reportgen import hub

            config = hub.load_remote_config(dict(self.hub or {}))
        elif self.source in ("config_file", "hub"):
            config = CONFIG_MAPPING[self.model_type].from_dict(dict(self.overrides))
        else:
            config = CONFIG_MAPPING[self.model_type](**dict(self.overrides))
        if layers is not None:
            return config, plan_depth(config, layers, self.name, scale, min_positions)
        if scale == "tiny":
            shrink_config(config, min_positions=min_positions)
        return config, None


@dataclass(frozen=True)
class DepthPlan:
    """``--layers``: the layers kept (`layers.Depth`) and the whole model's config at the
    widths measured (for its exact parameter and FLOP counts)."""

    depth: Depth
    full_config: Any


def _meta_model(config: Any) -> nn.Module:
    with torch.device("meta"):
        return _auto_class(config, architecture(config)).from_config(config)


def plan_depth(config: Any, n: int, name: str, scale: str, min_positions: int) -> DepthPlan:
    """Cut ``config`` (in place) to ``n`` of its layers, chosen by kind and checked on the
    meta device; at ``--scale tiny`` the widths shrink after the cut, the depth stays."""
    if architecture(config) == "encoder-decoder":
        raise UserError(f"--layers {n}: {name} is an encoder-decoder model; --layers measures models "
                        "with one stack of layers")
    full = copy.deepcopy(config)
    depth = reduce_depth(config, n, _meta_model, what=name)
    if scale == "tiny":
        for part in (config, full):
            shrink_config(part, min_positions=min_positions, depth=False)
    return DepthPlan(depth, full)


def check_layers(combos: Any) -> None:
    """Refuse, before anything runs, a ``--layers`` count a model cannot be measured at
    (none, more than it has, fewer than its kinds of layer): one line, with the smallest
    count that would do. Built on the meta device: no memory, no weights."""
    seen: set[tuple[Any, ...]] = set()
    for combo in combos:
        n = getattr(combo, "layers", None)
        key = (combo.model, combo.scale, n)
        if n is None or key in seen:
            continue
        seen.add(key)
        if combo.model == MICRO:
            raise UserError(f"--layers {n}: {MICRO} is a single attention call, not a stack of layers")
        try:
            spec_of(combo).depth_config("reference", layers=n)
        except UserError:
            raise
        except Exception:  # noqa: BLE001 - a config that does not build fails its combination, recorded
            continue


def depth_facts(plan: DepthPlan, model: nn.Module, name: str, arch: str) -> dict[str, Any]:
    """The record's ``depth`` section as built (`reportgen.depth` adds the whole-model
    figures once the timing is final), and the whole model's info and analytic hints
    (``_full_info``, ``_full_hints``: for its FLOP count, not stored)."""
    depth = plan.depth
    full = _meta_model(plan.full_config)
    fqns = layer_stack(model)
    info = model_info(name, full, arch)
    info.pop("config", None)
    return {
        "layers": len(depth.chosen), "full_layers": len(depth.kinds),
        "measured": depth.measured, "full": depth.full,
        "measured_layers": [{"index": i, "kind": depth.kinds[i], "layer": fqn}
                            for i, fqn in zip(depth.chosen, fqns)],
        "parameters": sum(p.numel() for p in model.parameters()),
        "full_parameters": info["parameters"],
        "_full_info": info, "_full_hints": analytic_hints(full),
    }


def model_choices() -> list[str]:
    """The preset names (any transformers model type, config.json path or Hub id also resolves)."""
    return list(preset_names())


def spec_of(combo: Any) -> ModelSpec:
    """The spec a combination measures: a Hub model from the source resolved when the suite
    was validated (carried by the combination, so no Hub access here), else by name."""
    source = getattr(combo, "source", None)
    if source:
        return ModelSpec.from_hub(combo.model, source)
    return resolve(combo.model)


def resolve(name: str, *, trust_remote_code: bool = False) -> ModelSpec:
    """A preset, ``attention-micro``, a transformers model type, a path to a config.json,
    or a Hugging Face Hub id (``org/name[@revision]``, its config fetched alone)."""
    if name == MICRO:
        return ModelSpec(name=name, model_type=MICRO, source="micro")
    if name in PRESETS:
        model_type, overrides = PRESETS[name]
        return ModelSpec(name=name, model_type=model_type, source="preset", overrides=dict(overrides))
    from transformers import CONFIG_MAPPING

    if name in CONFIG_MAPPING:  # before paths: a folder named like a type must not shadow it
        return ModelSpec(name=name, model_type=name, source="model_type")
    path = Path(name)
    if name.endswith(".json") or path.is_dir():
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise UserError(f"model config file not found: {file}")
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read model config {file}: {exc}") from exc
        file_type: Any = data.get("model_type") if isinstance(data, dict) else None
        if file_type not in CONFIG_MAPPING:
            raise UserError(f"{file}: model_type {file_type!r} is not a transformers model type")
        data = {k: v for k, v in data.items() if k != "model_type"}
        return ModelSpec(name=name, model_type=file_type, source="config_file", overrides=data)
    from reportgen import hub

    if hub.is_hub_id(name):
        return ModelSpec.from_hub(name, hub.resolve(name, trust_remote_code=trust_remote_code))
    raise UserError(
        f"unknown model {name!r}; choose a preset ({', '.join(model_choices())}), {MICRO}, "
        "a transformers model type (e.g. bert, llama, opt, bart), a path to a config.json "
        "or a Hugging Face Hub id (org/name[@revision])"
    )


# --- configs -------------------------------------------------------------------------


def _shrink_experts(config: Any, dense_prefix: bool = True) -> None:
    """Several experts, more than one per token, one routing group, one leading dense layer."""
    for name in _EXPERT_NAMES:
        value = _get(config, name) if _has(config, name) else None
        if _int(value) and value > TINY_EXPERTS:
            _set(config, name, TINY_EXPERTS)
    has_experts = any(_int(_get(config, name)) for name in _EXPERT_NAMES if _has(config, name))
    for name in _TOP_K_NAMES:
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
        if name.endswith("intermediate_size") and _int(value) and value > TINY_FF:
            setattr(config, name, TINY_FF)  # expert, shared-expert and dense-layer widths
        elif name.startswith("hidden_size_") and _int(value) and value > TINY_HIDDEN:
            setattr(config, name, TINY_HIDDEN)  # another part's width (a global model's)
    _shrink_experts(config, dense_prefix)
    if _has(config, "qk_rope_head_dim"):
        for name, value in _LATENT.items():
            if _int(_get(config, name)):
                _set(config, name, value)
        if _int(_get(config, "head_dim")):
            _set(config, "head_dim", _LATENT["qk_rope_head_dim"])  # MLA's rotary width
    hidden = _first(config, _HIDDEN_NAMES)
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
    for name in _INNER_WIDTH_NAMES:
        value = _get(config, name)
        if _int(value) and _int(old_hidden) and old_hidden and name != "mamba_d_ssm":
            # the same multiple of the model's width as at reference (Zamba-2's attention
            # reads the hidden state beside the embeddings: twice the width)
            _set(config, name, max(1, round(value / old_hidden)) * TINY_HIDDEN)


def shrink_config(config: Any, *, min_positions: int = 0, widths: bool = True, depth: bool = True) -> Any:
    """Shrink any transformers config in place to a tiny one of the same architecture,
    through the standard attribute names and their common aliases; a composite config
    (a language model with a vision or audio encoder) shrinks each of its parts. ``depth``
    False keeps the layers (``--layers`` chose them)."""
    _shrink_one(config, min_positions=min_positions, widths=widths, depth=depth)
    for name in getattr(config, "sub_configs", None) or {}:
        sub = _get(config, name)
        if sub is not None and sub is not config and hasattr(sub, "to_dict"):
            shrink_config(sub, min_positions=min_positions, widths=widths, depth=depth)
    return config


def _shrink_one(config: Any, *, min_positions: int = 0, widths: bool = True, depth: bool = True) -> Any:
    """One config's shrink; ``widths`` False keeps every width and head count (only the
    depth, the experts and the vocabulary shrink): the fallback for an architecture whose
    parts tie widths to each other in ways the names do not say."""
    old_layers = _first(config, _LAYER_NAMES)
    old_hidden = _first(config, _HIDDEN_NAMES)
    old_heads = _first(config, _HEAD_NAMES)
    old_kv = _first(config, _KV_HEAD_NAMES)
    if depth:
        _shrink_layers(config, old_layers)
    if not widths:
        _shrink_experts(config)
        _shrink_vocab(config, min_positions)
        return config
    for names, value in ((_HIDDEN_NAMES, TINY_HIDDEN), (_HEAD_NAMES, TINY_HEADS),
                         (_FF_NAMES, TINY_FF), (_HEAD_DIM_NAMES, TINY_HEAD_DIM)):
        for name in names:
            _set(config, name, value)
    _shrink_mixtures(config, old_hidden, dense_prefix=depth)
    # a partial rotary width (gptj, codegen) may not exceed the new head width
    rotary = getattr(config, "rotary_dim", None) if _has(config, "rotary_dim") else None
    if isinstance(rotary, int) and rotary > TINY_HEAD_DIM:
        config.rotary_dim = TINY_HEAD_DIM
    if old_kv is not None:
        # keep grouped-query attention grouped, and multi-head attention multi-head
        kv = TINY_KV_HEADS if old_heads is not None and old_kv < old_heads else TINY_HEADS
        for name in _KV_HEAD_NAMES:
            if _has(config, name):
                setattr(config, name, kv)
    _shrink_vocab(config, min_positions)
    return config


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


def architecture(config: Any) -> str:
    """"encoder", "decoder" (a causal LM) or "encoder-decoder", read from transformers'
    own class mappings: a type with a causal-LM class and no masked-LM class is a decoder
    (BERT-likes have both, and are encoders)."""
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = config.model_type
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "decoder"
    # a config whose classes live in its repository says what they are in its auto_map
    auto_map = getattr(config, "auto_map", None) or {}
    if "AutoModelForCausalLM" in auto_map and "AutoModelForMaskedLM" not in auto_map:
        return "decoder"
    return "encoder"


def _auto_class(config: Any, arch: str, mode: str = "forward") -> Any:
    """The transformers auto class a combination builds: a causal LM for a decoder, a
    sequence-to-sequence LM where the type has one, else the bare model; a training step
    of an encoder trains its masked-LM head where the type has one (labels and a loss)."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    if arch == "encoder" and mode in TRAIN_MODES and config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return transformers.AutoModelForMaskedLM
    if arch == "decoder":
        return transformers.AutoModelForCausalLM
    if arch == "encoder-decoder" and config.model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForSeq2SeqLM
    return transformers.AutoModel


def torch_dtype(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise UserError(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}") from None


def attn_backend(impl: str, device: torch.device, dtype: torch.dtype) -> tuple[str, Any | None]:
    """(transformers attn_implementation, SDPBackend or None) for one of
    ATTN_IMPLEMENTATIONS; Skip where the device cannot run it."""
    if impl not in ATTN_IMPLEMENTATIONS:
        raise UserError(f"unknown attn_implementation {impl!r}; choose from {', '.join(ATTN_IMPLEMENTATIONS)}")
    if impl in MICRO_ONLY:
        raise Skip(f"attn_implementation {impl} applies only to {MICRO}")
    if impl == "flash_attention_2":
        if device.type != "cuda":
            raise Skip("flash_attention_2 needs a CUDA device")
        if importlib.util.find_spec("flash_attn") is None:
            raise Skip("flash_attention_2 needs the flash_attn package, which is not installed")
        if dtype not in (torch.float16, torch.bfloat16):
            raise Skip("flash_attention_2 runs only in fp16 or bf16")
        return impl, None
    if impl in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend

        if impl in ("sdpa-efficient", "sdpa-cudnn") and device.type != "cuda":
            raise Skip(f"{impl} needs a CUDA device")
        return "sdpa", getattr(SDPBackend, SDPA_BACKENDS[impl])
    return impl, None


def check_dtype(dtype: torch.dtype, device: torch.device) -> None:
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise Skip(f"bf16 is not supported on {torch.cuda.get_device_name(device)}")


# --- inputs and steps ----------------------------------------------------------------



def random_ids(shape: tuple[int, ...], vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Seeded token ids in [1, vocab): drawn on the CPU so a seed means the same ids on
    every device; id 0 (often padding) is avoided so inputs are never all zeros."""
    return torch.randint(1, max(2, vocab_size), shape, generator=generator, dtype=torch.long)


class Step:
    """One measured iteration: ``step()`` runs the forward (no sync inside), ``reset()``
    restores state between iterations (untimed), ``sync()`` waits for the device."""

    def __init__(self, model: nn.Module, kwargs: dict[str, Any], *, device: torch.device,
                 inputs_info: dict[str, Any], backend: Any | None = None, mode: str = "forward") -> None:
        self.model = model
        self.kwargs = kwargs
        self.device = device
        self.inputs_info = inputs_info
        self.backend = backend
        self.mode = mode
        # torch.compile's wrapper of ``model`` when the combination is compiled; the KV
        # cache is still filled through the eager model (a prefill shape would compile a
        # graph the timed step never runs)
        self.compiled: Any = None

    def _kernel(self) -> contextlib.AbstractContextManager[Any]:
        if self.backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel(self.backend)

    def __call__(self) -> Any:
        model = self.model if self.compiled is None else self.compiled
        with torch.inference_mode(), self._kernel():
            return model(**self.kwargs)

    def reset(self) -> None:
        return None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


# The optimizer of mode ``train``: AdamW at torch's defaults (its states in the parameters'
# dtype, the implementation torch picks for the device). The learning rate is small so the
# weights stay ordinary numbers over many steps; timing does not depend on their values.
TRAIN_LR = 1e-5


def training_loss(output: Any) -> torch.Tensor:
    """The loss a training step differentiates: the model's own (a language model given
    ``labels`` computes its cross entropy), else, for a model without a head (an
    encoder's ``AutoModel``), the mean of each floating-point output tensor, summed: a
    stand-in whose backward reaches every parameter that produced an output (its own cost
    is one reduction per output)."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    values = output.values() if isinstance(output, Mapping) else (
        output if isinstance(output, (tuple, list)) else (output,))
    tensors = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()
               and v.requires_grad]
    if not tensors:
        raise RuntimeError("the model returned no floating-point output to train on")
    return sum(t.float().mean() for t in tensors)  # type: ignore[return-value]


class TrainStep(Step):
    """One training step (``train``): the forward with its loss, the backward, and an
    AdamW step; ``train-nooptim`` stops after the backward. ``reset()`` clears the
    gradients (``set_to_none``, as a training loop does before its next forward), outside
    the timed region. The model is in training mode (dropout as its config sets it).

    ``phase_hook``, when set, is called ``(phase, True)`` as each phase (``PHASES``)
    starts and ``(phase, False)`` as it ends: the profiled pass opens a profiler range
    there, the hooks method reads its clock. Unset (the timing pass), it costs nothing."""

    def __init__(self, model: nn.Module, kwargs: dict[str, Any], *, optimizer: bool, **kw: Any) -> None:
        super().__init__(model, kwargs, **kw)
        model.train()
        self.phase_hook: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        if optimizer:
            params = [p for p in model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(params, lr=TRAIN_LR)

    def __call__(self) -> Any:
        model = self.model if self.compiled is None else self.compiled
        hook = self.phase_hook
        with self._kernel():
            if hook is not None:
                hook("forward", True)
            loss = training_loss(model(**self.kwargs))
            if hook is not None:
                hook("forward", False)
                hook("backward", True)
            loss.backward()
            if hook is not None:
                hook("backward", False)
            if self.optimizer is not None:
                if hook is not None:
                    hook("optimizer", True)
                self.optimizer.step()
                if hook is not None:
                    hook("optimizer", False)
        return loss.detach()

    def reset(self) -> None:
        self.model.zero_grad(set_to_none=True)


def train_step(step: Step, mode: str) -> TrainStep:
    """A forward ``Step`` turned into the training step of ``mode`` (one of TRAIN_MODES)."""
    kwargs = dict(step.kwargs)
    info = dict(step.inputs_info)
    info["loss"] = ("cross entropy on the model's labels (the input tokens)" if "labels" in kwargs
                    else "mean of each output tensor, summed (no language-model head)")
    info["optimizer"] = "AdamW" if mode == TRAIN else None
    return TrainStep(step.model, kwargs, optimizer=mode == TRAIN, device=step.device,
                     inputs_info=info, backend=step.backend, mode=mode)


def _cache_of(output: Any) -> Any:
    for name in ("cache", "past_key_values"):
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    raise RuntimeError("the model returned no KV cache with use_cache=True")


class DecodeStep(Step):
    """One new token per sequence against a KV cache of ``kv_len`` tokens, built once
    (untimed); ``reset()`` crops the cache back so every iteration sees the same length."""

    def __init__(self, model: nn.Module, prefill_kwargs: dict[str, Any], decode_kwargs: dict[str, Any],
                 cache_arg: str, kv_len: int, **kw: Any) -> None:
        super().__init__(model, decode_kwargs, **kw)
        self.prefill_kwargs = prefill_kwargs
        self.cache_arg = cache_arg
        self.kv_len = kv_len
        self._croppable = True
        self._fill()

    def _fill(self) -> None:
        with torch.inference_mode(), self._kernel():
            out = self.model(**self.prefill_kwargs)
        self.cache = _cache_of(out)
        self.kwargs[self.cache_arg] = self.cache
        self.sync()

    def cache_len(self) -> int:
        return int(self.cache.get_seq_length())

    def reset(self) -> None:
        extra = self.cache_len() - self.kv_len
        if extra <= 0:
            return
        if self._croppable and getattr(self.cache, "is_croppable", True) and hasattr(self.cache, "crop"):
            try:
                with torch.inference_mode():
                    # negative: remove that many tokens (the one form every transformers version reads)
                    self.cache.crop(-extra)
                return
            except (RuntimeError, NotImplementedError):
                # a recurrent layer's state (state-space, linear attention) keeps no past
                # to roll back to: fill the cache anew, now and at every later reset
                self._croppable = False
        self._fill()


def _forward_params(model: nn.Module) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def _nocache_step(model: nn.Module, params: set[str], prefix: torch.Tensor, new_ids: torch.Tensor, *,
                  seed: int, **common: Any) -> Step:
    """``decode-nocache``: the token ``decode`` generates (the same prefix and new token,
    drawn in the same order from the same seed), computed from the whole sequence without
    a cache, as generation without a KV cache does at every step: ``seq_len + 1`` tokens
    in, the last position's logits out."""
    ids = torch.cat([prefix, new_ids], dim=1)
    batch_size, length = int(ids.shape[0]), int(ids.shape[1])
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "attention_mask" in params:
        kwargs["attention_mask"] = torch.ones((batch_size, length), dtype=torch.long, device=ids.device)
    if "use_cache" in params:
        kwargs["use_cache"] = False
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = 1
    info = {"seed": seed, "input_shape": [batch_size, length], "tokens": batch_size * length, "kv_len": None}
    return Step(model, kwargs, inputs_info=info, **common)


def make_step(model: nn.Module, config: Any, arch: str, mode: str, *, batch_size: int, seq_len: int,
              device: torch.device, backend: Any | None, seed: int, name: str) -> Step:
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if mode != "forward" and mode not in TRAIN_MODES and arch != "decoder":
        raise Skip(f"{mode} applies to causal LMs; {name} is an {arch}")
    params = _forward_params(model)
    gen = torch.Generator().manual_seed(seed)
    vocab = int(_first(config, ("vocab_size",)) or TINY_VOCAB)
    shape = (batch_size, seq_len)
    ids = random_ids(shape, vocab, gen).to(device)
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "attention_mask" in params:
        kwargs["attention_mask"] = torch.ones(shape, dtype=torch.long, device=device)
    cache_arg = "cache" if "cache" in params else "past_key_values"
    info = {"seed": seed, "input_shape": list(shape), "tokens": batch_size * seq_len, "kv_len": None}
    common: dict[str, Any] = {"device": device, "backend": backend, "mode": mode}
    if mode == "forward" or mode in TRAIN_MODES:
        if arch == "encoder-decoder":
            kwargs["decoder_input_ids"] = random_ids(shape, vocab, gen).to(device)
        if "use_cache" in params:
            kwargs["use_cache"] = False
        if mode == "forward":
            return Step(model, kwargs, inputs_info=info, **common)
        if "labels" in params:
            # a language model's own loss: a causal LM predicts the next token (the model
            # shifts the labels), a masked LM every position's token
            kwargs["labels"] = kwargs.get("decoder_input_ids", ids)
        return train_step(Step(model, kwargs, inputs_info=info, **common), mode)
    if mode == DECODE_NOCACHE:
        return _nocache_step(model, params, ids, random_ids((batch_size, 1), vocab, gen).to(device),
                             seed=seed, **common)
    kwargs["use_cache"] = True
    if mode == "prefill":
        # generation computes logits for the last position only; so do we
        if "logits_to_keep" in params:
            kwargs["logits_to_keep"] = 1
        return Step(model, kwargs, inputs_info=info, **common)
    new_ids = random_ids((batch_size, 1), vocab, gen).to(device)
    decode_kwargs: dict[str, Any] = {"input_ids": new_ids, "use_cache": True}
    if "attention_mask" in params:
        decode_kwargs["attention_mask"] = torch.ones((batch_size, seq_len + 1), dtype=torch.long, device=device)
    info = {"seed": seed, "input_shape": [batch_size, 1], "tokens": batch_size, "kv_len": seq_len}
    prefill_kwargs = dict(kwargs)
    if "logits_to_keep" in params:
        prefill_kwargs["logits_to_keep"] = 1
    return DecodeStep(model, prefill_kwargs, decode_kwargs, cache_arg, seq_len, inputs_info=info, **common)


# --- other modalities ----------------------------------------------------------------

# A model's main input -> what its sequence length counts.
SEQUENCES: dict[str, str] = {"input_ids": "tokens", "pixel_values": "patches",
                             "input_features": "frames", "input_values": "frames"}


def main_input(config: Any, arch: str) -> str:
    """The input the class that will be built reads (its ``main_input_name``), from
    transformers' own auto mapping: ``input_ids`` for text, ``pixel_values`` for vision
    encoders, ``input_features`` (a spectrogram) or ``input_values`` (a waveform) for
    speech."""
    try:
        cls = _auto_class(config, arch)._model_mapping[type(config)]
    except (KeyError, AttributeError, ValueError):
        return "input_ids"
    return str(getattr(cls, "main_input_name", "input_ids"))


def _patch(config: Any) -> int | None:
    patch = _get(config, "patch_size")
    if isinstance(patch, (list, tuple)) and patch:
        patch = patch[0]
    return patch if _int(patch) else None


def fit_sequence(config: Any, name: str, main: str, seq_len: int) -> None:
    """Size a vision or speech config so that its encoder sees ``seq_len`` positions:
    an image of a square grid of ``seq_len`` patches; ``seq_len`` spectrogram frames
    after a Whisper-like encoder's strided convolutions. Skip where that cannot be."""
    if main == "pixel_values":
        patch = _patch(config)
        side = int(round(seq_len ** 0.5))
        if patch is None or not _has(config, "image_size"):
            raise Skip(f"{name} takes images but its config names no patch size and image size")
        if side * side != seq_len:
            raise Skip(f"{name} sees an image as a square grid of patches; {seq_len} patches "
                       f"is not a square (64, 196 and 256 are)")
        _set(config, "image_size", side * patch)
    elif main == "input_features":
        if not _has(config, "max_source_positions"):
            raise Skip(f"{name} takes input_features but its config has no max_source_positions")
        _set(config, "max_source_positions", seq_len)
        target = _get(config, "max_target_positions")
        if _int(target) and target < seq_len:
            _set(config, "max_target_positions", seq_len)


def modality_step(model: nn.Module, config: Any, main: str, *, batch_size: int, seq_len: int,
                  device: torch.device, backend: Any | None, seed: int, name: str) -> Step:
    """The forward of a vision or speech model on seeded random inputs of the shape its
    encoder expects: ``seq_len`` patches, or ``seq_len`` frames."""
    gen = torch.Generator().manual_seed(seed)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    params = _forward_params(model)
    kwargs: dict[str, Any] = {}
    if main == "pixel_values":
        side = int(_get(config, "image_size") if not isinstance(_get(config, "image_size"), (list, tuple))
                   else _get(config, "image_size")[0])
        channels = int(_get(config, "num_channels") or 3)
        shape: tuple[int, ...] = (batch_size, channels, side, side)
    elif main == "input_features":
        bins = int(_get(config, "num_mel_bins") or _get(config, "feature_size") or 80)
        # Whisper-like encoders halve the frames with a stride-2 convolution
        shape = (batch_size, bins, 2 * seq_len)
    elif main == "input_values":
        strides = _get(config, "conv_stride") or (1,)
        kernels = _get(config, "conv_kernel") or (1,)
        samples = 1
        for kernel, stride in reversed(list(zip(kernels, strides))):
            samples = (samples - 1) * stride + kernel
        samples += (seq_len - 1) * math.prod(strides)
        shape = (batch_size, samples)
    else:
        raise Skip(f"{name} takes {main}, which reportgen has no inputs for")
    kwargs[main] = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        vocab = int(_first(config, ("vocab_size",)) or TINY_VOCAB)
        target = _get(config, "max_target_positions")
        length = min(seq_len, target) if _int(target) else seq_len
        kwargs["decoder_input_ids"] = random_ids((batch_size, length), vocab, gen).to(device)
    if "use_cache" in params:
        kwargs["use_cache"] = False
    info = {"seed": seed, "input_shape": list(shape), "tokens": batch_size * seq_len, "kv_len": None,
            "input": main, "sequence": SEQUENCES.get(main, "positions")}
    return Step(model, kwargs, inputs_info=info, device=device, backend=backend, mode="forward")


# --- building ------------------------------------------------------------------------


@dataclass
class BuiltModel:
    model: nn.Module
    info: dict[str, Any]
    step: StepLike
    # the build's trial iteration, host-clocked around the call and its sync (ms): the
    # timing pass counts it as its first warm-up sample
    trial_ms: float | None = None
    # --layers: `depth_facts`
    depth: dict[str, Any] | None = None


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    return str(value)


def _first_block(model: nn.Module) -> nn.Module | None:
    """The first item of a ModuleList that holds an attention module: a transformer block."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            first = module[0]
            if any(is_attention(m) for m in first.modules()):
                return first
    return None


def _mlp_projections(block: nn.Module) -> list[nn.Module]:
    found: list[nn.Module] = []

    def walk(module: nn.Module) -> None:
        for child in module.children():
            if is_attention(child):
                continue
            if is_projection(child):
                found.append(child)
            walk(child)

    walk(block)
    return found


def analytic_hints(model: nn.Module) -> dict[str, Any]:
    """What the analytic FLOP count reads from the model's structure rather than its
    config: the MLP's projections per block (3 when gated, 2 when a fused gate-up is one
    module), their weight elements (2 FLOPs each per token, whatever the fusion), and
    whether a pooler follows the encoder."""
    block = _first_block(model)
    projs = _mlp_projections(block) if block is not None else []
    weights: list[torch.Tensor] = [p.weight for p in projs]  # type: ignore[misc]
    width = max((max(w.shape) for w in weights), default=None)
    params = sum(int(w.numel()) for w in weights)
    pooler = any("Pooler" in type(m).__name__ for m in model.modules())
    hints: dict[str, Any] = {"mlp_projections": len(projs) or None, "mlp_width": width,
                             "mlp_weight_elements": params or None, "pooler": pooler}
    parts = _mixture_parts(model)
    if parts is not None:
        hints["parts"] = parts
    return hints


def _mixture_parts(model: nn.Module) -> dict[str, Any] | None:
    """For a model with experts or token mixers (whose layers differ from a dense
    transformer's): weight elements a token meets in each category over the whole model,
    read from the structure. Routed experts count ``top_k`` of their experts per token
    (the config's experts per token); shared experts, routers, token mixers and dense
    MLPs all their projections; and how many softmax-attention calls a forward makes."""
    from reportgen.profile.structure import classify, is_experts

    roles = classify(model)
    modules = dict(model.named_modules())
    if not any(r.role in ("mixer", "moe", "experts") for r in roles.values()):
        return None
    config: Any = getattr(model, "config", None)
    top_k = _first(config, _TOP_K_NAMES) if config is not None else None
    found = {"mlp": 0, "moe.router": 0, "moe.experts": 0, "mixer": 0}
    for fqn, info in roles.items():
        module = modules.get(fqn)
        if module is None:
            continue
        if info.role == "experts" and info.container == "moe" and is_experts(module):
            if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
                items = list(module.children())
                per_expert = sum(int(m.weight.numel()) for m in items[0].modules()  # type: ignore[operator,misc]
                                 if is_projection(m))
                count = len(items)
            else:
                stacked = [p for p in module.parameters(recurse=False) if p.dim() >= 3]
                count = max(int(p.shape[0]) for p in stacked)
                per_expert = sum(int(p.numel()) for p in stacked) // count
            found["moe.experts"] += per_expert * int(top_k if _int(top_k) else 1)
        elif is_projection(module) and info.category in found:
            found[info.category] += int(module.weight.numel())  # type: ignore[union-attr]
    attention = sum(1 for r in roles.values() if r.role == "attn")
    return {"weight_elements": found, "attention_calls": attention, "top_k": top_k if _int(top_k) else None}


def model_info(name: str, model: nn.Module, arch: str) -> dict[str, Any]:
    """The record's ``model`` section."""
    config: Any = model.config
    hidden = _first(config, _HIDDEN_NAMES[:3])
    heads = _first(config, _HEAD_NAMES)
    kv_heads = _first(config, _KV_HEAD_NAMES) or heads
    head_dim = _first(config, _HEAD_DIM_NAMES)
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    ff = _first(config, _FF_NAMES) or analytic_hints(model)["mlp_width"]
    return {
        "name": name,
        "model_type": config.model_type,
        "architecture": arch,
        "class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_layers": _first(config, _LAYER_NAMES),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": ff,
        "vocab_size": _first(config, ("vocab_size",)),
        "config": _json_safe(config.to_diff_dict()),
    }


def _check_positions(model: nn.Module, needed: int, name: str) -> None:
    """Learned position tables cannot index past their size (on a GPU that would be a
    device-side assert, which poisons the context), so refuse up front."""
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and "position" in module_name.lower():
            if module.num_embeddings < needed:
                raise Skip(f"{name} has {module.num_embeddings} learned positions ({module_name}); "
                           f"this combination needs {needed}")


# Seeded random weights without transformers' per-module initialisation (normal draws
# from a serial generator, most of a reference model's build time): one block of uniform
# values with HF's usual standard deviation, laid into each weight from its own random
# offset; norm scales 1, biases 0 (what the usual initialisation gives them). Timing does
# not depend on the values, only on their being ordinary finite numbers.
INIT_STD = 0.02
INIT_BLOCK = 1 << 20


def fast_init(model: nn.Module, seed: int) -> None:
    """Fill ``model``'s parameters with seeded random values (see INIT_STD)."""
    gen = torch.Generator().manual_seed(seed)
    bound = INIT_STD * 3.0 ** 0.5
    block = torch.empty(INIT_BLOCK).uniform_(-bound, bound, generator=gen)
    seen: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            for name, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue  # a tied weight is filled once
                seen.add(id(param))
                if name == "bias":
                    param.zero_()
                elif param.ndim == 1 and type(module).__name__.endswith("Norm"):
                    param.fill_(1.0)
                else:
                    offset = int(torch.randint(0, INIT_BLOCK, (1,), generator=gen))
                    source = torch.roll(block, offset).to(device=param.device, dtype=param.dtype)
                    flat = param.view(-1)
                    for start in range(0, flat.numel(), INIT_BLOCK):
                        stop = min(flat.numel(), start + INIT_BLOCK)
                        flat[start:stop].copy_(source[: stop - start])


def _instantiate(config: Any, arch: str, impl: str, dtype: torch.dtype, device: torch.device,
                 seed: int = 0, remote_code: bool = False, mode: str = "forward") -> nn.Module:
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers: its own initialisation, then ours over it
        no_init_weights = contextlib.nullcontext  # type: ignore[assignment]
    cls = _auto_class(config, arch, mode)
    extra = {"trust_remote_code": True} if remote_code else {}
    try:
        with torch.device(device), no_init_weights():
            model = cls.from_config(config, attn_implementation=impl, dtype=dtype, **extra)
        model.tie_weights()  # skipped with the initialisation
        fast_init(model, seed)
    except (ValueError, ImportError, NotImplementedError) as exc:
        message = str(exc)
        if "attn" in message.lower() or "attention" in message.lower():
            # an older transformers release may lack what a newer one has: say which release
            import transformers

            raise Skip(f"{config.model_type}: {impl} not in transformers {transformers.__version__} "
                       f"(does not support attn_implementation={impl}: {message})") from exc
        raise
    return model.to(device).eval()


def _default_builds(spec: ModelSpec, impl: str, exc: Exception) -> None:
    """Where a model type's tiny build failed, whether transformers' own default config of
    that type builds at all (on the meta device: no memory, no weights); if it does not
    either, the type cannot be measured from its defaults, and that is the Skip's line."""
    if spec.source != "model_type":
        return
    try:
        config = spec.make_config("reference")
        arch = architecture(config)
        with torch.device("meta"):
            _auto_class(config, arch).from_config(config, attn_implementation=impl)
    except Exception as default_exc:  # noqa: BLE001 - any failure of transformers' own build
        first = (str(default_exc).strip().splitlines() or [type(default_exc).__name__])[0]
        raise Skip(f"transformers' default {spec.model_type} config does not build either: "
                   f"{type(default_exc).__name__}: {first[:200]}") from exc


_SKIP_RUNTIME = ("No available kernel", "not implemented for", "No viable backend")


def _trial(step: StepLike) -> float:
    """One iteration outside the samples: lazy initialisation stays out of them, and a
    backend the shapes/dtype/device cannot use surfaces as a Skip, not a failure.
    Returns its milliseconds (host clock around the call and its sync)."""
    try:
        step.sync()
        start = time.perf_counter_ns()
        step()
        step.sync()
        elapsed = (time.perf_counter_ns() - start) / 1e6
    except RuntimeError as exc:
        if isinstance(exc, torch.OutOfMemoryError):
            raise
        message = str(exc)
        if any(s in message for s in _SKIP_RUNTIME):
            raise Skip(message.strip().splitlines()[0]) from exc
        raise
    step.reset()
    return elapsed


def build(combo: Any, device: torch.device | str | None = None, *, seed: int = 0) -> BuiltModel:
    """Build ``combo``'s model with random weights on ``device`` (default combo.device),
    its info dict and its Step. Raises Skip for combinations that cannot run here."""
    if combo.model == MICRO:
        from reportgen.profile import (
            micro,  # written alongside; imported only when asked for
        )

        module, info, step = micro.build(combo, device if device is not None else combo.device, seed=seed)
        return BuiltModel(module, info, step)
    spec = spec_of(combo)
    dev = torch.device(device if device is not None else combo.device)
    dtype = torch_dtype(combo.dtype)
    check_dtype(dtype, dev)
    impl, backend = attn_backend(combo.attn_implementation, dev, dtype)
    scale = getattr(combo, "scale", "reference")
    try:
        return _build(combo, spec, dev, dtype, impl, backend, seed, scale)
    except (Skip, UserError, torch.OutOfMemoryError):
        raise
    except Exception as exc:
        if scale != "tiny" or getattr(combo, "layers", None) is not None:
            raise
        first = exc
    # A tiny shrink that broke a width some part of the model ties to another: the same
    # architecture again at its own widths, shrunk in depth (and experts) alone
    free(None)
    try:
        built = _build(combo, spec, dev, dtype, impl, backend, seed, "tiny-depth")
    except (Skip, UserError, torch.OutOfMemoryError):
        raise
    except Exception as second:
        _default_builds(spec, impl, first)
        if (spec.source == "model_type" and type(second) is type(first)
                and str(second) == str(first)):
            # not the shrink: the default config fails the same way at its own widths
            line = (str(first).strip().splitlines() or [""])[0][:200]
            raise Skip(f"transformers' default {spec.model_type} config fails the same way at its "
                       f"own widths: {type(first).__name__}: {line}") from first
        first.add_note(f"at the reference widths too: {type(second).__name__}: "
                       f"{str(second).strip()[:200]}")
        raise first from None
    built.info["tiny"] = ("depth only: the widths are the reference's (shrinking them failed: "
                          f"{type(first).__name__}: {str(first).strip().splitlines()[0][:160]})")
    return built


def _build(combo: Any, spec: ModelSpec, dev: torch.device, dtype: torch.dtype, impl: str,
           backend: Any, seed: int, scale: str) -> BuiltModel:
    needed = positions_needed(combo.mode, combo.seq_len)
    if scale == "tiny-depth":
        config = spec.make_config("reference")
        shrink_config(config, min_positions=needed, widths=False)
        plan = None
    else:
        config, plan = spec.depth_config(scale, min_positions=needed, layers=getattr(combo, "layers", None))
    arch = architecture(config)
    if combo.mode != "forward" and combo.mode not in TRAIN_MODES and arch != "decoder":
        raise Skip(f"{combo.mode} applies to causal LMs; {spec.name} is an {arch}")
    main = main_input(config, arch)
    if main != "input_ids":
        fit_sequence(config, spec.name, main, combo.seq_len)
    # the seed fixes the random weights too (without touching the caller's RNG state), so
    # a rerun computes on the same numbers
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        model = _instantiate(config, arch, impl, dtype, dev, seed, remote_code=spec.remote_code,
                             mode=combo.mode)
    main = getattr(model, "main_input_name", main)
    info = model_info(spec.name, model, arch)
    if spec.hub is not None:
        info["source"] = _json_safe(spec.hub)
    depth = depth_facts(plan, model, spec.name, arch) if plan is not None else None
    built_step: StepLike
    if main == "input_ids":
        _check_positions(model, needed, spec.name)
        built_step = make_step(model, model.config, arch, combo.mode, batch_size=combo.batch_size,
                               seq_len=combo.seq_len, device=dev, backend=backend, seed=seed, name=spec.name)
    else:
        built_step = modality_step(model, model.config, main, batch_size=combo.batch_size,
                                   seq_len=combo.seq_len, device=dev, backend=backend, seed=seed,
                                   name=spec.name)
        if combo.mode in TRAIN_MODES:
            built_step = train_step(built_step, combo.mode)
    try:
        trial_ms = _trial(built_step)
    except BaseException:
        free(BuiltModel(model, info, built_step))
        raise
    return BuiltModel(model, info, built_step, trial_ms, depth)


def free(result: BuiltModel | None) -> None:
    """Drop the model, its inputs and any KV cache, then return cached CUDA blocks."""
    if result is not None:
        step = result.step
        for attr in ("model", "compiled", "kwargs", "cache", "prefill_kwargs", "optimizer"):
            with contextlib.suppress(AttributeError):
                delattr(step, attr)
        result.model = None  # type: ignore[assignment]
        result.step = None  # type: ignore[assignment]
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
