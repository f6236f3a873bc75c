"""The one form of every timestamp reportgen stores: UTC, ISO 8601, ending in ``Z``.

Standard library only, so both sides (and a bare GPU host's workers) write it alike.
"""

from __future__ import annotations

import datetime as _dt

__all__ = ["utc_now"]


def utc_now(*, fraction: bool = True) -> str:
    """Now, as ``2026-12-06T20:09:39.123456Z``; ``fraction=False`` drops the
    microseconds (``2026-12-06T20:09:39Z``) where a person reads the stamp (the
    environment's time, a claim on a combination, a bench file and its figures) rather
    than orders events within a second (a combination's start and end, a device reading)."""
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if fraction else "%Y-%m-%dT%H:%M:%SZ")
