"""Metric expressions of claim predicates: parsing (no eval) and reading them from records.

Grammar (whitespace is ignored)::

    expression := term | term "/" term
    term       := name [ "(" [ argument ("," argument)* ] ")" ]
    argument   := value | "attn=" implementation

    share(<category or glob>)              attribution.categories[c].share, summed over a glob
    latency                                timing.median with its CI (ms)
    kernels_per_forward[(<category>)]      attribution.launches_per_forward, or one category's
    memory.<field>                         e.g. memory.peak_allocated_bytes
    flops.<field>                          e.g. flops.total_counted, flops.analytic.<category>
    nongemm_share                          the share of operator time outside matrix
                                           multiplications (the record's op table)
    utilization(<category>)                the category's analytic FLOPs over its device
                                           time, in percent of the device's peak FLOP/s

``attn=<implementation>`` picks one variant from a group of combinations that differ only in
their attention implementation: it makes the predicate compare variants.

A model's structure, from the catalog (``reportgen models``) rather than from a run: a
predicate of these terms alone is decided on any host, with no measurement::

    catalog.params_total(<model>[, counts=<convention>])   every parameter
    catalog.params_active(<model>[, counts=<convention>])  the parameters one token runs
    catalog.kv_bytes_per_token(<model>[, bits=<n>])        cache bytes each further token
                                                           adds (16 bits, bf16, unless named)

``counts``: ``all`` (the default), ``without_input_embeddings`` or ``without_embeddings``
(less the head too), the conventions publishers count in (``catalog.CONVENTIONS``).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from reportgen import fmt
from reportgen.categories import CATEGORIES
from reportgen.intervals import stated_confidence
from reportgen.records import fields
from reportgen.records.shares import category_share
from reportgen.shares import combined_share, headline_section
from reportgen.stats.bootstrap import CONFIDENCE as BOOTSTRAP_LEVEL

VALID_FORMS = (
    "share(<category or glob>), latency, kernels_per_forward[(<category>)], "
    "memory.<field>, flops.<field>, nongemm_share, utilization(<category>); each may take attn=<implementation>; "
    "a ratio is <metric> / <metric>; a model's structure: catalog.params_total(<model>), "
    "catalog.params_active(<model>), catalog.kv_bytes_per_token(<model>)"
)

#: the catalog's functions and their units
CATALOG_TERMS = {"params_total": "params", "params_active": "params", "kv_bytes_per_token": "bytes"}
#: ``counts=`` as written in a metric -> the convention's name (``catalog.CONVENTIONS``)
COUNTS = {"all": "all", "without_input_embeddings": "without input embeddings",
          "without_embeddings": "without embeddings"}
DEFAULT_BITS = 16  # the cache at bf16, as reportgen models states it

MEMORY_FIELDS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "attention_activation_bytes.analytic",
    "attention_activation_bytes.measured",
)
FLOPS_FIELDS = (
    "total_analytic",
    "total_counted",
    "achieved_flops_per_s",
    "peak_flops_per_s",
    "percent_of_peak",
)

# Matrix multiplications (GEMM-based operators): aten ops on a CPU trace, kernel names on
# a device trace. A fused attention op is both, so a record holding one has no answer.
_GEMM_OP = re.compile(r"^aten::(linear|addmm|mm|bmm|matmul|baddbmm|addbmm|einsum|tensordot|"
                      r"conv\d?d|convolution|_convolution)$")
_GEMM_KERNEL = re.compile(r"gemm|xmma|cutlass|wgmma|cublas", re.IGNORECASE)
_FUSED_ATTENTION = re.compile(r"scaled_dot_product|flash|fmha|efficient_attention|cudnn_attention",
                              re.IGNORECASE)

_TERM = re.compile(r"^(?P<name>[a-z_]+(?:\.[a-z_.*]+)?)(?:\((?P<args>[^()]*)\))?$")
_MODEL = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_IMPL = re.compile(r"^[A-Za-z0-9_.\-]+$")


class MetricError(ValueError):
    """A metric expression that does not parse or names nothing that exists."""


@dataclass(frozen=True)
class Term:
    kind: str  # share | latency | kernels | memory | flops | nongemm | utilization | catalog
    arg: str | None  # category (glob), field path, or the catalog's function
    attn: str | None
    text: str
    model: str | None = None  # a catalog term's model
    counts: str = "all"  # a catalog parameter count's convention (catalog.CONVENTIONS)
    bits: int = DEFAULT_BITS  # a catalog cache's bits per element

    @property
    def unit(self) -> str:
        if self.kind == "catalog":
            return CATALOG_TERMS[self.arg or ""]
        return {
            "share": "share",
            "latency": "ms",
            "kernels": "kernels",
            "memory": "bytes",
            "flops": "FLOP",
            "nongemm": "share",
            "utilization": "percent",
        }[self.kind]


@dataclass(frozen=True)
class Metric:
    numerator: Term
    denominator: Term | None
    text: str

    @property
    def terms(self) -> tuple[Term, ...]:
        return (self.numerator,) if self.denominator is None else (self.numerator, self.denominator)

    @property
    def selects_variants(self) -> bool:
        return any(t.attn is not None for t in self.terms)

    @property
    def from_catalog(self) -> bool:
        """Whether the metric is a model's structure, computed from the catalog (no run)."""
        return self.numerator.kind == "catalog"

    @property
    def unit(self) -> str:
        return "ratio" if self.denominator is not None else self.numerator.unit


def _categories(pattern: str) -> list[str]:
    return [c for c in CATEGORIES if fnmatch.fnmatchcase(c, pattern)]


def _check_category(pattern: str, text: str, allow_glob: bool) -> None:
    if not allow_glob and any(ch in pattern for ch in "*?["):
        raise MetricError(f"{text!r}: a single category, not a glob")
    if not _categories(pattern):
        raise MetricError(
            f"{text!r}: no category matches {pattern!r}; categories: {', '.join(CATEGORIES)}"
        )


def parse_term(text: str) -> Term:
    compact = re.sub(r"\s+", "", text)
    match = _TERM.match(compact)
    if not match:
        raise MetricError(f"unknown metric {text.strip()!r}; valid: {VALID_FORMS}")
    name, raw_args = match["name"], match["args"]
    positional: list[str] = []
    attn: str | None = None
    for arg in filter(None, (raw_args or "").split(",")):
        key, eq, value = arg.partition("=")
        if not eq or name.startswith("catalog."):
            positional.append(arg)
        elif key == "attn" and _IMPL.match(value) and attn is None:
            attn = value
        else:
            raise MetricError(
                f"{text.strip()!r}: unknown argument {arg!r}; the only selector is attn=<implementation>"
            )
    if raw_args is not None and not raw_args and name != "latency":
        raise MetricError(f"{text.strip()!r}: empty argument list")

    head, _, field = name.partition(".")
    if head == "catalog":
        return _catalog_term(text.strip(), compact, field, raw_args)
    if name == "share":
        if len(positional) != 1:
            raise MetricError(
                f"{text.strip()!r}: share takes one category or glob, e.g. share(attention.*)"
            )
        _check_category(positional[0], text.strip(), allow_glob=True)
        return Term("share", positional[0], attn, compact)
    if name == "utilization":
        if len(positional) != 1:
            raise MetricError(f"{text.strip()!r}: utilization takes one category, e.g. utilization(attention.core)")
        _check_category(positional[0], text.strip(), allow_glob=False)
        return Term("utilization", positional[0], attn, compact)
    if name == "nongemm_share":
        if raw_args is not None:
            raise MetricError(f"{text.strip()!r}: nongemm_share takes no argument")
        return Term("nongemm", None, attn, compact)
    if name == "latency":
        if positional:
            raise MetricError(
                f"{text.strip()!r}: latency takes no category (it is the whole forward)"
            )
        return Term("latency", None, attn, compact)
    if name == "kernels_per_forward":
        if len(positional) > 1:
            raise MetricError(f"{text.strip()!r}: kernels_per_forward takes at most one category")
        if positional:
            _check_category(positional[0], text.strip(), allow_glob=False)
        return Term("kernels", positional[0] if positional else None, attn, compact)
    if head in ("memory", "flops") and field and not positional:
        valid = MEMORY_FIELDS if head == "memory" else FLOPS_FIELDS
        prefixes = ("by_category_bytes.",) if head == "memory" else ("analytic.", "counted.")
        prefix = next((p for p in prefixes if field.startswith(p)), None)
        if prefix is not None:
            _check_category(field[len(prefix) :], text.strip(), allow_glob=False)
        elif field not in valid:
            raise MetricError(
                f"unknown metric {text.strip()!r}; {head} fields: "
                f"{', '.join(valid + tuple(p + '<category>' for p in prefixes))}"
            )
        return Term(head, field, attn, compact)
    raise MetricError(f"unknown metric {text.strip()!r}; valid: {VALID_FORMS}")


def _catalog_term(text: str, compact: str, function: str, raw_args: str | None) -> Term:
    """``catalog.<function>(<model>[, counts=...|bits=...])``: the model must be in the catalog."""
    from reportgen import catalog

    if function not in CATALOG_TERMS:
        raise MetricError(f"unknown metric {text!r}; the catalog's: "
                          + ", ".join(f"catalog.{f}(<model>)" for f in CATALOG_TERMS))
    args = [a for a in (raw_args or "").split(",") if a]
    if not args or "=" in args[0] or not _MODEL.match(args[0]):
        raise MetricError(f"{text!r}: names a catalog model first, e.g. catalog.{function}(mixtral-8x7b)")
    model = args[0]
    if not catalog.is_catalog_name(model):
        raise MetricError(f"{text!r}: {model!r} is not a catalog model; the catalog has: "
                          + ", ".join(catalog.names()))
    option = "bits" if function == "kv_bytes_per_token" else "counts"
    values: dict[str, str] = {}
    for arg in args[1:]:
        key, eq, value = arg.partition("=")
        if not eq or key != option or key in values:
            raise MetricError(f"{text!r}: unknown argument {arg!r}; catalog.{function} takes {option}=")
        values[key] = value
    counts = values.get("counts", "all")
    if counts not in COUNTS:
        raise MetricError(f"{text!r}: counts={counts}; valid: {', '.join(COUNTS)}")
    bits = values.get("bits", str(DEFAULT_BITS))
    if not bits.isdigit() or not 1 <= int(bits) <= 32:
        raise MetricError(f"{text!r}: bits={bits}; a whole number of bits per element, 1 to 32")
    return Term("catalog", function, None, compact, model=model, counts=COUNTS[counts], bits=int(bits))


def parse_metric(text: str) -> Metric:
    if not isinstance(text, str) or not text.strip():
        raise MetricError(f"a metric is a non-empty string; valid: {VALID_FORMS}")
    parts = text.split("/")
    if len(parts) > 2:
        raise MetricError(f"{text.strip()!r}: at most one '/' (a ratio of two metrics)")
    numerator = parse_term(parts[0])
    denominator = parse_term(parts[1]) if len(parts) == 2 else None
    if denominator is not None and (numerator.kind == "catalog") != (denominator.kind == "catalog"):
        raise MetricError(f"{text.strip()!r}: both sides of a ratio are catalog terms, or neither "
                          "(a model's structure is not measured by a run)")
    if denominator is not None and (numerator.attn is None) != (denominator.attn is None):
        raise MetricError(
            f"{text.strip()!r}: both sides of a ratio select a variant (attn=...), or neither"
        )
    return Metric(numerator, denominator, re.sub(r"\s+", " ", text.strip()))


@dataclass(frozen=True)
class Measured:
    """A value with its interval; ``exact`` values (counts) have low == high == value.
    ``confidence``: the level the interval states (a latency's is its record's, below 95%
    under six rounds; None for exact values and values without an interval)."""

    value: float
    low: float
    high: float
    interval: str  # how the interval was obtained, for the page
    confidence: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "ci_low": self.low,
            "ci_high": self.high,
            "interval": self.interval,
            "confidence": self.confidence,
        }


def _latency_level(record: dict[str, Any]) -> float:
    """The level of the record's latency interval (records from before it was stored: 95%)."""
    return stated_confidence(record) or 0.95


def _recorded(record: dict[str, Any], head: str, field: str) -> Any:
    """``memory.<field>`` or ``flops.<field>`` of ``record`` (a category's name keeps its dot)."""
    if head == "memory" and field.startswith("by_category_bytes."):
        return fields.get(record, ("memory", "by_category_bytes", field.removeprefix("by_category_bytes.")))
    if head == "flops" and field.startswith("analytic."):
        return fields.get(record, ("flops", "analytic", field.removeprefix("analytic.")))
    if head == "flops" and field.startswith("counted."):
        return fields.get(record, ("flops", "counted", field.removeprefix("counted.")))
    if head == "memory":
        return {
            "peak_allocated_bytes": fields.get(record, "memory.peak_allocated_bytes"),
            "peak_reserved_bytes": fields.get(record, "memory.peak_reserved_bytes"),
            "attention_activation_bytes.analytic": fields.get(record, "memory.attention_activation_bytes.analytic"),
            "attention_activation_bytes.measured": fields.get(record, "memory.attention_activation_bytes.measured"),
        }.get(field)
    return {
        "total_analytic": fields.get(record, "flops.total_analytic"),
        "total_counted": fields.get(record, "flops.total_counted"),
        "achieved_flops_per_s": fields.get(record, "flops.achieved_flops_per_s"),
        "peak_flops_per_s": fields.get(record, "flops.peak_flops_per_s"),
        "percent_of_peak": fields.get(record, "flops.percent_of_peak"),
    }.get(field)


def _latency_propagated(record: dict[str, Any], value: float) -> Measured | None:
    """``value`` over a time anywhere in the latency's interval: [value * median / high,
    value * median / low], at that interval's level; None without the interval."""
    median = fields.get(record, "timing.median")
    low, high = fields.get(record, "timing.ci_low"), fields.get(record, "timing.ci_high")
    if median and low and high:
        level = _latency_level(record)
        return Measured(value, value * median / high, value * median / low,
                        f"latency {fmt.level(level)} CI propagated", level)
    return None


def _share_interval(record: dict[str, Any], cats: list[str], share: float) -> Measured:
    # Preferred: the headline method's per-iteration category times (bootstrap over them).
    section = headline_section(fields.get(record, "attribution"))
    combined = combined_share(section, cats) if section else None
    if section is not None and combined is not None:
        point, low, high = combined
        method = fields.get(record, "attribution.headline_method") or "profiler"
        iterations = fields.get(record, ("attribution", "methods", method, "iteration_ms")) or []
        return Measured(point, low, high,
                        f"95% bootstrap over {len(iterations)} iterations of the {method} method",
                        BOOTSTRAP_LEVEL)
    # Else: share = category time / forward time, with the forward time anywhere in the
    # latency's CI; the category time has no interval of its own.
    propagated = _latency_propagated(record, share)
    if propagated is not None:
        return Measured(share, propagated.low, min(1.0, propagated.high), propagated.interval,
                        propagated.confidence)
    return Measured(share, share, share, "no interval recorded")


def read_term(term: Term, record: dict[str, Any]) -> Measured | str:
    """The term's value in one ``ok`` record, or a string saying why it has none."""
    if term.kind == "share":
        categories = fields.get(record, "attribution.categories") or {}
        cats = [c for c in _categories(term.arg or "") if c in categories]
        shares = [s for s in (category_share(record, c) for c in cats) if s is not None]
        if not cats or len(shares) < len(cats):
            return f"no attribution for {term.arg}"
        return _share_interval(record, cats, sum(s.value for s in shares))
    if term.kind == "latency":
        median = fields.get(record, "timing.median")
        if median is None:
            return "no timing"
        median = float(median)
        low, high = fields.get(record, "timing.ci_low"), fields.get(record, "timing.ci_high")
        if low is None or high is None:
            return Measured(median, median, median, "no interval recorded")
        level, ci_method = _latency_level(record), fields.get(record, "timing.ci_method")
        return Measured(
            median,
            float(low),
            float(high),
            f"{fmt.level(level)} CI of the median "
            f"({'n/a' if ci_method is None else ci_method})",
            level,
        )
    if term.kind == "kernels":
        if term.arg is None:
            count = fields.get(record, "attribution.launches_per_forward")
        else:
            count = fields.get(record, ("attribution", "categories", term.arg, "launches"))
        if count is None:
            where = "on this device" if fields.get(record, "attribution.basis") == "device" else "on a CPU run"
            return f"no kernel launch counts {where}"
        return Measured(float(count), float(count), float(count), "exact count")
    if term.kind == "nongemm":
        return _nongemm_share(record)
    if term.kind == "utilization":
        return _utilization(record, term.arg or "")
    value = _recorded(record, term.kind, term.arg or "")
    if value is None:
        return f"no {term.kind}.{term.arg} recorded"
    return Measured(float(value), float(value), float(value), "exact")


def _utilization(record: dict[str, Any], category: str) -> Measured | str:
    """Percent of peak: the category's analytic FLOPs per second of its device time.

    A causal attention computes half its score matrix, and FlashAttention's papers count
    half; the analytic count is of the full matrix, so a decoder's (or the causal
    attention-micro's) ``attention.core`` FLOPs are halved here. The interval carries the
    latency's 95% interval over to the category's time, as a share's does.
    """
    if fields.get(record, "attribution.basis") != "device":
        return "no device time on a CPU run"
    peak = fields.get(record, "flops.peak_flops_per_s")
    if not peak:
        return "no peak FLOP/s recorded for this device and dtype"
    work = fields.get(record, ("flops", "analytic", category))
    ms = fields.get(record, ("attribution", "categories", category, "device_ms"))
    if ms is None:
        ms = fields.get(record, ("attribution", "categories", category, "ms"))
    if not work or not ms:
        return f"no analytic FLOPs or device time for {category}"
    causal = (fields.get(record, "model.architecture") == "decoder"
              or fields.get(record, "model.name") == "attention-micro")
    if category == "attention.core" and causal:
        work = work / 2
    value = 100.0 * work / (ms / 1000.0) / peak
    # time anywhere in the latency's interval
    return _latency_propagated(record, value) or Measured(value, value, value, "no interval recorded")


def _nongemm_share(record: dict[str, Any]) -> Measured | str:
    """Operator time outside matrix multiplications over all operator time (the forward's
    time outside any operator, Python and dispatch, is in neither)."""
    ops = fields.get(record, "ops") or []
    if not ops:
        return "no op table recorded"
    fused = sorted({str(o.get("name")) for o in ops if _FUSED_ATTENTION.search(str(o.get("name")))})
    if fused:
        return f"a fused attention op is both GEMM and not ({fused[0]})"
    device = fields.get(record, "attribution.basis") == "device"
    total = gemm = 0.0
    for op in ops:
        name, ms = str(op.get("name")), float(op.get("total_ms") or 0.0)
        total += ms
        if (_GEMM_KERNEL.search(name) if device else _GEMM_OP.match(name)):
            gemm += ms
    if total <= 0:
        return "no operator time recorded"
    share = (total - gemm) / total
    return Measured(share, share, share, "one profiled pass (no interval)")


def ratio(a: Measured, b: Measured) -> Measured | str:
    """a / b with the interval [low_a / high_b, high_a / low_b] (positive quantities)."""
    if b.value == 0 or b.low <= 0 or b.high <= 0:
        return "denominator is zero"
    interval = (
        "ratio of CI endpoints"
        if (a.low, a.high, b.low, b.high) != (a.value, a.value, b.value, b.value)
        else "exact"
    )
    # it holds where both intervals do: at most the lower of their levels
    levels = [c for c in (a.confidence, b.confidence) if c is not None]
    return Measured(a.value / b.value, a.low / b.high, a.high / b.low, interval,
                    min(levels) if levels else None)


def format_value(value: float | None, unit: str) -> str:
    """A value for a reader, in its unit: 35.6%, 3.7x, 146.8 us, 1.2 GiB."""
    if value is None:
        return "-"
    if unit == "share":
        return fmt.pct(value)
    if unit == "ratio":
        return fmt.ratio_sig(value)
    if unit == "kernels":
        return fmt.general(value)
    if unit == "percent":
        return f"{fmt.pct_value(value)} of peak"
    if unit == "ms":
        return fmt.duration_ms(value)
    if unit == "bytes":
        return fmt.nbytes_compact(value)
    if unit == "params":
        return f"{fmt.general(value / 1e9, 4)}B" if abs(value) >= 1e9 else f"{fmt.general(value / 1e6, 4)}M"
    return fmt.general(value, 4)


def format_range(low: float, high: float, unit: str) -> str:
    """``30.1–38.5%`` (one unit sign where the unit is a suffix without a space)."""
    lo, hi = format_value(low, unit), format_value(high, unit)
    if unit == "percent":
        return f"{fmt.fixed(low, 1)}\u2013{hi}"
    if unit in ("share", "ratio") and lo[-1] == hi[-1]:
        return f"{lo[:-1]}\u2013{hi}"
    return f"{lo}\u2013{hi}"
