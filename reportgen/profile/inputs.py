"""Seeded inputs for a built model, in the `Step` of its mode (`reportgen.profile.modes`):
token ids for text (`make_step`: every mode, ``decode-nocache`` included), and for vision
and speech encoders images of ``seq_len`` patches or ``seq_len`` frames (`fit_sequence`
sizes their config, `modality_step` draws them)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from reportgen.errors import Skip, UserError
from reportgen.profile.layers import first as _first
from reportgen.profile.layers import get as _get
from reportgen.profile.layers import has as _has
from reportgen.profile.layers import is_int as _int
from reportgen.profile.layers import set_ as _set
from reportgen.profile.modes import DecodeStep, Step, train_step
from reportgen.profile.shrink import TINY_VOCAB
from reportgen.vocabulary import DECODE_NOCACHE, MODES, TRAIN_MODES


def random_ids(shape: tuple[int, ...], vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Seeded token ids in [1, vocab): drawn on the CPU so a seed means the same ids on
    every device; id 0 (often padding) is avoided so inputs are never all zeros."""
    return torch.randint(1, max(2, vocab_size), shape, generator=generator, dtype=torch.long)


def forward_params(model: nn.Module) -> set[str]:
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
    params = forward_params(model)
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


# A model's main input -> what its sequence length counts.
SEQUENCES: dict[str, str] = {"input_ids": "tokens", "pixel_values": "patches",
                             "input_features": "frames", "input_values": "frames"}


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
    params = forward_params(model)
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
