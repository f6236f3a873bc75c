"""Evaluating claims against the combination records in runs/ (no torch: reads JSON only).

Verdicts, per piece of evidence (one combination, or one group of variants):

* ``supported``: the whole 95% interval satisfies the predicate;
* ``refuted``: the whole interval violates it;
* ``inconclusive``: the interval straddles the threshold (or, for an ordering, two
  variants' intervals overlap);
* ``not tested``: no measurement (no matching run, a skipped variant, a metric the device
  does not record such as kernel launches on a CPU).

Evidence is collected from every combination of the claim's model (and scale, mode,
suite). Those that also meet the claim's hardware, dtype, shape and attention conditions
are *within conditions* and decide the claim's verdict; the rest are shown as context.

Hardware: ``cpu`` and ``gpu`` match the device kind. A GPU name pattern (``A100*``) matches
every CUDA GPU run, because a claim about one GPU is the natural question to ask of
another; the evidence names the GPU and flags it when it is not the stated one.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen import stats
from reportgen.claims.metrics import Measured, Metric, ratio, read_term
from reportgen.claims.registry import Check, Claim, Comparison, load_claims

SUPPORTED, REFUTED, INCONCLUSIVE, NOT_TESTED = "supported", "refuted", "inconclusive", "not tested"
MIXED = "mixed"  # a claim's overall verdict when its evidence disagrees
VERDICTS = (SUPPORTED, REFUTED, INCONCLUSIVE, NOT_TESTED)

_CORE = ("model", "scale", "mode", "suite")
_SHAPE = ("dtype", "seq_len", "batch_size", "attn_implementation")
_KEY_FIELDS = ("model", "scale", "mode", "dtype", "batch_size", "seq_len", "attn_implementation", "device")


@dataclass(frozen=True)
class Observation:
    """One combination record with what its run says about the machine."""

    run_id: str
    hardware: str  # the run's hardware label (slug)
    device: str  # "cpu" | "gpu"
    gpu_name: str | None
    suite: str | None
    record: dict[str, Any]

    @property
    def combo(self) -> dict[str, Any]:
        return self.record.get("combination") or {}

    @property
    def id(self) -> str:
        return str(self.record.get("id"))

    @property
    def ok(self) -> bool:
        return self.record.get("status") == "ok"


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    counts: dict[str, int]
    evidence: list[dict[str, Any]]
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        c = self.claim
        return {
            "id": c.id,
            "title": c.title,
            "file": c.path,
            "quote": c.quote,
            "source": {"title": c.source.title, "url": c.source.url, "date": c.source.date,
                       "via": c.source.via, "provenance": c.source.provenance},
            "conditions": c.conditions,
            "predicate": c.predicate.describe(),
            "verdict": self.verdict,
            "counts": self.counts,
            "reason": self.reason,
            "evidence": self.evidence,
        }


@dataclass
class CheckReport:
    runs_root: str
    claims: list[ClaimResult] = field(default_factory=list)
    observations: int = 0

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
    env = run.get("environment") or {}
    candidates: list[Any] = []
    for key in ("gpus", "gpu", "devices"):
        value = env.get(key)
        candidates.extend(value if isinstance(value, list) else [value])
    for item in (env.get("cuda") or {}).get("devices") or []:
        candidates.append(item)
    for item in candidates:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            return str(item["name"])
        if isinstance(item, str):
            return item
    return None


def load_observations(runs_root: Path | str) -> list[Observation]:
    """Every combination record of the current runs under ``runs_root`` (the latest
    complete run of each suite on each hardware; a missing directory has none).

    Records come through ``reportgen.schema``: older ones are migrated, newer refused.
    """
    from reportgen.schema import current_runs, iter_runs

    observations: list[Observation] = []
    for run in current_runs(iter_runs(runs_root)):  # earlier runs of a suite: history only
        hardware = str(run.record.get("hardware") or run.path.parent.name)
        suite = (run.record.get("suite") or {}).get("name")
        gpu = _gpu_name(run.record)
        for record in run.combinations():
            device = str((record.get("combination") or {}).get("device") or "cpu")
            kind = "gpu" if device.startswith("cuda") else "cpu"
            observations.append(Observation(run.run_id, hardware, kind, gpu if kind == "gpu" else None,
                                            suite, record))
    return observations


# -- conditions ----------------------------------------------------------------------------


def _in_range(spec: dict[str, Any], value: Any) -> bool:
    if not isinstance(value, int):
        return False
    if "values" in spec:
        return value in spec["values"]
    low, high = spec.get("min"), spec.get("max")
    return (low is None or value >= low) and (high is None or value <= high)


def _matches(claim: Claim, obs: Observation, key: str) -> bool:
    spec = claim.conditions.get(key)
    if spec is None:
        return True
    value = obs.suite if key == "suite" else obs.combo.get(key)
    if key in ("seq_len", "batch_size"):
        return _in_range(spec, value)
    return any(fnmatch.fnmatchcase(str(value), pattern) for pattern in spec)


def _hardware(claim: Claim, obs: Observation) -> tuple[bool, str | None]:
    """(within conditions, note for the evidence table)."""
    stated = claim.conditions.get("hardware", "any")
    kind = stated.lower()
    if kind == "any":
        return True, None
    if kind in ("cpu", "gpu"):
        return obs.device == kind, None if obs.device == kind else f"{obs.device} (claim: {kind})"
    if obs.device != "gpu":
        return False, f"cpu (claim: {stated})"
    names = [n for n in (obs.gpu_name, obs.hardware) if n]
    pattern = stated.lower()
    for name in names:
        low = name.lower()
        for candidate in (low, low.removeprefix("nvidia ").removeprefix("nvidia-")):
            if fnmatch.fnmatchcase(candidate, pattern):
                return True, None
    return True, f"{obs.gpu_name or obs.hardware} differs from the stated {stated}"


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
            reasons.append(f"{key} {obs.combo.get(key)} (claim: {_describe_spec(claim.conditions[key])})")
    # a claim speaks of eager forwards unless it names torch.compile modes; records made
    # before the compile axis have no "compile" and ran eagerly
    compiled = str(obs.combo.get("compile") or "none")
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
            status, why = obs.record.get("status"), obs.record.get("reason") or "no reason recorded"
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


def _row(claim: Claim, group: list[Observation], attn_key: str | None) -> dict[str, Any]:
    first = group[0]
    within_hw, hw_note = _hardware(claim, first)
    outside = _outside(claim, first, variants=attn_key is None)
    if not within_hw:
        outside.insert(0, f"hardware {hw_note}")
        hw_note = None
    combo = {k: first.combo.get(k) for k in _KEY_FIELDS}
    if claim.predicate.compares_variants:
        combo["attn_implementation"] = None
        pick: dict[str | None, Observation | None] = {o.combo.get("attn_implementation"): o for o in group}
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
        "hardware_note": hw_note,
        "within_conditions": not outside,
        "outside": outside,
        "combination": combo,
        "combinations": [o.id for o in group if not claim.predicate.compares_variants
                         or o.combo.get("attn_implementation") in claim.predicate.variants],
        "verdict": verdict,
        "reason": _summarize([c["reason"] for c in checks if c.get("reason")]),
        "checks": checks,
    }
    head = checks[0]
    row.update({k: head.get(k) for k in ("value", "ci_low", "ci_high")})
    return row


def _groups(claim: Claim, observations: list[Observation]) -> list[list[Observation]]:
    if not claim.predicate.compares_variants:
        return [[o] for o in observations]
    grouped: dict[tuple[Any, ...], list[Observation]] = {}
    for obs in observations:
        key = (obs.run_id, *(str(obs.combo.get(k)) for k in _KEY_FIELDS if k != "attn_implementation"))
        grouped.setdefault(key, []).append(obs)
    wanted = set(claim.predicate.variants)
    return [g for g in grouped.values() if wanted & {o.combo.get("attn_implementation") for o in g}]


def evaluate_claim(claim: Claim, observations: list[Observation]) -> ClaimResult:
    core = [o for o in observations if all(_matches(claim, o, k) for k in _CORE)]
    rows = [_row(claim, group, None) for group in _groups(claim, core)]
    rows.sort(key=lambda r: (not r["within_conditions"], r["hardware"], r["run_id"],
                             str(r["combination"].get("dtype")), r["combination"].get("seq_len") or 0,
                             r["combination"].get("batch_size") or 0,
                             str(r["combination"].get("attn_implementation"))))
    within = [r for r in rows if r["within_conditions"]]
    counts = Counter(r["verdict"] for r in within)
    tested = {v for v in counts if v != NOT_TESTED}
    reason: str | None = None
    if not tested:
        verdict = NOT_TESTED
        models = ", ".join(claim.conditions["model"])
        if not rows:
            reason = f"no combination of {models} in the runs (with the claim's scale, mode and suite)"
        elif not within:
            why = Counter(r["outside"][0].split(" (")[0] for r in rows)
            reason = f"no run within the claim's conditions; {len(rows)} outside: " + ", ".join(
                f"{n}x {w}" for w, n in why.most_common())
        else:
            reason = "every matching combination lacks the measurement: " + (within[0]["reason"] or "")
    else:
        verdict = tested.pop() if len(tested) == 1 else MIXED
    return ClaimResult(claim, verdict, {v: counts.get(v, 0) for v in VERDICTS}, rows, reason)


def check(runs_root: Path | str, claims_dir: Path | str) -> CheckReport:
    """Load the registry (a bad claim raises UserError) and evaluate every claim."""
    claims = load_claims(claims_dir)
    observations = load_observations(runs_root)
    report = CheckReport(str(runs_root), observations=len(observations))
    report.claims = [evaluate_claim(c, observations) for c in claims]
    return report
