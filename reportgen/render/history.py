"""The History pages: per hardware and suite, each combination against torch and
transformers releases (``reportgen history``'s runs, one per release set).

For each library the other is held fixed: the transformers history of each torch release
measured, the torch history of each transformers release. Each combination's median (with
its interval) and its category shares are set against the release; each step between two
neighbouring releases is compared as ``reportgen compare`` compares two runs
(``render.compare.compare_records``), against this hardware's measured run-to-run drift:
a step beyond it is marked with the release pair and the categories whose time moved,
one within it is said to be noise.

Page models only: the Markdown is in ``history.md.j2`` / ``history_index.md.j2``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import pandas as pd

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.records.causes import Cause, cause_of, notes_url
from reportgen.records.releases import LIBRARIES, is_history, release_of, version_key
from reportgen.records.schema import Run
from reportgen.render import charts
from reportgen.render.builder import Builder, Page, rel, slugify
from reportgen.render.compare import WITHIN_NOISE, compare_records, host_drift

INDEX = "history/index.md"
# a category's time must move by more than this (relative) to be named in a step, where
# the hardware has no measured drift; with one, by more than the drift
CATEGORY_FLOOR = 0.05
# categories below this share on both sides of a step are not named (their relative moves are noise)
MIN_SHARE = 0.02
MOVED = ("slower", "faster")


@dataclass
class Point:
    """One combination measured in one release set."""

    combo_id: str
    torch: str
    transformers: str
    run_id: str
    status: str
    record: Mapping[str, Any]
    reason: str | None = None

    @property
    def median(self) -> float | None:
        value = fields.number(self.record, "timing.median")
        return None if math.isnan(value) else value

    def shares(self) -> dict[str, float]:
        out = {}
        for cat in CATEGORIES:
            value = fields.number(self.record, ("attribution", "categories", cat, "share"))
            if not math.isnan(value):
                out[cat] = value
        return out

    def release(self, library: str) -> str:
        return self.torch if library == "torch" else self.transformers


@dataclass
class Step:
    library: str
    combo_id: str
    held: str  # the other library's release, held fixed
    base: str
    new: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    change: str
    categories: list[dict[str, Any]] = field(default_factory=list)
    unstable: str | None = None  # a side measured while another process took its cores

    @property
    def marked(self) -> bool:
        return self.change in MOVED

    def text(self) -> str:
        """``gpt2 ...: 12% slower between transformers 5.19 and 5.20: attention.core −31%``."""
        if self.ratio is None:
            return f"{self.combo_id}: not compared between {self.library} {self.base} and {self.new}"
        amount = f"{abs(self.ratio - 1):.0%} {'slower' if self.ratio > 1 else 'faster'}"
        if not self.marked:
            what = ("within this hardware's run-to-run drift" if self.change == WITHIN_NOISE
                    else "no significant difference")
            return f"{self.combo_id}: {amount} between {self.library} {self.base} and {self.new}, {what}"
        moved = ", ".join(f"{c['category']} {_signed(c['change'])}" for c in self.categories)
        return (f"{self.combo_id}: {amount} between {self.library} {self.base} and {self.new}"
                + (f": {moved}" if moved else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"library": self.library, "combination": self.combo_id, "held": self.held, "base": self.base,
                "new": self.new, "ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "change": self.change, "marked": self.marked, "categories": self.categories,
                "unstable": self.unstable, "text": self.text()}


def _signed(x: float) -> str:
    return f"{'+' if x > 0 else '−'}{abs(x):.0%}"


def history_runs(runs: Sequence[Run]) -> dict[tuple[str, str], list[Run]]:
    """A history's runs by (hardware, suite), oldest release first."""
    out: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        if is_history(run.record):
            suite = str((run.record.get("suite") or {}).get("name") or "")
            out.setdefault((run.hardware, suite), []).append(run)
    return {k: sorted(v, key=_release_key) for k, v in sorted(out.items())}


def _release_key(run: Run) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    rel_ = release_of(run.record)
    return (version_key(rel_["torch"] or ""), version_key(rel_["transformers"] or ""),
            str(run.record.get("started") or ""))


def points(runs: Sequence[Run]) -> list[Point]:
    """Every combination of every run, by its release set (a release set measured twice:
    its latest run)."""
    latest: dict[tuple[str, str], Run] = {}
    for run in runs:
        rel_ = release_of(run.record)
        latest[(rel_["torch"] or "?", rel_["transformers"] or "?")] = run  # runs come oldest first
    out = []
    for (torch, transformers), run in sorted(latest.items(), key=lambda kv: (version_key(kv[0][0]),
                                                                          version_key(kv[0][1]))):
        for combo in run.combinations:
            rec = combo.record
            out.append(Point(combo_id=str(fields.get(rec, "id") or combo.path.stem), torch=torch,
                             transformers=transformers, run_id=run.run_id,
                             status=str(fields.get(rec, "status") or ""), record=rec,
                             reason=fields.get(rec, "reason")))
    return out


def moved_categories(base: Point, new: Point, floor: float | None) -> list[dict[str, Any]]:
    """The categories whose time moved by more than ``floor`` (the drift; else
    ``CATEGORY_FLOOR``) between two points, largest move in milliseconds first."""
    bm, nm = base.median, new.median
    if bm is None or nm is None:
        return []
    limit = max(floor or 0.0, CATEGORY_FLOOR)
    sb, sn = base.shares(), new.shares()
    out = []
    for cat in CATEGORIES:
        if cat not in sb or cat not in sn or max(sb[cat], sn[cat]) < MIN_SHARE:
            continue
        t_base, t_new = sb[cat] * bm, sn[cat] * nm
        if t_base <= 0:
            continue
        change = t_new / t_base - 1.0
        if abs(change) > limit:
            out.append({"category": cat, "change": change, "base_ms": t_base, "new_ms": t_new,
                        "base_share": sb[cat], "new_share": sn[cat]})
    return sorted(out, key=lambda c: -abs(c["new_ms"] - c["base_ms"]))


def steps(pts: Sequence[Point], library: str, floor: float | None) -> list[Step]:
    """Each step of each combination from one release of ``library`` to the next measured
    one, the other library held fixed; compared as ``reportgen compare`` compares runs."""
    other = "transformers" if library == "torch" else "torch"
    lines: dict[tuple[str, str], list[Point]] = {}
    for p in pts:
        lines.setdefault((p.combo_id, p.release(other)), []).append(p)
    out = []
    for (combo_id, held), line in sorted(lines.items()):
        line.sort(key=lambda p: version_key(p.release(library)))
        for base, new in zip(line, line[1:]):
            if base.status != "ok" or new.status != "ok":
                out.append(Step(library, combo_id, held, base.release(library), new.release(library),
                                None, None, None, "not comparable"))
                continue
            row = compare_records(base.record, new.record, floor=floor)
            change = str(row["change"])
            out.append(Step(library, combo_id, held, base.release(library), new.release(library),
                            row.get("ratio"), row.get("ci_low"), row.get("ci_high"), change,
                            moved_categories(base, new, floor) if change in MOVED else [],
                            row.get("unstable")))
    return out


def _latency_chart(frame: pd.DataFrame, library: str) -> dict[str, Any]:
    order = sorted(frame["release"].unique().tolist(), key=version_key)
    x = alt.X("release:O", title=f"{library} release", sort=order)
    colour = alt.Color("combination:N", title="combination", scale=alt.Scale(range=list(charts.SERIES_COLOURS)),
                       legend=alt.Legend(orient="bottom", columns=1))
    y = alt.Y("median:Q", title="median latency (ms)", scale=alt.Scale(zero=False))
    line = alt.Chart().mark_line().encode(x=x, y=y, color=colour)
    chart = charts.point_interval(
        value="median", low="ci_low", high="ci_high", along="y", title="median latency (ms)",
        scale=alt.Scale(zero=False), both={"x": x, "color": colour}, under=[line], height=300,
        point={"tooltip": [alt.Tooltip("combination:N"), alt.Tooltip("release:O", title=library),
                           alt.Tooltip("median:Q", format=".4~g"), alt.Tooltip("ci_low:Q", format=".4~g"),
                           alt.Tooltip("ci_high:Q", format=".4~g"),
                           alt.Tooltip("confidence:Q", title="interval level", format=".4~%")]})
    return charts._spec(chart, charts._records(frame))


def _shares_chart(long: pd.DataFrame, library: str) -> dict[str, Any]:
    order = sorted(long["release"].unique().tolist(), key=version_key)
    shown = [c for c in CATEGORIES if c in set(long["category"])]
    chart = alt.Chart(charts._PLACEHOLDER).mark_bar().encode(
        x=alt.X("share:Q", stack="zero", title="share of the time", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("release:O", title=f"{library} release", sort=order),
        color=alt.Color("category:N", scale=charts.category_scale(shown), title="category",
                        legend=alt.Legend(orient="bottom", columns=5, symbolType="square")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("combination:N"), alt.Tooltip("release:O", title=library),
                 alt.Tooltip("category:N"), alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=charts.WIDTH - 120, height=alt.Step(16))
    facet = chart.facet(row=alt.Row("combination:N", title=None,
                                    header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold")))
    return charts._spec(facet.configure_facet(spacing=8), charts._records(long))


def _frames(pts: Sequence[Point], library: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, long = [], []
    for p in pts:
        if p.status != "ok" or p.median is None:
            continue
        rows.append({"combination": p.combo_id, "release": p.release(library), "median": p.median,
                     "ci_low": fields.number(p.record, "timing.ci_low"),
                     "ci_high": fields.number(p.record, "timing.ci_high"),
                     "confidence": fields.number(p.record, "timing.confidence")})
        for order, (cat, share) in enumerate(p.shares().items()):
            if share > 0:
                long.append({"combination": p.combo_id, "release": p.release(library), "category": cat,
                             "order": CATEGORIES.index(cat) if cat in CATEGORIES else order, "share": share})
    return (pd.DataFrame(rows, columns=["combination", "release", "median", "ci_low", "ci_high", "confidence"]),
            pd.DataFrame(long, columns=["combination", "release", "category", "order", "share"]))


def _table(pts: Sequence[Point], library: str) -> list[dict[str, Any]]:
    """One row per combination and release: median, interval, its three largest shares, or why none."""
    out = []
    for p in sorted(pts, key=lambda p: (p.combo_id, version_key(p.release(library)))):
        shares = sorted(p.shares().items(), key=lambda kv: -kv[1])[:3]
        out.append({"combination": p.combo_id, "release": p.release(library), "status": p.status,
                    "reason": p.reason, "median": p.median,
                    "ci_low": fields.get(p.record, "timing.ci_low"), "ci_high": fields.get(p.record, "timing.ci_high"),
                    "confidence": fields.get(p.record, "timing.confidence"),
                    "shares": ", ".join(f"{c} {s:.0%}" for c, s in shares), "run_id": p.run_id})
    return out


def drift_by_hardware(b: Builder) -> dict[str, dict[str, Any]]:
    """This host's run-to-run drift, by hardware, from every bench results file (the newest wins)."""
    out: dict[str, dict[str, Any]] = {}
    for bench in [*reversed(b.other_benches), b.bench]:
        out.update(host_drift(bench))
    return out


def _explained(step: Step, causes: Sequence[Cause]) -> dict[str, Any]:
    """A marked step with its recorded cause (or None) and the new release's notes."""
    cause = cause_of(list(causes), step.library, step.base, step.new, step.combo_id)
    return {**step.as_dict(), "notes_url": notes_url(step.library, step.new),
            "cause": None if cause is None else {"text": cause.cause, "title": cause.source_title,
                                                 "url": cause.source_url, "release": cause.release}}


def sections_for(pts: Sequence[Point], library: str, floor: float | None,
                 causes: Sequence[Cause] = ()) -> list[dict[str, Any]]:
    """One section per release of the other library held fixed: the points, steps and
    table of ``library``'s history there (only where two or more of its releases were measured)."""
    other = "transformers" if library == "torch" else "torch"
    out = []
    for held in sorted({p.release(other) for p in pts}, key=version_key):
        part = [p for p in pts if p.release(other) == held]
        if len({p.release(library) for p in part}) < 2:
            continue
        found = steps(part, library, floor)
        section: dict[str, Any] = {
            "library": library, "other": other, "held": held, "points": part,
            "releases": sorted({p.release(library) for p in part}, key=version_key),
            "marked": [_explained(s, causes) for s in found if s.marked],
            "noise": [s.as_dict() for s in found if not s.marked and s.ratio is not None],
            "not_compared": [s.as_dict() for s in found if s.ratio is None],
            "table": _table(part, library)}
        out.append(section)
    return out


def history_pages(b: Builder) -> list[Page]:
    """The History index and one page per hardware and suite with a history's runs."""
    groups = history_runs(b.runs)
    if not groups:
        return []
    drift = drift_by_hardware(b)
    pages, entries = [], []
    for (hardware, suite), group in groups.items():
        path = f"history/{slugify(f'{hardware}--{suite}')}.md"
        pts = points(group)
        floor = (drift.get(hardware) or {}).get("floor")
        out_charts: list[charts.Chart] = []
        libraries: list[dict[str, Any]] = []
        for library in LIBRARIES:
            secs = sections_for(pts, library, floor, b.causes)
            for sec in secs:
                frame, long = _frames(sec.pop("points"), library)
                stem = f"{library}-{slugify(sec['other'] + '-' + sec['held'])}"
                sec["latency_chart"] = (b.chart(path, f"{stem}-latency", f"Median latency against the {library} "
                                                f"release ({sec['other']} {sec['held']})",
                                                _latency_chart(frame, library), out_charts)
                                        if not frame.empty else None)
                sec["shares_chart"] = (b.chart(path, f"{stem}-shares", f"Category shares against the {library} "
                                               f"release ({sec['other']} {sec['held']})",
                                               _shares_chart(long, library), out_charts)
                                       if not long.empty else None)
                sec["downloads"] = b.table(path, f"{stem}-table", sec["table"])
            libraries.append({"library": library, "sections": secs,
                              "releases": sorted({p.release(library) for p in pts}, key=version_key)})
        skipped = sorted({(p.combo_id, p.torch, p.transformers, str(p.reason)) for p in pts
                          if p.status != "ok"})
        marked = [s for lib in libraries for sec in lib["sections"] for s in sec["marked"]]
        pages.append(Page(path, "history.md.j2", {
            "hardware": hardware, "hardware_label": b.hw_labels.get(hardware, hardware), "suite": suite,
            "libraries": libraries, "drift": drift.get(hardware), "floor": floor,
            "runs": [{"run_id": r.run_id, **release_of(r.record), "status": r.record.get("status"),
                      "started": r.record.get("started")} for r in group],
            "skipped": [{"combination": c, "torch": t, "transformers": x, "reason": r} for c, t, x, r in skipped],
            "marked": marked}, tuple(out_charts)))
        entries.append({"hardware": hardware, "hardware_label": b.hw_labels.get(hardware, hardware),
                        "suite": suite, "link": rel(INDEX, path), "runs": len(group),
                        "torch": libraries[0]["releases"], "transformers": libraries[1]["releases"],
                        "marked": len(marked)})
    pages.append(Page(INDEX, "history_index.md.j2", {"series": entries}))
    return pages
