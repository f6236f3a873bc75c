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
    "other",
    "overhead",
)

ATTENTION_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c.startswith("attention."))
