"""Evaluating claims against the combination records in runs/ (no torch: reads JSON only).

Verdicts, per piece of evidence (one combination, or one group of variants):

* ``supported``: the whole interval (95%, or the lower level a record of few rounds
  states) satisfies the predicate;
* ``refuted``: the whole interval violates it;
* ``inconclusive``: the interval straddles the threshold (or, for an ordering, two
  variants' intervals overlap);
* ``not tested``: no measurement (no matching run, a skipped variant, a metric the device
  does not record such as kernel launches on a CPU).

* ``not tested on its hardware``: the claim's overall verdict while no run on the hardware
  it was made on exists; runs on other hardware are shown as context beside it.

Evidence is collected from every combination of the claim's model (and scale, mode,
suite). Those that also meet the claim's hardware, setting, dtype, shape and attention
conditions are *within conditions* and decide the claim's verdict; the rest are context.

Hardware: a claim states a class (``cpu``, ``gpu``) and, where its source names one, a
device. A run matches the class by its device kind, and the device word for word from the
start of its name, brand words dropped (``Hardware.matches``): a claim made on an ``A100``
is decided by "NVIDIA A100-SXM4-80GB" or "A100 80GB PCIe" runs, never by an H100, an H200
or an A10. A claim for ``any`` hardware is decided by every run.

A claim about models' structure (``catalog.*`` metrics: parameters, active parameters,
cache bytes per token) is decided from the catalog, on any host and with no run
(``structure``): one piece of evidence, exact; where it counts a cache at other than bf16,
the same comparison at bf16 is shown beside it as context.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reportgen import stats
from reportgen.claims.metrics import (
    Measured,
    Metric,
    format_range,
    format_value,
    ratio,
    read_term,
)
from reportgen.claims.registry import Check, Claim, Comparison, load_claims
from reportgen.claims.structure import at_default_precision, compute
from reportgen.records import fields
from reportgen.records.hardware import cpu_name, hardware_label, host_labels
from reportgen.records.status import is_ok
from reportgen.vocabulary import TRAIN_MODES

SUPPORTED, REFUTED, INCONCLUSIVE, NOT_TESTED = "supported", "refuted", "inconclusive", "not tested"
MIXED = "mixed"  # a claim's overall verdict when its evidence disagrees
NOT_TESTED_HARDWARE = "not tested on its hardware"  # a claim's overall verdict, never a row's
VERDICTS = (SUPPORTED, REFUTED, INCONCLUSIVE, NOT_TESTED)
# What a row outside the claim's conditions shows: the predicate's outcome there, in words
# that are not a verdict (context never decides, so it is never "refuted").
CONTEXT_OUTCOME = {SUPPORTED: "holds here", REFUTED: "does not hold here",
                   INCONCLUSIVE: "interval straddles the threshold", NOT_TESTED: "not measured"}

_CORE = ("model", "scale", "mode", "suite")
_SHAPE = ("setting", "dtype", "seq_len", "batch_size", "attn_implementation")
_KEY_FIELDS = ("model", "scale", "mode", "dtype", "batch_size", "seq_len", "attn_implementation", "device")


@dataclass(frozen=True)
class Observation:
    """One combination record with what its run says about the machine."""

    run_id: str
    hardware: str  # the run's hardware slug
    device: str  # "cpu" | "gpu"
    gpu_name: str | None
    suite: str | None
    record: dict[str, Any]
    cpu_name: str | None = None
    host_label: str | None = None  # how every page names the host (records.hardware)

    @property
    def hardware_label(self) -> str:
        """The host as every page names it (``CPU · AMD EPYC · 2 cores``)."""
        return self.host_label or hardware_label(self.hardware, None)

    @property
    def device_name(self) -> str | None:
        """The measuring device's name: the worker's GPU, else the run's GPU or CPU model."""
        worker = fields.get(self.record, "device.name")
        if self.device == "gpu":
            return str(worker) if worker else self.gpu_name
        return self.cpu_name

    @property
    def combo(self) -> dict[str, Any]:
        return fields.get(self.record, "combination") or {}

    @property
    def id(self) -> str:
        return str(fields.get(self.record, "id"))

    @property
    def ok(self) -> bool:
        return is_ok(self.record)


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    counts: dict[str, int]
    evidence: list[dict[str, Any]]
    reason: str | None = None
    # per hardware that is not the claim's: {"hardware", "device", "label", "n", "low",
    # "high", "unit", "lowest", "text"}
    context: list[dict[str, Any]] = field(default_factory=list)
    # the predicate under each release set a history measured (`across_releases`)
    releases: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        c = self.claim
        return {
            "id": c.id,
            "title": c.title,
            "file": c.path,
            "quote": c.quote,
            "source": {"title": c.source.title, "url": c.source.url, "date": c.source.date,
                       "via": c.source.via, "quote_in_primary": c.source.quote_in_primary,
                       "provenance": c.source.provenance},
            "conditions": {k: (v.describe() if k == "hardware" else v)
                           for k, v in c.conditions.items()},
            "hardware": {"class": c.hardware.kind, "device": c.hardware.device},
            "predicate": c.predicate.describe(),
            "verdict": self.verdict,
            "counts": self.counts,
            "reason": self.reason,
            "context": self.context,
            "releases": self.releases,
            "evidence": self.evidence,
        }

    def evidence_basis(self) -> tuple[list[str], str | None, list[str]]:
        """(run ids, latest finish date YYYY-MM-DD, commits) of the rows a reader relies on:
        those that decide the verdict, or every row when none does (what a citation of the
        claim's page names)."""
        rows = [r for r in self.evidence if r["within_conditions"]] or self.evidence
        runs = sorted({str(r["run_id"]) for r in rows if r["run_id"] is not None})
        dates = sorted(str(r["finished"])[:10] for r in rows if r.get("finished"))
        commits = sorted({c for r in rows for c in r.get("commits") or []})
        return runs, (dates[-1] if dates else None), commits


@dataclass
class CheckReport:
    runs_root: str
    claims: list[ClaimResult] = field(default_factory=list)
    observations: int = 0
    measured: int = 0  # of them, those measured (the rest skipped or failed), as the home page counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "reportgen.check",
            "schema_version": 1,
            "runs": self.runs_root,
            "combinations_read": self.observations,
            "claims": [c.as_dict() for c in self.claims],
        }


# -- reading runs/ -------------------------------------------------------------------------


def _gpu_name(run: dict[str, Any]) -> str | None:
    gpus = fields.run_get(run, "environment.gpus")
    for item in gpus if isinstance(gpus, list) else [gpus]:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            return str(item["name"])
        if isinstance(item, str):
            return item
    return None


def load_observations(runs_root: Path | str) -> list[Observation]:
    """Every combination record of the current runs under ``runs_root`` (the latest
    complete run of each suite on each hardware; a missing directory has none).

    Records come through ``reportgen.records.schema``: older ones are migrated, newer refused.
    """
    from reportgen.records.schema import current_runs, iter_runs

    runs = list(iter_runs(runs_root))
    labels = host_labels(runs)  # from every run, as the pages name each host
    observations: list[Observation] = []
    for run in current_runs(runs):  # earlier runs of a suite: history only
        observations.extend(_run_observations(run, labels))
    return observations


def _run_observations(run: Any, labels: dict[str, str]) -> list[Observation]:
    """One observation per combination record of ``run`` (a ``records.schema.Run``);
    ``labels``: each host's name to a reader (``host_labels``)."""
    hardware = run.hardware
    suite = fields.run_get(run.record, "suite.name")
    gpu, cpu = _gpu_name(run.record), cpu_name(fields.run_get(run.record, "environment"))
    out = []
    for record in run.combination_records():
        device = str(fields.get(record, "combination.device") or "cpu")
        kind = "gpu" if device.startswith("cuda") else "cpu"
        out.append(Observation(run.run_id, hardware, kind, gpu if kind == "gpu" else None,
                               suite, record, cpu, labels[hardware]))
    return out


# -- conditions ----------------------------------------------------------------------------


def _in_range(spec: dict[str, Any], value: Any) -> bool:
    if not isinstance(value, int):
        return False
    if "values" in spec:
        return value in spec["values"]
    low, high = spec.get("min"), spec.get("max")
    return (low is None or value >= low) and (high is None or value <= high)


def _value(obs: Observation, key: str) -> Any:
    if key == "suite":
        return obs.suite
    if key == "setting":  # a training step (train, train-nooptim) is training; the rest inference
        return "training" if fields.get(obs.record, "combination.mode") in TRAIN_MODES else "inference"
    return obs.combo.get(key)


def _matches(claim: Claim, obs: Observation, key: str) -> bool:
    spec = claim.conditions.get(key)
    if spec is None:
        return True
    value = _value(obs, key)
    if key in ("seq_len", "batch_size"):
        return _in_range(spec, value)
    return any(fnmatch.fnmatchcase(str(value), pattern) for pattern in spec)


def _hardware(claim: Claim, obs: Observation) -> bool:
    """Whether ``obs`` ran on the hardware the claim was made on."""
    # the measuring device's own name when recorded; the hardware slug only without one
    return claim.hardware.matches(obs.device, [obs.device_name or obs.hardware])


def _describe_spec(spec: Any) -> str:
    if isinstance(spec, dict):
        if "values" in spec:
            return ", ".join(str(v) for v in spec["values"])
        return f"{spec.get('min') or ''}..{spec.get('max') or ''}"
    return ", ".join(spec) if isinstance(spec, list) else str(spec)


def _outside(claim: Claim, obs: Observation, variants: bool) -> list[str]:
    reasons: list[str] = []
    for key in _SHAPE:
        if variants and key == "attn_implementation":
            continue
        if not _matches(claim, obs, key):
            reasons.append(f"{key} {_value(obs, key)} (claim: {_describe_spec(claim.conditions[key])})")
    # a claim speaks of eager forwards unless it names torch.compile modes; records made
    # before the compile axis have no "compile" and ran eagerly
    compiled = str(fields.get(obs.record, "combination.compile") or "none")
    stated = claim.conditions.get("compile", ["none"])
    if not any(fnmatch.fnmatchcase(compiled, pattern) for pattern in stated):
        reasons.append(f"compile {compiled} (claim: {_describe_spec(stated)})")
    return reasons


# -- verdicts ------------------------------------------------------------------------------


def _compare(m: Measured, check: Comparison) -> str:
    lo, hi, v = m.low, m.high, check.value
    if check.op == ">":
        return SUPPORTED if lo > v else REFUTED if hi <= v else INCONCLUSIVE
    if check.op == ">=":
        return SUPPORTED if lo >= v else REFUTED if hi < v else INCONCLUSIVE
    if check.op == "<":
        return SUPPORTED if hi < v else REFUTED if lo >= v else INCONCLUSIVE
    if check.op == "<=":
        return SUPPORTED if hi <= v else REFUTED if lo > v else INCONCLUSIVE
    band_lo, band_hi = check.band
    if band_lo <= lo and hi <= band_hi:
        return SUPPORTED
    return REFUTED if hi < band_lo or lo > band_hi else INCONCLUSIVE


def _combine(verdicts: list[str]) -> str:
    for verdict in (REFUTED, NOT_TESTED, INCONCLUSIVE):
        if verdict in verdicts:
            return verdict
    return SUPPORTED


def _evaluate_metric(metric: Metric, pick: dict[str | None, Observation | None],
                     missing: dict[str, str]) -> tuple[Measured | str, list[dict[str, Any]]]:
    """The metric's value; ``pick`` maps attn (None for the row itself) to its record."""
    parts: list[dict[str, Any]] = []
    values: list[Measured] = []
    for term in metric.terms:
        obs = pick.get(term.attn)
        label = f"attn={term.attn}: " if term.attn else ""
        if obs is None:
            return label + missing.get(term.attn or "", "no such combination"), parts
        if not obs.ok:
            status, why = fields.get(obs.record, "status"), fields.get(obs.record, "reason") or "no reason recorded"
            return f"{label}{status}: {why}", parts
        got = read_term(term, obs.record)
        if isinstance(got, str):
            return label + got, parts
        values.append(got)
        parts.append({"term": term.text, "combination": obs.id, **got.as_dict()})
    if len(values) == 2:
        return ratio(values[0], values[1]), parts
    return values[0], parts


def _evaluate_check(check: Check, pick: dict[str | None, Observation | None],
                    missing: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"check": check.describe()}
    if isinstance(check, Comparison):
        measured, parts = _evaluate_metric(check.metric, pick, missing)
        out["terms"] = parts
        if isinstance(measured, str):
            out.update(verdict=NOT_TESTED, reason=measured)
            return out
        out.update(verdict=_compare(measured, check), **measured.as_dict())
        if check.op in ("==", "approx"):
            out["band"] = list(check.band)
        else:
            out["threshold"] = check.value
        return out
    ranked: list[dict[str, Any]] = []
    gaps: list[str] = []
    for variant in check.variants:
        measured, _ = _evaluate_metric(
            check.metric, {None: pick.get(variant)},
            {"": missing.get(variant, "no such combination")})
        if isinstance(measured, str):
            gaps.append(f"attn={variant}: {measured}")
            continue
        obs = pick[variant]
        ranked.append({"attn": variant, "combination": obs.id if obs else None, **measured.as_dict()})
    if gaps:
        out.update(verdict=NOT_TESTED, reason="; ".join(gaps), variants=ranked)
        if len(ranked) > 1:  # for context: the fastest of the variants that were measured
            out["lowest_measured"] = min(ranked, key=lambda r: r["value"])["attn"]
        return out
    pairs = list(zip(ranked, ranked[1:])) if check.order == "ascending" else [(ranked[0], r) for r in ranked[1:]]
    verdicts = []
    for first, second in pairs:
        verdict = stats.difference(None, None, interval_a=(first["ci_low"], first["ci_high"]),
                                   interval_b=(second["ci_low"], second["ci_high"]))
        if not verdict.significant:
            verdicts.append(INCONCLUSIVE)
        else:
            verdicts.append(SUPPORTED if first["value"] < second["value"] else REFUTED)
    out.update(verdict=_combine(verdicts), variants=ranked)
    fastest = min(ranked, key=lambda r: r["value"])
    out["lowest"] = fastest["attn"]
    return out


def _summarize(reasons: list[str]) -> str | None:
    """One line from the checks' reasons: "attn=a: why; attn=b: why" -> "why (attn=a, b)"."""
    grouped: dict[str, list[str]] = {}
    for text in reasons:
        for part in text.split("; "):
            label, sep, why = part.partition(": ")
            if sep and label.startswith("attn="):
                grouped.setdefault(why, []).append(label.removeprefix("attn="))
            else:
                grouped.setdefault(part, [])
    if not grouped:
        return None
    return "; ".join(f"{why} (attn={', '.join(dict.fromkeys(v))})" if v else why
                     for why, v in grouped.items())


def _row(claim: Claim, group: list[Observation]) -> dict[str, Any]:
    first = group[0]
    on_hardware = _hardware(claim, first)
    outside = _outside(claim, first, variants=claim.predicate.compares_variants)
    if not on_hardware:
        outside.insert(0, f"hardware: not the claim's ({claim.hardware.describe()})")
    combo = {k: first.combo.get(k) for k in _KEY_FIELDS}
    if claim.predicate.compares_variants:
        combo["attn_implementation"] = None
        pick: dict[str | None, Observation | None] = {
            fields.get(o.record, "combination.attn_implementation"): o for o in group}
        missing = {v: f"no combination in run {first.run_id}" for v in claim.predicate.variants}
    else:
        pick, missing = {None: first}, {}
    checks = [_evaluate_check(c, pick, missing) for c in claim.predicate.checks]
    verdict = _combine([c["verdict"] for c in checks])
    row: dict[str, Any] = {
        "run_id": first.run_id,
        "hardware": first.hardware,
        "device": first.device,
        "gpu_name": first.gpu_name,
        "device_name": first.device_name,
        "hardware_label": first.hardware_label,
        "on_claim_hardware": on_hardware,
        "within_conditions": not outside,
        "role": "decides" if not outside else "context",
        "outside": outside,
        "combination": combo,
        "combinations": [o.id for o in group if not claim.predicate.compares_variants
                         or fields.get(o.record, "combination.attn_implementation") in claim.predicate.variants],
        "verdict": verdict,
        "reason": _summarize([c["reason"] for c in checks if c.get("reason")]),
        "checks": checks,
    }
    head = checks[0]
    row.update({k: head.get(k) for k in ("value", "ci_low", "ci_high")})
    row["outcome"] = verdict if not outside else CONTEXT_OUTCOME[verdict]
    used = [o for o in group if o.id in row["combinations"]]
    # for citing: when the evidence was measured, and by which project commit
    row["finished"] = max((str(fields.get(o.record, "finished") or "") for o in used), default="") or None
    row["commits"] = sorted({str(fields.get(o.record, "git.commit"))
                             for o in used if fields.get(o.record, "git.commit")})
    return row


def _groups(claim: Claim, observations: list[Observation]) -> list[list[Observation]]:
    if not claim.predicate.compares_variants:
        return [[o] for o in observations]
    grouped: dict[tuple[Any, ...], list[Observation]] = {}
    for obs in observations:
        key = (obs.run_id, *(str(obs.combo.get(k)) for k in _KEY_FIELDS if k != "attn_implementation"))
        grouped.setdefault(key, []).append(obs)
    wanted = set(claim.predicate.variants)
    return [g for g in grouped.values()
            if wanted & {fields.get(o.record, "combination.attn_implementation") for o in g}]


def _context(claim: Claim, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the runs on other hardware measured, one entry per hardware, for the reader
    ("on a CPU (AMD EPYC): 30.1-38.5%; not the claim's hardware"). Rows that also meet
    the claim's other conditions are preferred; without any, every row of that hardware."""
    unit = claim.predicate.checks[0].metric.unit
    by_hw: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if not row["on_claim_hardware"]:
            by_hw.setdefault(row["hardware_label"], []).append(row)
    out: list[dict[str, Any]] = []
    for label, group in by_hw.items():
        matching = [r for r in group if len(r["outside"]) == 1]  # outside by hardware only
        near = matching or group
        values = [r["value"] for r in near if r.get("value") is not None]
        lows = [r["ci_low"] for r in near if r.get("ci_low") is not None]
        highs = [r["ci_high"] for r in near if r.get("ci_high") is not None]
        head = [r["checks"][0] for r in near]
        lowest = Counter(c.get("lowest") or c.get("lowest_measured") for c in head
                         if c.get("lowest") or c.get("lowest_measured"))
        unmeasured = sorted({v for c in head if c.get("lowest_measured") for v in
                             set(getattr(claim.predicate.checks[0], "variants", ()))
                             - {m["attn"] for m in c.get("variants") or []}})
        entry: dict[str, Any] = {
            "label": label, "hardware": group[0]["hardware"], "device": group[0]["device"],
            "n": len(values) or sum(lowest.values()), "unit": unit,
            "low": min(values) if values else None, "high": max(values) if values else None,
            "ci_low": min(lows) if lows else None, "ci_high": max(highs) if highs else None,
            "lowest": dict(lowest.most_common()),
            "meets_other_conditions": bool(matching), "unmeasured": unmeasured,
            "why_unmeasured": next((r["reason"].split("; ")[0] for r in near if r.get("reason")), None),
        }
        entry["text"] = context_text(entry)
        out.append(entry)
    return sorted(out, key=lambda e: e["label"])


def context_text(entry: dict[str, Any]) -> str:
    """One line: "on a CPU (AMD EPYC): 30.1–38.5% over 4 combinations; not the claim's hardware"."""
    unit = entry["unit"]
    if entry["low"] is not None:
        if format_value(entry["low"], unit) == format_value(entry["high"], unit):
            measured = format_value(entry["low"], unit)
        else:
            measured = format_range(entry["low"], entry["high"], unit)
        n = entry["n"]
        what = f"{measured} over {n} combination{'s' if n != 1 else ''}"
    elif entry["lowest"]:
        what = "lowest: " + ", ".join(f"{k} in {v} of {entry['n']}" for k, v in entry["lowest"].items())
        if entry["unmeasured"]:
            what += f" ({', '.join(entry['unmeasured'])} not measured there)"
    else:
        what = "not measured: " + (entry["why_unmeasured"] or "no value recorded")
    return f"on {entry['label']}: {what}; not the claim's hardware"


def latest_per_combination(observations: list[Observation]) -> tuple[list[Observation], dict[int, list[str]]]:
    """One observation of each combination on each hardware: where several current runs
    (of different suites) measured the same combination, its latest record, so the
    combination counts once; with, by position in the kept list, the other runs' ids."""
    latest: dict[tuple[Any, ...], list[Observation]] = {}
    for obs in observations:
        key = (obs.hardware, *sorted((k, str(v)) for k, v in obs.combo.items()))
        latest.setdefault(key, []).append(obs)
    kept: list[Observation] = []
    others: dict[int, list[str]] = {}
    for group in latest.values():
        group.sort(key=lambda o: (str(fields.get(o.record, "finished") or ""), o.run_id))
        if len(group) > 1:
            others[len(kept)] = [o.run_id for o in group[:-1]]
        kept.append(group[-1])
    return kept, others


CATALOG_LABEL = "the catalog (any hardware)"


def _catalog_check(check: Comparison, metric: Metric) -> dict[str, Any]:
    """``check``'s comparison of ``metric`` (its own, or the same at bf16) from the catalog."""
    check = replace(check, metric=metric)
    out: dict[str, Any] = {"check": check.describe(), "metric": metric.text}
    measured, parts = compute(metric)
    out["terms"] = [{"term": t.text, "model": c.model, "how": c.how, "config_source": c.config_source,
                     **c.measured.as_dict()} for t, c in zip(metric.terms, parts)]
    if isinstance(measured, str):
        out.update(verdict=NOT_TESTED, reason=measured)
        return out
    out.update(verdict=_compare(measured, check), text=check.show(measured.value), **measured.as_dict())
    if check.op in ("==", "approx"):
        out["band"] = list(check.band)
    return out


def _catalog_row(claim: Claim, checks: list[dict[str, Any]], *, decides: bool, outside: list[str]) -> dict[str, Any]:
    verdict = _combine([c["verdict"] for c in checks])
    row: dict[str, Any] = {
        "run_id": None, "hardware": "catalog", "device": None, "gpu_name": None, "device_name": None,
        "hardware_label": CATALOG_LABEL, "on_claim_hardware": True, "within_conditions": decides,
        "role": "decides" if decides else "context", "outside": outside,
        "combination": {"model": ", ".join(claim.predicate.models)}, "combinations": [],
        "verdict": verdict, "reason": _summarize([c["reason"] for c in checks if c.get("reason")]),
        "checks": checks, "finished": None, "commits": [], "also_measured_in": [], "from_catalog": True,
    }
    row.update({k: checks[0].get(k) for k in ("value", "ci_low", "ci_high")})
    row["outcome"] = verdict if decides else CONTEXT_OUTCOME[verdict]
    return row


def _evaluate_from_catalog(claim: Claim) -> ClaimResult:
    """A claim about models' structure: its predicate on the catalog's figures (exact), and,
    where it counts a cache at other than bf16, the same comparison at bf16 as context."""
    specs = [c for c in claim.predicate.checks if isinstance(c, Comparison)]
    rows = [_catalog_row(claim, [_catalog_check(c, c.metric) for c in specs], decides=True, outside=[])]
    plain = [(c, at_default_precision(c.metric)) for c in specs]
    if any(m is not None for _, m in plain):
        checks = [_catalog_check(c, m or c.metric) for c, m in plain]
        rows.append(_catalog_row(claim, checks, decides=False,
                                 outside=["every cache at bf16 (the same precision on both sides)"]))
    verdict = rows[0]["verdict"]
    counts = {v: int(v == verdict) for v in VERDICTS}
    return ClaimResult(claim, verdict, counts, rows, rows[0]["reason"] or None)


def evaluate_claim(claim: Claim, observations: list[Observation]) -> ClaimResult:
    if claim.predicate.from_catalog:
        return _evaluate_from_catalog(claim)
    core, others = latest_per_combination(
        [o for o in observations if all(_matches(claim, o, k) for k in _CORE)])
    also = {id(core[i]): runs for i, runs in others.items()}
    groups = _groups(claim, core)
    rows = [_row(claim, group) for group in groups]
    for row, group in zip(rows, groups):
        row["also_measured_in"] = sorted({r for o in group for r in also.get(id(o), [])})
    rows.sort(key=lambda r: (not r["within_conditions"], not r["on_claim_hardware"], r["hardware"],
                             r["run_id"], str(r["combination"].get("dtype")),
                             r["combination"].get("seq_len") or 0,
                             r["combination"].get("batch_size") or 0,
                             str(r["combination"].get("attn_implementation"))))
    within = [r for r in rows if r["within_conditions"]]
    counts = Counter(r["verdict"] for r in within)
    tested = {v for v in counts if v != NOT_TESTED}
    context = _context(claim, rows)
    reason: str | None = None
    if not tested:
        verdict = NOT_TESTED
        models = ", ".join(claim.conditions["model"])
        hardware = claim.hardware.describe()
        if not rows:
            reason = f"no combination of {models} in the runs (with the claim's scale, mode and suite)"
            if claim.hardware.kind != "any":
                verdict = NOT_TESTED_HARDWARE
                reason = f"no run on the claim's hardware ({hardware}); " + reason
        elif not any(r["on_claim_hardware"] for r in rows):
            verdict = NOT_TESTED_HARDWARE
            measured_on = ", ".join(dict.fromkeys(r["hardware_label"] for r in rows))
            reason = f"no run on the claim's hardware ({hardware}); measured so far on {measured_on}"
        elif not within:
            why = Counter(r["outside"][0].split(" (")[0].split(":")[0] for r in rows if r["on_claim_hardware"])
            reason = (f"no run within the claim's conditions; {sum(why.values())} on its hardware outside them: "
                      + ", ".join(f"{n}x {w}" for w, n in why.most_common()))
        else:
            reason = "every matching combination lacks the measurement: " + (within[0]["reason"] or "")
    else:
        verdict = tested.pop() if len(tested) == 1 else MIXED
    return ClaimResult(claim, verdict, {v: counts.get(v, 0) for v in VERDICTS}, rows, reason, context)


def check(runs_root: Path | str, claims_dir: Path | str) -> CheckReport:
    """Load the registry (a bad claim raises UserError) and evaluate every claim."""
    claims = load_claims(claims_dir)
    observations = load_observations(runs_root)
    # a combination two current runs measured is one combination (as every page counts it)
    kept = latest_per_combination(observations)[0]
    report = CheckReport(str(runs_root), observations=len(kept),
                         measured=sum(1 for o in kept if is_ok(o.record)))
    report.claims = [evaluate_claim(c, observations) for c in claims]
    history = load_history_observations(runs_root)
    for result in report.claims:
        if not result.claim.predicate.from_catalog:  # a structure is the same under every release
            result.releases = across_releases(result.claim, history)
    return report


# -- across releases -----------------------------------------------------------------------


def load_history_observations(runs_root: Path | str) -> dict[tuple[str, str, str], list[Observation]]:
    """The records of every history run (``reportgen history``: one run per torch and
    transformers release set), by (hardware, torch, transformers); a release set measured
    twice on one hardware and suite: its latest complete run."""
    from reportgen.records.releases import is_history, release_of
    from reportgen.records.schema import COMPLETE, iter_runs

    runs = list(iter_runs(runs_root))
    labels = host_labels(runs)
    by_release: dict[tuple[str, str, str, str], list[Any]] = {}
    for run in runs:
        if is_history(run.record):
            rel = release_of(run.record)
            hardware = run.hardware
            suite = str(fields.run_get(run.record, "suite.name") or "")
            by_release.setdefault((hardware, suite, rel["torch"] or "?", rel["transformers"] or "?"),
                                  []).append(run)
    out: dict[tuple[str, str, str], list[Observation]] = {}
    for (hardware, _suite, torch, transformers), runs in sorted(by_release.items()):
        # as `current_runs` picks a series' run (it never picks a history's): latest complete
        runs.sort(key=lambda r: (str(r.record.get("started") or ""), r.run_id))
        complete = [r for r in runs if r.record.get("status") == COMPLETE] or runs
        out.setdefault((hardware, torch, transformers), []).extend(_run_observations(complete[-1], labels))
    return out


def across_releases(claim: Claim, history: dict[tuple[str, str, str], list[Observation]]) -> list[dict[str, Any]]:
    """What the claim's predicate gives under each release set a history measured: one
    entry per (hardware, torch, transformers) with a combination of the claim's model,
    scale and mode. On the claim's hardware and within its conditions the entry carries a
    verdict; elsewhere the predicate's outcome there (context, as on the claim page)."""
    out: list[dict[str, Any]] = []
    for (hardware, torch, transformers), observations in history.items():
        result = evaluate_claim(claim, observations)
        rows = [r for r in result.evidence if r.get("value") is not None]
        if not rows:
            continue
        decides = [r for r in rows if r["within_conditions"]]
        # context: the rows outside the claim's conditions by hardware only, else all
        near = decides or [r for r in rows if len(r["outside"]) == 1] or rows
        outcomes = Counter(str(r["verdict"]) for r in near)
        verdict = outcomes.most_common(1)[0][0] if len(outcomes) == 1 else MIXED
        values = [float(r["value"]) for r in near]
        unit = claim.predicate.checks[0].metric.unit
        measured = (format_value(values[0], unit) if len(values) == 1
                    else format_range(min(values), max(values), unit))
        if verdict == MIXED:
            said = ", ".join(f"{n} {v}" if decides else f"{n} {CONTEXT_OUTCOME.get(v, v)}"
                             for v, n in outcomes.most_common())
            outcome = f"mixed: {said}"
        else:
            outcome = verdict if decides else CONTEXT_OUTCOME.get(verdict, verdict)
        out.append({
            "hardware": hardware, "hardware_label": near[0]["hardware_label"],
            "torch": torch, "transformers": transformers,
            "run_ids": sorted({str(r["run_id"]) for r in near}),
            "n": len(near), "low": min(values), "high": max(values),
            "ci_low": min((float(r["ci_low"]) for r in near if r.get("ci_low") is not None), default=None),
            "ci_high": max((float(r["ci_high"]) for r in near if r.get("ci_high") is not None), default=None),
            "measured": measured, "decides": bool(decides), "verdict": verdict,
            "counts": dict(outcomes.most_common()), "outcome": outcome,
        })
    return sorted(out, key=lambda e: (e["hardware"], _version(e["torch"]), _version(e["transformers"])))


def _version(text: str) -> tuple[int, ...]:
    from reportgen.records.releases import version_key

    return version_key(text)


def releases_summary(entries: list[dict[str, Any]]) -> str | None:
    """One sentence: the predicate's outcome under each release set, release sets of one
    outcome together ("holds under torch 2.13.0 with transformers 5.0.0, ...; ...")."""
    if not entries:
        return None
    by_outcome: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_outcome.setdefault(str(e["outcome"]), []).append(e)
    context = "" if any(e["decides"] for e in entries) else " (context: not the claim's hardware)"
    if len(by_outcome) == 1:
        outcome = next(iter(by_outcome))
        return (f"Under every one of the {len(entries)} release sets measured, the same outcome"
                f"{context}: {outcome}.")

    def names(group: list[dict[str, Any]]) -> str:
        return ", ".join(f"torch {e['torch']} with transformers {e['transformers']}" for e in group)

    return ("The outcome depends on the release" + context + ": "
            + "; ".join(f"{outcome} under {names(group)}" for outcome, group in by_outcome.items()) + ".")
