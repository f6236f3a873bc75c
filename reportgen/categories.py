"""The attribution categories, in display order (no torch here: both sides use it)."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "embeddings",
    "attention.qkv",
    "attention.core",
    "attention.out",
    "mlp",
    "norm",
    "head",
    "compiled",
    "other",
    "overhead",
)

ATTENTION_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c.startswith("attention."))

# What each category holds, for pages and legends.
DESCRIPTIONS: dict[str, str] = {
    "embeddings": "token and position embeddings",
    "attention.qkv": "the query, key and value projections",
    "attention.core": "scores, softmax and the weighted sum (the attention call itself)",
    "attention.out": "the attention output projection",
    "mlp": "the feed-forward block: its projections and activation",
    "norm": "layer and RMS norms",
    "head": "output embeddings, poolers and task heads",
    "compiled": ("kernels of a torch.compile'd forward that no module can be named for: fused "
                 "kernels and library calls inside a compiled graph, where module boundaries "
                 "do not survive"),
    "other": "ops inside the forward that belong to no category above (residual adds, masks)",
    "overhead": "forward time outside any op (Python, dispatch, guards); on a GPU, device idle time",
}
