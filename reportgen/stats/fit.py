"""Least-squares lines, straight (``linear_fit_stats``: a cost linear in a count) and
log-log (a power law's exponent), with their goodness of fit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares of y = slope * x + intercept; returns ``(slope, intercept)``."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if len(xs) < 2:
        raise ValueError("a fit needs at least two points")
    mx = math.fsum(xs) / len(xs)
    my = math.fsum(ys) / len(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a fit needs at least two distinct x values")
    slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def loglog_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares of ln(y) = exponent * ln(x) + intercept; returns
    ``(exponent, intercept)`` with the intercept in natural-log units."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if any(x <= 0 for x in xs) or any(y <= 0 for y in ys):
        raise ValueError("log-log fit needs positive values")
    try:
        return linear_fit([math.log(x) for x in xs], [math.log(y) for y in ys])
    except ValueError as exc:
        raise ValueError(f"log-log fit: {exc}") from None


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond, 1.96 + a
# first-order correction (error below 0.001 from 30 on).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
MIN_FIT_POINTS = 3
"""A power law is reported only when fitted through at least three x values: a line
through two points always fits (R² = 1) and says nothing about the exponent's error."""


def t95(df: int) -> float:
    if df < 1:
        raise ValueError("t quantile needs at least one degree of freedom")
    return _T95[df - 1] if df <= len(_T95) else 1.959964 + 2.4 / df


def _fit_stats(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """The straight line through (xs, ys) with its goodness of fit: ``slope``,
    ``intercept``, ``r2`` and the slope's 95% interval (Student's t on n - 2 degrees of
    freedom)."""
    if len(set(xs)) < MIN_FIT_POINTS:
        raise ValueError(f"a reported fit needs at least {MIN_FIT_POINTS} distinct x values")
    slope, intercept = linear_fit(xs, ys)
    mx = math.fsum(xs) / len(xs)
    my = math.fsum(ys) / len(ys)
    ss_res = math.fsum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = math.fsum((y - my) ** 2 for y in ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    df = len(xs) - 2
    half = t95(df) * math.sqrt(ss_res / df / sxx)
    return {"slope": slope, "intercept": intercept, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "ci_low": slope - half, "ci_high": slope + half, "points": float(len(xs)),
            "x_mean": mx, "sxx": sxx, "residual_sd": math.sqrt(ss_res / df)}


def mean_band(fit: Mapping[str, float], x: float) -> float:
    """The half-width at ``x`` of the 95% confidence band of a fitted line's mean (a fit
    from :func:`linear_fit_stats` or :func:`loglog_fit_stats`, on the axes it was fitted on;
    Student's t on n - 2 degrees of freedom)."""
    n = int(fit["points"])
    return t95(n - 2) * fit["residual_sd"] * math.sqrt(1 / n + (x - fit["x_mean"]) ** 2 / fit["sxx"])


def linear_fit_stats(xs: Sequence[float], ys: Sequence[float]) -> dict[str, Any]:
    """:func:`linear_fit` with its goodness of fit: ``slope``, ``intercept``, ``r2``, the
    slope's 95% interval (``ci_low``, ``ci_high``) and each point's ``residuals`` (y less
    the line, in y's units). Needs :data:`MIN_FIT_POINTS` distinct x values."""
    out: dict[str, Any] = dict(_fit_stats(xs, ys))
    out["residuals"] = [y - (out["intercept"] + out["slope"] * x) for x, y in zip(xs, ys)]
    return out


def loglog_fit_stats(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """:func:`loglog_fit` with its goodness of fit: ``exponent``, ``intercept``, ``r2``
    and the exponent's 95% interval (``ci_low``, ``ci_high``; Student's t on n - 2
    degrees of freedom). Needs :data:`MIN_FIT_POINTS` distinct x values."""
    if any(x <= 0 for x in xs) or any(y <= 0 for y in ys):
        raise ValueError("log-log fit needs positive values")
    out = _fit_stats([math.log(x) for x in xs], [math.log(y) for y in ys])
    out["exponent"] = out.pop("slope")
    return out
