"""Paired comparisons of two ways of running the same thing (pure Python: both sides).

Interleaving: every comparison alternates its variants within one process, in ABBA order
(A,B then B,A), so slow drift of the host (thermal state, a noisy neighbour) falls on both
sides alike; the rounds stay paired for the bootstrap in ``stats.bootstrap_ratio``. The bench's
comparisons (``reportgen.bench``) and the instrumentation study
(``reportgen.profile.instrumentation``) share these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["interleave"]


def interleave(variants: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each variant once per round, alternating the order; returns values per variant."""
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            out[name].append(float(variants[name]()))
    return out
