"""The attribution categories, in display order (no torch here: both sides use it)."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "embeddings",
    "attention.qkv",
    "attention.indexer",
    "attention.core",
    "attention.out",
    "mixer",
    "mlp",
    "moe.router",
    "moe.experts",
    "moe.shared",
    "norm",
    "residual",
    "head",
    "optimizer",
    "compiled",
    "other",
    "overhead",
)

ATTENTION_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c.startswith("attention."))
# A mixture-of-experts layer's two parts: together they take the place of the dense MLP.
MOE_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c.startswith("moe."))
# Categories only some architectures have (a sparse attention's indexer, state-space and
# hybrid models, mixtures of experts, several residual streams): tables show them where a
# row has them, so a dense model's table keeps its columns and older records (written
# before these existed) read as not having them.
ARCHITECTURE_CATEGORIES: tuple[str, ...] = ("attention.indexer", "mixer", *MOE_CATEGORIES, "residual")
# The optimizer's step exists only in a training step with an optimizer (mode ``train``).
OPTIMIZER = "optimizer"
# Every category a table shows only where a row has it: the architecture categories and
# the optimizer (a forward, or a training step without the optimizer, has none).
OPTIONAL_CATEGORIES: tuple[str, ...] = (*ARCHITECTURE_CATEGORIES, OPTIMIZER)

# What each category holds, for pages and legends.
DESCRIPTIONS: dict[str, str] = {
    "embeddings": "token and position embeddings",
    "attention.qkv": "the query, key and value projections",
    "attention.indexer": ("a sparse attention's indexer: its own projections and scores that pick "
                          "the positions each query attends to (DeepSeek sparse attention)"),
    "attention.core": "scores, softmax and the weighted sum (the attention call itself)",
    "attention.out": "the attention output projection",
    "mixer": ("token mixers other than softmax attention, with their projections: "
              "state-space scans (Mamba), linear and gated-delta attention, short convolutions"),
    "mlp": "the dense feed-forward block: its projections and activation",
    "moe.router": ("a mixture-of-experts layer outside its experts: the router's gate, top-k, "
                   "the dispatch to and combination of the experts' outputs, and zero-compute "
                   "(identity) experts, which are only that scaling"),
    "moe.experts": ("the routed experts of a mixture-of-experts layer (records written before "
                    "moe.shared existed count the shared experts here too)"),
    "moe.shared": "the shared experts of a mixture-of-experts layer, which every token goes through",
    "norm": "layer and RMS norms",
    "residual": ("the mixing of several residual streams a layer keeps side by side "
                 "(DeepSeek-V4's hyper-connections, Gemma 3n's alternating updates): computing "
                 "the mixing weights, collapsing the streams into the one its attention or MLP "
                 "reads, expanding and adding its output back, and collapsing them at the end "
                 "(their norms stay norm; a single stream's residual adds stay other)"),
    "head": "output embeddings, poolers and task heads",
    "optimizer": ("the optimizer's step in a training step (AdamW: its moment updates and the "
                  "parameter update) and clearing the gradients; only in mode train"),
    "compiled": ("kernels of a torch.compile'd forward that no module can be named for: fused "
                 "kernels and library calls inside a compiled graph, where module boundaries "
                 "do not survive"),
    "other": "ops inside the forward that belong to no category above (residual adds, masks)",
    "overhead": "forward time outside any op (Python, dispatch, guards); on a GPU, device idle time",
}
