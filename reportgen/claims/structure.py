"""A model's structure as a claim's evidence: parameters and cache bytes from the catalog
(no torch, no run).

* ``catalog.params_total(<model>)``, ``catalog.params_active(<model>)``: the census an
  entry records (``catalog.Entry.census``: the meta-device count of ``reportgen models``,
  which the tests recount with torch), in the publisher's convention where the term names
  one (``counts=without_input_embeddings``: less the input embedding tables);
* ``catalog.kv_bytes_per_token(<model>[, bits=n])``: the cache each further token adds,
  every layer's by its kind (``kvcache``, from the entry's config values), at ``n`` bits
  per element (16, bf16, unless named).

Each value is exact (a count, not a measurement) and comes with the words that say how it
was computed, from which config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reportgen import catalog, fmt, kvcache
from reportgen.claims.metrics import DEFAULT_BITS, Measured, Metric, Term, format_value, ratio

EXACT = "exact (computed from the published config)"


def _n(value: float) -> str:
    """A count with its thousands marked (34,560), a fraction to 8 significant digits."""
    return f"{int(value):,}" if float(value).is_integer() else fmt.general(value, 8)


@dataclass(frozen=True)
class Computed:
    """A catalog term's value and how it was computed, in words."""

    measured: Measured
    how: str
    model: str
    config_source: str


def _params(term: Term, entry: catalog.Entry) -> Computed | str:
    census = entry.census
    if census is None:
        return f"{entry.name}: the catalog records no census (reportgen models counts it; add it to the entry)"
    active = term.arg == "params_active"
    count = census["active" if active else "total"]
    what = "parameters one token runs" if active else "every parameter"
    how = [f"{what} of {entry.name}, built on the meta device from its config.json"]
    if active and census["active"] != census["total"]:
        how.append("(each routed expert counted by the share of experts a token runs)")
    if term.counts == "without input embeddings":
        count -= census["input_embeddings"]
        how.append(f"less its input embedding table ({format_value(census['input_embeddings'], 'params')})")
    elif term.counts == "without embeddings":
        count -= census["input_embeddings"] + census["head"]
        how.append(f"less its input embedding table and head "
                   f"({format_value(census['input_embeddings'] + census['head'], 'params')})")
    how.append(f"= {count:,}")
    value = float(count)
    return Computed(Measured(value, value, value, EXACT), " ".join(how), entry.name, entry.config_source)


def _cache(term: Term, entry: catalog.Entry) -> Computed | str:
    if entry.family == "encoder":
        return f"{entry.name} is an encoder: it keeps no cache"
    layers = kvcache.layer_memory(entry.config)
    by_kind: dict[tuple[str, int], int] = {}
    for layer in layers:
        if layer.window is None and layer.per_token:
            by_kind[(layer.kind, layer.per_token)] = by_kind.get((layer.kind, layer.per_token), 0) + 1
    elements = sum(n * per_token for (_, per_token), n in by_kind.items())
    elements_rated = sum(layer.per_rate / layer.rate for layer in layers)
    if not elements and not elements_rated:
        return f"{entry.name}: no layer's cache grows with the sequence"
    value = (elements + elements_rated) * term.bits / 8
    parts = " + ".join(f"{n} layers of {kind} x {per_token:,} elements" for (kind, per_token), n in by_kind.items())
    if elements_rated:
        parts += f" + compressed rows ({fmt.general(elements_rated, 4)} elements a token)"
    precision = "bf16" if term.bits == DEFAULT_BITS else f"{term.bits} bits an element"
    how = (f"{entry.name}: {parts} = {_n(elements + elements_rated)} elements a token, "
           f"at {precision} = {_n(value)} bytes a token")
    return Computed(Measured(value, value, value, EXACT), how, entry.name, entry.config_source)


def compute_term(term: Term) -> Computed | str:
    """The term's value from the catalog, or a string saying why it has none."""
    entry = catalog.entry(term.model or "")
    if term.arg == "kv_bytes_per_token":
        return _cache(term, entry)
    return _params(term, entry)


def compute(metric: Metric) -> tuple[Measured | str, list[Computed]]:
    """The metric's value (a ratio of two terms where it is one) and each term's working."""
    parts: list[Computed] = []
    for term in metric.terms:
        got = compute_term(term)
        if isinstance(got, str):
            return got, parts
        parts.append(got)
    if len(parts) == 2:
        return ratio(parts[0].measured, parts[1].measured), parts
    return parts[0].measured, parts


def at_default_precision(metric: Metric) -> Metric | None:
    """The same metric with every cache at bf16, where a term names other bits (what the
    claim's page shows beside the verdict: the comparison at one precision); else None."""
    if not any(t.kind == "catalog" and t.bits != DEFAULT_BITS for t in metric.terms):
        return None

    def plain(term: Term) -> Term:
        if term.bits == DEFAULT_BITS:
            return term
        return replace(term, bits=DEFAULT_BITS, text=f"catalog.{term.arg}({term.model})")

    numerator = plain(metric.numerator)
    denominator = plain(metric.denominator) if metric.denominator is not None else None
    text = numerator.text + (f" / {denominator.text}" if denominator is not None else "")
    return Metric(numerator, denominator, text)
