"""Memory traffic and the roofline, from the records (pure functions, no torch).

Per category of a combination: the analytic FLOPs and bytes (``reportgen.traffic``;
recomputed for records made before the bytes were stored), the attributed time with its
interval, and from them the achieved bandwidth, arithmetic intensity (FLOPs per byte) and
achieved FLOP/s. The device's roof: a GPU's datasheet figures (``reportgen.peaks``,
looked up by the device name the record carries), a CPU's from the probe stored in a run
on that hardware (``environment.cpu_probe``); none is drawn where neither exists.

The attributed time of a category is its share of the profiled forward times the
unprofiled median latency (METHOD.md rule 1: the profiled pass only apportions). Its
interval carries both intervals through: [share low x latency CI low, share high x
latency CI high] where the record has share intervals, else the latency's interval alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reportgen import fmt, peaks, stats
from reportgen.categories import ATTENTION_CATEGORIES
from reportgen.intervals import (
    SHARE_VARIATION,
    TIMER_RESOLUTION_MS,
    interval_wide_reason,
    stated_confidence,
    wide_reason,
)
from reportgen.records import fields
from reportgen.records.releases import is_history
from reportgen.records.shares import category_share
from reportgen.render.shown import shown_categories
from reportgen.shares import combined_share
from reportgen.traffic import BYTE_CATEGORIES, record_bytes

# categories that move analytic bytes or do analytic FLOPs ("compiled" and "overhead" have
# time but no formula)
ROOFLINE_CATEGORIES = tuple(c for c in BYTE_CATEGORIES if c != "compiled")
# categories that take time whose memory traffic the analytic formula does not model:
# shown with their time and "not modelled" bytes, never a measured 0
UNMODELLED_TRAFFIC = ("attention.indexer", "mixer", "moe.router", "moe.experts", "moe.shared",
                      "residual")
ATTENTION = "attention (all)"
REST = "rest of the forward"


@dataclass(frozen=True)
class Roof:
    """A device's roof for one dtype: peak FLOP/s and memory bandwidth (bytes/s), each
    with where it came from, or None with why not."""

    device: str
    kind: str  # "gpu" or "cpu"
    flops_per_s: float | None
    bandwidth: float | None
    flops_source: str
    bandwidth_source: str
    run_id: str | None = None  # CPU: the run whose probe gave the figures

    @property
    def ridge(self) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the bandwidth slope meets the roof."""
        if self.flops_per_s and self.bandwidth:
            return self.flops_per_s / self.bandwidth
        return None

    def attainable(self, intensity: float) -> float | None:
        values = [v for v in (self.flops_per_s,
                              self.bandwidth * intensity if self.bandwidth else None) if v]
        return min(values) if values else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def latency(record: Mapping[str, Any]) -> tuple[float, float, float] | None:
    med, lo, hi = (_num(fields.get(record, "timing.median")), _num(fields.get(record, "timing.ci_low")),
                   _num(fields.get(record, "timing.ci_high")))
    if med is None or med <= 0:
        return None
    return med, lo if lo else med, hi if hi else med


def category_time(record: Mapping[str, Any], categories: Sequence[str]
                  ) -> tuple[float, float, float, str] | None:
    """Attributed time (ms) of ``categories`` together with its interval and how the
    interval was formed; None without a latency or shares."""
    lat = latency(record)
    shares = [category_share(record, c) for c in categories]
    found = [s for s in shares if s is not None]
    if lat is None or not found:
        return None
    med, lo, hi = lat
    share = sum(s.value for s in found)
    interval: tuple[float, float] | None = None
    if len(categories) == 1:
        low, high = found[0].low, found[0].high
        interval = (low, high) if low is not None and high is not None else None
    else:
        method = fields.get(record, "attribution.headline_method") or "profiler"
        section = fields.get(record, ("attribution", "methods", method))
        # a record made before mixer and moe.* existed holds no series for them: they
        # are not present (not a missing series that would void the interval)
        shown = shown_categories([fields.get(record, ("attribution", "methods", method, "categories")) or {}])
        present = [c for c in categories if c in shown]
        combined = combined_share(section, present) if section and present else None
        interval = (combined[1], combined[2]) if combined else None
    latency_ci = f"latency {fmt.level(confidence(record))} CI"
    if interval is None:
        return share * med, share * lo, share * hi, f"{latency_ci} (no share interval recorded)"
    return (share * med, interval[0] * lo, interval[1] * hi,
            f"share interval x {latency_ci}")


def confidence(record: Mapping[str, Any]) -> float | None:
    """The level the record's latency interval states (below 95% under six rounds): the
    level every interval carried through from it is quoted at."""
    return stated_confidence(record)


def device_name(record: Mapping[str, Any], env: Mapping[str, Any] | None) -> str | None:
    """The GPU a record was measured on, as torch or NVML named it (a GPU worker's record
    names its GPU; else the run's environment)."""
    name = fields.get(record, "device.name")
    if name:
        return str(name)
    run = {"environment": env}  # the run record around it: its fields by their names there
    source = fields.run_get(run, "environment.device")
    if isinstance(source, Mapping) and source.get("name") and source.get("type", "cuda") != "cpu":
        return str(source["name"])
    gpus = fields.run_get(run, "environment.gpus") or []
    names = [g.get("name") for g in gpus if isinstance(g, Mapping) and g.get("name")]
    return str(names[0]) if names else None


def gpu_roof(name: str, dtype: str) -> Roof:
    row = peaks.peak_row(name)
    if row is None:
        why = f"{name} is not in the datasheet table"
        return Roof(name, "gpu", None, None, why, why)
    flops = peaks.peak_flops(name, dtype)
    bandwidth = peaks.peak_bandwidth(name)
    cite = f"{row.source_title} ({row.source_url})"
    missing = row.unconfirmed or "not confirmed"
    return Roof(name, "gpu", flops, bandwidth,
                cite if flops else f"no confirmed {dtype} figure for the {row.gpu}: {missing}",
                cite if bandwidth else f"no confirmed bandwidth for the {row.gpu}: {missing}")


def cpu_roof(hardware: str, dtype: str, probe: tuple[str, Mapping[str, Any]] | None) -> Roof:
    if probe is None:
        why = ("no run on this hardware recorded a CPU probe (runs made before the probe "
               "existed lack it)")
        return Roof(hardware, "cpu", None, None, why, why)
    run_id, p = probe
    threads = p.get("threads")
    where = f"CPU probe of run {run_id} ({threads} threads)"
    bandwidth = _num(p.get("copy_bandwidth_bytes_per_s"))
    flops = _num(p.get("matmul_flops_per_s")) if dtype == "fp32" else None
    return Roof(hardware, "cpu", flops, bandwidth,
                where if flops else f"the probe measures fp32 matmul only; no {dtype} roof",
                where if bandwidth else "the probe recorded no copy bandwidth", run_id)


def latest_probe(runs: Iterable[Any], hardware: str) -> tuple[str, Mapping[str, Any]] | None:
    """The CPU probe of the most recent run on ``hardware`` that has one (a history's
    runs, measured in other environments and perhaps with other thread counts, never)."""
    found: list[tuple[str, str, Mapping[str, Any]]] = []
    for run in runs:
        probe = fields.run_get(run.record, "environment.cpu_probe")
        if run.hardware == hardware and isinstance(probe, Mapping) and not is_history(run.record):
            when = fields.run_get(run.record, "updated") or fields.run_get(run.record, "started")
            found.append((str(when or ""), run.run_id, probe))
    if not found:
        return None
    _, run_id, probe = max(found, key=lambda f: (f[0], f[1]))
    return run_id, probe


def roof_for(record: Mapping[str, Any], env: Mapping[str, Any] | None, hardware: str,
             probe: Callable[[], tuple[str, Mapping[str, Any]] | None]) -> Roof:
    dtype = str(fields.get(record, "combination.dtype") or "fp32")
    device = str(fields.get(record, "combination.device") or "cpu")
    if device == "cuda":
        name = device_name(record, env)
        if name is None:
            why = "the record names no GPU"
            return Roof(hardware, "gpu", None, None, why, why)
        return gpu_roof(name, dtype)
    return cpu_roof(hardware, dtype, probe())


def _rate(amount: float, ms: tuple[float, float, float]) -> tuple[float, float, float] | None:
    """amount per second over a time interval (ms): point, low (longest time), high."""
    point, lo, hi = ms
    if point <= 0 or lo <= 0 or hi <= 0:
        return None
    return amount / (point / 1e3), amount / (hi / 1e3), amount / (lo / 1e3)


def category_rows(record: Mapping[str, Any], roof: Roof | None = None) -> list[dict[str, Any]]:
    """Per category with analytic FLOPs or bytes and attributed time: both, the attributed
    time with its interval, achieved bandwidth (bytes/s) and FLOP/s with intervals, the
    arithmetic intensity, and with a roof the bandwidth as a fraction of its peak. A
    category that takes time but whose memory traffic the formula does not model (a
    mixer, a router, the experts) has ``bytes`` None (``modelled`` false): no bandwidth,
    no point on the chart, never a measured 0. A category the attribution gave no time
    (the dense MLP of a model whose MLP is its experts) has nothing to place and is left
    out (``left_out``)."""
    moved = record_bytes(record)
    if moved is None or latency(record) is None:
        return []
    rows: list[dict[str, Any]] = []
    for cat in ROOFLINE_CATEGORIES:
        nbytes = _num(moved["analytic_bytes"].get(cat)) or 0.0
        work = _analytic_flops(record, cat)
        share = category_share(record, cat)
        if share is not None and share.value <= 0:
            continue  # the attribution gave it no time: nothing to place (left_out)
        if nbytes <= 0 and work <= 0 and not (cat in UNMODELLED_TRAFFIC and share is not None):
            continue
        rows.append(_row(record, cat, [cat], nbytes if nbytes > 0 else None, work, moved, roof))
    return rows


def left_out(record: Mapping[str, Any]) -> list[str]:
    """The categories with analytic bytes or FLOPs that the attribution gave no time:
    the roofline leaves them out (each page says which)."""
    moved = record_bytes(record)
    if moved is None:
        return []
    out = []
    for cat in ROOFLINE_CATEGORIES:
        share = category_share(record, cat)
        has_work = (_num(moved["analytic_bytes"].get(cat)) or 0.0) > 0 or _analytic_flops(record, cat) > 0
        if has_work and share is not None and share.value <= 0:
            out.append(cat)
    return out


def _analytic_flops(record: Mapping[str, Any], category: str) -> float:
    """The analytic FLOPs the record states for ``category`` (0 where it states none)."""
    return _num(fields.get(record, ("flops", "analytic", category))) or 0.0


def _time_wide(record: Mapping[str, Any], time: tuple[float, float, float, str] | None) -> str | None:
    """Why a category's time interval reaches past twice its median, in words (None where
    it does not): the latency interval's own reason where that interval is wide, else what
    widened the share (the timer's resolution for a category of a few clock ticks, or its
    share's variation between the profiled iterations)."""
    if time is None:
        return None
    latency = wide_reason(record)
    tick = TIMER_RESOLUTION_MS.get(str(fields.get(record, "timing.method") or ""), 0.001)
    reason = interval_wide_reason(time[0], time[1], time[2], tick_ms=tick,
                                  between=SHARE_VARIATION)
    if reason is None or latency is None:
        return reason
    return f"the latency's interval is wide: {latency}"


def _row(record: Mapping[str, Any], label: str, cats: Sequence[str], nbytes: float | None,
         work: float, moved: Mapping[str, Any], roof: Roof | None) -> dict[str, Any]:
    time = category_time(record, cats)
    bw = _rate(nbytes, time[:3]) if time and nbytes else None
    fl = _rate(work, time[:3]) if time and work > 0 else None
    peak_bw = roof.bandwidth if roof else None
    return {
        "category": label, "flops": work, "bytes": nbytes, "modelled": nbytes is not None,
        "parts": dict((moved.get("analytic_bytes_parts") or {}).get(label) or {}),
        "bytes_source": moved.get("source"),
        "ms": time[0] if time else None, "ms_low": time[1] if time else None,
        "ms_high": time[2] if time else None, "interval": time[3] if time else None,
        "confidence": confidence(record), "wide": _time_wide(record, time),
        "bandwidth": bw[0] if bw else None, "bandwidth_low": bw[1] if bw else None,
        "bandwidth_high": bw[2] if bw else None,
        "intensity": work / nbytes if nbytes and work > 0 else None,
        "flops_per_s": fl[0] if fl else None, "flops_per_s_low": fl[1] if fl else None,
        "flops_per_s_high": fl[2] if fl else None,
        "pct_peak_bandwidth": 100 * bw[0] / peak_bw if bw and peak_bw else None,
        "pct_peak_bandwidth_low": 100 * bw[1] / peak_bw if bw and peak_bw else None,
        "pct_peak_bandwidth_high": 100 * bw[2] / peak_bw if bw and peak_bw else None,
    }


def attention_vs_rest(record: Mapping[str, Any], roof: Roof | None = None) -> dict[str, Any] | None:
    """Attention (its three categories) beside the rest of the forward: shares of bytes,
    FLOPs and time, and achieved bandwidth of each with intervals; ``higher`` says whether
    attention's bandwidth is significantly above the rest's (``stats.difference`` on the
    two intervals), ``lower`` the reverse; both None when untested: no rest to compare
    (the isolated attention micro-benchmark) or no share interval recorded (older records,
    whose two bandwidths differ by their point shares alone)."""
    moved = record_bytes(record)
    if moved is None or latency(record) is None:
        return None
    by_bytes = moved["analytic_bytes"]
    # the rest's bandwidth is its modelled bytes over its time: a category whose traffic
    # is not modelled would add time without bytes, so it stays out of both
    rest = [c for c in ROOFLINE_CATEGORIES if c not in ATTENTION_CATEGORIES
            and not (c in UNMODELLED_TRAFFIC and not (_num(by_bytes.get(c)) or 0.0) > 0)]
    total_bytes = sum(_num(by_bytes.get(c)) or 0.0 for c in ROOFLINE_CATEGORIES)
    total_flops = sum(_analytic_flops(record, c) for c in ROOFLINE_CATEGORIES)
    sides = {}
    for label, cats in ((ATTENTION, list(ATTENTION_CATEGORIES)), (REST, rest)):
        nbytes = sum(_num(by_bytes.get(c)) or 0.0 for c in cats)
        work = sum(_analytic_flops(record, c) for c in cats)
        row = _row(record, label, cats, nbytes, work, moved, roof)
        row["bytes_share"] = nbytes / total_bytes if total_bytes > 0 else None
        row["flops_share"] = work / total_flops if total_flops > 0 else None
        sides[label] = row
    a, r = sides[ATTENTION], sides[REST]
    higher = lower = None
    # both bandwidths scale with the same latency: only the shares' own intervals can
    # tell them apart, so without those nothing is tested
    tested = all(str(side["interval"] or "").startswith("share") for side in (a, r))
    if tested and a["bandwidth"] is not None and r["bandwidth"] is not None:
        diff = stats.difference(None, None, interval_a=(a["bandwidth_low"], a["bandwidth_high"]),
                                interval_b=(r["bandwidth_low"], r["bandwidth_high"]))
        higher = diff.significant and a["bandwidth"] > r["bandwidth"]
        lower = diff.significant and a["bandwidth"] < r["bandwidth"]
    if not r["bytes"]:
        return None
    return {"attention": a, "rest": r, "higher": higher, "lower": lower}


def roof_rows(roof: Roof, x_min: float, x_max: float) -> list[dict[str, Any]]:
    """The roof as a polyline over [x_min, x_max] (log axes: its ends and the ridge)."""
    xs = [x_min, x_max]
    if roof.ridge is not None and x_min < roof.ridge < x_max:
        xs.insert(1, roof.ridge)
    out = []
    for x in xs:
        y = roof.attainable(x)
        if y is not None:
            out.append({"intensity": x, "flops_per_s": y})
    return out


def chart_rows(points: Sequence[Mapping[str, Any]], roofs: Mapping[str, Roof]) -> list[dict[str, Any]]:
    """One data set for a roofline chart: the points (``kind`` "category", with their
    ``panel``) and each panel's roof (``kind`` "roof"), over the intensities drawn."""
    drawn = [p for p in points if p.get("intensity") and p.get("flops_per_s")]
    order = {c: i for i, c in enumerate(shown_categories(drawn))}  # the chart's categories
    out: list[dict[str, Any]] = [{"kind": "category", "order": order.get(p["category"], len(order)),
                                  **{k: p.get(k) for k in (
                                      "panel", "category", "intensity", "flops_per_s",
                                      "flops_per_s_low", "flops_per_s_high", "bandwidth",
                                      "bandwidth_low", "bandwidth_high", "flops", "bytes", "ms",
                                      "ms_low", "ms_high")}} for p in drawn]
    if not drawn:
        return out
    xs = [float(p["intensity"]) for p in drawn]
    ridges = [r.ridge for r in roofs.values() if r.ridge is not None]
    x_min = min(xs + ridges) / 4
    x_max = max(xs + ridges) * 4
    for panel, roof in roofs.items():
        out += [{"kind": "roof", "panel": panel, **r} for r in roof_rows(roof, x_min, x_max)]
    return out
