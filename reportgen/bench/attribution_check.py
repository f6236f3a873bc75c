"""Figure 3: attribution checked without model-specific code, one module per figure.

(a) Breadth (``attribution_breadth``): many transformers text architectures at tiny scale
    go through reportgen's profiled pass; the shares must sum to 1 and ``attention.core``
    must be found.
(b) Ablation: at reference size, a target category's work (the attention core; a
    mixture-of-experts model's experts, its router kept; a hybrid's token mixers) is
    replaced by a stand-in of negligible cost (``ablation``: the stand-ins and the
    agreement rule); the drop in unprofiled forward time is an independent estimate of
    that work's cost, compared with what each attribution method attributes to the
    category and the stand-in removes. Measured in rounds, each combination of a round in
    a fresh process of its own (``ablation_rounds``), summed up as a figure
    (``ablation_figure``).
(c) Unnamed time (``attribution_remainder``): the ``other`` plus ``overhead`` share of the
    suite's forwards.

The names below are the figures' entry points, as the bench and its tests call them.
"""

from __future__ import annotations

from reportgen.bench.ablation_figure import ablation_row, ablation_summary, merge_ablation
from reportgen.bench.ablation_rounds import (
    Target,
    ablation,
    ablation_policy,
    paired_forwards,
    precise,
)
from reportgen.bench.attribution_breadth import ARCHITECTURES, QUICK_ARCHITECTURES, architectures
from reportgen.bench.attribution_remainder import other_overhead

__all__ = ["ARCHITECTURES", "QUICK_ARCHITECTURES", "Target", "ablation", "ablation_policy", "ablation_row",
           "ablation_summary", "architectures", "merge_ablation", "other_overhead", "paired_forwards", "precise"]
