"""A category's share of the forward as a record stores it: ``attribution.categories
[<category>]`` with ``share`` and, where the record has one, its interval ``share_low`` /
``share_high``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple


class Share(NamedTuple):
    value: float
    low: float | None  # None: the record holds no interval
    high: float | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def category_share(record: Mapping[str, Any], category: str) -> Share | None:
    """``category``'s share in ``record``'s headline attribution; None where the record has
    no attribution or not that category (a category a model lacks is absent, not 0)."""
    categories = (record.get("attribution") or {}).get("categories") or {}
    entry = categories.get(category)
    if not isinstance(entry, Mapping):
        return None
    value = _number(entry.get("share"))
    if value is None:
        return None
    low, high = _number(entry.get("share_low")), _number(entry.get("share_high"))
    if low is None or high is None:
        low = high = None
    return Share(value, low, high)
