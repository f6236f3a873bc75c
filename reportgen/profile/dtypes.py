"""The torch dtype of each precision a suite names (``vocabulary.DTYPES``)."""

from __future__ import annotations

import torch

TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
