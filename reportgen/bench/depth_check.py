"""Depth-reduced measurement (``--layers N``) against the same models measured whole.

``--layers N`` measures a model at its full width with N of its layers and extrapolates
its whole-model latency and category shares by layer kind (``reportgen.depth``).
METHOD.md rule 10c shows such a figure only for a method validated against full-depth
measurements of models that fit. This figure is that validation: a dense, a
mixture-of-experts and a hybrid model that fit this host whole, each measured whole and
with 2, 4 and 8 of its layers in one suite run (prefill, 128 tokens, batch 1, fp32; each
combination in rounds, each round a fresh worker process, stopped by the suites' rounds
rule, ``execute.rounds.Policy``).

Two checks, each on every model:

* **The extrapolation**: each depth-reduced combination's extrapolated whole-model median
  against the median measured whole, within ``LATENCY_TOLERANCE``; each category's
  extrapolated share against its share measured whole, within ``SHARE_TOLERANCE`` (both
  one attribution method's: the one whose per-layer times the extrapolation scales by,
  ``depth.basis``, the headline's where it times each layer, on a CPU the module-boundary
  clocks of an unprofiled pass; the profiler's per-op recording inflates a layer of many
  small ops once a pass has recorded enough events, so its shares of a whole model and of
  a few layers differ by more than the tolerance). Both intervals are kept
  beside the medians: the extrapolation's (the reduced median's interval times the
  bootstrap over the measured layers) and the whole measurement's.
* **Linearity**: the medians measured at 2, 4 and 8 layers fitted by latency = a + b x
  layers (``stats.linear_fit_stats``: slope, intercept, R², residuals); the median
  measured whole within ``LINE_TOLERANCE`` of the line at the model's full depth. The
  per-kind extrapolation assumes exactly this (each missing layer costs what a measured
  one did), so a model off its line would be extrapolated wrongly whatever its intervals.

The figure passes when every row and every line does. The computation from records
(``rows``, ``fits``, ``summarise``) is pure; ``run`` measures.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportgen import depth, stats
from reportgen.bench.results import figure
from reportgen.intervals import unstable_reason
from reportgen.records import fields
from reportgen.records.status import is_ok

NAME = "depth_extrapolation"
TITLE = "Depth-reduced measurement"
QUESTION = (
    "Do the whole-model latency and category shares that reportgen extrapolates from a model "
    "measured with a few of its layers (--layers N) agree with the same model measured whole, "
    "and does a forward's latency grow linearly with its layer count?")
LATENCY_TOLERANCE = 0.05  # extrapolated / measured - 1
SHARE_TOLERANCE = 0.02  # a share's extrapolated less its measured value, in absolute terms (2 points)
LINE_TOLERANCE = 0.05  # measured whole / the line's value at full depth - 1
COUNTS: tuple[int, ...] = (2, 4, 8)
MODE = "prefill"
SEQ_LEN = 128
GOAL = (f"every extrapolated whole-model latency within {LATENCY_TOLERANCE:.0%} of the median measured "
        f"whole and every category share within {SHARE_TOLERANCE * 100:.0f} points of its measured share, "
        "for a dense, a mixture-of-experts and a hybrid model; each model's median measured whole "
        f"within {LINE_TOLERANCE:.0%} of the line through its medians at fewer layers")


@dataclass(frozen=True)
class DepthModel:
    """One model of the figure: its ``group`` (``dense``, ``moe``, ``hybrid``), the model a
    suite names (a preset at full depth) and where its configuration comes from."""

    group: str
    model: str
    source: str


MODELS: tuple[DepthModel, ...] = (
    DepthModel("dense", "llama-small", "the llama-small preset (Llama architecture, 12 layers, 768 wide)"),
    DepthModel("moe", "granitemoe-1b-a400m",
               "ibm-granite/granite-3.0-1b-a400m's config (24 layers, 32 experts, 8 per token)"),
    DepthModel("hybrid", "falcon-h1-0.5b",
               "the catalog's tiiuae/Falcon-H1-0.5B (36 layers, attention beside a Mamba-2 mixer in each)"),
)


@dataclass(frozen=True)
class Plan:
    """What the figure measures and how long: the suite's settings (``budget_s`` of
    timing per combination, split over up to ``rounds`` rounds; ``min_rounds`` clean ones
    within ``target`` end it sooner)."""

    models: tuple[DepthModel, ...] = MODELS
    counts: tuple[int, ...] = COUNTS
    mode: str = MODE
    seq_len: int = SEQ_LEN
    scale: str = "reference"
    # six rounds of each combination (the fewest that state a 95% interval), 2 s of timing
    # each: on a 2-core host a round's median moves by up to 15% from one round to the
    # next (four rounds of 1 s left the medians measured whole 10-20% wide, wider than the
    # 5% the figure judges); the two larger models whole (1.3 and 0.5 billion parameters,
    # a second or more a forward) take minutes, much of it building them again for each
    # round's fresh process
    budget_s: float = 12.0
    rounds: int = 6
    min_rounds: int = 6
    target: float = 0.05
    profile_iterations: int = 3
    # one round of a combination, at most: the runner's default (15 minutes) is too short
    # for the profiled round of a model of a billion parameters whole on a busy 2-core host
    timeout_s: float = 3600.0


def plan_dict(plan: Plan) -> dict[str, Any]:
    """``plan`` as the figure stores it (``plan_of`` reads it back)."""
    return dataclasses.asdict(plan)


def plan_of(stored: Mapping[str, Any] | None, default: Plan) -> Plan:
    """The plan a figure stored (``plan_dict``), else ``default`` (a figure stored before
    it kept its plan)."""
    if not isinstance(stored, Mapping):
        return default
    values = {f.name: stored[f.name] for f in dataclasses.fields(Plan) if f.name in stored}
    values["models"] = tuple(DepthModel(**m) for m in values.get("models", ()))
    values["counts"] = tuple(values.get("counts", ()))
    return dataclasses.replace(default, **values)


QUICK = Plan(models=MODELS[:1], seq_len=32, budget_s=1.0, rounds=2, min_rounds=2, timeout_s=900.0)


def suite_text(plan: Plan, name: str = "depth-check") -> str:
    """The suite (TOML) that measures each model of ``plan`` whole and with each of its
    layer counts: one matrix entry for the whole models, one per count."""
    models = json.dumps([m.model for m in plan.models])
    entry = (f"[[matrix]]\nmodels = {models}\nmodes = [{json.dumps(plan.mode)}]\n"
             f"seq_lens = [{plan.seq_len}]\nattn = [\"sdpa\"]\n")
    return (f"name = {json.dumps(name)}\n[settings]\nscale = {json.dumps(plan.scale)}\ndevice = \"cpu\"\n"
            f"budget_s = {plan.budget_s}\nrounds = {plan.rounds}\nmin_rounds = {plan.min_rounds}\n"
            f"target = {plan.target}\nprofile_iterations = {plan.profile_iterations}\n\n"
            + entry + "".join(f"\n{entry}layers = {n}\n" for n in plan.counts))


# ---------------------------------------------------------------- from records (pure)


def share_method(reduced: Mapping[str, Any]) -> str:
    """The attribution method whose shares a depth-reduced record extrapolated (the
    profiler's in a record made before it was named)."""
    return str(fields.get(reduced, "depth.whole.attribution_method") or depth.PROFILER)


def _method_categories(record: Mapping[str, Any], method: str) -> Mapping[str, Any]:
    """``method``'s categories of a record (the headline's where it has only one method):
    what the extrapolated shares are compared with."""
    methods = fields.get(record, "attribution.methods")
    section = methods.get(method) if isinstance(methods, Mapping) else None
    categories = section.get("categories") if isinstance(section, Mapping) else None
    if not isinstance(categories, Mapping) and not isinstance(methods, Mapping):
        categories = fields.get(record, "attribution.categories")
    return categories if isinstance(categories, Mapping) else {}


def _share(entry: Any) -> tuple[float, float | None, float | None]:
    if not isinstance(entry, Mapping):
        return 0.0, None, None  # a category one side lacks holds none of its forward
    low, high = entry.get("share_low"), entry.get("share_high")
    return float(entry.get("share") or 0.0), (float(low) if low is not None else None), \
        (float(high) if high is not None else None)


def share_comparison(whole: Mapping[str, Any], reduced: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per category: the share extrapolated from ``reduced`` and the share measured in
    ``whole`` by the same attribution method (each with its interval) and their difference
    (extrapolated less measured)."""
    return _compare(fields.get(reduced, "depth.whole.categories") or {},
                    _method_categories(whole, share_method(reduced)))


def profiler_comparison(whole: Mapping[str, Any], reduced: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """``share_comparison`` by the profiler method, where the record extrapolated another's
    (the profiler's per-layer times extrapolated again, the whole model's profiler shares
    beside them): the disagreement METHOD.md rule 10b shows. None where the extrapolation
    was the profiler's already or the record lacks what it needs."""
    section, attribution = fields.get(reduced, "depth"), fields.get(reduced, "attribution")
    if share_method(reduced) == depth.PROFILER or not isinstance(section, Mapping) \
            or not isinstance(attribution, Mapping):
        return None
    found = depth.extrapolate(section, fields.get(reduced, "timing"),
                              {**attribution, "headline_method": depth.PROFILER})
    if found is None:
        return None
    return _compare(found["categories"], _method_categories(whole, depth.PROFILER))


def _compare(extrapolated: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for category in [*extrapolated, *(c for c in measured if c not in extrapolated)]:
        e, e_low, e_high = _share(extrapolated.get(category))
        m, m_low, m_high = _share(measured.get(category))
        if e == 0.0 and m == 0.0:
            continue
        out[str(category)] = {"extrapolated": e, "extrapolated_low": e_low, "extrapolated_high": e_high,
                              "measured": m, "measured_low": m_low, "measured_high": m_high, "diff": e - m}
    return out


def comparison_row(whole: Mapping[str, Any], reduced: Mapping[str, Any], group: str = "") -> dict[str, Any] | None:
    """One depth-reduced record against its model measured whole; None where the reduced
    record has no whole-model figures (``depth.check``)."""
    found = depth.check(whole, reduced)
    if found is None:
        return None
    shares = share_comparison(whole, reduced)
    worst = max(shares, key=lambda c: abs(shares[c]["diff"]), default=None)
    profiled = profiler_comparison(whole, reduced) or {}
    profiled_worst = max(profiled, key=lambda c: abs(profiled[c]["diff"]), default=None)
    rel = found["ratio"] - 1.0
    measured = found["measured_ms"]
    latency_ok = abs(rel) <= LATENCY_TOLERANCE
    shares_ok = all(abs(s["diff"]) <= SHARE_TOLERANCE for s in shares.values())
    return {
        "model": fields.get(whole, "combination.model"), "group": group,
        "combination": fields.get(reduced, "id"),
        "layers": found["layers"], "full_layers": found["full_layers"],
        "reduced_ms": fields.get(reduced, "timing.median"),
        "reduced_low_ms": fields.get(reduced, "timing.ci_low"),
        "reduced_high_ms": fields.get(reduced, "timing.ci_high"),
        "extrapolated_ms": found["extrapolated_ms"],
        "extrapolated_low_ms": found["ci_low_ms"], "extrapolated_high_ms": found["ci_high_ms"],
        "measured_ms": measured, "measured_low_ms": fields.get(whole, "timing.ci_low"),
        "measured_high_ms": fields.get(whole, "timing.ci_high"),
        "measured_confidence": fields.get(whole, "timing.confidence"),
        "reduced_confidence": fields.get(reduced, "timing.confidence"),
        "ratio": found["ratio"], "rel_diff": rel,
        "rel_diff_low": found["ci_low_ms"] / measured - 1.0, "rel_diff_high": found["ci_high_ms"] / measured - 1.0,
        "inside": found["within"],
        "worst_share_category": worst, "worst_share_diff": shares[worst]["diff"] if worst else None,
        "share_diffs": {c: s["diff"] for c, s in shares.items()},
        "shares": shares, "share_method": share_method(reduced),
        # the profiler's shares compared the same way, where the extrapolation was another
        # method's: shown, not judged
        "profiler_worst_share_category": profiled_worst,
        "profiler_worst_share_diff": profiled[profiled_worst]["diff"] if profiled_worst else None,
        "profiled_ratio": fields.get(reduced, "profile.overhead_ratio"),
        "whole_profiled_ratio": fields.get(whole, "profile.overhead_ratio"),
        "extrapolation_notes": list(fields.get(reduced, "depth.whole.notes") or []),
        "unstable": unstable_reason(reduced), "whole_unstable": unstable_reason(whole),
        "latency_ok": latency_ok, "shares_ok": shares_ok,
        "verdict": "pass" if latency_ok and shares_ok else "fail",
    }


def _by_model(records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Mapping[str, Any] | None,
                                                                       list[Mapping[str, Any]]]]:
    """Each model's record measured whole and its depth-reduced records (by layer count)."""
    out: dict[str, tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]] = {}
    for record in records:
        model = str(fields.get(record, "combination.model"))
        whole, reduced = out.get(model, (None, []))
        if fields.get(record, "combination.layers") is None:
            whole = record
        else:
            reduced = sorted([*reduced, record], key=lambda r: int(fields.get(r, "combination.layers") or 0))
        out[model] = (whole, reduced)
    return out


def rows(records: Sequence[Mapping[str, Any]], groups: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """A row per depth-reduced record whose model was measured whole too (both ``ok``)."""
    out: list[dict[str, Any]] = []
    for model, (whole, reduced) in _by_model(records).items():
        if whole is None or not is_ok(whole):
            continue
        for record in reduced:
            row = comparison_row(whole, record, (groups or {}).get(model, "")) if is_ok(record) else None
            if row is not None:
                out.append(row)
    return out


def fit(model_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The line latency = a + b x layers through one model's medians at fewer layers, and
    the median measured whole against it at the model's full depth; None with fewer than
    ``stats.MIN_FIT_POINTS`` layer counts."""
    points = sorted((int(r["layers"]), float(r["reduced_ms"])) for r in model_rows
                    if r.get("reduced_ms") is not None)
    if len({x for x, _ in points}) < stats.MIN_FIT_POINTS:
        return None
    line = stats.linear_fit_stats([float(x) for x, _ in points], [y for _, y in points])
    first = model_rows[0]
    full = int(first["full_layers"])
    predicted = line["intercept"] + line["slope"] * full
    measured = float(first["measured_ms"])
    rel = measured / predicted - 1.0 if predicted > 0 else None
    return {
        "model": first["model"], "group": first.get("group", ""), "full_layers": full,
        "layers": [x for x, _ in points],
        "slope_ms": line["slope"], "slope_low_ms": line["ci_low"], "slope_high_ms": line["ci_high"],
        "intercept_ms": line["intercept"], "r2": line["r2"],
        "residuals_ms": {str(x): r for (x, _), r in zip(points, line["residuals"])},
        "predicted_full_ms": predicted, "measured_full_ms": measured,
        "measured_low_ms": first.get("measured_low_ms"), "measured_high_ms": first.get("measured_high_ms"),
        "line_rel_diff": rel, "on_line": rel is not None and abs(rel) <= LINE_TOLERANCE,
    }


def fits(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``fit`` of each model's rows, in the rows' order."""
    models = list(dict.fromkeys(str(r["model"]) for r in table))
    found = [fit([r for r in table if str(r["model"]) == m]) for m in models]
    return [f for f in found if f is not None]


def _level(row: Mapping[str, Any]) -> str:
    level = row.get("reduced_confidence")
    return f"{float(level):.1%}".replace(".0%", "%") if isinstance(level, (int, float)) else "stated"


def _failures(records: Sequence[Mapping[str, Any]]) -> list[str]:
    return [f"{fields.get(r, 'id')}: {fields.get(r, 'status')}: {fields.get(r, 'reason')}"
            for r in records if not is_ok(r)]


def summarise(records: Sequence[Mapping[str, Any]], plan: Plan, *, duration_s: float | None = None,
              notes: Sequence[str] = ()) -> dict[str, Any]:
    """The figure from the suite run's records (pure)."""
    groups = {m.model: m.group for m in plan.models}
    table = rows(records, groups)
    lines = fits(table)
    failed = _failures(records)
    missing = [m for m in plan.models if not any(r["model"] == m.model for r in table)]
    unfitted = [m for m in plan.models if m not in missing and not any(f["model"] == m.model for f in lines)]
    described = [f"{m.group}: `{m.model}`, {m.source}" for m in plan.models]
    method_notes = [
        f"{plan.mode}, {plan.seq_len} tokens, batch 1, fp32, SDPA, {plan.scale} widths; each model measured "
        f"whole and with {', '.join(str(n) for n in plan.counts)} of its layers in one suite run: up to "
        f"{plan.rounds} rounds of each combination ({plan.budget_s:g} s of timing split over them), each "
        f"round a fresh worker process, ended once {plan.min_rounds} clean rounds give an interval "
        f"within ±{plan.target:.0%} (execute.rounds.Policy).",
        "Models: " + "; ".join(described) + ".",
        f"Extrapolation (reportgen.depth): {depth.METHOD}. Shares on both sides are one attribution "
        "method's, the one whose per-layer times the extrapolation scales by (each row's `share_method`): on "
        "a CPU the module-boundary clocks of an unprofiled pass, since the profiler's per-op recording slows "
        "a layer of many small ops once a pass has recorded enough events, unequally at different depths.",
        f"A row passes when the extrapolated median is within {LATENCY_TOLERANCE:.0%} of the median measured "
        f"whole and every category's extrapolated share within {SHARE_TOLERANCE * 100:.0f} points of its "
        "measured share; `inside` says whether the measured median lies in the extrapolation's interval. "
        f"A line passes when the median measured whole is within {LINE_TOLERANCE:.0%} of a + b x layers "
        "at full depth.",
    ]
    if not table:
        return figure(TITLE, QUESTION, value=None, unit="fraction", goal=GOAL, goal_spec=None,
                      status="not measured", duration_s=duration_s, extra={"plan": plan_dict(plan)},
                      notes=[*method_notes, *notes, *(failed or ["no depth-reduced record with its "
                                                                 "whole-model figures"])])
    worst = max(table, key=lambda r: abs(r["rel_diff"]))
    passed = (all(r["verdict"] == "pass" for r in table) and all(f["on_line"] for f in lines)
              and not missing and not unfitted)
    contended = [str(fields.get(r, "id")) for r in records if is_ok(r) and unstable_reason(r)]
    summary = [
        f"{sum(r['verdict'] == 'pass' for r in table)} of {len(table)} depth-reduced combinations within "
        f"both tolerances; {sum(bool(f['on_line']) for f in lines)} of {len(lines)} models on their line.",
        *[f"{r['model']} at {r['layers']} of {r['full_layers']} layers: extrapolated latency "
          f"{r['rel_diff']:+.1%} of the measured, worst share {r['worst_share_category']} "
          f"{(r['worst_share_diff'] or 0.0) * 100:+.1f} points" for r in table if r["verdict"] != "pass"],
        *[f"{r['model']} at {r['layers']} of {r['full_layers']} layers, by the profiler's shares (not judged: "
          f"the extrapolation scaled the {r['share_method']} method's): worst share "
          f"{r['profiler_worst_share_category']} {r['profiler_worst_share_diff'] * 100:+.1f} points"
          for r in table if r.get("profiler_worst_share_diff") is not None
          and abs(r["profiler_worst_share_diff"]) > SHARE_TOLERANCE],
        *[f"{f['model']}: " + (f"the median measured whole is {f['line_rel_diff']:+.1%} off the line"
                               if f["line_rel_diff"] is not None else "the line gives no positive latency")
          + f" at {f['full_layers']} layers ({f['slope_ms']:.3g} ms per layer + {f['intercept_ms']:.3g} ms, "
          f"R² {f['r2']:.4f})" for f in lines if not f["on_line"]],
        *[f"{m.model}: not measured whole and reduced" for m in missing],
        *[f"{m.model}: fewer than {stats.MIN_FIT_POINTS} layer counts to fit a line through" for m in unfitted],
        *([f"Measured under contention (too few clean rounds, or a contended profiled pass; each row's "
           f"`unstable` says why): {len(contended)} of {len(records)} combinations: " + ", ".join(contended) + "."]
          if contended else []),
    ]
    return figure(
        TITLE, QUESTION, value=worst["rel_diff"], unit="fraction",
        interval=[worst["rel_diff_low"], worst["rel_diff_high"]],
        interval_kind=("extrapolated interval of the worst row (over the median measured whole, less 1: the "
                       f"reduced median's {_level(worst)} interval times a 95% bootstrap over the measured "
                       "layers, not a confidence interval at one level)"),
        goal=GOAL, goal_spec={"kind": "rel_within", "target": LATENCY_TOLERANCE},
        status="pass" if passed else "fail",
        notes=[*summary, *method_notes, *notes, *(f"Failed: {f}" for f in failed)],
        rows=table, duration_s=duration_s,
        extra={"fits": lines, "plan": plan_dict(plan),
               "tolerances": {"latency": LATENCY_TOLERANCE, "share": SHARE_TOLERANCE, "line": LINE_TOLERANCE}},
    )


# ---------------------------------------------------------------- measuring


def _finished(runs: Path) -> bool:
    """Whether ``runs`` holds a run its runner finished (not one it was stopped in)."""
    from reportgen.records.schema import iter_runs

    found = list(iter_runs(runs)) if runs.is_dir() else []
    return bool(found) and all(fields.run_get(r.record, "status") == "complete" for r in found)


def run(plan: Plan, scratch: Path, *, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False,
        command: str = "python scripts/bench.py --only depth") -> dict[str, Any]:
    """Measure ``plan``'s suite into ``scratch/runs`` (a scratch runs tree) and summarise
    it. A run stopped part way (the bench interrupted) is resumed, its finished rounds
    kept and its failed combinations measured again; a finished one is measured again
    from scratch."""
    from reportgen.bench import efficiency
    from reportgen.records.schema import iter_runs
    from reportgen.suite import load_suite

    if stop():
        return summarise([], plan, notes=["time limit reached before the figure started"])
    t0 = time.perf_counter()
    runs = scratch / "runs"
    if _finished(runs):
        shutil.rmtree(runs)
    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "depth-check.toml"
    path.write_text(suite_text(plan), encoding="utf-8")
    suite = load_suite(path)
    log(f"  depth: {len(suite.combinations())} combinations in up to {plan.rounds} rounds -> {runs}")
    measured = efficiency.run_suite(suite, runs, command=command, force=False, timeout_s=plan.timeout_s)
    # every record of the run: a resumed run's earlier ones too, not only this invocation's
    here = measured.run_dir.resolve()
    records = next((list(r.combination_records()) for r in iter_runs(runs) if r.path.resolve() == here),
                   measured.records)
    for record in records:
        log(f"  depth {fields.get(record, 'id')}: {fields.get(record, 'status')} "
            f"{fields.get(record, 'timing.median')} ms, whole {fields.get(record, 'depth.whole.median_ms')} ms")
    return summarise(records, plan, duration_s=time.perf_counter() - t0)
