"""Pure statistics, one implementation of each: the median, its 95% order-statistic interval,
quantiles and percentile intervals (`basic`); the one significance test (`significance`:
Mann-Whitney U on raw samples, interval overlap where samples are too few); Hodges-Lehmann
estimates, the ratio of two sample sets with its interval among them (`hl`); every
bootstrap (`bootstrap`); straight and log-log least-squares fits (`fit`).

Only the bootstraps and the one-sample Hodges-Lehmann estimate use numpy, imported when
called: the render side imports this package and the timing loop calls it often.
"""

from reportgen.stats.basic import (
    CI_METHOD,
    MIN_EXACT_N,
    coverage,
    median,
    median_ci,
    median_ci_exact,
    order_statistic_rank,
    percentiles,
    quantile,
    rel_halfwidth,
    summarize,
)
from reportgen.stats.bootstrap import (
    bootstrap_median,
    bootstrap_medians,
    bootstrap_ratio,
    ratio_of_sums,
    share_interval,
    two_sample_intervals,
)
from reportgen.stats.fit import (
    MIN_FIT_POINTS,
    linear_fit,
    linear_fit_stats,
    loglog_fit,
    loglog_fit_stats,
    mean_band,
    t95,
)
from reportgen.stats.hl import MAX_PAIR_SIDE, hodges_lehmann, ratio_ci
from reportgen.stats.significance import (
    ALPHA,
    EXACT_MAX_N,
    Difference,
    difference,
    mann_whitney_u,
    min_p_value,
)

__all__ = [
    "ALPHA", "CI_METHOD", "EXACT_MAX_N", "MAX_PAIR_SIDE", "MIN_EXACT_N", "MIN_FIT_POINTS", "Difference",
    "bootstrap_median", "bootstrap_medians", "bootstrap_ratio", "coverage", "difference",
    "hodges_lehmann", "linear_fit", "linear_fit_stats", "loglog_fit", "loglog_fit_stats", "mann_whitney_u",
    "mean_band",
    "median", "median_ci", "median_ci_exact", "min_p_value", "order_statistic_rank", "percentiles", "quantile",
    "ratio_ci", "ratio_of_sums", "rel_halfwidth", "share_interval", "summarize", "t95",
    "two_sample_intervals",
]
