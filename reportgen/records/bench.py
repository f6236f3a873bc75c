"""The bench results files (``bench/<hardware>.json``), read one way: their kind and
format version, the figures' order, the validating reader and every host's file in a
directory, newest first. ``reportgen.bench.results`` builds the figures and writes them;
the pages and the README read them here.

A results file is one JSON object::

    {"kind": "reportgen.bench", "schema_version": 1, "created": "...", "quick": false,
     "duration_s": 1234.5, "command": "...", "environment": {...},
     "figures": {"latency_agreement": {<figure>}, ...}}

and each figure::

    {"title": "...", "question": "...", "status": "pass" | "fail" | "info" | "not measured",
     "value": 1.004, "unit": "ratio", "interval": [0.998, 1.010], "interval_kind": "...",
     "goal": "within 3% of 1", "goal_spec": {"kind": "ratio_within", "target": 0.03},
     "notes": ["..."], "rows": [{...}, ...], "duration_s": 12.3}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reportgen.errors import UserError

KIND = "reportgen.bench"
SCHEMA_VERSION = 1

PASS, FAIL, INFO, NOT_MEASURED = "pass", "fail", "info", "not measured"
STATUSES: tuple[str, ...] = (PASS, FAIL, INFO, NOT_MEASURED)

# Display order of the figures on the Validation page (and in the results file).
FIGURES: tuple[str, ...] = (
    "latency_agreement",
    "interval_coverage",
    "profiler_overhead",
    "instrumentation_overhead",
    "attribution_architectures",
    "attribution_ablation",
    "training_latency_agreement",
    "training_ablation",
    "depth_extrapolation",
    "expert_reduction",
    "attribution_remainder",
    "flops_agreement",
    "trace_agreement",
    "harness_efficiency",
    "suite_time",
    "report_time",
    "tiny_effort",
    "reference_effort",
    "contention",
    "isolation_cost",
    "memory_estimate",
    "render_scaling",
)


class ResultsError(ValueError):
    """A results file that cannot be read: wrong kind, newer schema, missing fields."""


def validate(doc: Mapping[str, Any], *, source: str = "results") -> dict[str, Any]:
    """Check kind and version (refusing newer ones), migrate older ones; returns the doc."""
    if doc.get("kind") != KIND:
        raise ResultsError(f"{source}: kind is {doc.get('kind')!r}, expected {KIND!r}")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"{source}: schema_version missing or not an integer")
    if version > SCHEMA_VERSION:
        raise ResultsError(
            f"{source}: schema_version {version} is newer than this reportgen reads "
            f"({SCHEMA_VERSION}); upgrade reportgen"
        )
    # Version 1 is the first; older versions would migrate here step by step.
    figures = doc.get("figures")
    if not isinstance(figures, dict):
        raise ResultsError(f"{source}: 'figures' missing or not an object")
    for name, fig in figures.items():
        for key in ("title", "status", "value", "goal", "notes"):
            if key not in fig:
                raise ResultsError(f"{source}: figure {name!r} lacks {key!r}")
        if fig["status"] not in STATUSES:
            raise ResultsError(f"{source}: figure {name!r} has status {fig['status']!r}")
    return dict(doc)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read bench results: {exc}") from exc


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One results file, validated."""
    p = Path(path)
    return validate(_read(p), source=str(p))


def load_benches(directory: Path) -> list[dict[str, Any]]:
    """Every bench results document in ``directory``, newest first (``bench_files``)."""
    return [doc for _, doc in bench_files(directory)]


def bench_files(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every bench results file in ``directory`` with its document, newest first (by its
    ``created`` stamp, then its name): each host writes its own, and a figure holds on the
    hardware it was measured on.

    JSON files of another kind are ignored; a bench file that cannot be read, or that a
    newer reportgen wrote, is a user error rather than a silently older page.
    """
    if not directory.is_dir():
        return []
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            raw = _read(path)
            if not isinstance(raw, dict) or raw.get("kind") != KIND:
                continue
            found.append((path, validate(raw, source=str(path))))
        except ResultsError as exc:
            raise UserError(str(exc)) from exc
    return sorted(found, key=lambda item: (str(item[1].get("created") or ""), item[0].name), reverse=True)
