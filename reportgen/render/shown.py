"""Which categories a table or chart shows: the one rule, for every page, download and
command that lists one column or row per category.

Every category is shown, except the ``OPTIONAL_CATEGORIES``: the architecture categories
(``attention.indexer``, ``mixer``, ``moe.router``, ``moe.experts``, ``moe.shared``),
which only some models have, and
``optimizer``, which only a training step with an optimizer has. A table shows one only
where at least one of its rows has a non-zero value for it. A table of dense models keeps the columns it
had before these categories existed, and a record written before them (which lacks their
keys) reads as not having them: never as a 0 that would show the column.

Plain Python (no pandas, no torch): ``reportgen compare`` and ``reportgen summary`` use
it as well as the site.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reportgen.categories import CATEGORIES, OPTIONAL_CATEGORIES

__all__ = ["category_present", "shown_categories"]


def _nonzero(value: Any) -> bool:
    if isinstance(value, Mapping):  # an attribution entry: {"ms": ..., "share": ...}
        return _nonzero(value.get("share")) or _nonzero(value.get("ms"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False  # missing (None) or not a number: not present
    return not math.isnan(value) and value != 0


def category_present(row: Mapping[str, Any], category: str) -> bool:
    """Whether ``row`` has a non-zero value for ``category``. A row is any of:

    * a category -> value mapping (``attribution.categories`` of a record, whose values
      are entries with ``share`` and ``ms``; or a ``shares`` mapping of plain numbers);
    * a long row: ``{"category": ..., "share": ..., "ms": ...}`` (one row per category);
    * a wide row of the combinations frame: ``share:<category>`` and ``ms:<category>``.
    """
    if row.get("category") == category and (_nonzero(row.get("share")) or _nonzero(row.get("ms"))):
        return True
    return (_nonzero(row.get(category)) or _nonzero(row.get(f"share:{category}"))
            or _nonzero(row.get(f"ms:{category}")))


def shown_categories(rows: Any) -> tuple[str, ...]:
    """The categories, in display order, that a table or chart of ``rows`` lists: all of
    ``CATEGORIES`` but the optional categories (architecture ones, optimizer) no row has a
    non-zero value for.

    ``rows``: an iterable of rows of any form ``category_present`` reads, or a pandas
    DataFrame of them (its records are read)."""
    if hasattr(rows, "to_dict"):  # a DataFrame; read without importing pandas here
        rows = rows.to_dict(orient="records")
    rows = [r for r in (rows or ()) if isinstance(r, Mapping)]
    present = {c for c in OPTIONAL_CATEGORIES if any(category_present(r, c) for r in rows)}
    return tuple(c for c in CATEGORIES if c not in OPTIONAL_CATEGORIES or c in present)

