"""The claims registry: one YAML file per claim, validated when loaded.

Every problem is a UserError of one line naming the file and the field, e.g.
``claims/x.yaml: predicate.metric: unknown metric 'shares(attention)'; valid: ...``.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reportgen import fmt
from reportgen.catalog import parse_figure
from reportgen.claims.metrics import Metric, MetricError, format_value, parse_metric
from reportgen.errors import UserError

OPS = (">", ">=", "<", "<=", "==", "approx")
ORDERS = ("ascending", "fastest")
HARDWARE_KINDS = ("any", "cpu", "gpu")
SETTINGS = ("inference", "training")
QUOTE_IN_PRIMARY = ("found", "not found", "not checked")
# Words a device name may start with that name no device: dropped before matching.
_BRANDS = frozenset({"nvidia", "amd", "intel", "tesla", "geforce", "quadro", "radeon", "instinct"})

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOP = {"id", "title", "quote", "source", "conditions", "predicate", "notes"}
_SOURCE = {"title", "url", "date", "via", "quote_in_primary", "provenance"}
_HARDWARE = {"class", "device"}
_VIA = {"title", "url", "note"}
_CONDITIONS = {
    "model",
    "scale",
    "mode",
    "dtype",
    "seq_len",
    "batch_size",
    "attn_implementation",
    "compile",
    "hardware",
    "setting",
    "suite",
}
_SIMPLE = {"metric", "op", "value", "tolerance"}
_ORDER = {"metric", "order", "variants"}


@dataclass(frozen=True)
class Comparison:
    """``metric op value``; ``tolerance`` widens == and approx (absolute, or relative if rel).

    ``written``: the value as the claim writes a stated figure ("47B", "6.7%"), whose
    ``tolerance: rounding`` is half a unit of its last digit."""

    metric: Metric
    op: str
    value: float
    tolerance: float = 0.0
    relative: bool = False
    written: str | None = None

    @property
    def band(self) -> tuple[float, float]:
        tol = abs(self.value) * self.tolerance if self.relative else self.tolerance
        return self.value - tol, self.value + tol

    def show(self, value: float) -> str:
        """A value as the claim writes its figure: a percent to one digit more than the
        figure's ("6.7%" -> 6.66%), else in the metric's unit."""
        if self.written is not None and self.written.endswith("%"):
            digits = len(self.written.rstrip("% ").partition(".")[2])
            return fmt.pct(value, digits + 1)
        return format_value(value, self.metric.unit)

    def describe(self) -> str:
        if self.written is not None and self.op in ("==", "approx"):
            low, high = (self.show(b) for b in self.band)
            return f"{self.metric.text} \u2248 {self.written} (within its rounding: {low} to {high})"
        if self.op in ("==", "approx") and self.tolerance:
            tol = fmt.pct(self.tolerance, 0) if self.relative else fmt.general(self.tolerance)
            return f"{self.metric.text} \u2248 {fmt.general(self.value)} \u00b1 {tol}"
        return f"{self.metric.text} {self.op} {fmt.general(self.value)}"


@dataclass(frozen=True)
class Ordering:
    """Variants by ``metric``: ``ascending`` (each below the next) or ``fastest`` (first below all)."""

    metric: Metric
    order: str
    variants: tuple[str, ...]

    def describe(self) -> str:
        if self.order == "fastest":
            return (
                f"{self.metric.text}: attn={self.variants[0]} lowest of {', '.join(self.variants)}"
            )
        return f"{self.metric.text}: " + " < ".join(f"attn={v}" for v in self.variants)


Check = Comparison | Ordering


@dataclass(frozen=True)
class Predicate:
    checks: tuple[Check, ...]  # all must hold

    @property
    def compares_variants(self) -> bool:
        return isinstance(self.checks[0], Ordering) or self.checks[0].metric.selects_variants

    @property
    def from_catalog(self) -> bool:
        """Whether the predicate is about models' structure alone (decided from the catalog)."""
        return all(isinstance(c, Comparison) and c.metric.from_catalog for c in self.checks)

    @property
    def models(self) -> tuple[str, ...]:
        """The catalog models a structural predicate names, in order."""
        return tuple(dict.fromkeys(t.model for c in self.checks if isinstance(c, Comparison)
                                   for t in c.metric.terms if t.model))

    @property
    def variants(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for check in self.checks:
            if isinstance(check, Ordering):
                seen.update(dict.fromkeys(check.variants))
            else:
                seen.update(dict.fromkeys(t.attn for t in check.metric.terms if t.attn))
        return tuple(seen)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.checks)


def device_tokens(name: str) -> tuple[str, ...]:
    """A device name as the words that identify it: lower case, split on anything that is
    not a letter or digit, leading brand words dropped ("NVIDIA A100-SXM4-80GB" ->
    a100, sxm4, 80gb)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    while words and words[0] in _BRANDS:
        words.pop(0)
    return tuple(words)


@dataclass(frozen=True)
class Hardware:
    """The hardware a claim was made on: a class (``cpu``, ``gpu`` or ``any``) and, where
    the source names it, a device (``A100``, ``H100 SXM``)."""

    kind: str
    device: str | None = None

    def matches(self, kind: str, names: list[str]) -> bool:
        """Whether a run on a ``kind`` device called one of ``names`` is the claim's hardware.

        A named device matches when its words begin the run's device name, word for word:
        ``A100`` matches "NVIDIA A100-SXM4-80GB" and "A100 80GB PCIe", not "A10" nor
        "H100"; ``A100-SXM4-80GB`` matches that variant only.
        """
        if self.kind == "any":
            return True
        if kind != self.kind:
            return False
        if self.device is None:
            return True
        wanted = device_tokens(self.device)
        return any(device_tokens(n)[: len(wanted)] == wanted for n in names if n)

    def describe(self) -> str:
        if self.kind == "any":
            return "any hardware"
        noun = "a GPU" if self.kind == "gpu" else "a CPU"
        return f"{noun}: {self.device}" if self.device else noun


@dataclass(frozen=True)
class Source:
    title: str
    url: str
    date: str | None
    via: dict[str, str | None] | None  # title, url, note (absent ones None)
    quote_in_primary: str  # found | not found | not checked
    provenance: str | None


@dataclass(frozen=True)
class Claim:
    id: str
    title: str
    quote: str
    source: Source
    conditions: dict[str, Any]
    predicate: Predicate
    notes: str | None
    path: str  # as the user named it, for messages
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def hardware(self) -> Hardware:
        hardware = self.conditions["hardware"]
        assert isinstance(hardware, Hardware)
        return hardware


class _Ctx:
    """Error helper: every message starts with the claim file and the field."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> UserError:
        return UserError(f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}")

    def mapping(
        self, value: Any, where: str, allowed: set[str], required: set[str]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                name = f"{where}.{key}" if where else str(key)
                raise self.fail(name, f"unknown field; valid: {', '.join(sorted(allowed))}")
        for key in sorted(required):
            if key not in value or value[key] in (None, ""):
                raise self.fail(f"{where}.{key}" if where else key, "missing")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, "expected non-empty text")
        return " ".join(value.split())


def _url(ctx: _Ctx, value: Any, where: str) -> str:
    url = ctx.text(value, where)
    if not re.match(r"^https?://[^\s<>\"']+$", url):
        raise ctx.fail(where, f"expected an http(s) URL, got {url!r}")
    return url


def _strings(ctx: _Ctx, value: Any, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise ctx.fail(where, "expected text or a list of text")
    return [i.strip() for i in items]


def _seq_len(ctx: _Ctx, value: Any, where: str) -> dict[str, Any]:
    def ints(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    if ints(value):
        return {"values": [value]}
    if isinstance(value, list) and value and all(ints(v) for v in value):
        return {"values": list(value)}
    if isinstance(value, dict):
        ctx.mapping(value, where, {"min", "max"}, set())
        if not value or not all(ints(v) for v in value.values()):
            raise ctx.fail(where, "a range is {min: N, max: M} with positive integers")
        return {"min": value.get("min"), "max": value.get("max")}
    raise ctx.fail(where, "expected an integer, a list of integers or {min: N, max: M}")


_HARDWARE_FORMS = "cpu, gpu, any, or {class: gpu, device: A100}"


def _hardware(ctx: _Ctx, value: Any) -> Hardware:
    where = "conditions.hardware"
    if isinstance(value, str):
        if value.strip().lower() not in HARDWARE_KINDS:
            raise ctx.fail(where, f"{value!r}: expected {_HARDWARE_FORMS}")
        return Hardware(value.strip().lower())
    raw = ctx.mapping(value, where, _HARDWARE, {"class"})
    kind = raw["class"]
    if not isinstance(kind, str) or kind.lower() not in ("cpu", "gpu"):
        raise ctx.fail(f"{where}.class", f"{kind!r}: expected cpu or gpu")
    device = raw.get("device")
    if device is not None:
        device = ctx.text(device, f"{where}.device")
        if any(ch in device for ch in "*?[]") or not device_tokens(device):
            raise ctx.fail(f"{where}.device", f"{device!r}: a device name (e.g. A100, H100 SXM), not a pattern")
    return Hardware(kind.lower(), device)


def _structural_conditions(ctx: _Ctx, value: Any, predicate: Predicate) -> dict[str, Any]:
    """A claim about models' structure is decided from the catalog on any host: its
    conditions, if stated, say ``hardware: any`` and nothing else; its models are the
    predicate's."""
    if value is not None:
        raw = ctx.mapping(value, "conditions", {"hardware"}, set())
        if "hardware" in raw and _hardware(ctx, raw["hardware"]).kind != "any":
            raise ctx.fail("conditions.hardware", "a claim about a model's structure (catalog.*) holds on any "
                           "hardware: 'any'")
    return {"model": list(predicate.models), "hardware": Hardware("any")}


def _conditions(ctx: _Ctx, value: Any) -> dict[str, Any]:
    raw = ctx.mapping(value, "conditions", _CONDITIONS, {"model", "hardware", "setting"})
    out: dict[str, Any] = {}
    for key, item in raw.items():
        where = f"conditions.{key}"
        if key in ("seq_len", "batch_size"):
            out[key] = _seq_len(ctx, item, where)
        elif key == "hardware":
            out[key] = _hardware(ctx, item)
        elif key == "setting":
            if item not in SETTINGS:
                raise ctx.fail(where, f"{item!r}: expected {' or '.join(SETTINGS)}")
            out[key] = [item]
        else:
            out[key] = _strings(ctx, item, where)
    return out


def _number(ctx: _Ctx, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ctx.fail(where, f"expected a number, got {value!r}")
    return float(value)


_PERCENT = re.compile(r"^\s*(\d+(?:\.(\d+))?)\s*%\s*$")


def _written(ctx: _Ctx, value: Any, where: str) -> tuple[float, float] | None:
    """A stated figure as written ("47B", "5.1B", "6.7%"): (its value, the unit of its last
    digit); None for a plain number."""
    if not isinstance(value, str):
        return None
    percent = _PERCENT.match(value)
    if percent:
        return float(percent.group(1)) / 100, 10.0 ** -len(percent.group(2) or "") / 100
    try:
        return parse_figure(value)
    except ValueError:
        raise ctx.fail(where, f"expected a number or a stated figure (47B, 5.1B, 6.7%), got {value!r}") from None


def _metric(ctx: _Ctx, value: Any, where: str) -> Metric:
    try:
        return parse_metric(value)
    except MetricError as exc:
        raise ctx.fail(where, str(exc)) from None


def _check(ctx: _Ctx, value: Any, where: str) -> Check:
    if isinstance(value, dict) and "order" in value:
        raw = ctx.mapping(value, where, _ORDER, _ORDER)
        metric = _metric(ctx, raw["metric"], f"{where}.metric")
        if metric.selects_variants:
            raise ctx.fail(
                f"{where}.metric", "an ordering names its variants in 'variants', not attn="
            )
        if raw["order"] not in ORDERS:
            raise ctx.fail(
                f"{where}.order", f"unknown order {raw['order']!r}; valid: {', '.join(ORDERS)}"
            )
        variants = _strings(ctx, raw["variants"], f"{where}.variants")
        if len(variants) < 2 or len(set(variants)) != len(variants):
            raise ctx.fail(f"{where}.variants", "at least two distinct attention implementations")
        return Ordering(metric, raw["order"], tuple(variants))
    raw = ctx.mapping(value, where, _SIMPLE | {"order", "variants"}, {"metric", "op", "value"})
    if "variants" in raw:
        raise ctx.fail(
            f"{where}.variants", "only an ordering (order: ascending|fastest) takes variants"
        )
    metric = _metric(ctx, raw["metric"], f"{where}.metric")
    op = raw["op"]
    if op not in OPS:
        raise ctx.fail(f"{where}.op", f"unknown op {op!r}; valid: {', '.join(OPS)}")
    written = _written(ctx, raw["value"], f"{where}.value")
    number = written[0] if written else _number(ctx, raw["value"], f"{where}.value")
    tolerance, relative = 0.0, False
    if "tolerance" in raw:
        tol = raw["tolerance"]
        if op not in ("==", "approx"):
            raise ctx.fail(f"{where}.tolerance", f"only == and approx take a tolerance, not {op!r}")
        if tol == "rounding":
            if written is None:
                raise ctx.fail(f"{where}.tolerance", "rounding needs the value as stated (47B, 6.7%), not a number")
            return Comparison(metric, op, number, written[1] / 2, False, " ".join(str(raw["value"]).split()))
        if isinstance(tol, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*%\s*", tol):
            tolerance, relative = float(tol.strip().rstrip("%")) / 100, True
        else:
            tolerance = _number(ctx, tol, f"{where}.tolerance")
        if tolerance < 0:
            raise ctx.fail(f"{where}.tolerance", "must not be negative")
    elif op == "approx":
        raise ctx.fail(f"{where}.tolerance", "missing (approx needs a tolerance, e.g. 10% or 0.05)")
    return Comparison(metric, op, number, tolerance, relative)


def _predicate(ctx: _Ctx, value: Any) -> Predicate:
    if isinstance(value, dict) and "all" in value:
        ctx.mapping(value, "predicate", {"all"}, {"all"})
        items = value["all"]
        if not isinstance(items, list) or not items:
            raise ctx.fail("predicate.all", "expected a non-empty list of predicates")
        checks = tuple(_check(ctx, item, f"predicate.all[{i}]") for i, item in enumerate(items))
    elif value is None:
        raise ctx.fail("predicate", "missing")
    else:
        checks = (_check(ctx, value, "predicate"),)
    structural = {not isinstance(c, Ordering) and c.metric.from_catalog for c in checks}
    if len(structural) > 1 or (True in structural and any(isinstance(c, Ordering) for c in checks)):
        raise ctx.fail("predicate", "mixes a model's structure (catalog.*) with measured metrics")
    kinds = {isinstance(c, Ordering) or c.metric.selects_variants for c in checks}
    if len(kinds) > 1:
        raise ctx.fail(
            "predicate.all", "mixes per-combination metrics with variant comparisons (attn=...)"
        )
    return Predicate(checks)


def _source(ctx: _Ctx, value: Any) -> Source:
    raw = ctx.mapping(value, "source", _SOURCE, {"title", "url", "quote_in_primary"})
    date = raw.get("date")
    if isinstance(date, (_dt.date, _dt.datetime)):
        date = date.isoformat()[:10]
    elif date is not None and not (
        isinstance(date, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    ):
        raise ctx.fail("source.date", f"expected YYYY-MM-DD, got {date!r}")
    via = raw.get("via")
    if via is not None:
        if not isinstance(via, dict):
            raise ctx.fail("source.via", "expected {title: ..., url: ..., note: ...} naming the secondary source")
        via = ctx.mapping(via, "source.via", _VIA, {"title"})
        via = {k: _url(ctx, v, f"source.via.{k}") if k == "url" else ctx.text(v, f"source.via.{k}")
               for k, v in via.items()}
        via = {k: via.get(k) for k in sorted(_VIA)}
    found = raw["quote_in_primary"]
    if found not in QUOTE_IN_PRIMARY:
        raise ctx.fail("source.quote_in_primary",
                       f"{found!r}: expected {', '.join(QUOTE_IN_PRIMARY)}")
    if found == "not found" and via is None:
        raise ctx.fail("source.via", "missing: a quote not found in its source names where it was found")
    provenance = raw.get("provenance")
    return Source(
        title=ctx.text(raw["title"], "source.title"),
        url=_url(ctx, raw["url"], "source.url"),
        date=date,
        via=via,
        quote_in_primary=found,
        provenance=ctx.text(provenance, "source.provenance") if provenance is not None else None,
    )


def load_claim(path: Path, display: str | None = None) -> Claim:
    ctx = _Ctx(display or str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ctx.fail("", f"cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ctx.fail(where, f"invalid YAML: {problem}") from None
    raw = ctx.mapping(data, "", _TOP, {"id", "title", "quote", "source", "predicate"})
    claim_id = raw["id"]
    if not isinstance(claim_id, str) or not _ID.match(claim_id):
        raise ctx.fail("id", f"expected lowercase letters, digits and '-', got {claim_id!r}")
    if claim_id != path.stem:
        raise ctx.fail("id", f"{claim_id!r} differs from the file name {path.stem!r}")
    predicate = _predicate(ctx, raw["predicate"])
    if predicate.from_catalog:
        conditions = _structural_conditions(ctx, raw.get("conditions"), predicate)
    elif raw.get("conditions") in (None, ""):
        raise ctx.fail("conditions", "missing")
    else:
        conditions = _conditions(ctx, raw["conditions"])
    if predicate.compares_variants and "attn_implementation" in conditions:
        raise ctx.fail(
            "conditions.attn_implementation",
            "a comparison of variants names them in its predicate (attn=...), not here",
        )
    notes = raw.get("notes")
    return Claim(
        id=claim_id,
        title=ctx.text(raw["title"], "title"),
        quote=ctx.text(raw["quote"], "quote"),
        source=_source(ctx, raw["source"]),
        conditions=conditions,
        predicate=predicate,
        notes=ctx.text(notes, "notes") if notes is not None else None,
        path=ctx.path,
        raw=raw,
    )


def load_claims(claims_dir: Path | str) -> list[Claim]:
    """Every ``*.yaml`` claim in ``claims_dir``, sorted by id; the first bad one raises."""
    root = Path(claims_dir)
    if not root.is_dir():
        raise UserError(f"{root}: no claims directory")
    claims: list[Claim] = []
    seen: dict[str, str] = {}
    for path in sorted(root.glob("*.y*ml")):
        display = str(path) if root.is_absolute() else path.as_posix()
        claim = load_claim(path, display)
        if claim.id in seen:
            raise UserError(f"{display}: id: {claim.id!r} is also the id of {seen[claim.id]}")
        seen[claim.id] = display
        claims.append(claim)
    return sorted(claims, key=lambda c: c.id)
