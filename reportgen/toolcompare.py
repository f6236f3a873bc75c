"""Other tools' figures for the same forward, folded into reportgen's categories, and
the comparison of each with reportgen's (pure: no torch, no HTA; both sides use it).

Every tool here reports time per *range*: torch's ``key_averages`` per
``record_function`` name, HolisticTraceAnalysis per user annotation, Nsight Systems per
NVTX range. The ranges are reportgen's own ``rg|<role>|<fqn>`` module ranges, so one fold
turns any of them into categories: a range's exclusive time is its total less the totals
of the labelled ranges nested in it (nesting read from the module names), and goes to
the category of its module (``module_category``: the structural classification, the
same one the hooks method uses). The ``rg|iteration`` range's exclusive time is the
forward outside every module range.

``compare`` puts each tool beside reportgen per category and explains every difference
over ``THRESHOLD`` of the forward by named parts computed from the same pass; what they
leave over that threshold is shown as ``unexplained``. ``aggregate`` does so for several
passes of the same forward: the median pass's figures, each figure and each difference
with the interval of its median over the passes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen.attribution import ITERATION_LABEL, ROLE_CATEGORY, parse_label
from reportgen.categories import CATEGORIES
from reportgen.records.status import MEASURED

__all__ = ["NSYS_COLUMNS", "PASSES", "THRESHOLD", "TOOLS", "aggregate", "compare", "fold_ranges",
           "label_category", "parse_nvtx_gpu_proj_sum"]

THRESHOLD = 0.02  # a difference over this share of the forward must be explained
TOOLS = ("key_averages", "hta", "nsys")
# The columns of ``nsys stats --report nvtx_gpu_proj_sum --format csv`` (Nsight Systems
# post-collection analysis guide); the parser reads the first five.
NSYS_COLUMNS = ("Range", "Style", "Total Proj Time (ns)", "Total Range Time (ns)",
                "Range Instances", "Proj Avg (ns)", "Proj Med (ns)", "Proj Min (ns)",
                "Proj Max (ns)", "Proj StdDev (ns)", "Total GPU Ops", "Avg GPU Ops",
                "Avg Range Lvl", "Avg Num Child")
_CONTAINER_CATEGORY = {"attn": "attention.core", "mlp": "mlp"}


def label_category(label: str, module_category: Mapping[str, str]) -> str | None:
    """The category of the time a module range holds outside its nested ranges; None
    for a name that is not a module range (``rg|iteration``, another tool's names)."""
    parsed = parse_label(label)
    if parsed is None:
        return None
    role, fqn = parsed
    if role in ROLE_CATEGORY:
        return ROLE_CATEGORY[role]
    if role in _CONTAINER_CATEGORY:
        return _CONTAINER_CATEGORY[role]
    return module_category.get(fqn) or "other"


def _parents(fqns: Sequence[str]) -> dict[str, str | None]:
    """Each labelled module's nearest labelled ancestor (None: the iteration)."""
    known = set(fqns)
    out: dict[str, str | None] = {}
    for fqn in fqns:
        parent, probe = None, fqn
        while "." in probe:
            probe = probe.rsplit(".", 1)[0]
            if probe in known:
                parent = probe
                break
        out[fqn] = parent
    return out


def fold_ranges(totals: Mapping[str, float], module_category: Mapping[str, str], *,
                iterations: int, self_times: Mapping[str, float] | None = None
                ) -> dict[str, Any]:
    """Category ms per forward from per-range totals summed over ``iterations`` forwards.

    ``totals`` maps range names to ms (names that are not ``rg|`` ranges are ignored; the
    ``rg|iteration`` entry is the forward). With ``self_times`` (a range's own time outside
    every event nested in it, as ``key_averages`` gives) that time is ``overhead`` and the
    rest of a range's exclusive time its category; the iteration's exclusive time less
    its self time (ops outside every module range) is ``other``. Without them a range's
    whole exclusive time is its category, the iteration's exclusive time is ``other`` and
    ``overhead`` is None (the tool has no such notion).

    Returns ``totals`` {category: ms}, ``forward_ms``, ``outside_ranges_ms`` (the
    iteration's exclusive time) and ``negative`` (ranges whose nested ranges hold more
    than they do: nesting the module names did not predict).
    """
    if iterations < 1:
        raise ValueError(f"need iterations >= 1, got {iterations}")
    labels = {name: float(ms) for name, ms in totals.items() if parse_label(name) is not None}
    by_fqn: dict[str, str] = {}
    for name in labels:
        by_fqn[(parse_label(name) or ("", ""))[1]] = name
    parents = _parents(sorted(by_fqn))
    nested: dict[str | None, float] = {}
    for fqn, parent in parents.items():
        nested[parent] = nested.get(parent, 0.0) + labels[by_fqn[fqn]]
    out = {c: 0.0 for c in CATEGORIES}
    negative: list[str] = []
    selfs = self_times or {}
    for fqn, name in by_fqn.items():
        exclusive = labels[name] - nested.get(fqn, 0.0)
        if exclusive < -1e-9:
            negative.append(name)
        category = label_category(name, module_category) or "other"
        own = float(selfs.get(name, 0.0))
        out[category] += exclusive - own
        out["overhead"] += own
    if ITERATION_LABEL not in totals:
        raise ValueError(f"no {ITERATION_LABEL!r} range among the totals")
    forward = float(totals[ITERATION_LABEL])
    outside = forward - nested.get(None, 0.0)
    own = float(selfs.get(ITERATION_LABEL, 0.0))
    out["other"] += outside - own
    out["overhead"] += own
    scaled: dict[str, float | None] = {c: v / iterations for c, v in out.items()}
    if self_times is None:
        scaled["overhead"] = None
    return {"totals": scaled, "forward_ms": forward / iterations,
            "outside_ranges_ms": outside / iterations, "negative": sorted(negative)}


def parse_nvtx_gpu_proj_sum(text: str) -> list[dict[str, Any]]:
    """Rows of ``nsys stats --report nvtx_gpu_proj_sum --format csv`` output.

    Lines before the CSV header (nsys prints what it processes) are skipped. A range in
    the default domain is written ``:<name>``; the leading colon is dropped, a domain
    prefix kept. Times stay in ns. Raises ValueError when the header is missing or lacks
    a column the parser reads.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip('"').startswith("Range")),
                 None)
    if start is None:
        raise ValueError("no nvtx_gpu_proj_sum header (a line starting with 'Range') in the "
                         "nsys stats output")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    missing = [c for c in NSYS_COLUMNS[:5] if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"nvtx_gpu_proj_sum output lacks the columns {missing}")
    rows = []
    for row in reader:
        name = row["Range"] or ""
        rows.append({"range": name.removeprefix(":"),
                     "style": row["Style"],
                     "proj_ns": float(row["Total Proj Time (ns)"].replace(",", "")),
                     "range_ns": float(row["Total Range Time (ns)"].replace(",", "")),
                     "instances": int(float(row["Range Instances"].replace(",", "")))})
    return rows


def _reason(reason: str, per_category: Mapping[str, float]) -> list[tuple[str, str, float]]:
    return [(c, reason, float(v)) for c, v in per_category.items() if v]


def explanations(tool: str, *, basis: str, reportgen: Mapping[str, Any],
                 evidence: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    """(category, reason, ms tool minus reportgen) parts for ``tool``, from the pass's
    own figures in ``evidence``: ``tails`` {category: ms} (reportgen's ``other`` ops
    inside attention and MLP modules after their output projection), ``gaps``
    {category: ms} (time in the category's ranges outside every op, ``other`` for the
    iteration's own), ``rounding`` {category: ms} (what whole-microsecond events change)."""
    parts: list[tuple[str, str, float]] = []
    tails = dict(evidence.get("tails") or {})
    tail_total = sum(tails.values())
    range_tool = tool in TOOLS
    host_tool = tool == "key_averages" or (tool == "hta" and basis == "cpu")
    if range_tool and host_tool and tail_total:
        parts += _reason("reportgen counts the ops after an attention or MLP module's output "
                         "projection (dropout, residual add) as other; the module's range "
                         "holds them", {**tails, "other": -tail_total})
    if tool == "key_averages" and basis == "device":
        cats = reportgen.get("categories") or {}
        parts += _reason("key_averages sums host CPU time; reportgen's figure on this device "
                         "is device time", {c: (cats.get(c) or {}).get("cpu_ms", 0.0)
                                            - (cats.get(c) or {}).get("ms", 0.0)
                                            for c in CATEGORIES})
    if tool == "hta" and basis == "cpu":
        gaps = dict(evidence.get("gaps") or {})
        parts += _reason("HTA counts a range's whole duration: the time in it between ops "
                         "(Python, hooks, dispatch) is reportgen's overhead", gaps)
        parts += _reason("HTA rounds every event inward to whole microseconds",
                         dict(evidence.get("rounding") or {}))
    return parts


def compare(reportgen: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]], *,
            evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Per category every measured tool's ms beside reportgen's; each difference over
    ``THRESHOLD`` of reportgen's forward with its named parts and, where they leave more
    than the threshold, an ``unexplained`` part. ``reportgen`` is the reportgen entry
    (``totals``, ``forward_ms``, ``basis``, ``categories`` with ``cpu_ms``)."""
    forward = float(reportgen["forward_ms"])
    limit = THRESHOLD * forward
    basis = str(reportgen.get("basis") or "cpu")
    measured = {name: t for name, t in tools.items() if t.get("status") == MEASURED}
    parts = {name: explanations(name, basis=basis, reportgen=reportgen, evidence=evidence)
             for name in measured}
    rows = []
    for category in CATEGORIES:
        ours = (reportgen.get("totals") or {}).get(category)
        row: dict[str, Any] = {"category": category, "reportgen": ours}
        differences = []
        for name in TOOLS:
            theirs = (measured.get(name, {}).get("totals") or {}).get(category)
            row[name] = theirs
            if theirs is None or ours is None:
                continue
            delta = float(theirs) - float(ours)
            if abs(delta) <= limit:
                continue
            reasons: list[dict[str, Any]] = [{"reason": reason, "ms": ms} for c, reason, ms in parts[name]
                       if c == category and abs(ms) > 1e-9]
            left = delta - sum(r["ms"] for r in reasons)
            if abs(left) > limit:
                reasons.append({"reason": "unexplained", "ms": left})
            differences.append({"tool": name, "ms": delta, "share_of_forward": delta / forward,
                                "explained": abs(left) <= limit, "reasons": reasons})
        row["differences"] = differences
        rows.append(row)
    return {"basis": basis, "forward_ms": forward, "threshold": THRESHOLD,
            "threshold_ms": limit, "rows": rows}


# passes ---------------------------------------------------------------------------------
PASSES = 6  # the fewest whose order-statistic interval of the median reaches 95% ([min, max])
NOT_RUN = "not run"  # a tool's status in the passes it is not run in


def _median_ci(values: Sequence[float]) -> dict[str, Any]:
    from reportgen import stats
    from reportgen.intervals import achieved_confidence

    median, low, high = stats.median_ci(values, 0.95)
    return {"median": median, "low": low, "high": high,
            "confidence": achieved_confidence(len(values), 0.95)}


def aggregate(passes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several passes of the same forward, each read by every tool, summarised.

    Each pass is ``{"tools": {name: entry}, "evidence": {...}}`` (entries as ``compare``
    takes them, ``reportgen`` among them). The figures shown are those of the median pass
    (by reportgen's forward time; the lower middle of an even count), so within it every
    relation between tools and categories holds exactly, and its evidence explains its
    differences. Each measured tool's entry gets ``passes`` and, per category and for its
    forward, the interval of the median over the passes (``stats.median_ci``, with the
    confidence it achieves); each row of the comparison the tools' intervals, each
    difference the interval of the per-pass difference (tool minus reportgen, paired by
    pass). A tool run in one pass only (its status ``NOT_RUN`` in the others) keeps that
    pass's figures, with one-pass intervals (confidence 0). Returns ``{"pass": index,
    "tools", "evidence", "comparison"}``."""
    if not passes:
        raise ValueError("no passes")
    forwards = [float(p["tools"]["reportgen"]["forward_ms"]) for p in passes]
    index = sorted(range(len(passes)), key=lambda i: (forwards[i], i))[(len(passes) - 1) // 2]
    chosen = passes[index]
    per_tool: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for name, entry in chosen["tools"].items():
        if entry.get("status") == NOT_RUN:
            # a tool run once (in a process of its own), not in every pass: its one result
            entry = next((p["tools"][name] for p in passes
                          if (p["tools"].get(name) or {}).get("status") != NOT_RUN), entry)
        entry = dict(entry)
        if entry.get("status") == MEASURED:
            seen = [(i, p["tools"][name]) for i, p in enumerate(passes)
                    if (p["tools"].get(name) or {}).get("status") == MEASURED]
            per_tool[name] = seen
            totals = [dict(t.get("totals") or {}) for _, t in seen]
            entry["passes"] = len(seen)
            entry["intervals"] = {c: _median_ci([float(t[c]) for t in totals if t.get(c) is not None])
                                  for c in CATEGORIES if any(t.get(c) is not None for t in totals)}
            forward = [float(t["forward_ms"]) for _, t in seen if t.get("forward_ms") is not None]
            if forward:
                entry["forward_interval"] = _median_ci(forward)
        tools[name] = entry
    comparison = compare(tools["reportgen"], tools, evidence=chosen["evidence"])
    ours = dict(per_tool.get("reportgen") or [])
    for row in comparison["rows"]:
        category = row["category"]
        row["intervals"] = {name: tools[name]["intervals"].get(category)
                            for name in ("reportgen", *TOOLS)
                            if name in tools and "intervals" in tools[name]}
        for d in row["differences"]:
            paired = [float((t.get("totals") or {})[category])
                      - float((ours[i].get("totals") or {})[category])
                      for i, t in per_tool.get(d["tool"]) or []
                      if i in ours and (t.get("totals") or {}).get(category) is not None
                      and (ours[i].get("totals") or {}).get(category) is not None]
            d["interval"] = _median_ci(paired) if paired else None
    comparison["passes"] = len(passes)
    return {"pass": index, "tools": tools, "evidence": dict(chosen["evidence"]),
            "comparison": comparison}
