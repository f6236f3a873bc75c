"""Figure: unnamed time, the ``other`` plus ``overhead`` share the headline attribution
leaves in each forward of the suite's records (pure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.bench import FAIL, NOT_MEASURED, PASS
from reportgen.records.status import is_ok

REMAINDER_GOAL = 0.10
REMAINDER_QUESTION = (
    "How much of each forward does the headline attribution leave in `other` and "
    "`overhead`, the categories that name no part of the model? Forward and prefill at "
    "reference size must stay at or under 10%; for decode the figure and where it comes "
    "from are shown."
)


def other_overhead(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Figure from the suite's records (pure): the headline method's other + overhead
    share per combination, with its bootstrap interval and, where the hooks method
    recorded it, the largest source."""
    from reportgen.shares import combined_share, headline_section

    rows: list[dict[str, Any]] = []
    for rec in records:
        attribution = fields.get(rec, "attribution") or {}
        if not is_ok(rec) or not attribution.get("categories"):
            continue
        cats = attribution["categories"]
        share = sum(float((cats.get(c) or {}).get("share") or 0.0) for c in ("other", "overhead"))
        section = headline_section(attribution)
        interval = combined_share(section, ["other", "overhead"]) if section else None
        hooks = (attribution.get("methods") or {}).get("hooks") or {}
        sources = hooks.get("other_sources_ms") or {}
        top = max(sources.items(), key=lambda kv: kv[1]) if sources else None
        mode = fields.get(rec, "combination.mode")
        rows.append({"combination": fields.get(rec, "id"), "mode": mode,
                     "method": attribution.get("headline_method") or "profiler",
                     "share": share,
                     "share_low": interval[1] if interval else None,
                     "share_high": interval[2] if interval else None,
                     "judged": mode in ("forward", "prefill"),
                     "largest_source": top[0] if top else None,
                     "largest_source_ms": top[1] if top else None})
    goal = (f"other + overhead at most {REMAINDER_GOAL:.0%} of the forward for forward and "
            "prefill; decode shown with its cause")
    spec = {"kind": "below", "target": REMAINDER_GOAL}
    judged = [r for r in rows if r["judged"]]
    if not judged:
        return figure("Unnamed time (other + overhead)", REMAINDER_QUESTION, value=None,
                      unit="share", goal=goal, goal_spec=spec, status=NOT_MEASURED,
                      notes=["no forward or prefill record"], rows=rows)
    worst = max(judged, key=lambda r: r["share"])
    over = [r for r in judged if r["share"] > REMAINDER_GOAL]
    decode = [r for r in rows if r["mode"] == "decode"]
    notes = [f"{len(judged) - len(over)} of {len(judged)} forward/prefill combinations at or "
             f"under {REMAINDER_GOAL:.0%}; highest {worst['combination']} "
             f"({worst['share']:.1%}, {worst['method']} method)."]
    if decode:
        d = max(decode, key=lambda r: r["share"])
        notes.append(f"Decode: highest {d['combination']} ({d['share']:.1%}); largest source: "
                     f"{d['largest_source'] or 'not recorded'}.")
    return figure("Unnamed time (other + overhead)", REMAINDER_QUESTION,
                  value=worst["share"], unit="share",
                  interval=([worst["share_low"], worst["share_high"]]
                            if worst["share_low"] is not None else None),
                  interval_kind="worst forward/prefill combination, bootstrap over iterations",
                  goal=goal, goal_spec=spec, status=FAIL if over else PASS,
                  notes=notes, rows=rows)
