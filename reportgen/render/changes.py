"""The Changes pages: per suite and hardware, each run against the previous run of the
same suite there (history across library versions), significant changes first.

Page models only: the statistics are `reportgen.render.compare`'s, the Markdown is in
``changes.md.j2`` / ``changes_index.md.j2``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reportgen import schema
from reportgen.errors import UserError
from reportgen.render.compare import Side, compare
from reportgen.render.load import Run

INDEX = "changes/index.md"


def _rel(page: str, target: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def host_drift(bench: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """How far the bench's re-measurement of a suite moved its medians, by hardware: the
    drift between two runs of the same code on the same host, which no interval inside
    one run can show. From the bench's interval-coverage rows (``rel_shift``)."""
    if not bench:
        return {}
    figure = (bench.get("figures") or {}).get("interval_coverage") or {}
    shifts = [abs(float(r["rel_shift"])) for r in figure.get("rows") or []
              if r.get("rel_shift") is not None]
    hardware = (bench.get("environment") or {}).get("hardware")
    if not shifts or not hardware:
        return {}
    ordered = sorted(shifts)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {str(hardware): {"median": median, "max": ordered[-1], "combinations": len(ordered),
                            "measured": figure.get("measured_at") or bench.get("created")}}


def series_pages(runs: Sequence[Run], *, slug: Callable[[str], str], data: Callable[[str], str],
                 page_type: type, bench: Mapping[str, Any] | None = None,
                 validation: str | None = None) -> list[Any]:
    """``page_type(path, template, context)`` for the index and one page per series.

    ``slug`` makes a file name of a series label, ``data`` the docs/ path of a run file;
    ``bench`` (the Validation page's results, at docs/``validation``) gives the host's
    run-to-run drift shown beside each comparison.
    """
    drift = host_drift(bench)
    groups = schema.series(runs)
    current = {r.run_id for r in schema.current_runs(runs)}
    entries = []
    pages = []
    for (hardware, suite), group in groups.items():
        path = f"changes/{slug(f'{hardware}--{suite}')}.md"
        items = []
        for previous, run in zip([None, *group[:-1]], group):
            item: dict[str, Any] = {
                "run_id": run.run_id, "status": run.record.get("status"),
                "started": run.record.get("started"), "current": run.run_id in current,
                "run_json": _rel(path, data(f"{run.rel}/run.json")),
                "previous": previous.run_id if previous is not None else None,
                "comparison": None, "reason": None}
            if previous is not None:
                try:
                    item["comparison"] = compare(_side(previous), _side(run)).as_dict()
                except UserError as exc:
                    item["reason"] = str(exc)
            items.append(item)
        items.reverse()  # newest first
        latest = next((i["comparison"] for i in items if i["comparison"] is not None), None)
        pages.append(page_type(path, "changes.md.j2", {
            "hardware": hardware, "suite": suite, "runs": items, "drift": drift.get(hardware),
            "validation": _rel(path, validation) if validation and hardware in drift else None}))
        entries.append({"hardware": hardware, "suite": suite, "link": _rel(INDEX, path),
                        "runs": len(group), "latest": latest})
    pages.append(page_type(INDEX, "changes_index.md.j2", {"series": entries}))
    return pages


def _side(run: Run) -> Side:
    return Side(label=run.run_id, runs=(schema.Run(path=run.path, record=dict(run.record)),))
