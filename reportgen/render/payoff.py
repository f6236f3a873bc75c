"""Does a switch pay off end to end? Pure analysis over the combinations frame and the
records (no torch), for the two findings pages built from it:

* ``pairs``: combinations on the same hardware that differ in exactly one axis of
  ``GAINS`` (attention implementation, precision, the KV cache, ``torch.compile``), both
  sides from one run where one run measured both (else each from the newest run that
  holds it, and the pair names both runs); ``payoff`` gives each pair its
  measured end-to-end gain (base latency / new latency) with the interval and the verdict
  of the project's one test (``compare.compare_records``), and ``missing`` says which
  gains a model lacks and the command that measures them.
* ``amdahl``: for each attention-implementation pair, the end-to-end speedup Amdahl's law
  predicts from the attribution (the share ``a`` of ``attention.core`` in the baseline,
  the speedup ``s`` of ``attention.core`` itself: ``1 / ((1 - a) + a / s)``) against the
  measured one, both with intervals, and where they disagree the attributed time that
  moved into other categories.
"""

from __future__ import annotations

import gzip
import json
import math
import shlex
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from reportgen import shares, stats
from reportgen.attribution import profiler_iterations
from reportgen.categories import CATEGORIES, OPTIONAL_CATEGORIES
from reportgen.records import fields
from reportgen.records.status import OK, SKIPPED
from reportgen.render import compare
from reportgen.render.shown import shown_categories
from reportgen.vocabulary import ATTENTION_MICRO, COMPILE_NONE, DECODE_NOCACHE, TRAIN_MODES


@dataclass(frozen=True)
class Gain:
    """One axis a switch moves along: the frame ``column``, and either the explicit
    (from, to) ``steps`` or a ``base`` value switched to every other value present."""

    name: str
    title: str
    column: str
    steps: tuple[tuple[str, str], ...] = ()
    base: str | None = None
    decoder_only: bool = False

    def switches(self, values: Iterable[str]) -> list[tuple[str, str]]:
        present = set(values)
        if self.base is not None:
            return [(self.base, v) for v in sorted(present) if v != self.base and self.base in present]
        return [(a, b) for a, b in self.steps if a in present and b in present]


GAINS: tuple[Gain, ...] = (
    Gain("attention", "attention implementation", "attn", base="eager"),
    Gain("precision", "lower precision", "dtype", steps=(("fp32", "bf16"), ("fp32", "fp16"))),
    Gain("kv-cache", "KV cache", "mode", steps=((DECODE_NOCACHE, "decode"),), decoder_only=True),
    Gain("compile", "torch.compile", "compile", base=COMPILE_NONE),
)
PAIR_KEYS: tuple[str, ...] = ("hardware", "model", "scale", "depth", "mode", "dtype", "attn", "batch", "seq",
                              "compile")
"""What identifies a combination on one hardware: a pair agrees in all but one of these."""
PART: tuple[str, ...] = ("attention.core",)
"""The part a change of attention implementation replaces, for Amdahl's law: the attention
call less its projections (the projections are the same module in every implementation)."""
PAIR_COLUMNS = ["gain", "gain_title", "column", "base_value", "new_value", *PAIR_KEYS[:2],
                "setting", "seq", "compile", "base_combo", "base_run", "new_combo", "new_run"]


def _models_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The isolated-attention benchmark is not a model (no projections, no MLP, no cache):
    none of these switches apply to it as a whole-model gain."""
    keep = frame["model"] != ATTENTION_MICRO
    if "architecture" in frame:
        keep &= frame["architecture"] != "attention"
    return frame[keep]


def _setting(row: Mapping[str, Any], column: str) -> str:
    """The axes a pair shares, in words (the varied one left out)."""
    parts = [str(row[k]) for k in ("mode", "dtype", "attn") if k != column]
    parts.append(f"batch {int(row['batch'])}")
    if row["scale"] != "reference":
        parts.append(f"{row['scale']} scale")
    if row.get("depth"):
        parts.append(str(row["depth"]))
    if column != "compile" and row["compile"] != COMPILE_NONE:
        parts.append(f"torch.compile {row['compile']}")
    return ", ".join(parts)


def _same_run_first(bases: Sequence[Mapping[str, Any]],
                    news: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The two sides of a pair where a combination was measured by more than one run
    (each list newest first): both from the newest run that measured both (measured in
    one sitting, the machine's drift between runs stays out of the gain), else the
    newest of each."""
    for a in bases:
        for b in news:
            if a["run_id"] == b["run_id"]:
                return a, b
    return bases[0], news[0]


def pairs(frame: pd.DataFrame, gains: Sequence[Gain] = GAINS) -> pd.DataFrame:
    """Every (base, new) pair of combinations that differ in exactly one axis, along one of
    ``gains`` in its direction: all of ``PAIR_KEYS`` but the gain's column are equal. Pairs
    with a skipped side, or with neither side measured, are left out."""
    out: list[dict[str, Any]] = []
    if frame.empty:
        return pd.DataFrame(out, columns=PAIR_COLUMNS)
    rows = _models_only(frame)
    if "run_updated" in rows.columns:
        # newest run first, so that a side measured by several runs is read from the newest
        rows = rows.sort_values(["run_updated", "run_id"], ascending=False, kind="mergesort")
    records = rows.to_dict(orient="records")
    for gain in gains:
        others = [k for k in PAIR_KEYS if k != gain.column]
        groups: dict[tuple[Any, ...], dict[str, list[Mapping[str, Any]]]] = {}
        for row in records:
            # (a frame made without the depth column holds whole models only)
            groups.setdefault(tuple(row.get(k, "") for k in others), {}).setdefault(
                str(row[gain.column]), []).append(row)
        for by_value in groups.values():
            for old, new in gain.switches(by_value):
                a, b = _same_run_first(by_value[old], by_value[new])
                statuses = (a.get("status", OK), b.get("status", OK))
                if SKIPPED in statuses or OK not in statuses:
                    # a side that cannot run here (a backend this device lacks) has no gain to
                    # show; a failed side beside a measured one is shown as not comparable
                    continue
                out.append({"gain": gain.name, "gain_title": gain.title, "column": gain.column,
                            "base_value": old, "new_value": new, "hardware": a["hardware"],
                            "model": a["model"], "setting": _setting(a, gain.column),
                            "seq": int(a["seq"]), "compile": a["compile"], "base_combo": a["combo_id"],
                            "base_run": a["run_id"], "new_combo": b["combo_id"],
                            "new_run": b["run_id"]})
    frame_out = pd.DataFrame(out, columns=PAIR_COLUMNS)
    order = {g.name: i for i, g in enumerate(GAINS)}
    frame_out["_order"] = frame_out["gain"].map(order)
    return (frame_out.sort_values(["hardware", "model", "_order", "base_value", "new_value", "setting",
                                  "seq"], kind="mergesort")
            .drop(columns="_order").reset_index(drop=True))


def measured_gain(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``speedup``: base latency / new latency (above 1: the switch is faster) with its interval (at the
    level ``confidence``; ``verdict_level`` where the verdict rests on the records' intervals) and
    the verdict of the project's one test, from ``compare.compare_records`` (which gives
    new / base: the interval is inverted)."""
    row = compare.compare_records(base, new)
    ratio, low, high = row.get("ratio"), row.get("ci_low"), row.get("ci_high")
    if not ratio or not low or not high:
        return {"speedup": None, "speedup_low": None, "speedup_high": None, "significant": False,
                "verdict": "not comparable", "test": None, "p_value": None,
                "reason": row.get("reason"), "interval": None, "confidence": None, "verdict_level": None}
    return {"speedup": 1.0 / ratio, "speedup_low": 1.0 / high, "speedup_high": 1.0 / low,
            "confidence": row["confidence"], "verdict_level": row["verdict_level"],
            "significant": bool(row["significant"]), "test": row["method"],
            "p_value": row["p_value"], "reason": None,
            "verdict": ("faster" if row["change"] == "faster" else
                        "slower" if row["change"] == "slower" else "no significant difference"),
            "interval": row["ci_method"]}


# (hardware, run id, combination id), or (hardware, combination id) for the newest run's
Records = Mapping[tuple[str, ...], Mapping[str, Any]]


def side(mapping: Mapping[tuple[str, ...], Any], pair: Mapping[str, Any], which: str) -> Any:
    """A pair's ``which`` side ("base" or "new") from a mapping keyed by (hardware, run,
    combination), or by (hardware, combination) where it holds no run-keyed entry."""
    hw, combo = str(pair["hardware"]), str(pair[f"{which}_combo"])
    run_keyed = (hw, str(pair.get(f"{which}_run")), combo)
    return mapping[run_keyed] if run_keyed in mapping else mapping.get((hw, combo))


def payoff(matched: pd.DataFrame, records: Records) -> list[dict[str, Any]]:
    """``pairs`` rows with their measured gain (``measured_gain``), each side the record of
    the run the pair names."""
    out = []
    for row in matched.to_dict(orient="records"):
        out.append({**row, **measured_gain(side(records, row, "base"), side(records, row, "new"))})
    return out


# --- what is not measured ------------------------------------------------------------------

SUITE_FOR_DEVICE = {"cpu": "cpu-payoff", "cuda": "gpu-payoff"}
_FLAG_VALUES: dict[str, tuple[str, str]] = {
    "attention": ("--attn", "eager,sdpa"), "precision": ("--dtypes", "fp32,bf16"),
    "kv-cache": ("--modes", f"{DECODE_NOCACHE},decode"), "compile": ("--compile", "none,default")}


def suite_pairs(suite_name: str) -> set[tuple[str, str]]:
    """(model, gain) pairs a built-in suite measures. Its matrix is read as written (the
    built-in suites are validated by the tests): validating model names would import the
    profile side, and rendering never imports torch."""
    from reportgen.suite import MATRIX_DEFAULTS, SUITES_DIR, Settings, Suite

    raw = tomllib.loads((SUITES_DIR / f"{suite_name}.toml").read_text(encoding="utf-8"))
    settings = raw.get("settings") or {}
    matrix = tuple({**MATRIX_DEFAULTS, "scale": settings.get("scale", "reference"), **entry}
                   for entry in raw.get("matrix") or ())
    combos = Suite(suite_name, f"builtin:{suite_name}", "", Settings(device=settings.get("device", "auto")),
                   matrix).combinations()
    frame = pd.DataFrame([{"hardware": c.device, "model": c.model, "scale": c.scale,
                           "depth": "" if c.layers is None else str(c.layers), "mode": c.mode,
                           "dtype": c.dtype, "attn": c.attn_implementation, "batch": c.batch_size,
                           "seq": c.seq_len, "compile": c.compile, "combo_id": c.id,
                           "run_id": suite_name} for c in combos])
    found = pairs(frame)
    return {(str(m), str(g)) for m, g in zip(found["model"], found["gain"])}


def command_for(gain: Gain, model: str, device: str, setting: Mapping[str, Any],
                measured_by_suite: Callable[[str], set[tuple[str, str]]] = suite_pairs) -> str:
    """The command that measures ``gain`` for ``model``: the device's pay-off suite where
    it covers them, else the suite's flags for this model at its measured ``setting``."""
    suite_name = SUITE_FOR_DEVICE.get(device, SUITE_FOR_DEVICE["cpu"])
    if (model, gain.name) in measured_by_suite(suite_name):
        return f"reportgen profile --suite {suite_name}"
    flag, values = _FLAG_VALUES[gain.name]
    fixed = {"--modes": "decode" if gain.name == "kv-cache" else str(setting["mode"]),
             "--dtypes": str(setting["dtype"]), "--attn": str(setting["attn"]),
             "--compile": str(setting["compile"])}
    fixed[flag] = values
    parts = [f"reportgen profile --device {device} --models {shlex.quote(model)} --scale {setting['scale']}",
             f"--seq-lens {int(setting['seq'])} --batch-sizes {int(setting['batch'])}",
             *(f"{k} {v}" for k, v in fixed.items())]
    return " ".join(parts)


def missing(frame: pd.DataFrame, matched: pd.DataFrame,
            measured_by_suite: Callable[[str], set[tuple[str, str]]] = suite_pairs) -> list[dict[str, Any]]:
    """Per hardware and model, each gain with no measured pair: ``not measured`` with the
    command that measures it, or ``not applicable`` (the KV cache of a model without one)."""
    out: list[dict[str, Any]] = []
    if frame.empty:
        return out
    have = set(zip(matched["hardware"], matched["model"], matched["gain"]))
    ok = _models_only(frame[frame["status"] == OK])
    cache: dict[str, set[tuple[str, str]]] = {}

    def suite_cover(name: str) -> set[tuple[str, str]]:
        if name not in cache:
            cache[name] = measured_by_suite(name)
        return cache[name]

    for (hw, model), part in ok.groupby(["hardware", "model"], sort=True):
        arch = str(part["architecture"].iloc[0])
        first = part.sort_values(["seq", "combo_id"], kind="mergesort").iloc[0]
        for gain in GAINS:
            if (hw, model, gain.name) in have:
                continue
            if gain.decoder_only and arch != "decoder":
                out.append({"hardware": hw, "model": model, "gain": gain.name,
                            "gain_title": gain.title, "status": "not applicable",
                            "why": f"an {arch} has no KV cache", "command": None})
                continue
            if gain.name == "compile" and set(part["mode"]) <= set(TRAIN_MODES):
                out.append({"hardware": hw, "model": model, "gain": gain.name,
                            "gain_title": gain.title, "status": "not applicable",
                            "why": "training steps are measured eagerly only", "command": None})
                continue
            out.append({"hardware": hw, "model": model, "gain": gain.name, "gain_title": gain.title,
                        "status": "not measured", "why": None,
                        "command": command_for(gain, str(model), str(first["device"]), first, suite_cover)})
    return out


# --- Amdahl's law ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """A combination's attributed iterations: forward ms and category ms of each."""

    method: str  # attribution method: "hooks" or "profiler"
    source: str  # "record" (stored series) or "trace" (read from the profiled pass's trace)
    iteration_ms: tuple[float, ...]
    categories: Mapping[str, tuple[float, ...]]

    @property
    def n(self) -> int:
        return len(self.iteration_ms)

    def mean(self, cats: Sequence[str], idx: Sequence[int]) -> float:
        return math.fsum(self.categories[c][i] for c in cats for i in idx) / len(idx)

    def forward(self, idx: Sequence[int]) -> float:
        return math.fsum(self.iteration_ms[i] for i in idx) / len(idx)


def iteration_series(record: Mapping[str, Any], trace: Path | None) -> Series | None:
    """The headline method's stored per-iteration series; for a record written before
    they were stored, the profiler method's, read from its trace (each profiled iteration
    attributed alone: ``attribution.profiler_iterations``). None when neither exists."""
    method = fields.get(record, "attribution.headline_method") or "profiler"
    if fields.get(record, ("attribution", "methods", method)):
        walls = fields.get(record, ("attribution", "methods", method, "iteration_ms")) or []
        cats = {c: fields.get(record, ("attribution", "methods", method, "categories", c, "per_iteration_ms"))
                for c in CATEGORIES}
        for c in OPTIONAL_CATEGORIES:  # records made before these categories lack them
            if cats[c] is None:
                cats[c] = [0.0] * len(walls)
        if walls and all(isinstance(v, list) and len(v) == len(walls) for v in cats.values()):
            return Series(str(method), "record",
                          tuple(map(float, walls)),
                          {c: tuple(map(float, v)) for c, v in cats.items()})  # type: ignore[arg-type]
    if trace is None:
        return None
    try:
        with gzip.open(trace, "rt", encoding="utf-8") as fh:
            rows = profiler_iterations(json.load(fh))
    except (OSError, EOFError, ValueError):
        return None  # an unreadable trace: no series, said on the page
    if not rows:
        return None
    return Series("profiler", "trace", tuple(ms for ms, _ in rows),
                  {c: tuple(float(cats.get(c, 0.0)) for _, cats in rows) for c in CATEGORIES})


def share_intervals(record: Mapping[str, Any], trace: Path | None) -> dict[str, tuple[float, float]]:
    """Each category's share interval from the record's attributed iterations
    (``iteration_series``; the 95% percentile bootstrap the profile side stores with a
    share), for a record that stores its shares without one; empty where it has no series."""
    series = iteration_series(record, trace)
    if series is None or series.n < 2:
        return {}
    out = {}
    for category, per_iteration in series.categories.items():
        _, low, high = stats.share_interval(per_iteration, series.iteration_ms)
        out[category] = (low, high)
    return out


def amdahl(a: float, s: float) -> float:
    """End-to-end speedup when a share ``a`` of the time speeds up ``s`` times."""
    return 1.0 / ((1.0 - a) + a / s)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.inf


def predict(base: Series, new: Series, part: Sequence[str] = PART) -> dict[str, Any]:
    """Amdahl's prediction from two combinations' attributed iterations, with percentile
    bootstrap intervals over both sides' iterations (``shares.two_sample_intervals``):
    ``a`` (share of ``part`` in the base forward), ``s`` (base ``part`` ms / new ``part``
    ms), ``predicted`` (``amdahl(a, s)``), ``attributed`` (base forward / new forward: what
    the attribution says with every category) and per category the change in ms
    (``delta:<category>``, new - base)."""
    # mixer and moe.* only where either side has time in them
    shown = shown_categories([{c: math.fsum(v) for c, v in side.categories.items()}
                              for side in (base, new)])

    def statistic(ib: Sequence[int], inew: Sequence[int]) -> dict[str, float]:
        tb, ab = base.forward(ib), base.mean(part, ib)
        a, s = _ratio(ab, tb), _ratio(ab, new.mean(part, inew))
        out = {"a": a, "s": s, "predicted": amdahl(a, s) if math.isfinite(s) and s > 0 else math.nan,
               "attributed": _ratio(tb, new.forward(inew))}
        for c in shown:
            out[f"delta:{c}"] = new.mean([c], inew) - base.mean([c], ib)
        return out

    point = statistic(range(base.n), range(new.n))
    intervals = shares.two_sample_intervals(base.n, new.n, statistic)
    result: dict[str, Any] = {}
    for name, value in point.items():
        low, high = intervals.get(name, (math.nan, math.nan))
        result[name] = value
        result[f"{name}_low"] = min(low, value) if math.isfinite(low) else None
        result[f"{name}_high"] = max(high, value) if math.isfinite(high) else None
    return result


def _overlap(lo_a: float | None, hi_a: float | None, lo_b: float | None, hi_b: float | None) -> bool | None:
    if lo_a is None or hi_a is None or lo_b is None or hi_b is None:
        return None
    return not stats.difference(None, None, interval_a=(lo_a, hi_a), interval_b=(lo_b, hi_b)).significant


def moved(prediction: Mapping[str, Any], part: Sequence[str] = PART) -> list[dict[str, Any]]:
    """Where attributed time went outside ``part``: each other category's change (new - base
    ms) with its interval, largest first; ``significant`` when the interval excludes 0."""
    rows = []
    for c in CATEGORIES:
        if c in part or f"delta:{c}" not in prediction:  # a category neither side shows
            continue
        d, lo, hi = (prediction[f"delta:{c}"], prediction[f"delta:{c}_low"],
                     prediction[f"delta:{c}_high"])
        rows.append({"category": c, "ms": d, "ci_low": lo, "ci_high": hi,
                     "significant": bool(lo is not None and hi is not None and (lo > 0 or hi < 0))})
    return sorted(rows, key=lambda r: (-abs(r["ms"]), CATEGORIES.index(r["category"])))


TOO_NOISY = ("too noisy to test: the measured interval holds no change (1x) and is wider than the "
             "predicted effect")


def too_noisy(predicted: float, low: float, high: float) -> bool:
    """The measured interval ``[low, high]`` holds 1 (no change) and is wider than the
    predicted effect (its distance from 1): it cannot tell the prediction from no change,
    so overlapping the prediction is no test of it (a predicted 0.90x against a measured
    [0.93, 1.17]: the prediction lies outside, but so near 1 that an interval this wide
    says nothing about it)."""
    return low <= 1.0 <= high and predicted != 1.0 and high - low > abs(predicted - 1.0)


def amdahl_row(pair: Mapping[str, Any], base: Mapping[str, Any], new: Mapping[str, Any],
               sb: Series | None, sn: Series | None) -> dict[str, Any]:
    """One attention-implementation pair: the predicted end-to-end speedup (from the two
    records' attributed iterations ``sb``, ``sn``: `iteration_series`) against the measured
    one (from their timing samples)."""
    row: dict[str, Any] = {**pair, **measured_gain(base, new)}
    row.update({f"{name}{end}": None for name in ("a", "s", "predicted", "attributed")
                for end in ("", "_low", "_high")})
    row.update(agree=None, moved=[], method=None, iterations=None, source=None,
               measured_over_predicted=None, gap=None, moved_outside=None, why=None)
    if sb is None or sn is None:
        row["why"] = "no per-iteration attribution on " + " and ".join(
            side for side, s in (("the base", sb), ("the new side", sn)) if s is None)
        return row
    p = predict(sb, sn)
    methods = sorted({sb.method, sn.method})
    row.update({k: p[k] for k in ("a", "a_low", "a_high", "s", "s_low", "s_high", "predicted",
                                  "predicted_low", "predicted_high", "attributed", "attributed_low",
                                  "attributed_high")},
               method=" and ".join(methods), iterations=f"{sb.n} and {sn.n}",
               source="trace" if "trace" in (sb.source, sn.source) else "record", why=None)
    if p["predicted_low"] is None or row["speedup"] is None:
        return row
    row["agree"] = _overlap(p["predicted_low"], p["predicted_high"], row["speedup_low"], row["speedup_high"])
    if row["agree"] and too_noisy(p["predicted"], row["speedup_low"], row["speedup_high"]):
        # an interval that holds no change and is wider than the predicted effect cannot tell them apart:
        # overlapping with the prediction is no agreement
        row["agree"] = None
        row["why"] = TOO_NOISY
    row["measured_over_predicted"] = row["speedup"] / p["predicted"]
    # how far apart the intervals lie (0 when they overlap), in speedup units
    row["gap"] = max(0.0, p["predicted_low"] - row["speedup_high"], row["speedup_low"] - p["predicted_high"])
    if row["agree"] is False:
        row["moved"] = moved(p)
        row["moved_outside"] = math.fsum(m["ms"] for m in row["moved"])
    return row


def amdahl_rows(matched: pd.DataFrame, records: Records,
                traces: Mapping[tuple[str, ...], Path | None]) -> list[dict[str, Any]]:
    """``amdahl_row`` for every attention-implementation pair in ``matched`` run without
    ``torch.compile``; records and traces keyed as ``side`` reads them."""
    out = []
    cache: dict[tuple[str, ...], Series | None] = {}  # eager is the base of several pairs

    def series(pair: Mapping[str, Any], which: str) -> Series | None:
        key = (str(pair["hardware"]), str(pair.get(f"{which}_run")), str(pair[f"{which}_combo"]))
        if key not in cache:
            cache[key] = iteration_series(side(records, pair, which), side(traces, pair, which))
        return cache[key]

    # a compiled forward keeps no attention boundary for the attribution to read (fused
    # kernels are `compiled`), so only eager-executed pairs have an attention.core to predict from
    eager = matched[(matched["gain"] == "attention") & (matched["compile"] == COMPILE_NONE)]
    for pair in eager.to_dict(orient="records"):
        out.append(amdahl_row(pair, side(records, pair, "base"), side(records, pair, "new"),
                              series(pair, "base"), series(pair, "new")))
    return out


def agreement(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per hardware and model: switches compared, how many agree, disagree, or lack an
    interval on one side."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault((str(r["hardware"]), str(r["model"])),
                               {"hardware": r["hardware"], "model": r["model"], "pairs": 0,
                                "agree": 0, "disagree": 0, "undecided": 0, "noisy": 0})
        entry["pairs"] += 1
        entry["agree" if r["agree"] is True else "disagree" if r["agree"] is False
              else "noisy" if r.get("why") == TOO_NOISY else "undecided"] += 1
    return [out[k] for k in sorted(out)]
