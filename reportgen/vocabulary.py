"""The names a suite is made of, defined once: modes, dtypes, scales, devices, attention
implementations. Torch-free; the profile side maps these names to torch objects."""

from __future__ import annotations

# ``decode`` generates one token against a KV cache of ``seq_len`` tokens; ``decode-nocache``
# generates the same token by recomputing the whole prefix (``seq_len + 1`` tokens, no
# cache): the pair measures what the KV cache saves.
# ``train`` is one training step: the forward with its loss, the backward and an AdamW
# optimizer step; ``train-nooptim`` the same without the optimizer step (forward and
# backward only), so the pair isolates what the optimizer costs.
MODES: tuple[str, ...] = ("forward", "prefill", "decode", "decode-nocache", "train", "train-nooptim")
DECODE_NOCACHE = "decode-nocache"
TRAIN = "train"
TRAIN_NOOPTIM = "train-nooptim"
# Modes that run a backward pass (and keep activations for it); every architecture has them.
TRAIN_MODES: tuple[str, ...] = (TRAIN, TRAIN_NOOPTIM)
# The parts of one training step, in order: each has its share of the step.
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
# Modes that produce token ``seq_len + 1``: the model needs that many positions.
NEXT_TOKEN_MODES: tuple[str, ...] = ("decode", DECODE_NOCACHE)


def positions_needed(mode: str, seq_len: int) -> int:
    """The longest sequence a combination's model sees (its position tables must fit it)."""
    return int(seq_len) + (1 if mode in NEXT_TOKEN_MODES else 0)
DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16")
SCALES: tuple[str, ...] = ("tiny", "reference")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
ARCHITECTURES: tuple[str, ...] = ("encoder", "decoder", "encoder-decoder")

# The isolated attention micro-benchmark model (not a transformers model).
ATTENTION_MICRO = "attention-micro"

# SDPA pinned to one backend: implementation name -> torch.nn.attention.SDPBackend member.
SDPA_BACKENDS: dict[str, str] = {
    "sdpa-math": "MATH",
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
}
# Variants that exist only in the micro-benchmark (hand-written attention).
MICRO_ONLY: tuple[str, ...] = ("naive", "naive-inplace")
ATTN_IMPLEMENTATIONS: tuple[str, ...] = ("eager", "sdpa", *SDPA_BACKENDS, "flash_attention_2", *MICRO_ONLY)

# torch.compile modes a suite can ask for; "none" runs the model eagerly. The others are
# torch.compile's own ``mode`` names.
COMPILE_NONE = "none"
COMPILE_MODES: tuple[str, ...] = (COMPILE_NONE, "default", "reduce-overhead", "max-autotune")

# Studies a suite can ask for (``studies = [...]`` in ``[settings]``): extra
# measurements run in a combination's profiled round, each recorded under
# ``studies.<name>`` (reportgen.profile.studies maps a name to its code).
STUDIES: tuple[str, ...] = ("instrumentation", "tools")
