"""``reportgen check``: every claim in the registry against the runs; exit 0 whatever the verdicts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="check the claims registry against the measured runs",
        description="Evaluate every claim (claims/*.yaml) against the combinations in runs/ "
        "measured on the hardware and under the conditions it was made: supported, refuted, "
        "inconclusive (the interval straddles the threshold), mixed, not tested, or "
        "not tested on its hardware (no run on the claim's hardware yet; runs on other "
        "hardware are listed as context). Exits 0 whatever the verdicts; 2 for a bad claim.",
    )
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="runs directory (default: runs/)")
    parser.add_argument("--claims", type=Path, default=Path("claims"), help="claims directory (default: claims/)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(func=run)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


def _interval(item: dict[str, Any]) -> str:
    if item.get("value") is None:
        return ""
    if item.get("text"):  # a catalog figure, as the claim writes it (46.7B, 6.66%)
        return str(item["text"])
    if item.get("ci_low") == item.get("ci_high") == item.get("value"):
        return _number(item["value"])
    return f"{_number(item['value'])} [{_number(item['ci_low'])}, {_number(item['ci_high'])}]"


def _evidence_line(row: dict[str, Any]) -> str:
    combo = row["combination"]
    parts = [row["hardware"], str(combo.get("model")), str(combo.get("mode")), str(combo.get("dtype")),
             f"b{combo.get('batch_size')}", f"s{combo.get('seq_len')}"]
    if row.get("from_catalog"):  # a model's structure: no run, no shape
        parts = [row["hardware_label"] + ":", str(combo.get("model"))]
    if combo.get("attn_implementation"):
        parts.append(str(combo["attn_implementation"]))
    where = " ".join(parts)
    checks = []
    for item in row["checks"]:
        if item.get("variants"):
            detail = ", ".join(f"{v['attn']} {_interval(v)}" for v in item["variants"])
        else:
            detail = _interval(item)
        if detail:
            checks.append(f"{detail} ({item['verdict']})" if len(row["checks"]) > 1 else detail)
    outcome = row.get("outcome") or row["verdict"]
    width = 12 if row["within_conditions"] else 18
    text = f"    {outcome:<{width}} {where}: {'; '.join(checks)}" if checks else f"    {outcome:<{width}} {where}"
    if row.get("reason"):
        text += f" -- {row['reason']}"
    return text


def format_text(report: dict[str, Any]) -> str:
    lines = [f"{len(report['claims'])} claims against {report['combinations_read']} combinations in {report['runs']}"]
    for claim in report["claims"]:
        counts = ", ".join(f"{n} {v}" for v, n in claim["counts"].items() if n)
        lines.append("")
        lines.append(f"{claim['id']}: {claim['verdict'].upper()}" + (f" ({counts})" if counts else ""))
        lines.append(f"  {claim['predicate']}")
        if claim.get("reason"):
            lines.append(f"  {claim['reason']}")
        for entry in claim.get("context") or []:
            lines.append(f"  context: {entry['text']}")
        within = [r for r in claim["evidence"] if r["within_conditions"]]
        outside = [r for r in claim["evidence"] if not r["within_conditions"]]
        lines.extend(_evidence_line(r) for r in within)
        if outside:
            lines.append(f"  outside the stated conditions (context, not counted): {len(outside)}")
            lines.extend(_evidence_line(r) + f" <{'; '.join(r['outside'])}>" for r in outside)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from reportgen.claims import check

    report = check(args.runs, args.claims).as_dict()
    if args.format == "json":
        json.dump(report, sys.stdout, indent=2, sort_keys=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_text(report))
    return 0
