"""The Instrumentation trade-offs page: for each hardware and combination that was studied
(``studies.instrumentation`` in its record), what each way of looking inside a forward
cost there, with its interval, and what it gives. Pure Python over the records (no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from reportgen.records import fields
from reportgen.records.schema import Run
from reportgen.records.status import FAILED, NOT_APPLICABLE, OK, is_ok
from reportgen.render import charts
from reportgen.render.charts import Chart

PATH = "instrumentation.md"
TITLE = "Instrumentation trade-offs"
STUDY = "instrumentation"

# Columns of the per-combination downloads (the rows carry more).
COLUMNS = ("hardware", "run_id", "combo_id", "variant", "status", "reason", "ratio", "ci_low",
           "ci_high", "confidence", "n_pairs", "bare_ms", "instrumented_ms", "session_ms",
           "gives", "verdict")

ChartFn = Callable[[str, str, str, Mapping[str, Any], list[Chart]], dict[str, str]]
TableFn = Callable[[str, str, Sequence[Mapping[str, Any]]], dict[str, str] | None]


def verdict(row: Mapping[str, Any]) -> str | None:
    """``slower`` / ``faster`` where the interval of the ratio excludes 1, else ``no
    significant difference`` (METHOD.md rule 5); None where nothing was measured."""
    low, high = row.get("ci_low"), row.get("ci_high")
    if row.get("status") != OK or low is None or high is None:
        return None
    if low > 1.0:
        return "slower"
    if high < 1.0:
        return "faster"
    return "no significant difference"


def studied(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One entry per studied combination of ``runs`` (hardware, run, combination, its
    study, its variants with their verdicts), in hardware then suite order."""
    out = []
    for run in runs:
        for combo in run.combinations:
            record = combo.record
            study = fields.get(record, ("studies", STUDY)) if is_ok(record) else None
            if not isinstance(study, Mapping):
                continue
            combination = fields.get(record, "combination") or {}
            variants = [{**v, "gives": list(v.get("gives") or []), "verdict": verdict(v)}
                        for v in study.get("variants") or []]
            out.append({"hardware": run.hardware, "run_id": run.run_id,
                        "combo_id": str(fields.get(record, "id") or combo.path.stem),
                        "model": str(combination.get("model") or fields.get(record, "model.name")
                                     or "unknown"),
                        "combination": combination,
                        "status": study.get("status"), "reason": study.get("reason"),
                        "study": {k: v for k, v in study.items() if k != "variants"},
                        "variants": variants})
    return sorted(out, key=lambda e: (e["hardware"], e["run_id"], e["combo_id"]))


def chart_frame(entries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The measured variants of ``entries`` (one hardware), one row each, for the chart."""
    rows = [{"combination": e["combo_id"], "variant": v["name"], "ratio": v["ratio"],
             "ci_low": v["ci_low"], "ci_high": v["ci_high"], "n_pairs": v["n_pairs"],
             "bare_ms": v["bare_ms"], "instrumented_ms": v["instrumented_ms"],
             "gives": ", ".join(v["gives"]) or "nothing", "baseline": 1.0}
            for e in entries if e["status"] == OK for v in e["variants"] if v["status"] == OK]
    return pd.DataFrame(rows, columns=["combination", "variant", "ratio", "ci_low", "ci_high",
                                       "n_pairs", "bare_ms", "instrumented_ms", "gives", "baseline"])


def capabilities(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What each variant gives on this hardware, from the records (the union over its
    combinations, in first-seen order), and on how many combinations it applied."""
    seen: dict[str, dict[str, Any]] = {}
    for e in entries:
        for v in e["variants"]:
            row = seen.setdefault(v["name"], {"variant": v["name"], "gives": [], "measured": 0,
                                              "not_applicable": 0, "failed": 0})
            row["gives"] += [g for g in v["gives"] if g not in row["gives"]]
            key = {OK: "measured", NOT_APPLICABLE: "not_applicable"}.get(v["status"], "failed")
            row[key] += 1
    return list(seen.values())


def instrumentation_page(runs: Sequence[Run], *, labels: Mapping[str, str], chart: ChartFn,
                         table: TableFn, combination_page: Callable[[str, str], str | None],
                         page_type: Any) -> Any | None:
    """The page (a ``pages.Page``), or None when no current run holds the study."""
    entries = studied(runs)
    if not entries:
        return None
    out: list[Chart] = []
    hardware = []
    for hw in dict.fromkeys(e["hardware"] for e in entries):
        mine = [e for e in entries if e["hardware"] == hw]
        label = labels.get(hw, hw)
        combos = []
        for e in mine:
            rows = [{"hardware": hw, "run_id": e["run_id"], "combo_id": e["combo_id"],
                     "variant": v["name"], **{k: v.get(k) for k in COLUMNS[4:] if k != "gives"},
                     "gives": " ".join(v["gives"])} for v in e["variants"]]
            combos.append({**e, "link": combination_page(hw, e["model"]),
                           "measured": [v for v in e["variants"] if v["status"] == OK],
                           "not_applicable": [v for v in e["variants"] if v["status"] == NOT_APPLICABLE],
                           "failed": [v for v in e["variants"] if v["status"] == FAILED],
                           "data": table(PATH, f"{hw}-{e['combo_id']}", rows)})
        frame = chart_frame(mine)
        entry: dict[str, Any] = {"hardware": label, "combinations": combos,
                                 "capabilities": capabilities(mine)}
        entry["capabilities_data"] = table(PATH, f"{hw}-capabilities", [
            {**c, "gives": " ".join(c["gives"])} for c in entry["capabilities"]])
        if not frame.empty:
            entry["chart"] = chart(PATH, f"overhead-{hw}",
                                   f"Overhead of each instrument on {label}: instrumented / bare "
                                   "forward time, 95% CI", charts.overhead_chart(frame), out)
        hardware.append(entry)
    return page_type(PATH, "instrumentation.md.j2", {"title": TITLE, "hardware": hardware},
                     tuple(out))
