"""The ``attention-micro`` model: the post's attention module alone, in six variants.

It reproduces the microbenchmark of the Hugging Face post "Profiling in PyTorch (Part 3):
Attention is all you profile" (https://huggingface.co/blog/torch-attention-profile): the
same causal attention computed naively (out-of-place and in-place masking) and through
``F.scaled_dot_product_attention`` pinned to each backend.

**The measured region is the post's module and nothing else**: ``forward(q, k, v, mask)``
of :class:`PostAttention`, which for the naive variants is ``q @ k^T``, the scaling, the
causal masking (``masked_fill`` or ``masked_fill_``), the softmax and the product with
``v``, and for the SDPA variants the one ``scaled_dot_product_attention`` call under
``sdpa_kernel(<backend>)``. Both the timing and the profiled pass run exactly that call, so
the latency and the kernel count of ``attention.core`` cover the region the post's
counts (naive 6, naive in-place 5, SDPA math 20, the fused backends 1) and times cover.

Outside the region, made once by ``build`` and never timed: the query/key/value tensors
(seeded random ``[B, H, L, D]``, contiguous, as the module receives them), the boolean
causal mask (upper triangle, ``True`` where a query may not look; the SDPA variants get
``None`` and ask for ``is_causal=True``), and no projections or head merge at all. They
would add a model's kernels (two GEMMs, a layout copy, a mask build) to counts the post
made without them.

What is reconstructed, and from which text: the post's scripts are not stored with it.
The signature ``forward(q, k, v, mask)``, the pinned SDPA call and the kernel counts come
from the summary of the post recorded in ``claims/attention-kernels-per-forward.yaml`` and
its siblings; the order of operations in the naive variants is the one that gives the
post's counts (scaling after the first product: one kernel; out-of-place masking: a copy
and a fill, two kernels; in-place: one). ``is_causal=True`` for the SDPA variants follows
from the counts: the flash and cuDNN backends take no explicit mask, and the post reports
one kernel for each. The post's input shape is not stored either; we use 16 heads of 64
(hidden 1024), with batch size and sequence length from the combination.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from reportgen.errors import Skip
from reportgen.profile.dtypes import TORCH_DTYPES
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

# What the pages say about the region; kept with the record (model.config) so a page
# describes the module that measured, not today's code.
MEASURED_REGION = "forward(q, k, v, mask)"  # of the post's attention module
OUTSIDE_REGION = ("q/k/v projections, head split and merge, output projection, "
                  "mask construction, input creation")


class PostAttention(nn.Module):
    """Causal attention over per-head ``q, k, v`` (``[B, H, L, D]``): the post's module.

    ``mask`` is boolean, ``True`` where a query may not look; the SDPA variants ignore it
    and pass ``is_causal=True``. No parameters: the projections are outside the region.
    """

    def __init__(self, variant: str, head_dim: int) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown attention-micro variant {variant!r}; one of {VARIANTS}")
        self.variant = variant
        self.head_dim = head_dim
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        if self.variant.startswith("sdpa-"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert mask is not None, "the naive variants need the causal mask"
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if self.variant == "naive-inplace":
            scores.masked_fill_(mask, float("-inf"))
        else:
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class MicroModel(nn.Module):
    """The model that is measured: a root holding the attention module.

    The profiler never treats the root module as an attention container (the root's own
    ops are ``other``; it has none), so the attention module is a child, as in a model.
    """

    def __init__(self, attn: PostAttention) -> None:
        super().__init__()
        self.attn = attn

    @property
    def variant(self) -> str:
        return self.attn.variant

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = self.attn(q, k, v, mask)
        return out


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """``True`` above the diagonal: the positions a query may not see."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(1)


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


def _probe(variant: str, q: torch.Tensor, device: torch.device, dtype: str) -> None:
    """Raise Skip when the pinned backend has no kernel for these inputs on this device."""
    if variant not in SDPA_BACKENDS or variant == "sdpa-math":
        return
    import warnings

    context = backend_context(variant)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.inference_mode(), context():
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
        except RuntimeError as exc:
            # torch's per-backend reasons arrive as warnings on CUDA; keep them in the reason.
            details = "; ".join(dict.fromkeys(str(w.message).strip() for w in caught))
            reason = f"{variant} cannot run on {device.type} in {dtype}: {str(exc).strip()}"
            if details:
                reason += f" [{details}]"
            raise Skip(reason) from None


class MicroStep:
    """One call of the module on inputs made once, outside the measured region."""

    def __init__(
        self,
        module: MicroModel,
        qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        device: torch.device,
        inputs_info: dict[str, Any],
    ) -> None:
        self.module = module
        self.q, self.k, self.v = qkv
        self.mask = mask
        self.device = device
        self.inputs_info = inputs_info
        self._context = backend_context(module.variant)

    def __call__(self) -> torch.Tensor:
        with torch.inference_mode(), self._context():
            out: torch.Tensor = self.module(self.q, self.k, self.v, self.mask)
        return out

    def reset(self) -> None:
        """Nothing to reset: the module keeps no state between calls."""

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def build(
    combo: Any, device: torch.device | str, *, seed: int | None = None
) -> tuple[MicroModel, dict[str, Any], MicroStep]:
    """Build the variant ``combo.attn_implementation`` on ``device``.

    The inputs (q, k, v) are seeded (``seed``, else ``combo.seed``, else 0); the module has
    no weights.
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

    head_dim = HIDDEN_SIZE // NUM_HEADS
    module = MicroModel(PostAttention(variant, head_dim)).to(device=device).eval()
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, NUM_HEADS, length, head_dim)
    q, k, v = (torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)
               for _ in range(3))
    mask = None if variant.startswith("sdpa-") else causal_mask(length, device)
    _probe(variant, q, device, dtype_name)

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
        "head_dim": head_dim,
        "intermediate_size": None,
        "vocab_size": None,
        "config": {
            "variant": variant,
            "attention_class": type(module.attn).__name__,
            "causal": True,
            "masking": {
                "naive": "masked_fill (out of place)",
                "naive-inplace": "masked_fill_ (in place)",
            }.get(variant, "is_causal=True"),
            "sdpa_backend": SDPA_BACKENDS.get(variant),
            "measured_region": MEASURED_REGION,
            "outside_region": OUTSIDE_REGION,
        },
    }
    inputs_info: dict[str, Any] = {
        "seed": seed,
        "input_shape": list(shape),
        "tokens": batch * length,
        "kv_len": None,
    }
    return module, info, MicroStep(module, (q, k, v), mask, device, inputs_info)
