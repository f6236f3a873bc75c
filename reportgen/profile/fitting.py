"""What to measure of a combination too big for its device: the most layers that fit
(every kind of layer kept, at full width, as ``--layers`` measures), and, where even the
fewest layers do not fit a mixture of experts, fewer routed experts per layer
(`experts.candidates`: the largest count first) with the most layers that then fit.

The search asks one question, whether an estimate fits (``fits(layers, experts)``: True,
False, or None where the cut is refused, such as fewer layers than the model has kinds);
the pre-flight check answers it from its estimate, so nothing here allocates or knows
how memory is estimated. The estimate grows with the layers kept and with the experts,
so a bisection over the layer counts finds the most.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from reportgen.profile.experts import Routing, candidates

MAX_KINDS = 8  # layer kinds one model mixes, at most, tried when looking for the fewest layers

Fits = Callable[[int, "int | None"], "bool | None"]


@dataclass(frozen=True)
class Reduction:
    """The layers and routed experts a combination is measured with instead of those it
    asked for (None: as asked)."""

    layers: int | None
    experts: int | None
    full_layers: int
    full_experts: int | None

    def words(self) -> str:
        """"measured 6 of 61 layers with 16 of 256 experts"."""
        experts = (f"{self.experts} of {self.full_experts} experts"
                   if self.experts is not None and self.full_experts is not None else "")
        if self.layers is None:
            return f"measured with {experts}"
        return f"measured {self.layers} of {self.full_layers} layers" + (f" with {experts}" if experts else "")


def most_layers(fits: Fits, experts: int | None, ceiling: int) -> int | None:
    """The most layers, at most ``ceiling``, that fit with ``experts``; None where even the
    fewest that keep every kind do not."""
    if ceiling < 1:
        return None
    fewest = 1
    answer = fits(fewest, experts)
    while answer is None and fewest < min(ceiling, MAX_KINDS):
        fewest += 1  # the fewest layers that keep one of every kind
        answer = fits(fewest, experts)
    if not answer:
        return None
    best, low, high = fewest, fewest + 1, ceiling
    while low <= high:
        middle = (low + high) // 2
        if fits(middle, experts):
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


def reduce(fits: Fits, *, total: int, layers: int | None, experts: int | None,
           route: Routing | None) -> Reduction | None:
    """What fits of a combination that asked for ``layers`` (None: all ``total``) and
    ``experts`` (None: all) and does not fit: fewer layers first; then, for a mixture of
    experts whose ``experts`` were not named, each reduced expert count from the largest,
    with the most layers (up to those asked for) that then fit. None where nothing does."""
    ceiling = layers if layers is not None else total
    full_experts = route.experts if route is not None else None
    fewer = most_layers(fits, experts, ceiling - 1)
    if fewer is not None:
        return Reduction(fewer, None, total, full_experts)
    if experts is not None or route is None:
        return None  # experts named on the command line are kept as asked
    for count in candidates(route):
        most = most_layers(fits, count, ceiling)
        if most is not None:
            return Reduction(None if most == ceiling and layers is None else most, count, total, full_experts)
    return None


def applied(combo: Any, reduction: Any) -> Any:
    """``combo`` with a pre-flight section's ``reduced`` layers and experts (``combo``
    itself where there is none)."""
    if not isinstance(reduction, dict):
        return combo
    changes = {k: reduction[k] for k in ("layers", "experts") if reduction.get(k) is not None}
    if not changes:
        return combo
    if isinstance(combo, SimpleNamespace):
        return SimpleNamespace(**{**vars(combo), **changes})
    if isinstance(combo, dict):
        return {**combo, **changes}
    return replace(combo, **changes)
