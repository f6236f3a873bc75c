"""The ``attention-micro`` model: one isolated causal self-attention module in six variants.

It reproduces the microbenchmark of the Hugging Face post "Profiling in PyTorch (Part 3):
Attention is all you profile": the same attention computed naively (out-of-place and
in-place masking) and through ``F.scaled_dot_product_attention`` pinned to each backend.

The post's exact shape is not stored with it; we use hidden 1024 = 16 heads x 64 (a
common GPT-style width that is still quick in fp32 on a CPU at sequence length 1024).
Batch size and sequence length come from the combination.

Kernel counts are part of what the post reports (naive 6, naive in-place 5, SDPA math 20,
the fused backends 1), so the module is laid out so that the ``attention.core`` region holds
only the attention computation:

* the causal mask is built once at ``build`` time (a buffer), not in the forward;
* the output projection (:class:`OutProjection`) merges the heads itself, so the copy
  that turns ``[B, H, L, D]`` back into ``[B, L, H*D]`` is attributed to ``attention.out``
  (the projection that consumes it) rather than inflating the core's count;
* ``naive`` masks with out-of-place ``masked_fill`` (a copy plus a fill: 2 kernels), and
  ``naive-inplace`` with ``masked_fill_`` (1 kernel): the one-kernel difference the post
  measured.

The measured model is :class:`MicroModel`, a root whose child ``attn`` is the attention
module: the profiler never treats the root as an attention container.

With batch size 1 the per-head views of the fused ``qkv`` output need no copies before the
batched matmuls; with a larger batch, ``matmul`` may copy q/k/v first (and those copies are
core kernels, as they would be in any model).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from reportgen.errors import Skip
from reportgen.profile.models import TORCH_DTYPES
from reportgen.vocabulary import ATTENTION_MICRO, SDPA_BACKENDS

NAME = ATTENTION_MICRO
HIDDEN_SIZE = 1024
NUM_HEADS = 16

VARIANTS: tuple[str, ...] = (
    "naive",
    "naive-inplace",
    "sdpa-math",
    "sdpa-efficient",
    "sdpa-flash",
    "sdpa-cudnn",
)


class OutProjection(nn.Linear):
    """Output projection that takes per-head outputs ``[B, H, L, D]``.

    Merging the heads inside the projection keeps the layout copy out of the attention
    core (see the module docstring); it is still a leaf with a 2-D weight, so the profiler
    classifies it as a projection.
    """

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        b, h, length, d = heads.shape
        merged = heads.transpose(1, 2).reshape(b, length, h * d)
        return super().forward(merged)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention; ``variant`` picks how the core is computed."""

    def __init__(self, hidden_size: int, num_heads: int, max_seq_len: int, variant: str) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown attention-micro variant {variant!r}; one of {VARIANTS}")
        if hidden_size % num_heads:
            raise ValueError("hidden_size must be a multiple of num_heads")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.variant = variant
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = OutProjection(hidden_size, hidden_size)
        # True above the diagonal = positions a query may not see. Only the naive variants
        # read it; SDPA builds its own, so they carry no mask in their memory figures.
        mask = None
        if not variant.startswith("sdpa-"):
            mask = torch.ones(max_seq_len, max_seq_len, dtype=torch.bool).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, length, _ = x.shape
        qkv = self.qkv(x).view(b, length, 3, self.num_heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # [3, B, H, L, D], views only
        return qkv[0], qkv[1], qkv[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_heads(x)
        length = x.shape[1]
        if self.variant.startswith("sdpa-"):
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * self.scale
            causal: torch.Tensor = self.causal_mask  # type: ignore[assignment]
            mask = causal[:length, :length]
            if self.variant == "naive-inplace":
                scores.masked_fill_(mask, float("-inf"))
            else:
                scores = scores.masked_fill(mask, float("-inf"))
            heads = torch.softmax(scores, dim=-1) @ v
        out: torch.Tensor = self.out(heads)
        return out


class MicroModel(nn.Module):
    """The model that is measured: a root holding the attention module.

    The profiler never treats the root module as an attention container (the root's own
    ops are ``other``), so the attention module is a child, as it is in a real model.
    """

    def __init__(self, attn: CausalSelfAttention) -> None:
        super().__init__()
        self.attn = attn

    @property
    def variant(self) -> str:
        return self.attn.variant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attn(x)
        return out


def _field(combo: Any, name: str, default: Any = None) -> Any:
    if isinstance(combo, dict):
        return combo.get(name, default)
    return getattr(combo, name, default)


def backend_context(variant: str) -> Callable[[], AbstractContextManager[Any]]:
    """A factory for the context that pins SDPA to the variant's backend (none for naive)."""
    if variant not in SDPA_BACKENDS:
        return nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[variant])
    return lambda: sdpa_kernel(backend)


def _probe(variant: str, module: MicroModel, x: torch.Tensor, device: torch.device, dtype: str) -> None:
    """Raise Skip when the pinned backend has no kernel for these inputs on this device."""
    if variant not in SDPA_BACKENDS or variant == "sdpa-math":
        return
    import warnings

    context = backend_context(variant)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.inference_mode(), context():
                q, k, v = module.attn.split_heads(x)
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
        except RuntimeError as exc:
            # torch's per-backend reasons arrive as warnings on CUDA; keep them in the reason.
            details = "; ".join(dict.fromkeys(str(w.message).strip() for w in caught))
            reason = f"{variant} cannot run on {device.type} in {dtype}: {str(exc).strip()}"
            if details:
                reason += f" [{details}]"
            raise Skip(reason) from None


class MicroStep:
    """One forward of the attention module, as the timing and profiling passes call it."""

    def __init__(
        self,
        module: MicroModel,
        hidden: torch.Tensor,
        device: torch.device,
        inputs_info: dict[str, Any],
    ) -> None:
        self.module = module
        self.hidden = hidden
        self.device = device
        self.inputs_info = inputs_info
        self._context = backend_context(module.variant)

    def __call__(self) -> torch.Tensor:
        with torch.inference_mode(), self._context():
            out: torch.Tensor = self.module(self.hidden)
        return out

    def reset(self) -> None:
        """Nothing to reset: the module keeps no state between forwards."""

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def build(
    combo: Any, device: torch.device | str, *, seed: int | None = None
) -> tuple[MicroModel, dict[str, Any], MicroStep]:
    """Build the variant ``combo.attn_implementation`` on ``device``.

    Weights and the input hidden states are seeded (``seed``, else ``combo.seed``, else 0).
    Raises Skip when the variant cannot run here (a backend without a kernel for this
    device and dtype, a mode other than forward).
    """
    device = torch.device(device)
    variant = str(_field(combo, "attn_implementation", "naive"))
    if variant not in VARIANTS:
        raise Skip(f"attention-micro has no variant {variant!r}; variants: {', '.join(VARIANTS)}")
    mode = _field(combo, "mode", "forward")
    if mode not in (None, "forward"):
        raise Skip(f"attention-micro measures the forward pass only, not mode {mode!r}")
    dtype_name = str(_field(combo, "dtype", "fp32"))
    if dtype_name not in TORCH_DTYPES:
        raise Skip(f"attention-micro does not support dtype {dtype_name!r}")
    dtype = TORCH_DTYPES[dtype_name]
    batch = int(_field(combo, "batch_size", 1) or 1)
    length = int(_field(combo, "seq_len", 1024) or 1024)
    if seed is None:
        seed = int(_field(combo, "seed", 0) or 0)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = MicroModel(CausalSelfAttention(HIDDEN_SIZE, NUM_HEADS, length, variant))
    module = module.to(device=device, dtype=dtype).eval()

    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, HIDDEN_SIZE, generator=generator)
    hidden = hidden.to(device=device, dtype=dtype)
    _probe(variant, module, hidden, device, dtype_name)

    parameters = sum(p.numel() for p in module.parameters())
    info: dict[str, Any] = {
        "name": NAME,
        "model_type": NAME,
        "architecture": "attention",
        "class": type(module).__name__,
        "parameters": parameters,
        "num_layers": 1,
        "hidden_size": HIDDEN_SIZE,
        "num_heads": NUM_HEADS,
        "num_kv_heads": NUM_HEADS,
        "head_dim": module.attn.head_dim,
        "intermediate_size": None,
        "vocab_size": None,
        "config": {
            "variant": variant,
            "attention_class": type(module.attn).__name__,
            "causal": True,
            "bias": True,
            "masking": {
                "naive": "masked_fill (out of place)",
                "naive-inplace": "masked_fill_ (in place)",
            }.get(variant, "is_causal=True"),
            "sdpa_backend": SDPA_BACKENDS.get(variant),
        },
    }
    inputs_info: dict[str, Any] = {
        "seed": seed,
        "input_shape": [batch, length, HIDDEN_SIZE],
        "tokens": batch * length,
        "kv_len": None,
    }
    return module, info, MicroStep(module, hidden, device, inputs_info)
