"""Compare two sets of measurements: per combination the latency ratio NEW/BASE with its
interval and the project's significance test, per category the change in time share.

Pure functions over stored records (``reportgen.records.schema``); no torch, no pandas. Used by
``reportgen compare`` and by the site's Changes pages.

A side is a run directory or a filter over a runs tree (``KEY=VALUE[,KEY=VALUE...]``,
values may be shell-style globs):

* run keys: ``hardware``, ``suite``, ``run`` (the run id), ``commit`` (git commit), ``python``
  and any library of the environment record (``transformers``, ``torch``, ``numpy``, ...);
* combination keys: ``model``, ``scale``, ``mode``, ``dtype``, ``attn``, ``batch``, ``seq``,
  ``device``, ``layers`` (``--layers``: None for a whole model).

Combinations are paired by their settings and hardware, leaving out the keys the two
sides filter on with different values (``attn=eager`` against ``attn=sdpa`` pairs each
eager combination with its SDPA twin; ``hardware=a`` against ``hardware=b`` pairs across
hardware). Where a side holds the same combination in several runs, the latest run's
record is used.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen import depth, stats
from reportgen.categories import CATEGORIES
from reportgen.errors import UserError
from reportgen.intervals import unstable_reason
from reportgen.records import fields, paths
from reportgen.records.schema import Run, iter_runs, load_run
from reportgen.records.status import is_ok
from reportgen.render.shown import shown_categories

COMBINATION_KEYS: dict[str, str] = {
    "model": "model", "scale": "scale", "mode": "mode", "dtype": "dtype",
    "attn": "attn_implementation", "batch": "batch_size", "seq": "seq_len", "device": "device",
    "layers": "layers",  # absent (the whole model) in records of whole models
}
RUN_KEYS = ("hardware", "suite", "run", "commit", "python")
DEFAULT_THRESHOLD = 0.05
HL_CONFIDENCE = 0.95  # the level stats.ratio_ci is asked for
WITHIN_NOISE = "within noise"  # significant, but no larger than the host's run-to-run drift


def run_time(run: Run) -> tuple[str, str]:
    """Sort key: when the run last finished (or was written), then its id."""
    rec = run.record
    return (str(fields.run_get(rec, "finished") or fields.run_get(rec, "updated")
                or fields.run_get(rec, "started") or ""), run.run_id)


def libraries(run: Run) -> dict[str, str | None]:
    installed = fields.run_get(run.record, "environment.libraries") or {}
    libs = {str(k): (None if v is None else str(v)) for k, v in installed.items()}
    python = fields.run_get(run.record, "environment.python.version")
    if python:
        libs["python"] = str(python)
    return libs


def run_value(run: Run, key: str) -> str | None:
    rec = run.record
    if key == "hardware":
        return str(fields.run_get(rec, "hardware") or run.run_id.split("/")[0])
    if key == "suite":
        return str(fields.run_get(rec, "suite.name") or "")
    if key == "run":
        return run.run_id
    if key == "commit":
        return fields.run_get(rec, "environment.git.commit")
    libs = {k.lower(): v for k, v in libraries(run).items()}
    return libs.get(key.lower())


@dataclass(frozen=True)
class Side:
    """What one side of a comparison selects: its runs and, per pairing key, a record."""

    label: str
    runs: tuple[Run, ...]
    filters: Mapping[str, str] = field(default_factory=dict)

    def records(self) -> list[tuple[Run, dict[str, Any]]]:
        combo_filters = {k: v for k, v in self.filters.items() if k in COMBINATION_KEYS}
        out = []
        for run in sorted(self.runs, key=run_time):
            for record in run.combination_records():
                settings = fields.get(record, "combination") or {}
                if all(fnmatch.fnmatchcase(str(settings.get(COMBINATION_KEYS[k])), v)
                       for k, v in combo_filters.items()):
                    out.append((run, record))
        return out


def parse_filter(text: str, where: str) -> dict[str, str]:
    filters: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        key = key.strip().lower()
        if not eq or not key or not value.strip():
            raise UserError(f"{where}: {part.strip()!r} is not KEY=VALUE (e.g. transformers=5.0.0,"
                            "hardware=cpu-amd-epyc-2c,attn=sdpa)")
        if key in filters:
            raise UserError(f"{where}: {key} given twice")
        filters[key] = value.strip()
    return filters


def select(spec: str, runs_root: Path | None, where: str) -> Side:
    """A side from a run directory or a filter over ``runs_root``."""
    path = Path(spec)
    if paths.run_path(path).is_file():
        return Side(label=spec, runs=(load_run(path),))
    if "=" not in spec:
        raise UserError(f"{where}: {spec} is neither a run directory (no run.json) nor a "
                        "filter KEY=VALUE[,KEY=VALUE...]")
    filters = parse_filter(spec, where)
    if runs_root is None or not runs_root.is_dir():
        raise UserError(f"{where}: a filter needs a runs directory (--runs); {runs_root} does not exist")
    runs = list(iter_runs(runs_root))
    known_libs = {k.lower() for run in runs for k in libraries(run)}
    run_filters = {k: v for k, v in filters.items() if k not in COMBINATION_KEYS}
    for key in run_filters:
        if key not in RUN_KEYS and key not in known_libs:
            raise UserError(f"{where}: unknown filter key {key!r} (run keys: {', '.join(RUN_KEYS)} "
                            f"or a library; combination keys: {', '.join(COMBINATION_KEYS)})")
    chosen = tuple(run for run in runs
                   if all(fnmatch.fnmatchcase(str(run_value(run, k)), v) for k, v in run_filters.items()))
    if not chosen:
        raise UserError(f"{where}: no run under {runs_root} matches {spec}")
    return Side(label=spec, runs=chosen, filters=filters)


def pairing_keys(base: Side, new: Side) -> tuple[str, ...]:
    """The settings two paired combinations share: all but those the sides set apart."""
    varied = {k for k in base.filters.keys() & new.filters.keys()
              if base.filters[k] != new.filters[k]}
    hardware = {run_value(r, "hardware") for r in (*base.runs, *new.runs)}
    if not base.filters and not new.filters and len(hardware) > 1:
        varied.add("hardware")  # two run directories on different hardware
    return tuple(k for k in ("hardware", *COMBINATION_KEYS) if k not in varied)


def _key(run: Run, record: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, ...]:
    settings = fields.get(record, "combination") or {}
    return tuple(str(run_value(run, "hardware")) if k == "hardware"
                 else str(settings.get(COMBINATION_KEYS[k])) for k in keys)


def _by_key(side: Side, keys: Sequence[str], where: str) -> dict[tuple[str, ...], tuple[Run, dict[str, Any]]]:
    out: dict[tuple[str, ...], tuple[Run, dict[str, Any]]] = {}
    for run, record in side.records():  # oldest run first: the latest wins
        key = _key(run, record, keys)
        if key in out and out[key][0].run_id == run.run_id:
            raise UserError(f"{where}: {side.label} holds several combinations that pair with "
                            f"{fields.get(record, 'id')} in {run.run_id}; add a filter to tell them apart")
        out[key] = (run, record)
    return out


def _timed(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` holds a latency to compare: ``ok``, with a median."""
    return is_ok(record) and isinstance(fields.get(record, "timing.median"), (int, float))


def _shares(record: Mapping[str, Any]) -> dict[str, float]:
    cats = (fields.get(record, "attribution.categories") or {}) if is_ok(record) else {}
    shares = {c: fields.get(record, ("attribution", "categories", c, "share")) for c in cats}
    return {c: float(v) for c, v in shares.items() if isinstance(v, (int, float))}


def round_medians(timing: Mapping[str, Any]) -> list[float]:
    """The medians of the rounds a record's interval is built from (excluded rounds left
    out); [] for a record measured in one round."""
    return [float(r["median"]) for r in timing.get("rounds") or ()
            if r.get("median") is not None and not r.get("excluded")]


def compare_records(base: Mapping[str, Any], new: Mapping[str, Any],
                    threshold: float = DEFAULT_THRESHOLD, floor: float | None = None) -> dict[str, Any]:
    """One row: latency ratio new/base with its interval and the significance test.

    The ratio's interval states ``confidence``: 95% for the Hodges-Lehmann interval of two
    sample sets, the lower of the two records' levels for one formed from their intervals
    (``timing.confidence``: below 95% under six rounds); ``verdict_level`` is that lower
    level where the verdict rests on the intervals' overlap.

    Records measured in rounds are tested on their round medians (each round a fresh
    process at another moment: the between-round variation a pooled-sample test cannot
    see), or by the overlap of their hierarchical intervals where the rounds are too few
    for the test; records of one round on their samples. ``floor``: the host's measured
    run-to-run drift (relative); a significant change smaller than it is ``within noise``.
    """
    row: dict[str, Any] = {"id": str(fields.get(new, "id")), "base_id": str(fields.get(base, "id")),
                           "combination": dict(fields.get(new, "combination") or {})}
    # a side measured with fewer layers than its model has: its figures are of those layers
    labels = (depth.record_label(base), depth.record_label(new))
    row["depth"] = (labels[0] if labels[0] == labels[1] else
                    "; ".join(f"{side}: {label}" for side, label in zip(("base", "new"), labels) if label)) or None
    if not (_timed(base) and _timed(new)):
        why = [f"{side}: {fields.get(rec, 'status')}"
               + (f" ({fields.get(rec, 'reason')})" if fields.get(rec, "reason") else "")
               for side, rec in (("base", base), ("new", new)) if not _timed(rec)]
        row.update(ratio=None, ci_low=None, ci_high=None, confidence=None, verdict_level=None,
                   p_value=None, significant=False,
                   method=None, change="not comparable", reason="; ".join(why))
        return row
    xs = [float(x) for x in fields.get(base, "timing.samples") or []]
    ys = [float(y) for y in fields.get(new, "timing.samples") or []]
    base_median, new_median = float(fields.get(base, "timing.median")), float(fields.get(new, "timing.median"))
    row.update(base_median=base_median, new_median=new_median, base_n=len(xs), new_n=len(ys))
    rb, rn = round_medians(fields.get(base, "timing")), round_medians(fields.get(new, "timing"))
    rounds = len(rb) >= 2 and len(rn) >= 2
    base_ci = (fields.get(base, "timing.ci_low"), fields.get(base, "timing.ci_high"))
    new_ci = (fields.get(new, "timing.ci_low"), fields.get(new, "timing.ci_high"))
    # the levels the two records' intervals state (fewer than six rounds: below 95%)
    levels = [fields.number(rec, "timing.confidence") for rec in (base, new)]
    lowest = min((c for c in levels if not math.isnan(c)), default=None)
    verdict = stats.difference(rb if rounds else xs, rn if rounds else ys,
                               interval_a=base_ci, interval_b=new_ci)
    if xs and ys and min(xs) > 0 and min(ys) > 0 and not rounds:
        ratio, low, high, exact = stats.ratio_ci(xs, ys, HL_CONFIDENCE)
        ci_method = "hodges-lehmann"
        confidence = HL_CONFIDENCE if exact else None
    else:  # the medians' ratio, the interval from their intervals (rounds: hierarchical)
        ratio = new_median / base_median
        low, high = float(new_ci[0]) / float(base_ci[1]), float(new_ci[1]) / float(base_ci[0])
        exact, ci_method, confidence = False, "interval-ratio", lowest
    within = verdict.significant and floor is not None and abs(ratio - 1.0) <= floor
    slower = verdict.significant and not within and ratio > 1.0
    faster = verdict.significant and not within and ratio < 1.0
    row.update(ratio=ratio, ci_low=low, ci_high=high, ci_exact=exact, ci_method=ci_method,
               confidence=confidence,
               # an overlap verdict rests on the records' intervals: the lower level of the two
               verdict_level=lowest if verdict.method == "interval-overlap" else None,
               p_value=verdict.p_value, significant=verdict.significant,
               method=verdict.method + (" on round medians" if rounds and verdict.method == "mann-whitney" else ""),
               noise_floor=floor,
               change=("slower" if slower else "faster" if faster else WITHIN_NOISE if within
                       else "no significant difference"),
               regression=bool(slower and ratio > 1.0 + threshold))
    row["unstable"] = "; ".join(f"{side}: {reason}" for side, reason in
                                (("base", unstable_reason(base)), ("new", unstable_reason(new))) if reason) or None
    sb, sn = _shares(base), _shares(new)
    # mixer and moe.* only where a side has them: a dense model's older record (without
    # their keys) compares with a newer one (where they are 0) as before
    row["shares"] = {c: {"base": sb.get(c), "new": sn.get(c),
                         "diff": (sn[c] - sb[c]) if c in sb and c in sn else None}
                     for c in shown_categories([sb, sn]) if c in sb or c in sn}
    return row


def host_drift(bench: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """How far the bench's re-measurement of a suite moved its medians, by hardware: the
    drift between two runs of the same code on the same host, which no interval inside
    one run can show. From the bench's interval-coverage rows (``rel_shift``); ``floor``
    is the 90th percentile of the shifts, the noise floor of a comparison there."""
    if not bench:
        return {}
    figure = (bench.get("figures") or {}).get("interval_coverage") or {}
    shifts = [abs(float(r["rel_shift"])) for r in figure.get("rows") or []
              if r.get("rel_shift") is not None]
    hardware = (bench.get("environment") or {}).get("hardware")
    if not shifts or not hardware:
        return {}
    ordered = sorted(shifts)
    return {str(hardware): {"median": stats.median(ordered), "max": ordered[-1],
                            "floor": stats.quantile(ordered, 0.9), "combinations": len(ordered),
                            "measured": figure.get("measured_at") or bench.get("created")}}


def read_drift(bench_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """``host_drift`` of every ``<bench_dir>/<hardware>.json`` (a missing or unreadable
    file: no floor for that hardware)."""
    import json

    out: dict[str, dict[str, Any]] = {}
    directory = Path(bench_dir) if bench_dir else None
    if directory is None or not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            out.update(host_drift(json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def share_summary(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per category, the median over compared combinations of the share difference
    (new - base) with its 95% order-statistic interval; a change when the interval
    excludes zero and reaches its confidence."""
    out = []
    for cat in CATEGORIES:
        diffs = [r["shares"][cat]["diff"] for r in rows
                 if r.get("shares", {}).get(cat, {}).get("diff") is not None]
        if not diffs:
            continue
        med, low, high = stats.median_ci(diffs)
        exact = stats.median_ci_exact(len(diffs))
        out.append({"category": cat, "n": len(diffs), "diff": med, "ci_low": low, "ci_high": high,
                    "ci_exact": exact, "significant": bool(exact and (low > 0 or high < 0))})
    return out


def version_changes(base_runs: Iterable[Run], new_runs: Iterable[Run]) -> list[dict[str, Any]]:
    """Libraries (and Python) whose versions differ between the two sides' runs."""
    def versions(runs: Iterable[Run]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for run in runs:
            for lib, version in libraries(run).items():
                if version is not None and lib != "reportgen":
                    out.setdefault(lib, set()).add(version)
        return out

    b, n = versions(base_runs), versions(new_runs)
    return [{"library": lib, "base": ", ".join(sorted(b.get(lib, ()))) or None,
             "new": ", ".join(sorted(n.get(lib, ()))) or None}
            for lib in sorted(b.keys() | n.keys(), key=str.lower) if b.get(lib) != n.get(lib)]


def _order(row: Mapping[str, Any]) -> tuple[int, float, str]:
    rank = {"slower": 0, "faster": 1, WITHIN_NOISE: 2, "no significant difference": 3}.get(row["change"], 4)
    ratio = row.get("ratio")
    return (rank, -abs(math.log(ratio)) if ratio else 0.0, row["id"])


@dataclass(frozen=True)
class Comparison:
    base: Side
    new: Side
    threshold: float
    rows: list[dict[str, Any]]
    shares: list[dict[str, Any]]
    only_base: list[str]
    only_new: list[str]
    versions: list[dict[str, Any]]
    # the host's run-to-run drift (relative) below which a significant change is noise
    floor: float | None = None

    def count(self, change: str) -> int:
        return sum(1 for r in self.rows if r["change"] == change)

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("regression")]

    def as_dict(self) -> dict[str, Any]:
        return {"base": {"label": self.base.label, "runs": [r.run_id for r in self.base.runs]},
                "new": {"label": self.new.label, "runs": [r.run_id for r in self.new.runs]},
                "threshold": self.threshold, "alpha": stats.ALPHA,
                "counts": {c: self.count(c) for c in ("slower", "faster", WITHIN_NOISE,
                                                      "no significant difference", "not comparable")},
                "noise_floor": self.floor,
                "regressions": len(self.regressions), "rows": self.rows,
                "shares": self.shares, "only_base": self.only_base, "only_new": self.only_new,
                "versions": self.versions}


def compare(base: Side, new: Side, *, threshold: float = DEFAULT_THRESHOLD,
            drift: Mapping[str, Mapping[str, Any]] | None = None) -> Comparison:
    """``drift`` (``host_drift``/``read_drift``, by hardware): where both sides ran on
    one hardware with a measured drift, its floor decides what is ``within noise``."""
    keys = pairing_keys(base, new)
    b = _by_key(base, keys, "BASE")
    n = _by_key(new, keys, "NEW")
    common = [k for k in n if k in b]
    if not common:
        raise UserError(f"BASE ({base.label}) and NEW ({new.label}) have no combination in common")
    hardware = {str(fields.run_get(run.record, "hardware") or run.run_id.split("/")[0]) for side in (base, new)
                for run in side.runs}
    floor = None
    if drift and len(hardware) == 1:
        floor = (drift.get(next(iter(hardware))) or {}).get("floor")
    rows = [compare_records(b[k][1], n[k][1], threshold, floor) for k in common]
    for k, row in zip(common, rows):
        if "hardware" in keys and len({k2[0] for k2 in common}) > 1:
            row["id"] = f"{k[0]}/{row['id']}"
            row["base_id"] = f"{k[0]}/{row['base_id']}"  # paired on the same host
        row["base_run"], row["new_run"] = b[k][0].run_id, n[k][0].run_id
    rows.sort(key=_order)
    used_b = {b[k][0].run_id: b[k][0] for k in common}
    used_n = {n[k][0].run_id: n[k][0] for k in common}
    return Comparison(base=base, new=new, threshold=threshold, rows=rows, floor=floor,
                      shares=share_summary(rows),
                      only_base=sorted(str(fields.get(b[k][1], "id")) for k in b if k not in n),
                      only_new=sorted(str(fields.get(n[k][1], "id")) for k in n if k not in b),
                      versions=version_changes(used_b.values(), used_n.values()))
