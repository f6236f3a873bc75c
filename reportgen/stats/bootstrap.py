"""Every percentile bootstrap of the project, on two cores that fix its random stream.

``draws`` resamples indices with Python's ``random.Random(seed)``: each replicate draws, for
each set in turn, as many indices as the set holds (the ratio of medians, a median, a
category's share of a forward). ``two_level`` resamples groups, then the values within each
drawn group, with numpy's ``default_rng(seed)`` (samples measured in rounds, the ablation's
pairs): numpy because rounds of hundreds of samples drawn one by one in Python take seconds.
A figure is reproduced only from the same stream, so each caller keeps its own (seed,
replicates, draw order); ``two_level``'s ``picks`` keeps both orders its callers draw in.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from reportgen.stats.basic import median, percentiles

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

T = TypeVar("T")

BOOTSTRAP_REPLICATES = 2000
SHARE_REPLICATES = 1000
CONFIDENCE = 0.95


def draws(statistic: Callable[..., T], sizes: Sequence[int], *, reps: int, seed: int) -> list[T]:
    """``reps`` values of ``statistic(indices, ...)``: each replicate draws, for each n of
    ``sizes`` in turn, n indices in [0, n) with replacement from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [statistic(*[[rng.randrange(n) for _ in range(n)] for n in sizes]) for _ in range(reps)]


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], *, paired: bool = True,
                    reps: int = BOOTSTRAP_REPLICATES, confidence: float = CONFIDENCE, seed: int = 0
                    ) -> tuple[float, float, float]:
    """median(a) / median(b) with a percentile-bootstrap interval.

    ``paired``: a[i] and b[i] come from the same interleaved round, so rounds are resampled
    together (drift between rounds cancels); otherwise each side is resampled alone. A
    replicate whose denominator is zero is left out.
    """
    if not a or not b:
        return (float("nan"),) * 3  # type: ignore[return-value]
    point = median(a) / median(b)

    def ratio(ia: Sequence[int], ib: Sequence[int] | None = None) -> float | None:
        den = median([b[i] for i in (ia if ib is None else ib)])
        return median([a[i] for i in ia]) / den if den else None

    sizes = (len(a),) if paired and len(a) == len(b) else (len(a), len(b))
    kept = [r for r in draws(ratio, sizes, reps=reps, seed=seed) if r is not None]
    return point, *percentiles(kept, confidence)


def bootstrap_median(values: Sequence[float], *, reps: int = BOOTSTRAP_REPLICATES,
                     confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float, float]:
    """Median with a percentile-bootstrap interval."""
    if not values:
        return (float("nan"),) * 3  # type: ignore[return-value]
    meds = draws(lambda idx: median([values[i] for i in idx]), (len(values),), reps=reps, seed=seed)
    return median(values), *percentiles(meds, confidence)


def ratio_of_sums(num: Sequence[float], den: Sequence[float], idx: Sequence[int]) -> float:
    """sum(num[i]) / sum(den[i]) over the indices ``idx`` (0 when the denominator is)."""
    total = sum(den[i] for i in idx)
    return sum(num[i] for i in idx) / total if total > 0 else 0.0


def share_interval(category_ms: Sequence[float], forward_ms: Sequence[float], *,
                   reps: int = SHARE_REPLICATES, confidence: float = CONFIDENCE,
                   seed: int = 0) -> tuple[float, float, float]:
    """Share of a category over repeated iterations with a percentile-bootstrap interval:
    iterations are resampled with replacement and the share recomputed as (sum of the
    category's times) / (sum of the forward times) of each resample."""
    n = len(forward_ms)
    if n == 0 or len(category_ms) != n:
        raise ValueError(f"need one category time per iteration, got {len(category_ms)} "
                         f"for {n} iterations")
    point = ratio_of_sums(category_ms, forward_ms, range(n))
    low, high = percentiles(draws(lambda idx: ratio_of_sums(category_ms, forward_ms, idx), (n,),
                                  reps=reps, seed=seed), confidence)
    return point, min(low, point), max(high, point)


def two_sample_intervals(n_a: int, n_b: int,
                         statistic: Callable[[Sequence[int], Sequence[int]], Mapping[str, float]], *,
                         reps: int = SHARE_REPLICATES, confidence: float = CONFIDENCE,
                         seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap intervals of statistics of two independent sets of iterations
    (two combinations' attributed iterations): each replicate draws ``n_a`` indices into
    the first set and ``n_b`` into the second, with replacement, and evaluates
    ``statistic(indices_a, indices_b)``, a mapping of named values; a non-finite value
    (a zero denominator in a draw) is left out of its name's interval."""
    if n_a < 1 or n_b < 1:
        raise ValueError("two_sample_intervals needs iterations on both sides")
    by_name: dict[str, list[float]] = defaultdict(list)
    for values in draws(statistic, (n_a, n_b), reps=reps, seed=seed):
        for name, value in values.items():
            if math.isfinite(value):
                by_name[name].append(value)
    return {name: percentiles(values, confidence) for name, values in by_name.items()}


def resample(rng: np.random.Generator, groups: Sequence[NDArray[Any]],
             picked: Sequence[int] | NDArray[Any]) -> NDArray[Any]:
    """The picked groups, each resampled with replacement at its own size, end to end."""
    import numpy as np

    return np.concatenate([groups[g][rng.integers(0, len(groups[g]), size=len(groups[g]))] for g in picked])


def two_level(n_groups: int, statistic: Callable[[np.random.Generator, NDArray[Any]], T], *,
              reps: int, seed: int, picks: Literal["upfront", "per-replicate"] = "upfront") -> list[T]:
    """``reps`` values of ``statistic(rng, picked)``: ``picked`` holds ``n_groups`` groups
    drawn with replacement from numpy's ``default_rng(seed)``, and ``statistic`` draws within
    them from the same ``rng`` (``resample``). ``picks``: the groups of every replicate drawn
    first, in one array, or each replicate's just before it (two streams, both in use)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if picks == "upfront":
        return [statistic(rng, row) for row in rng.integers(0, n_groups, size=(reps, n_groups))]
    return [statistic(rng, rng.integers(n_groups, size=n_groups)) for _ in range(reps)]


def bootstrap_medians(rounds: Sequence[Sequence[float]], *, replicates: int = BOOTSTRAP_REPLICATES,
                      seed: int = 0) -> list[float]:
    """Medians of ``replicates`` two-level resamples (rounds, then samples in each): the
    hierarchical bootstrap of a median measured in rounds."""
    import numpy as np

    groups = [np.asarray(r, dtype=float) for r in rounds if len(r)]
    if not groups:
        raise ValueError("no samples")
    return two_level(len(groups), lambda rng, row: float(np.median(resample(rng, groups, row))),
                     reps=replicates, seed=seed)
