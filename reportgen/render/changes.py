"""The Changes pages: per suite and hardware, each run against the previous run of the
same suite there (history across library versions), significant changes first.

Page models only: the statistics are `reportgen.render.compare`'s, the Markdown is in
``changes.md.j2`` / ``changes_index.md.j2``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reportgen.errors import UserError
from reportgen.records import fields, schema
from reportgen.records.releases import is_history
from reportgen.records.schema import Run
from reportgen.render.builder import rel
from reportgen.render.compare import Side, compare, host_drift

INDEX = "changes/index.md"


def series_pages(runs: Sequence[Run], *, slug: Callable[[str], str], data: Callable[[str], str],
                 page_type: type, bench: Mapping[str, Any] | None = None,
                 validation: str | None = None, history: str | None = None) -> list[Any]:
    """``page_type(path, template, context)`` for the index and one page per series.

    ``slug`` makes a file name of a series label, ``data`` the docs/ path of a run file;
    ``bench`` (the Validation page's results, at docs/``validation``) gives the host's
    run-to-run drift shown beside each comparison. A history's runs (one per torch and
    transformers release set) are left to the History pages (``history``, the docs/ path
    of their index): a series compares the suite's own runs, measured one after another.
    """
    drift = host_drift(bench)
    releases = [r for r in runs if is_history(r.record)]
    groups = schema.series([r for r in runs if not is_history(r.record)])
    current = {r.run_id for r in schema.current_runs(runs)}
    entries = []
    pages = []
    for (hardware, suite), group in groups.items():
        path = f"changes/{slug(f'{hardware}--{suite}')}.md"
        items = []
        for previous, run in zip([None, *group[:-1]], group):
            item: dict[str, Any] = {
                "run_id": run.run_id, "status": fields.run_get(run.record, "status"),
                "started": fields.run_get(run.record, "started"), "current": run.run_id in current,
                "run_json": rel(path, data(f"{run.rel}/run.json")),
                "previous": previous.run_id if previous is not None else None,
                "comparison": None, "reason": None}
            if previous is not None:
                try:
                    item["comparison"] = compare(_side(previous), _side(run), drift=drift).as_dict()
                except UserError as exc:
                    item["reason"] = str(exc)
            items.append(item)
        items.reverse()  # newest first
        latest = next((i["comparison"] for i in items if i["comparison"] is not None), None)
        pages.append(page_type(path, "changes.md.j2", {
            "hardware": hardware, "suite": suite, "runs": items, "drift": drift.get(hardware),
            "validation": rel(path, validation) if validation and hardware in drift else None}))
        entries.append({"hardware": hardware, "suite": suite, "link": rel(INDEX, path),
                        "runs": len(group), "latest": latest})
    pages.append(page_type(INDEX, "changes_index.md.j2", {
        "series": entries, "history_runs": len(releases),
        "history": rel(INDEX, history) if history and releases else None}))
    return pages


def _side(run: Run) -> Side:
    return Side(label=run.run_id, runs=(run,))
