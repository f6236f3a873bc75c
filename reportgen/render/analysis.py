"""Analysis of loaded runs: data frames and plain dicts, no display decisions.

Everything here is a pure function of the records; charts and pages are built from what
it returns (``charts.py``, ``pages.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from reportgen import depth, fmt, stats
from reportgen.categories import ATTENTION_CATEGORIES, CATEGORIES, MOE_CATEGORIES, OPTIONAL_CATEGORIES
from reportgen.intervals import unstable_reason, wide_reason
from reportgen.records import fields
from reportgen.records.releases import is_history
from reportgen.records.schema import Run
from reportgen.records.status import OK, is_ok
from reportgen.render.shown import shown_categories
from reportgen.shares import disagreement

SETTING = ["scale", "depth", "mode", "dtype", "attn", "batch", "compile"]
"""The columns that, with ``seq``, identify a measurement on one hardware for one model."""

# Preferred order when choosing a page's reference setting (the one its charts show).
_ATTN_PREFERENCE = ("sdpa", "flash_attention_2", "eager")
_MODE_PREFERENCE = ("forward", "prefill", "decode", "decode-nocache", "train")

# Shares of the frame that sum several categories, stated beside the attention share:
# the mixture-of-experts layers (router and experts) and the token mixers. A column is
# shown where its categories are (``shown_categories``).
GROUP_SHARES: dict[str, tuple[str, ...]] = {"mixer_share": ("mixer",), "moe_share": MOE_CATEGORIES}


_num = fields.as_number


def combinations_frame(runs: Sequence[Run], *, latest_only: bool = True) -> pd.DataFrame:
    """One row per (hardware, combination id); a later run replaces an earlier one, and a
    suite's own run one of a history (another release set's, ``reportgen history``)
    (``latest_only`` False: one row per run that holds the combination)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for combo in run.combinations:
            rec = combo.record
            c = fields.get(rec, "combination") or {}
            cats = fields.get(rec, "attribution.categories") or {}
            analytic = fields.get(rec, "flops.analytic") or {}
            counted = fields.get(rec, "flops.counted") or {}
            flops_src = analytic if any(_num(v) > 0 for v in analytic.values()) else counted
            flops_total = sum(_num(v) for v in flops_src.values() if _num(v) > 0)
            row: dict[str, Any] = {
                "hardware": run.hardware, "run_id": run.run_id, "run_rel": run.rel,
                # the releases the run measured under: reruns pool only within one pair
                "torch": str(fields.run_get(run.record, "environment.libraries.torch") or ""),
                "transformers": str(fields.run_get(run.record, "environment.libraries.transformers") or ""),
                "run_updated": str(fields.run_get(run.record, "updated")
                                   or fields.run_get(run.record, "started") or ""),
                "run_plain": 0 if is_history(run.record) else 1,
                "combo_id": str(fields.get(rec, "id") or combo.path.stem),
                "json_rel": f"{run.rel}/{combo.path.relative_to(run.path).as_posix()}",
                "trace_rel": (f"{run.rel}/{combo.trace.relative_to(run.path).as_posix()}"
                              if combo.trace is not None else None),
                "model": str(c.get("model") or fields.get(rec, "model.name") or "unknown"),
                "scale": str(c.get("scale") or ""),
                # what the figures are of where not the whole model ("measured 4 of 48
                # layers; whole-model figures extrapolated"): "" for a whole model
                "depth": depth.record_label(rec),
                "whole_median": fields.number(rec, "depth.whole.median_ms"),
                "whole_ci_low": fields.number(rec, "depth.whole.ci_low_ms"),
                "whole_ci_high": fields.number(rec, "depth.whole.ci_high_ms"),
                "whole_notes": "; ".join(str(n) for n in fields.get(rec, "depth.whole.notes") or []),
                # built with fewer routed experts (--experts, or because it did not fit), and why
                # it was measured reduced where the pre-flight chose it
                "experts_measured": fields.number(rec, "depth.experts.measured"),
                "experts_full": fields.number(rec, "depth.experts.full"),
                "depth_reason": str(fields.get(rec, "depth.reason") or ""),
                "mode": str(c.get("mode") or ""),
                "dtype": str(c.get("dtype") or ""),
                "attn": str(c.get("attn_implementation") or ""),
                "batch": int(c.get("batch_size") or 0), "seq": int(c.get("seq_len") or 0),
                # what the length counts (older records: tokens); filled per model below
                "input": str(fields.get(rec, "inputs.input") or ""),
                "sequence": fields.get(rec, "inputs.sequence"),
                "device": str(c.get("device") or ""),
                # records made before the compile axis lack it: they ran eagerly
                "compile": str(c.get("compile") or "none"),
                "compile_s": fields.number(rec, "compile.compile_s"),
                "recompiles": fields.number(rec, "compile.recompiles"),
                "graph_breaks": fields.number(rec, "compile.graph_breaks"),
                "status": str(fields.get(rec, "status") or "unknown"), "reason": fields.get(rec, "reason"),
                "finished": str(fields.get(rec, "finished") or ""),
                "median": fields.number(rec, "timing.median"),
                "ci_low": fields.number(rec, "timing.ci_low"),
                "ci_high": fields.number(rec, "timing.ci_high"),
                "p25": fields.number(rec, "timing.p25"), "p75": fields.number(rec, "timing.p75"),
                "n": fields.number(rec, "timing.n"),
                "confidence": fields.number(rec, "timing.confidence"),
                "stop_reason": fields.get(rec, "timing.stop_reason"),
                "timing_method": fields.get(rec, "timing.method"),
                "overhead_ratio": fields.number(rec, "profile.overhead_ratio"),
                # measured under contention: why, in words (None when clean)
                "unstable": unstable_reason(rec) if is_ok(rec) else None,
                # an interval past twice its median: why, in words (None when not)
                "wide": wide_reason(rec) if is_ok(rec) else None,
                "forward_ms": fields.number(rec, "attribution.forward_ms"),
                "basis": fields.get(rec, "attribution.basis"),
                "headline_method": (fields.get(rec, "attribution.headline_method")
                                    or ("profiler" if cats else None)),
                "launches": fields.number(rec, "attribution.launches_per_forward"),
                "memory_ops": fields.number(rec, "attribution.memory_ops_per_forward"),
                "params": fields.number(rec, "model.parameters"),
                "architecture": str(fields.get(rec, "model.architecture") or ""),
                "peak_alloc": fields.number(rec, "memory.peak_allocated_bytes"),
                "peak_reserved": fields.number(rec, "memory.peak_reserved_bytes"),
                "attn_act_analytic": fields.number(rec, "memory.attention_activation_bytes.analytic"),
                "attn_act_measured": fields.number(rec, "memory.attention_activation_bytes.measured"),
                "achieved_flops": fields.number(rec, "flops.achieved_flops_per_s"),
                "peak_flops": fields.number(rec, "flops.peak_flops_per_s"),
                "pct_peak": fields.number(rec, "flops.percent_of_peak"),
            }
            shares = {cat: fields.number(rec, ("attribution", "categories", cat, "share")) for cat in CATEGORIES}
            for cat in CATEGORIES:
                row[f"ms:{cat}"] = attributed_ms(rec, cat)
                row[f"share:{cat}"] = shares[cat]
                # optional: the share's bootstrap interval over the attributed iterations,
                # where the record carries one (records store it as share_low/share_high)
                row[f"share_ci_low:{cat}"] = fields.number(rec, ("attribution", "categories", cat, "share_low"))
                row[f"share_ci_high:{cat}"] = fields.number(rec, ("attribution", "categories", cat, "share_high"))
                fl = _num(flops_src.get(cat))
                row[f"flops_share:{cat}"] = (fl / flops_total if flops_total > 0 and fl >= 0
                                             else math.nan)
            row["attention_share"] = (sum(shares[c] for c in ATTENTION_CATEGORIES
                                          if not math.isnan(shares[c]))
                                      if row["status"] == OK and cats else math.nan)
            for column, group in GROUP_SHARES.items():
                # NaN where the record has none of them (dense models' older records)
                known = [shares[c] for c in group if not math.isnan(shares[c])]
                row[column] = (sum(known) if row["status"] == OK and known else math.nan)
            # mixture-of-experts records: the busiest expert's load against the mean
            row["moe_max_over_mean"] = fields.number(rec, "moe.max_over_mean")
            rows.append(row)
    _fill_sequence(rows)
    columns = list(rows[0]) if rows else ["hardware", "model", "combo_id", "status", "seq"]
    df = pd.DataFrame(rows, columns=columns)
    if df.empty:
        return df
    df = df.sort_values(["hardware", "combo_id", "run_plain", "run_updated", "run_id"], kind="mergesort")
    if latest_only:
        df = df.drop_duplicates(["hardware", "combo_id"], keep="last")
    return df.sort_values(["hardware", "model", *SETTING, "seq", "combo_id"],
                          kind="mergesort").reset_index(drop=True)


RERUN_KEY = ["hardware", "model", *SETTING, "seq", "device", "torch", "transformers"]
"""What makes two records the same measurement run again: one hardware kind, one
combination, one pair of torch and transformers releases (runs of different releases
are never pooled)."""


def with_reruns(frame: pd.DataFrame, every: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (the pages' rows) with what a rerun on the same kind of host has given:
    ``rerun_runs`` (how many committed runs measured the combination, this one included),
    ``rerun_low``/``rerun_high`` (the lowest and highest of their medians, in the row's
    unit), ``rerun_first``/``rerun_last`` (the days of the first and last of them).

    ``every`` is ``combinations_frame(runs, latest_only=False)`` over every committed run.
    Only finished measurements count (status ok, a median); a row that only its own run
    measured has ``rerun_runs`` 1 and no spread: the within-run interval is then all a
    reader has, and the pages say so."""
    out = frame.copy()
    for column in ("rerun_runs", "rerun_low", "rerun_high"):
        out[column] = math.nan
    for column in ("rerun_first", "rerun_last"):
        out[column] = ""
    if frame.empty or every.empty:
        return out
    done = every[(every["status"] == OK) & every["median"].notna()].copy()
    if done.empty:
        return out
    done["day"] = [day_of(a, b) for a, b in zip(done["finished"], done["run_updated"])]
    # one median per run: a run that holds the combination twice (two suites' ids) counts once
    done = done.drop_duplicates([*RERUN_KEY, "run_id"], keep="last")
    groups = {key if isinstance(key, tuple) else (key,): part
              for key, part in done.groupby(RERUN_KEY, sort=False, dropna=False)}
    for index, row in out.iterrows():
        part = groups.get(tuple(row[c] for c in RERUN_KEY))
        if part is None or row["status"] != OK:
            continue
        days = sorted(d for d in part["day"] if d)
        out.at[index, "rerun_runs"] = float(part["run_id"].nunique())
        out.at[index, "rerun_low"] = float(part["median"].min())
        out.at[index, "rerun_high"] = float(part["median"].max())
        out.at[index, "rerun_first"] = days[0] if days else ""
        out.at[index, "rerun_last"] = days[-1] if days else ""
    return out


def reruns_measured(every: pd.DataFrame) -> list[dict[str, Any]]:
    """One measurement per run and combination, in the shape
    ``bench.coverage.across_days`` reads: every finished record of every committed run."""
    if every.empty:
        return []
    done = every[(every["status"] == OK) & every["median"].notna()]
    return [{"hardware": row["hardware"], "key": tuple(row[c] for c in RERUN_KEY[1:]),
             "run_id": row["run_id"], "day": day_of(row["finished"], row["run_updated"]),
             "median": row["median"], "ci_low": _finite(row["ci_low"]), "ci_high": _finite(row["ci_high"])}
            for row in done.to_dict(orient="records")]


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def day_of(*stamps: Any) -> str:
    """The UTC day (``YYYY-MM-DD``) of the first ISO 8601 time among ``stamps``."""
    for stamp in stamps:
        text = str(stamp or "")
        if len(text) >= 10 and text[4] == "-" and text[7] == "-":
            return text[:10]
    return ""


def rerun_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """How many of ``frame``'s measured rows some other run measured again, over which
    days: the sentence above a table whose rows carry a rerun column."""
    measured = frame[(frame["status"] == OK) & frame["median"].notna()] if not frame.empty else frame
    if measured.empty or "rerun_runs" not in measured:
        return {"rows": 0, "rerun": 0, "first": "", "last": "", "most": 0}
    rerun = measured[measured["rerun_runs"] >= 2]
    days = sorted({d for d in [*rerun["rerun_first"], *rerun["rerun_last"]] if d})
    return {"rows": len(measured), "rerun": len(rerun), "first": days[0] if days else "",
            "last": days[-1] if days else "",
            "most": int(rerun["rerun_runs"].max()) if not rerun.empty else 0}


def _fill_sequence(rows: list[dict[str, Any]]) -> None:
    """What each row's length counts: its record's ``inputs.sequence``; a record without
    inputs (skipped, failed) takes its model's, and older records read as tokens."""
    by_model: dict[str, tuple[str, str]] = {}
    for row in rows:
        if isinstance(row["sequence"], str) and row["sequence"]:
            by_model.setdefault(row["model"], (row["sequence"], row["input"]))
    for row in rows:
        if not (isinstance(row["sequence"], str) and row["sequence"]):
            unit, main = by_model.get(row["model"], (fmt.TOKENS, row["input"]))
            row["sequence"], row["input"] = unit, row["input"] or main


def sequence_of(rows: pd.DataFrame | Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
    """What the lengths of ``rows`` (one model's) count, and the note that says what a
    frame is: (``tokens``, None) for text models and for records made before inputs said."""
    records = rows.to_dict(orient="records") if hasattr(rows, "to_dict") else list(rows)
    for row in records:
        unit = fmt.sequence_unit(row.get("sequence"))
        if unit != fmt.TOKENS:
            return unit, fmt.sequence_note(row.get("input"), unit)
    return fmt.TOKENS, None


def reference_setting(page: pd.DataFrame) -> dict[str, Any] | None:
    """The setting whose sequence sweep a page charts: eager over compiled, then most
    sequence lengths, then sdpa over other implementations, forward over other modes, the smallest batch."""
    ok = page[page["status"] == OK]
    if ok.empty:
        return None
    counts = ok.groupby(SETTING, sort=True)["seq"].nunique().reset_index()

    def rank(row: pd.Series) -> tuple[Any, ...]:
        attn_rank = (_ATTN_PREFERENCE.index(row["attn"]) if row["attn"] in _ATTN_PREFERENCE
                     else len(_ATTN_PREFERENCE))
        mode_rank = (_MODE_PREFERENCE.index(row["mode"]) if row["mode"] in _MODE_PREFERENCE
                     else len(_MODE_PREFERENCE))
        return (row["compile"] != "none", -int(row["seq"]), attn_rank, mode_rank, int(row["batch"]),
                row["scale"], row["dtype"], row["attn"], row["mode"], row["compile"])

    best = min((row for _, row in counts.iterrows()), key=rank)
    return {key: (int(best[key]) if key == "batch" else str(best[key])) for key in SETTING}


def select(frame: pd.DataFrame, setting: Mapping[str, Any]) -> pd.DataFrame:
    mask = pd.Series(True, index=frame.index)
    for key, value in setting.items():
        mask &= frame[key] == value
    return frame[mask & (frame["status"] == OK)].sort_values("seq", kind="mergesort")


def shown_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of a combinations frame (or a part of it) that a download of it holds:
    all but those of the architecture categories no row shows (``shown_categories``)."""
    hidden = set(OPTIONAL_CATEGORIES) - set(shown_categories(frame))
    drop = {column for column, group in GROUP_SHARES.items() if hidden.issuperset(group)}
    # what the lengths count, only where some row counts other than tokens; the MoE load
    # only where some row has it: a table of text models keeps the columns it had
    if "sequence" in frame and (frame["sequence"] == fmt.TOKENS).all():
        drop |= {"input", "sequence"}
    if "moe_max_over_mean" in frame and not frame["moe_max_over_mean"].notna().any():
        drop.add("moe_max_over_mean")
    # the depth columns only where some row measured fewer layers than its model has
    for column in ("depth", "whole_notes", "depth_reason"):
        if column in frame and not (frame[column] != "").any():
            drop.add(column)
    for column in ("whole_median", "whole_ci_low", "whole_ci_high", "experts_measured", "experts_full"):
        if column in frame and not frame[column].notna().any():
            drop.add(column)
    return [c for c in frame.columns
            if c not in drop and not (":" in c and c.split(":", 1)[1] in hidden)]


def attributed_ms(record: Mapping[str, Any], category: str) -> float:
    """A category's time as every page quotes it: its share of the forward times the
    unprofiled median latency (the attributed pass only apportions; its own forward, slower
    by the profiler's or the clocks' cost, is not the latency), so a category reads the same
    in every table and chart; the attributed pass's own ms only where the record has no
    median."""
    share = fields.number(record, ("attribution", "categories", category, "share"))
    median = fields.number(record, "timing.median")
    if math.isfinite(share) and math.isfinite(median):
        return share * median
    return fields.number(record, ("attribution", "categories", category, "ms"))


def shares_long(rows: pd.DataFrame, by: str = "seq",
                categories: Sequence[str] | None = None) -> pd.DataFrame:
    """Time and FLOP shares per category, one row per (``by`` value, measure, category);
    ``categories`` those a chart of ``rows`` shows (default: ``shown_categories(rows)``),
    ``order`` the category's place among them."""
    shown = tuple(categories) if categories is not None else shown_categories(rows)
    out: list[dict[str, Any]] = []
    for _, row in rows.iterrows():
        for measure, prefix in (("time", "share:"), ("FLOPs", "flops_share:")):
            for order, cat in enumerate(shown):
                share = row[f"{prefix}{cat}"]
                if isinstance(share, float) and math.isnan(share):
                    continue
                out.append({by: row[by], "measure": measure, "category": cat, "order": order,
                            "share": float(share),
                            "ms": float(row[f"ms:{cat}"]) if measure == "time" else None})
    return pd.DataFrame(out, columns=[by, "measure", "category", "order", "share", "ms"])


def category_ms_long(rows: pd.DataFrame) -> pd.DataFrame:
    """Milliseconds per category and sequence length (positive values only: log axes)."""
    cols = [f"ms:{c}" for c in CATEGORIES]
    long = rows[["seq", *cols]].melt(id_vars="seq", var_name="category", value_name="ms")
    long["category"] = long["category"].str.slice(3)
    long["order"] = long["category"].map(CATEGORIES.index)
    long = long[long["ms"] > 0].sort_values(["order", "seq"], kind="mergesort")
    return long[["seq", "category", "ms"]].astype({"seq": int, "ms": float}).reset_index(drop=True)


def scaling_fits(rows: pd.DataFrame) -> pd.DataFrame:
    """Power-law fit of ms = c * seq^k per category (``stats.loglog_fit_stats``): the
    exponent k with its 95% interval and R². Only categories measured at
    ``stats.MIN_FIT_POINTS`` or more sequence lengths get a row."""
    out: list[dict[str, Any]] = []
    long = category_ms_long(rows)
    for cat in CATEGORIES:
        part = long[long["category"] == cat]
        if part["seq"].nunique() < stats.MIN_FIT_POINTS:
            continue
        fit = stats.loglog_fit_stats(part["seq"].astype(float).tolist(),
                                     part["ms"].astype(float).tolist())
        out.append({"category": cat, "exponent": fit["exponent"], "ci_low": fit["ci_low"],
                    "ci_high": fit["ci_high"], "r2": fit["r2"], "points": len(part),
                    "seq_min": int(part["seq"].min()), "seq_max": int(part["seq"].max())})
    return pd.DataFrame(out, columns=["category", "exponent", "ci_low", "ci_high", "r2",
                                      "points", "seq_min", "seq_max"])


def attention_comparison(page: pd.DataFrame) -> pd.DataFrame:
    """Each attention implementation against the fastest one at the same setting and length.

    ``significant`` is true when the difference is significant (`stats.difference` on the
    two medians' intervals, at the levels ``confidence`` and ``fastest_confidence`` they
    state) and this implementation is the slower one.
    Only groups with two or more implementations appear.
    """
    ok = page[(page["status"] == OK) & page["median"].notna()]
    if "compile" not in ok:
        ok = ok.assign(compile="none")
    keys = ["scale", "mode", "dtype", "batch", "seq", "compile"]
    out: list[dict[str, Any]] = []
    for group_key, group in ok.groupby(keys, sort=True):
        if group["attn"].nunique() < 2:
            continue
        group = group.sort_values(["median", "attn"], kind="mergesort")
        fastest = group.iloc[0]
        for _, row in group.iterrows():
            is_fastest = row["attn"] == fastest["attn"]
            out.append({**dict(zip(keys, group_key)), "attn": row["attn"],
                        "median": row["median"], "ci_low": row["ci_low"],
                        "ci_high": row["ci_high"], "confidence": row.get("confidence"),
                        "wide": row.get("wide"),
                        # the level the verdict against the fastest rests on
                        "fastest_confidence": fastest.get("confidence"), "fastest": bool(is_fastest),
                        "ratio": float(row["median"] / fastest["median"]),
                        "significant": (None if is_fastest
                                        else _slower(row, fastest))})
    return pd.DataFrame(out, columns=[*keys, "attn", "median", "ci_low", "ci_high", "confidence", "wide",
                                      "fastest_confidence", "fastest", "ratio", "significant"])


LEGACY_REASON = ("these records hold figures from the profiler only (written before the "
                 "module-boundary method was recorded)")


def headline_methods(rows: pd.DataFrame, records: Mapping[tuple[str, str], Mapping[str, Any]]
                     ) -> list[dict[str, Any]]:
    """Which attribution method the shares of ``rows`` (ok rows) use, and why: one entry
    per method, with how many combinations use it. ``records`` by (hardware, combo id)."""
    out: dict[str, dict[str, Any]] = {}
    if rows.empty or "headline_method" not in rows:
        return []
    for _, row in rows[rows["status"] == OK].iterrows():
        method = row["headline_method"]
        if not isinstance(method, str):
            continue
        record = records.get((str(row["hardware"]), str(row["combo_id"]))) or {}
        reason = fields.get(record, "attribution.headline_reason") or LEGACY_REASON
        entry = out.setdefault(method, {"method": method, "reason": reason, "count": 0})
        entry["count"] += 1
    return sorted(out.values(), key=lambda e: (-e["count"], e["method"]))


def attribution_methods(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """Both methods' shares and their difference for one record, the hooks method's own
    cost and where its ``other`` and ``overhead`` came from; None without methods."""
    attribution = fields.get(record, "attribution") or {}
    rows = disagreement(attribution)
    if not rows:
        return None
    hooks = (attribution.get("methods") or {}).get("hooks") or {}
    prof = (attribution.get("methods") or {}).get("profiler") or {}
    # mixer and moe.* only where either method has them (never for older records)
    shown = shown_categories([hooks.get("categories") or {}, prof.get("categories") or {}])
    rows = [r for r in rows if r["category"] in shown or r["category"] not in CATEGORIES]
    cats = hooks.get("categories") or {}
    forward = _num(hooks.get("forward_ms"))
    median = fields.number(record, "timing.median")
    sources = []
    for where, ms in sorted((hooks.get("other_sources_ms") or {}).items(), key=lambda kv: -kv[1]):
        share = ms / forward if forward > 0 else math.nan
        # on the latency's base, as the categories are quoted (attributed_ms)
        sources.append({"where": where, "share": share,
                        "ms": share * median if math.isfinite(share * median) else ms})
    remainder = sum(_num((cats.get(c) or {}).get("share")) for c in ("other", "overhead"))
    return {"rows": rows, "headline": attribution.get("headline_method"),
            "reason": attribution.get("headline_reason"), "cost": hooks.get("cost") or {},
            "clock": hooks.get("clock"), "hooks_iterations": hooks.get("iterations"),
            "profiler_iterations": prof.get("iterations"), "interval": hooks.get("interval"),
            "other_overhead": remainder, "sources": sources}


def _slower(row: Mapping[str, Any], fastest: Mapping[str, Any]) -> bool:
    verdict = stats.difference(None, None, interval_a=(row["ci_low"], row["ci_high"]),
                               interval_b=(fastest["ci_low"], fastest["ci_high"]))
    return verdict.significant and row["median"] > fastest["median"]


def top_ops(record: Mapping[str, Any], limit: int = 10) -> list[dict[str, Any]]:
    ops = [op for op in fields.get(record, "ops") or [] if isinstance(op, Mapping)]
    ops = sorted(ops, key=lambda op: (-_num(op.get("total_ms")), str(op.get("name"))))
    return [dict(op) for op in ops[:limit]]


def group_shares(rows: pd.DataFrame) -> list[str]:
    """Which ``GROUP_SHARES`` columns a table of ``rows`` states beside the attention
    share: those whose categories the rows show (none for dense models)."""
    shown = set(shown_categories(rows))
    return [column for column, group in GROUP_SHARES.items() if shown.intersection(group)]


def latest_runs(runs: Iterable[Run], limit: int = 10) -> list[Run]:
    def key(run: Run) -> tuple[str, str]:
        when = fields.run_get(run.record, "updated") or fields.run_get(run.record, "started")
        return (str(when or ""), run.run_id)
    return sorted(runs, key=key, reverse=True)[:limit]


_FAILED = re.compile(r"^(?P<what>[\w.]+) failed: (?P<kind>[A-Z]\w*(?:Error|Exception))\b")
_WHAT_FAILED = {"flop_counter": "PyTorch's FLOP counter could not count this model's operators, "
                                "so only the analytic FLOPs are given"}


def reader_note(note: str) -> str:
    """A record's note as a reader reads it: a raw exception ("flop_counter failed:
    AttributeError: ...") becomes a sentence saying what could not be done; the exception
    itself stays in the record, which the page links."""
    m = _FAILED.match(note)
    if m is None:
        return note
    what = _WHAT_FAILED.get(m.group("what"), f"{m.group('what')} could not run")
    return f"{what} ({m.group('kind')}; the full message is in the record)"
