"""The transformers class a config builds: the architecture read from transformers' own
class mappings (encoder, decoder, encoder-decoder), the auto class of a combination, the
input it reads, and the class built on the meta device (no memory, no weights)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from reportgen.vocabulary import TRAIN_MODES


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


def auto_class(config: Any, arch: str, mode: str = "forward") -> Any:
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


def meta_model(config: Any) -> nn.Module:
    with torch.device("meta"):
        return auto_class(config, architecture(config)).from_config(config)


def main_input(config: Any, arch: str) -> str:
    """The input the class that will be built reads (its ``main_input_name``), from
    transformers' own auto mapping: ``input_ids`` for text, ``pixel_values`` for vision
    encoders, ``input_features`` (a spectrogram) or ``input_values`` (a waveform) for
    speech."""
    try:
        cls = auto_class(config, arch)._model_mapping[type(config)]
    except (KeyError, AttributeError, ValueError):
        return "input_ids"
    return str(getattr(cls, "main_input_name", "input_ids"))
