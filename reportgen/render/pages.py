"""The site's own pages (home, hardware, models, combinations, runs, status) and the order
in which the pages other modules produce join them (``PRODUCERS``).

The machinery every page is built with (``Page``, ``Builder``, slugs, links, downloads) is
``reportgen.render.builder``'s; this module only adds pages to it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from reportgen import stats
from reportgen.categories import CATEGORIES
from reportgen.intervals import share_wide_reason
from reportgen.records import fields, hardware, paths
from reportgen.records.causes import Cause
from reportgen.records.releases import is_history, release_of
from reportgen.records.schema import Run
from reportgen.records.status import COMBINATION_STATUSES, OK
from reportgen.render import (
    analysis,
    changes,
    charts,
    cite,
    compiled,
    findings,
    flop_shares,
    history,
    longcontext,
    machine,
    moe,
    payoff_pages,
    roofline_pages,
    sections,
    studies,
    training,
    validation,
)
from reportgen.render import crossover as crossovers
from reportgen.render import tools as tools_page
from reportgen.render.builder import (
    ALL_COMBINATIONS,
    DATA_DIR,
    Builder,
    Page,
    Producer,
    SiteModel,
    clean,
    clean_row,
    clean_rows,
    frame_csv,
    rel,
    slugify,
    unique_slugs,
)
from reportgen.render.charts import Chart

if TYPE_CHECKING:
    from reportgen.claims.evaluate import CheckReport

# Columns of the all-combinations table that only locate files inside the site.
_INTERNAL_COLUMNS = ("json_rel", "trace_rel", "run_rel")

# The columns of a page's downloadable tables (the frame has more).
_COMBINATION_COLUMNS = ("run_id", "combo_id", "status", "reason", "median", "ci_low", "ci_high",
                        "confidence", "overhead_ratio", "unstable")
_HEADLINE_COLUMNS = ("run_id", "combo_id", "seq", "median", "ci_low", "ci_high", "confidence", "p25", "p75",
                     "n", "rerun_runs", "rerun_low", "rerun_high", "rerun_first", "rerun_last",
                     "stop_reason", "attention_share", "overhead_ratio", "peak_alloc",
                     "pct_peak")


# How a page names each of analysis.GROUP_SHARES: in a sentence and as a column heading.
_GROUP_LABELS: dict[str, tuple[str, str]] = {
    "mixer_share": ("the token mixers", "mixer share"),
    "moe_share": ("the mixture-of-experts layers (router and experts)", "MoE share"),
}


def _group_labels(groups: Sequence[str]) -> list[dict[str, str]]:
    return [{"key": g, "phrase": _GROUP_LABELS[g][0], "heading": _GROUP_LABELS[g][1]}
            for g in groups]


def _headline_columns(groups: Sequence[str]) -> tuple[str, ...]:
    """The headline download's columns, with the ``groups`` after the attention share."""
    at = _HEADLINE_COLUMNS.index("attention_share") + 1
    return (*_HEADLINE_COLUMNS[:at], *groups, *_HEADLINE_COLUMNS[at:])


# Runs the bench measured before it recorded its own command line carry this instead.
_BENCH_SUITE_RUN = "scripts/bench.py (suite run)"


def run_command(record: Mapping[str, Any]) -> str | None:
    """The command line that measures a run again: as recorded, or for a run the bench made
    before it recorded its command line, the bench's (which measures its suite run first)."""
    command = fields.run_get(record, "command")
    if command == _BENCH_SUITE_RUN:
        return "python scripts/bench.py  # or: nox -s bench"
    return str(command) if command else None


def setting_label(setting: Mapping[str, Any]) -> str:
    # a model measured with fewer layers than it has is full-width, never full-size
    depth = str(setting.get("depth") or "")
    if setting["scale"] == "reference":
        scale = f"full-width model, {depth}" if depth else "full-size model"
    else:
        scale = f"{setting['scale']} test-size model" + (f", {depth}" if depth else "")
    compiled = setting.get("compile", "none")
    return (f"{setting['mode']}, {setting['dtype']}, {setting['attn']}, "
            f"batch {setting['batch']}, {scale}"
            + (f", torch.compile {compiled}" if compiled != "none" else ""))


def units_title(units: Iterable[str]) -> str:
    """What the lengths on one axis count: ``tokens``, or ``tokens or patches`` (``tokens,
    frames or patches``) where the lines count different things; tokens first."""
    found = sorted(set(units), key=lambda u: (u != "tokens", u))
    if not found:
        return "tokens"
    return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} or {found[-1]}"


def all_combinations(frame: pd.DataFrame) -> dict[str, bytes]:
    """The combinations table as CSV and Parquet (suffix -> bytes)."""
    table = frame[[c for c in analysis.shown_columns(frame) if c not in _INTERNAL_COLUMNS]]
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False, engine="pyarrow")
    return {".csv": frame_csv(table),
            ".parquet": buffer.getvalue()}




def _absent_blank(row: dict[str, Any]) -> dict[str, Any]:
    """A category row for a download: a category the model does not have (no time, no
    share, no FLOPs) is left blank, as the page shows it a dash, never a measured 0."""
    if row.get("ms") or row.get("share") or row.get("flops_share"):
        return row
    return {k: (v if k == "category" else None) for k, v in row.items()}

def _sources(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The runs a table's rows come from, each with when its last row was measured and the
    load its rows were measured under (the contention they name, or none recorded)."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_run.setdefault(str(r["run_id"]), []).append(r)
    return [{"run_id": run, "when": max(str(r.get("finished") or "") for r in part),
             "load": "; ".join(dict.fromkeys(str(r["unstable"]) for r in part if r.get("unstable")))
             or "no contention recorded"} for run, part in by_run.items()]


class SiteBuilder(Builder):
    """The site's own pages (home, hardware, models, combinations, runs, status), and the
    order in which every producer's pages join them."""

    def __init__(self, runs: Sequence[Run], report: CheckReport | None = None,
                 bench: Mapping[str, Any] | None = None, site_url: str | None = None,
                 other_benches: Sequence[Mapping[str, Any]] = (), causes: Sequence[Cause] = ()) -> None:
        super().__init__(runs, report, bench, site_url, other_benches, causes)
        self._claims = findings.claims_index(self.report) if self.report is not None else {}
        self._summaries: dict[tuple[str, str], dict[str, Any] | None] = {}


    def _links(self, page: str, row: Mapping[str, Any]) -> dict[str, str | None]:
        trace = clean(row.get("trace_rel"))
        return {"json": rel(page, self.data(str(row["json_rel"]))),
                "trace": rel(page, self.data(str(trace))) if trace else None}

    def _not_ok(self, page: str, frame: pd.DataFrame) -> list[dict[str, Any]]:
        bad = frame[frame["status"] != OK]
        return [{**clean_row(r), "links": self._links(page, r)}
                for r in bad.to_dict(orient="records")]

    def _page_summary(self, rows: pd.DataFrame) -> dict[str, Any] | None:
        """Reference setting, its longest sequence and the numbers quoted for it.

        ``rows`` are all rows of one hardware/model pair; computed once per pair.
        """
        key = (str(rows["hardware"].iloc[0]), str(rows["model"].iloc[0]))
        if key not in self._summaries:
            self._summaries[key] = self._compute_summary(rows)
        return self._summaries[key]

    def _compute_summary(self, rows: pd.DataFrame) -> dict[str, Any] | None:
        setting = analysis.reference_setting(rows)
        if setting is None:
            return None
        sel = analysis.select(rows, setting)
        last = sel.iloc[-1]
        crossover = crossovers.attention_crossover(sel)
        fits = analysis.scaling_fits(sel)
        core = fits[fits["category"] == "attention.core"]
        return {"setting": setting, "label": setting_label(setting), "rows": sel,
                "longest": clean_row(last.to_dict()), "crossover": crossover,
                "fits": fits, "lengths": sorted(int(x) for x in sel["seq"].unique()),
                "core_exponent": float(core["exponent"].iloc[0]) if not core.empty else None,
                "core_fit": clean_row(core.iloc[0].to_dict()) if not core.empty else None}

    def _run_context(self, page: str, run_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for rid in sorted(set(run_ids)):
            run = self.runs_by_id[rid]
            env = fields.run_get(run.record, "environment") or {}
            out.append({"run_id": rid, "command": run_command(run.record),
                        "suite": fields.run_get(run.record, "suite.name"),
                        "hardware": self.hw_labels.get(run.hardware, run.hardware),
                        "environment": env, "facts": machine.environment_facts(env),
                        "run_json": rel(page, self.data(f"{run.rel}/{paths.RUN_FILE}"))})
        return out

    # pages -------------------------------------------------------------------------------
    def combination_page(self, hw: str, model: str, rows: pd.DataFrame) -> Page:
        path = self.combo_page(hw, model)
        out: list[Chart] = []
        summary = self._page_summary(rows)
        unit, note = analysis.sequence_of(rows)
        ctx: dict[str, Any] = {
            "hardware": self.hw_labels[hw], "model": model,
            "seq_unit": unit, "seq_note": note,
            "hw_link": rel(path, self.hw_page(hw)),
            "model_link": rel(path, self.model_page(model)),
            "methodology": rel(path, "methodology.md"), "status_link": rel(path, "status.md"),
            "not_ok": self._not_ok(path, rows), "summary": None, "claims": None,
            "headline_methods": analysis.headline_methods(rows, self.records),
        }
        if self.report is not None:
            ctx["findings_link"] = rel(path, findings.FINDINGS_INDEX)
            ctx["claims"] = [
                {**c, "link": rel(path, c["page"])} for c in findings.combination_claims(
                    self._claims, list(zip(rows["run_id"].astype(str),
                                           rows["combo_id"].astype(str))))]
        all_rows = []
        for r in rows.to_dict(orient="records"):
            all_rows.append({**clean_row(r), "links": self._links(path, r)})
        ctx["all_rows"] = all_rows
        ctx["all_rows_data"] = self.table(path, "all-combinations", [
            {k: r[k] for k in _COMBINATION_COLUMNS} for r in all_rows])
        run_ids = sorted(set(rows["run_id"]))
        ctx["runs"] = self._run_context(path, run_ids)
        records = [self.records[(hw, cid)] for cid in rows["combo_id"]]
        commits = sorted({str(fields.get(r, "git.commit")) for r in records if fields.get(r, "git.commit")})
        ctx["commits"] = commits
        ctx["dirty"] = any(bool(fields.get(r, "git.dirty")) for r in records)
        measured = sorted(str(r["finished"]) for r in all_rows if r.get("finished"))
        ctx["cite"] = cite.cite_block(f"{model} on {self.hw_labels[hw]}",
                                      date=measured[-1] if measured else "",
                                      run_ids=run_ids, commits=commits,
                                      url=cite.page_url(self.site_url, path))
        if summary is not None:
            sel = summary["rows"]
            longest = summary["longest"]
            record = self.records[(hw, longest["combo_id"])]
            headline = clean_rows(sel)
            groups = analysis.group_shares(sel)
            categories = [{
                "category": cat, "ms": longest[f"ms:{cat}"], "share": longest[f"share:{cat}"],
                "share_ci_low": longest[f"share_ci_low:{cat}"],
                "share_ci_high": longest[f"share_ci_high:{cat}"],
                "flops_share": longest[f"flops_share:{cat}"]}
                for cat in analysis.shown_categories(sel)]
            ctx["summary"] = {
                "label": summary["label"], "setting": summary["setting"],
                "headline": headline, "longest": longest, "groups": _group_labels(groups),
                "headline_data": self.table(path, "headline", [
                    {k: r[k] for k in _headline_columns(groups)} for r in headline]),
                "categories": categories,
                "has_share_ci": any(c["share_ci_low"] is not None for c in categories),
                "share_wide": {c["category"]: share_wide_reason(
                    c["share"], c["share_ci_low"], c["share_ci_high"], c["ms"],
                    fields.get(record, "timing.method")) for c in categories},
                "categories_data": self.table(path, "categories", [_absent_blank(c) for c in categories]),
                "lengths": summary["lengths"], "min_fit_points": stats.MIN_FIT_POINTS,
                "fits": clean_rows(summary["fits"]),
                "fits_data": self.table(path, "fits", clean_rows(summary["fits"])),
                "memory_data": self.table(path, "memory", [
                    {k: r[k] for k in ("seq", "peak_alloc", "peak_reserved", "attn_act_analytic",
                                       "attn_act_measured")} for r in headline]),
                "crossover": summary["crossover"],
                "model_info": fields.get(record, "model") or {},
                "top_ops": analysis.top_ops(record), "op_basis": fields.get(record, "attribution.basis"),
                "unlinked": {"unlinked_device_events": fields.get(record, "attribution.unlinked_device_events"),
                             "unlinked_device_ms": fields.get(record, "attribution.unlinked_device_ms")},
                "methods": analysis.attribution_methods(record),
                "top_ops_data": self.table(path, "top-ops", analysis.top_ops(record)),
                "flop_notes": [analysis.reader_note(str(n)) for n in fields.get(record, "flops.notes") or []],
                "has_peak": bool(sel["pct_peak"].notna().any()),
                "has_launches": bool(sel["launches"].notna().any()),
                "shares_chart": self.chart(path, "shares", "Category shares: time beside FLOPs",
                                            charts.shares_chart(analysis.shares_long(sel)), out),
            }
            if sel["seq"].nunique() >= 2:
                ctx["summary"]["scaling_chart"] = self.chart(
                    path, "scaling", "Time per category against sequence length (log-log)",
                    charts.scaling_chart(analysis.category_ms_long(sel), unit), out)
        ctx["routing"] = self._routing(path, hw, rows, summary, out)
        ctx["training"] = training.section(self, path, [
            (self.records[(hw, str(r["combo_id"]))], self._links(path, r)["json"])
            for r in rows.to_dict(orient="records") if (hw, str(r["combo_id"])) in self.records])
        ctx["roofline"] = roofline_pages.combination_section(self, path, hw, rows, out)
        comparison = analysis.attention_comparison(rows)
        ctx["attention"] = clean_rows(comparison)
        ctx["attention_data"] = self.table(path, "attention", ctx["attention"])
        if not comparison.empty:
            ctx["attention_chart"] = self.chart(
                path, "attention", "Attention implementations: median latency with its CI",
                charts.attention_chart(comparison), out)
        return Page(path, "combination.md.j2", ctx, tuple(out))

    def _routing(self, path: str, hw: str, rows: pd.DataFrame, summary: Mapping[str, Any] | None,
                 out: list[Chart]) -> dict[str, Any] | None:
        """"Where the router sent the tokens": the figures of one combination's ``moe``
        section (the headline combination's where it has one, else the longest one of
        the reference setting, else the longest other), its layers as a table and a chart,
        and every combination of the page that has one; None where none has."""
        ok = rows[rows["status"] == OK]
        sections = ((r, moe.section(self.records.get((hw, str(r["combo_id"])))))
                    for r in ok.to_dict(orient="records"))
        found = [(r, m) for r, m in sections if m is not None]
        if not found:
            return None
        headline = str(summary["longest"]["combo_id"]) if summary is not None else None
        setting = summary["setting"] if summary is not None else {}

        def rank(item: tuple[Mapping[str, Any], Mapping[str, Any]]) -> tuple[Any, ...]:
            r = item[0]
            return (str(r["combo_id"]) != headline,
                    any(r[k] != v for k, v in setting.items()), -int(r["seq"]))

        row, section = min(found, key=rank)
        layers = moe.layer_rows(section)
        unit = str(row.get("sequence") or "tokens")
        combos = []
        for r, m in found:
            figures = moe.overview(m, moe.layer_rows(m))
            combos.append({"combo_id": str(r["combo_id"]), "mode": r["mode"], "seq": r["seq"],
                           "sequence": r.get("sequence") or "tokens", "batch": r["batch"],
                           **figures})
        return {
            "combo_id": str(row["combo_id"]), "mode": row["mode"], "seq": row["seq"],
            "sequence": unit, "batch": row["batch"],
            "label": setting_label(row), "headline": str(row["combo_id"]) == headline,
            "json": self._links(path, row)["json"],
            **moe.overview(section, layers),
            "layer_rows": layers,
            "layers_data": self.table(path, "routing-layers", moe.table_rows(layers)),
            "chart": self.chart(path, "routing", "Tokens per expert in each layer (dashed: "
                                 "the layer's mean)",
                                 charts.expert_load_chart(moe.chart_rows(layers)), out),
            "combinations": combos if len(combos) > 1 else [],
            "combinations_data": (self.table(path, "routing-combinations", combos)
                                  if len(combos) > 1 else None),
            "decode": any(c["mode"] == moe.DECODE for c in combos),
        }

    def _history_link(self, path: str, hw: str) -> dict[str, Any] | None:
        """Where this hardware's history across releases is, and the releases this page's
        runs measured with; None without one."""
        if not any(run.hardware == hw and is_history(run.record) for run in self.runs):
            return None
        shown = {(v["torch"], v["transformers"]) for run in self.current if run.hardware == hw
                 for v in [release_of(run.record)]}
        return {"link": rel(path, history.INDEX),
                "releases": sorted(f"torch {t}, transformers {x}" for t, x in shown)}

    def hardware_page(self, hw: str, rows: pd.DataFrame) -> Page:
        path = self.hw_page(hw)
        out: list[Chart] = []
        models: list[dict[str, Any]] = []
        longests: list[pd.DataFrame] = []
        lines: list[dict[str, Any]] = []
        isolated: set[str] = set()  # isolated attention, not whole models: their own chart
        for model, part in rows.groupby("model", sort=True):
            if (part["architecture"] == "attention").any():
                isolated.add(str(model))
            s = self._page_summary(part)
            entry: dict[str, Any] = {"model": model, "link": rel(path, self.combo_page(hw, model)),
                                     "summary": None, "not_ok": int((part["status"] != OK).sum())}
            if s is not None:
                entry["summary"] = {"label": s["label"], "longest": s["longest"],
                                    "crossover": s["crossover"],
                                    "core_exponent": s["core_exponent"]}
                longests.append(s["rows"].iloc[[-1]].assign(model=model))
                lines.extend({"model": model, "setting": s["label"], "seq": int(r["seq"]),
                              "median": r["median"], "attention_share": r["attention_share"],
                              "sequence": r["sequence"]}
                             for _, r in s["rows"].iterrows())
            models.append(entry)
        # one frame for the shares chart, so every model's bars share its categories
        longest_rows = pd.concat(longests, ignore_index=True) if longests else None
        groups = analysis.group_shares(longest_rows) if longest_rows is not None else []
        ctx: dict[str, Any] = {"hardware": self.hw_labels[hw], "models": models,
                               "history": self._history_link(path, hw),
                               "not_ok": self._not_ok(path, rows),
                               "groups": _group_labels(groups),
                               "models_data": self.table(path, "models", [
                                   {"model": m["model"], "setting": m["summary"]["label"],
                                    **{k: m["summary"]["longest"][k]
                                       for k in _headline_columns(groups)},
                                    "core_exponent": m["summary"]["core_exponent"],
                                    "run_id": m["summary"]["longest"]["run_id"]}
                                   for m in models if m["summary"]]),
                               "sources": _sources(clean_rows(longest_rows)) if longest_rows is not None else [],
                               "headline_methods": analysis.headline_methods(rows, self.records)}
        if longest_rows is not None:
            ctx["shares_chart"] = self.chart(
                path, "shares", "Category shares per model at its longest measured length",
                charts.shares_chart(analysis.shares_long(longest_rows, by="model"), by="model",
                                    by_title="model", by_type="N"), out)
            frame = pd.DataFrame(lines)
            whole = frame[~frame["model"].isin(isolated)]
            alone = frame[frame["model"].isin(isolated)]
            if not whole.empty:
                ctx["latency_chart"] = self.chart(
                    path, "latency", "Median latency per model against sequence length",
                    charts.latency_lines(whole.drop(columns="sequence"), "model", "model",
                                         units_title(whole["sequence"])), out)
            if not alone.empty:
                ctx["isolated_chart"] = self.chart(
                    path, "latency-isolated",
                    "Isolated attention (one attention layer alone): median latency against "
                    "sequence length", charts.latency_lines(alone.drop(columns="sequence"),
                                                            "model", "benchmark",
                                                            units_title(alone["sequence"])), out)
        return Page(path, "hardware.md.j2", ctx, tuple(out))

    def model_page_for(self, model: str, rows: pd.DataFrame) -> Page:
        path = self.model_page(model)
        out: list[Chart] = []
        entries: list[dict[str, Any]] = []
        lines: list[dict[str, Any]] = []
        units: set[str] = set()
        for hw, part in rows.groupby("hardware", sort=True):
            s = self._page_summary(part)
            entry: dict[str, Any] = {"hardware": self.hw_labels[hw],
                                     "link": rel(path, self.combo_page(hw, model)),
                                     "summary": None, "headline": [],
                                     "not_ok": int((part["status"] != OK).sum())}
            if s is not None:
                entry["summary"] = {"label": s["label"], "crossover": s["crossover"],
                                    "core_exponent": s["core_exponent"],
                                    "groups": _group_labels(analysis.group_shares(s["rows"])),
                                    "sequence": analysis.sequence_of(s["rows"])[0]}
                entry["headline"] = clean_rows(s["rows"])
                entry["sources"] = _sources(entry["headline"])
                lines.extend({"hardware": self.hw_labels[hw], "setting": s["label"],
                              "seq": int(r["seq"]),
                              "median": r["median"], "attention_share": r["attention_share"]}
                             for _, r in s["rows"].iterrows())
                units.add(analysis.sequence_of(s["rows"])[0])
            entry["compiled"] = self._compiled_vs_eager(path, str(hw), model, part, out)
            entries.append(entry)
        ctx: dict[str, Any] = {"model": model, "entries": entries,
                               "headline_methods": analysis.headline_methods(rows, self.records)}
        if lines:
            ctx["latency_chart"] = self.chart(
                path, "latency", "Median latency per hardware against sequence length",
                charts.latency_lines(pd.DataFrame(lines), "hardware", "hardware",
                                     units_title(units)), out)
        return Page(path, "model.md.j2", ctx, tuple(out))

    def _compiled_vs_eager(self, page: str, hw: str, model: str, rows: pd.DataFrame,
                           out: list[Chart]) -> dict[str, Any] | None:
        """Each compiled combination beside its eager twin, with the compile time."""
        matched = compiled.pairs(rows)
        if matched.empty:
            return None
        table = [{**clean_row(r), "label": setting_label({**r, "compile": "none"})}
                 for r in matched.to_dict(orient="records")]
        chart = self.chart(page, f"compiled-{self.hw_slugs[hw]}",
                            f"Category shares on {hw}: eager beside torch.compile",
                            charts.shares_chart(compiled.shares(rows, matched), by="variant",
                                                by_title="combination", by_type="N"), out)
        return {"rows": table, "chart": chart, "link": rel(page, self.combo_page(hw, model))}

    def home(self) -> Page:
        path = "index.md"
        out: list[Chart] = []
        f = self.frame
        models = sorted(self.model_slugs)
        breakdown: list[dict[str, Any]] = []  # one row per (hardware, model)
        cells: list[dict[str, Any]] = []  # one per (hardware, model, category), for the chart
        for (hw, model), part in (f.groupby(["hardware", "model"], sort=True)
                                  if not f.empty else []):
            s = self._page_summary(part)
            entry: dict[str, Any] = {
                "hardware": self.hw_labels[hw], "model": model,
                "link": rel(path, self.combo_page(hw, model)), "summary": None,
                "href": f"hardware/{self.hw_slugs[hw]}/{self.model_slugs[model]}/"}
            if s is not None:
                longest = s["longest"]
                entry["summary"] = {"seq": longest["seq"], "sequence": longest["sequence"],
                                    "label": s["label"], "depth": str(longest.get("depth") or ""),
                                    "attention_share": longest["attention_share"],
                                    "longest": longest}
            breakdown.append(entry)
        # each table (one per hardware) and the chart show the categories their rows have
        summaries = [e["summary"] for e in breakdown if e["summary"]]
        shown = analysis.shown_categories([x["longest"] for x in summaries])
        by_hw: dict[str, list[dict[str, Any]]] = {}
        for entry in breakdown:
            by_hw.setdefault(entry["hardware"], []).append(entry)
        hw_categories = {hw: analysis.shown_categories([e["summary"]["longest"] for e in entries
                                                         if e["summary"]])
                         for hw, entries in by_hw.items()}
        for entry in breakdown:
            summary = entry["summary"]
            if summary is None:
                continue
            longest = summary.pop("longest")
            summary["shares"] = [{"category": cat, "share": longest[f"share:{cat}"],
                                  "ci_low": longest[f"share_ci_low:{cat}"],
                                  "ci_high": longest[f"share_ci_high:{cat}"]}
                                 for cat in hw_categories[entry["hardware"]]]
            for c in summary["shares"]:
                if c["share"] is None:
                    continue
                cells.append({"hardware": entry["hardware"], "model": entry["model"],
                              "row": f"{entry['model']} ({entry['hardware']})"
                              if len(self.hw_slugs) > 1 else entry["model"],
                              "category": c["category"], "order": shown.index(c["category"]),
                              "share": c["share"], "share_ci_low": c["ci_low"],
                              "share_ci_high": c["ci_high"], "seq": longest["seq"],
                              "href": entry["href"]})
        measured = [{"label": self.hw_labels[hw], "link": rel(path, self.hw_page(hw)),
                     "models": int(f[f["hardware"] == hw]["model"].nunique()),
                     "ok": int(((f["hardware"] == hw) & (f["status"] == OK)).sum())}
                    for hw in sorted(self.hw_slugs)]
        ctx: dict[str, Any] = {
            "models": [{"model": m, "link": rel(path, self.model_page(m))} for m in models],
            "breakdown": [{"hardware": hw, "rows": rows, "categories": hw_categories[hw]}
                          for hw, rows in by_hw.items()],
            "has_share_ci": any(c["share_ci_low"] is not None for c in cells),
            "measured_on": measured,
            "gpu_measured": any(hardware.has_gpu(self.hw_env.get(hw)) for hw in self.hw_slugs),
            "latest": self._run_rows(path, analysis.latest_runs(self.runs)),
            "counts": {s: int((f["status"] == s).sum()) if not f.empty else 0
                       for s in COMBINATION_STATUSES},
            "shown": len(f),
            "findings_link": findings.FINDINGS_INDEX if self.report is not None else None,
            "validation_link": sections.VALIDATION if self.bench is not None else None,
            "instrumentation_link": studies.PATH if studies.studied(self.current) else None,
            "headline_methods": analysis.headline_methods(f, self.records),
            "all_combinations": {ext: rel(path, f"{ALL_COMBINATIONS}{ext}")
                                 for ext in (".csv", ".parquet")} if not f.empty else None,
        }
        ctx["breakdown_data"] = self.table(path, "breakdown", [
            {"hardware": c["hardware"], "model": c["model"], "seq": c["seq"],
             "category": c["category"], "share": c["share"], "share_ci_low": c["share_ci_low"],
             "share_ci_high": c["share_ci_high"]} for c in cells])
        if cells:
            ctx["breakdown_chart"] = self.chart(
                path, "breakdown", "Share of forward time per category, each model at its "
                "longest measured sequence length", charts.breakdown_chart(cells), out)
        lines = longcontext.share_lines(f, self.hw_labels)
        ctx["long"] = {"lines": lines, "min_lengths": longcontext.MIN_LENGTHS}
        if lines:
            unit = units_title(line["sequence"] for line in lines)
            ctx["long"]["chart"] = self.chart(
                path, "attention-share", "Attention's share of the time against sequence length, "
                "with where attention overtakes the rest of the layer",
                charts.share_lines_chart(longcontext.chart_rows(lines), unit), out)
            ctx["long"]["data"] = self.table(path, "crossovers", longcontext.crossover_table(lines))
        return Page(path, "home.md.j2", ctx, tuple(out))

    def _run_rows(self, page: str, runs: Iterable[Run]) -> list[dict[str, Any]]:
        out = []
        for run in runs:
            statuses = [str(fields.get(c.record, "status")) for c in run.combinations]
            out.append({"run_id": run.run_id,
                        "hardware": self.hw_labels.get(run.hardware, run.hardware),
                        "hw_link": (rel(page, self.hw_page(run.hardware))
                                    if run.hardware in self.hw_slugs else None),
                        "suite": fields.run_get(run.record, "suite.name"),
                        "command": run_command(run.record),
                        "updated": (fields.run_get(run.record, "updated")
                                    or fields.run_get(run.record, "started")),
                        "environment": fields.run_get(run.record, "environment") or {},
                        "facts": machine.environment_facts(fields.run_get(run.record, "environment")),
                        **{s: statuses.count(s) for s in COMBINATION_STATUSES},
                        "run_json": rel(page, self.data(f"{run.rel}/{paths.RUN_FILE}"))})
        return out

    def build(self) -> SiteModel:
        pages = [self.home()]
        f = self.frame
        if not f.empty:
            for (hw, model), part in f.groupby(["hardware", "model"], sort=True):
                pages.append(self.combination_page(str(hw), str(model), part))
            for hw, part in f.groupby("hardware", sort=True):
                pages.append(self.hardware_page(str(hw), part))
            for model, part in f.groupby("model", sort=True):
                pages.append(self.model_page_for(str(model), part))
        pages.append(Page("hardware/index.md", "hardware_index.md.j2", {"hardware": [
            {"hardware": self.hw_labels[hw], "link": rel("hardware/index.md", self.hw_page(hw)),
             "models": sorted(set(f[f["hardware"] == hw]["model"]))}
            for hw in sorted(self.hw_slugs)]}))
        pages.append(Page("models/index.md", "models_index.md.j2", {"models": [
            {"model": m, "link": rel("models/index.md", self.model_page(m)),
             "hardware": sorted({self.hw_labels[h] for h in f[f["model"] == m]["hardware"]})}
            for m in sorted(self.model_slugs)]}))
        pages.append(Page("status.md", "status.md.j2", {"rows": [
            {**r, "page": rel("status.md", self.combo_page(r["hardware"], r["model"])),
             "hardware": self.hw_labels[r["hardware"]]}
            for r in self._not_ok("status.md", f)] if not f.empty else []}))
        pages.append(Page("runs.md", "runs.md.j2", {
            "runs": self._run_rows("runs.md", sorted(self.runs, key=lambda r: r.run_id)),
            "shown": len(f), "records": sum(len(run.combinations) for run in self.runs),
            "all_combinations": {ext: rel("runs.md", f"{ALL_COMBINATIONS}{ext}")
                                 for ext in (".csv", ".parquet")} if not f.empty else None}))
        for produce in PRODUCERS:
            pages += produce(self)
        data_files: list[tuple[str, str]] = []
        for run in self.runs:
            data_files.append((self.data(f"{run.rel}/{paths.RUN_FILE}"), str(paths.run_path(run.path))))
            for c in run.combinations:
                data_files.append((self.data(f"{run.rel}/{c.path.relative_to(run.path).as_posix()}"),
                                   str(c.path)))
                if c.trace is not None:
                    data_files.append((self.data(
                        f"{run.rel}/{c.trace.relative_to(run.path).as_posix()}"), str(c.trace)))
                extra = tools_page.trace_path(run.path, tools_page.study_of(c.record))
                if extra is not None:
                    data_files.append((self.data(
                        f"{run.rel}/{extra.relative_to(run.path).as_posix()}"), str(extra)))
        files = dict(self.files)
        if not f.empty:
            files.update({f"{ALL_COMBINATIONS}{ext}": data
                          for ext, data in all_combinations(f).items()})
        return SiteModel(pages=pages, data_files=sorted(data_files), files=files)


def _changes(b: Builder) -> list[Page]:
    return changes.series_pages(b.runs, slug=slugify, data=b.data, page_type=Page, bench=b.bench,
                                validation=sections.VALIDATION, history=history.INDEX)


def _instrumentation(b: Builder) -> list[Page]:
    page = studies.instrumentation_page(
        b.current, labels=b.hw_labels, page_type=Page,
        chart=b.chart, table=lambda page, name, rows: b.table(page, slugify(name), rows),
        combination_page=lambda hw, model: (rel(studies.PATH, b.combo_page(hw, model))
                                            if hw in b.hw_slugs and model in b.model_slugs else None))
    return [page] if page is not None else []


PRODUCERS: tuple[Producer, ...] = (
    roofline_pages.findings_page, payoff_pages.speedups_page, payoff_pages.payoff_page, flop_shares.page,
    tools_page.page,
    _changes, history.history_pages, _instrumentation, findings.findings_pages, validation.validation_page)
"""The pages other modules produce, in the order they follow the site's own."""


def site_model(runs: Sequence[Run], *, report: CheckReport | None = None,
               bench: Mapping[str, Any] | None = None, site_url: str | None = None,
               other_benches: Sequence[Mapping[str, Any]] = (), causes: Sequence[Cause] = ()) -> SiteModel:
    """Every page of the site; ``report`` adds the Findings section (when it has claims)
    and the claims on each combination page, ``bench`` (a results document) the
    Validation page, ``other_benches`` (other hosts' results) a summary of theirs on it;
    ``site_url`` (the published site's address) the citations' URLs, ``causes`` (runs/causes.yaml)
    the causes the History pages name beside the steps they explain."""
    return SiteBuilder(runs, report, bench, site_url, other_benches, causes).build()


__all__ = ["CATEGORIES", "DATA_DIR", "Page", "SiteModel", "rel", "site_model", "slugify",
           "unique_slugs"]
