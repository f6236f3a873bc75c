"""The machinery every page of the site is built with, below every module that produces pages.

A page model (``Page``) is a template name, a path under docs/ and a context of plain
values. Paths are built from slugs only, so no run data ends up in a file name or a link
target. ``Builder`` holds what the runs give every page (the current runs, the
combinations frame, slugs, labels) and writes a page's charts and downloads; a producer of
pages (``Producer``: the site's own pages, the findings pages, the Validation page) takes
the builder and returns its pages.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from reportgen.intervals import unstable_reason
from reportgen.records import fields, hardware
from reportgen.records.causes import Cause
from reportgen.records.schema import Run, current_runs
from reportgen.records.status import OK
from reportgen.render import analysis, charts, payoff
from reportgen.render.charts import Chart
from reportgen.render.templating import environment

if TYPE_CHECKING:
    from reportgen.claims.evaluate import CheckReport

DATA_DIR = "data"
"""Copies of the run files under docs/, so raw data and traces are linked from the site."""
ALL_COMBINATIONS = f"{DATA_DIR}/combinations"
"""One table of every combination (``.csv`` and ``.parquet``), for notebooks."""


@dataclass(frozen=True)
class Page:
    path: str  # under docs/, forward slashes
    template: str
    context: Mapping[str, Any]
    charts: tuple[Chart, ...] = field(default=())


def slugify(text: str) -> str:
    out = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return re.sub(r"\.{2,}", ".", out)


def unique_slugs(names: Iterable[str]) -> dict[str, str]:
    """A slug per name; names that share a slug (or have none) get a hash suffix."""
    names = sorted(set(names))
    base = {name: slugify(name) for name in names}
    counts: dict[str, int] = {}
    for s in base.values():
        counts[s] = counts.get(s, 0) + 1
    out: dict[str, str] = {}
    for name in names:
        s = base[name]
        if not s or counts[s] > 1 or s == "index":
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            s = f"{s}-{digest}" if s else digest
        out[name] = s
    return out


def rel(from_page: str, target: str) -> str:
    """Relative link from one docs/ file to another (MkDocs resolves .md targets)."""
    return posixpath.relpath(target, posixpath.dirname(from_page) or ".")


def clean(value: Any) -> Any:
    """NaN becomes None so templates test one thing; numpy scalars become Python."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def clean_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: clean(v) for k, v in row.items()}


def clean_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [clean_row(r) for r in frame.to_dict(orient="records")]


def table_csv(rows: Sequence[Mapping[str, Any]]) -> bytes:
    return frame_csv(pd.DataFrame([dict(r) for r in rows]))


def frame_csv(frame: pd.DataFrame) -> bytes:
    """A table as CSV; a column of whole numbers stored as floats only because it has a
    gap (pandas' float64 for missing values) is written as integers, so a count reads
    29, not 29.0."""
    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if values.dtype.kind == "f":
            known = values.dropna()
            if not known.empty and bool((known == known.round()).all()) and bool((known.abs() < 2**53).all()):
                out[column] = values.astype("Int64")
    return out.to_csv(index=False, lineterminator="\n").encode("utf-8")


def table_json(rows: Sequence[Mapping[str, Any]]) -> bytes:
    cleaned = [{k: clean(v) for k, v in r.items()} for r in rows]
    return (json.dumps(cleaned, indent=1, sort_keys=False, allow_nan=False, default=str)
            + "\n").encode("utf-8")


@dataclass
class SiteModel:
    """All pages of the site and the run files to copy under docs/data/."""

    pages: list[Page]
    data_files: list[tuple[str, str]]  # (path under docs/, source path)
    files: dict[str, bytes] = field(default_factory=dict)  # downloads built from the runs


def _with_share_intervals(frame: pd.DataFrame, runs: Sequence[Run]) -> pd.DataFrame:
    """The combinations frame with each share's interval filled in for a record stored
    before shares carried one, from its attributed iterations (its trace), where it has
    them: every page and download then shows the same interval."""
    if frame.empty:
        return frame
    lows = [c for c in frame.columns if c.startswith("share_ci_low:")]
    lacking = frame[(frame["status"] == OK) & frame[lows].isna().all(axis=1)
                    & frame["trace_rel"].notna()]
    if lacking.empty:
        return frame
    stored = {(run.run_id, str(fields.get(c.record, "id") or c.path.stem)): c
              for run in runs for c in run.combinations}
    frame = frame.copy()
    for index, row in lacking.iterrows():
        combination = stored.get((str(row["run_id"]), str(row["combo_id"])))
        if combination is None:
            continue
        for category, (low, high) in payoff.share_intervals(combination.record, combination.trace).items():
            if f"share_ci_low:{category}" in frame.columns and pd.notna(row.get(f"share:{category}")):
                frame.at[index, f"share_ci_low:{category}"] = low
                frame.at[index, f"share_ci_high:{category}"] = high
    return frame


ChartEmbed = Callable[[str, Mapping[str, Any]], str]
"""A chart callback for Markdown written elsewhere: (name, Vega-Lite spec) -> chart block."""


class Builder:
    """What every page producer reads of the runs, and where its charts and downloads go."""

    def __init__(self, runs: Sequence[Run], report: CheckReport | None = None,
                 bench: Mapping[str, Any] | None = None, site_url: str | None = None,
                 other_benches: Sequence[Mapping[str, Any]] = (), causes: Sequence[Cause] = ()) -> None:
        self.runs = list(runs)
        self.site_url = site_url
        self.causes = list(causes)  # why steps between releases happened (runs/causes.yaml)
        # pages read each suite's current run; earlier runs appear in Runs and Changes
        self.current = current_runs(self.runs)
        self.report = report if report is not None and report.claims else None
        self.bench = bench
        self.other_benches = list(other_benches)  # other hosts' results, newest first
        self.embedded: dict[str, list[Chart]] = {}  # charts of pages written elsewhere
        self.files: dict[str, bytes] = {}  # CSV and JSON behind charts and tables
        # every committed run's rows: each page row carries what reruns of it on the
        # same kind of host gave
        self.every = analysis.combinations_frame(self.runs, latest_only=False)
        self.records = {(run.hardware, str(fields.get(c.record, "id") or c.path.stem)): c.record
                        for run in self.current for c in run.combinations}
        self.frame = analysis.with_reruns(
            _with_share_intervals(analysis.combinations_frame(self.current), self.current), self.every)
        self.runs_by_id = {run.run_id: run for run in self.runs}
        f = self.frame
        self.hw_slugs = unique_slugs(f["hardware"]) if not f.empty else {}
        self.hw_env = hardware.host_environments(self.runs)
        self.hw_labels = {hw: hardware.hardware_label(hw, self.hw_env.get(hw))
                          for hw in {run.hardware for run in self.runs} | set(self.hw_slugs)}
        self.model_slugs = unique_slugs(f["model"]) if not f.empty else {}
        # what each model's lengths count on each hardware (tokens, patches, frames)
        self.sequences: dict[tuple[str, str], str] = {} if f.empty else {
            (str(hw), str(model)): analysis.sequence_of(part)[0]
            for (hw, model), part in f.groupby(["hardware", "model"], sort=True)}
        self.probes: dict[str, Any] = {}  # hardware -> (run id, CPU probe) or None
        self.combo_pages = ({} if f.empty else {
            (str(r), str(c)): self.combo_page(str(h), str(m))
            for r, c, h, m in zip(f["run_id"], f["combo_id"], f["hardware"], f["model"])})

    # paths -----------------------------------------------------------------------------
    def combo_page(self, hw: str, model: str) -> str:
        return f"hardware/{self.hw_slugs[hw]}/{self.model_slugs[model]}.md"

    def hw_page(self, hw: str) -> str:
        return f"hardware/{self.hw_slugs[hw]}/index.md"

    def model_page(self, model: str) -> str:
        return f"models/{self.model_slugs[model]}.md"

    @staticmethod
    def data(rel_path: str) -> str:
        return f"{DATA_DIR}/{rel_path}"

    # shared pieces ---------------------------------------------------------------------
    def chart(self, page: str, name: str, title: str, spec: Mapping[str, Any],
              out: list[Chart]) -> dict[str, Any]:
        chart = Chart(name=name, title=title, spec=spec)
        out.append(chart)
        stem = posixpath.splitext(posixpath.basename(page))[0]
        svg = f"{posixpath.dirname(page)}/charts/{stem}--{name}.svg".lstrip("/")
        return {"name": name, "title": title, "json": chart.json(), "svg": rel(page, svg),
                "svg_path": svg,
                "data": self.table(page, f"{name}-chart", charts.data_rows(spec))}

    def table(self, page: str, name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
        """CSV and JSON of ``rows`` next to ``page``'s charts; their links from ``page``.
        None where there are no rows: the site offers no empty download."""
        if not rows:
            return None
        stem = posixpath.splitext(posixpath.basename(page))[0]
        base = f"{posixpath.dirname(page)}/charts/{stem}--{name}".lstrip("/")
        self.files[f"{base}.csv"] = table_csv(rows)
        self.files[f"{base}.json"] = table_json(rows)
        return {"csv": rel(page, f"{base}.csv"), "json": rel(page, f"{base}.json")}

    def embed_for(self, page: str) -> ChartEmbed:
        """A chart callback for Markdown that another module writes for ``page``."""
        out = self.embedded.setdefault(page, [])

        def embed(name: str, spec: Mapping[str, Any]) -> str:
            spec = {k: v for k, v in spec.items() if k != "$schema"}  # as charts._spec
            title = spec.get("title")
            if isinstance(title, Mapping):
                title = title.get("text")
            slug = slugify(name) or "chart"
            c = self.chart(page, slug, str(title or name), spec, out)
            return environment().get_template("_chart.md.j2").render(c=c).strip("\n")
        return embed

    def provenance(self, run_id: str, record: Mapping[str, Any]) -> dict[str, Any]:
        """Where a figure comes from, for the sentence beside it: its run, when its record
        was finished and the load it was measured under (the contention the record names,
        or none recorded)."""
        return {"run_id": run_id, "when": str(fields.get(record, "finished") or ""),
                "load": unstable_reason(record) or "no contention recorded"}

    def shown_latency(self, hw: str, combo_id: str) -> dict[str, Any] | None:
        """The latency the combination's own page shows (its current record), with the
        run and date it comes from; None where no page shows it."""
        f = self.frame
        if f.empty:
            return None
        rows = f[(f["hardware"] == hw) & (f["combo_id"] == combo_id)]
        if rows.empty:
            return None
        row = rows.iloc[-1]
        run = self.runs_by_id.get(str(row["run_id"]))
        record = next((c.record for c in (run.combinations if run else [])
                       if str(fields.get(c.record, "id") or c.path.stem) == combo_id), None)
        return {"median": clean(row["median"]), "ci_low": clean(row["ci_low"]),
                "ci_high": clean(row["ci_high"]), "confidence": clean(row.get("confidence")),
                **self.provenance(str(row["run_id"]), record or {})}

    def combo_page_of(self, run_id: str, combo_id: str) -> str | None:
        """The page of a combination, for links from the Findings pages."""
        return self.combo_pages.get((run_id, combo_id))


Producer = Callable[[Builder], Iterable[Page]]
"""A producer of pages: the builder in, its pages out (none where it has nothing to show)."""
