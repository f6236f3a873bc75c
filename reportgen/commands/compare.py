"""``reportgen compare BASE NEW``: what changed between two sets of measurements.

Exit status 0 when nothing got significantly slower by more than ``--threshold``, 1 when
something did (so CI can gate on it), 2 on bad input. The statistics are in
``reportgen.render.compare`` and ``reportgen.stats``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMATS = ("text", "json", "markdown")

EPILOG = """\
BASE and NEW are each a run directory (runs/<hardware>/<run>) or a filter over the runs
tree given by --runs: KEY=VALUE[,KEY=VALUE...], values may be globs (5.*).
Run keys: hardware, suite, run (run id), commit, python, or any library of the
environment record (transformers, torch, numpy, ...). Combination keys: model, scale,
mode, dtype, attn, batch, seq, device, layers. Combinations are paired by their settings and
hardware, except the keys both sides set to different values.

examples:
  reportgen compare runs/cpu-amd-epyc-2c/cpu-default-c11f32ec runs/cpu-amd-epyc-2c/cpu-default-c11f32ec-20261203T090000
  reportgen compare --runs runs transformers=5.0.0,suite=cpu-default transformers=5.24.0,suite=cpu-default
  reportgen compare --runs runs attn=eager,suite=cpu-default attn=sdpa,suite=cpu-default
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare", help="latency ratios and significance between two runs or run filters",
        description="Per combination present in both: the latency ratio NEW/BASE with its "
                    "interval (95%, or the level the records' intervals state where lower) and a "
                    "Mann-Whitney U test on the raw samples (significant at "
                    "p < 0.002 where the sample sizes can reach it, otherwise when the medians' "
                    "intervals do not overlap); per category the change in time share. Exit 1 "
                    "when a significant slowdown exceeds --threshold.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", metavar="BASE", help="run directory or filter (the reference)")
    parser.add_argument("new", metavar="NEW", help="run directory or filter (compared with BASE)")
    parser.add_argument("--runs", type=Path, default=Path("runs"),
                        help="runs tree the filters select from (default: runs/)")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--bench", type=Path, default=Path("bench"),
                        help="bench results (<hardware>.json): a host's measured run-to-run drift is the "
                             "floor below which a significant change is 'within noise' (default: bench)")
    parser.add_argument("--threshold", type=_fraction, default=0.05,
                        help="slowdown that fails the comparison, as a fraction (default: 0.05 = 5%%)")
    parser.set_defaults(func=run)


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 10.0:
        raise argparse.ArgumentTypeError(f"threshold must be >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from reportgen.render.compare import compare, read_drift, select

    base = select(args.base, args.runs, "BASE")
    new = select(args.new, args.runs, "NEW")
    result = compare(base, new, threshold=args.threshold, drift=read_drift(args.bench))
    data = result.as_dict()
    if args.format == "json":
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
    elif args.format == "markdown":
        from reportgen.render.templating import environment

        sys.stdout.write(environment().get_template("compare.md.j2").render(c=data))
    else:
        sys.stdout.write(text(data))
    return 1 if result.regressions else 0


def _num(x: Any, digits: int = 3) -> str:
    from reportgen.fmt import num

    return num(x, digits)


def _ci(row: Mapping[str, Any], shared: float | None) -> str:
    from reportgen.fmt import ci_level

    return ci_level(row["ci_low"], row["ci_high"], row.get("confidence"), shared)


def text(data: dict[str, Any]) -> str:
    """A plain-text report: significant changes first, then the rest in one line each."""
    lines = [f"BASE {data['base']['label']} ({len(data['base']['runs'])} run(s))",
             f"NEW  {data['new']['label']} ({len(data['new']['runs'])} run(s))"]
    for v in data["versions"]:
        lines.append(f"  {v['library']}: {v['base']} -> {v['new']}")
    from reportgen.fmt import ci_heading, rests_on, shared_level

    width = max([len(r["id"]) for r in data["rows"]] + [11])
    compared = [r for r in data["rows"] if r["ratio"] is not None]
    shared = shared_level(compared)
    ci_width = max([len(_ci(r, shared)) for r in compared] + [17])
    lines.append("")
    lines.append(f"{'combination':<{width}}  {'base ms':>9}  {'new ms':>9}  {'ratio':>7}  "
                 f"{ci_heading(shared):<{ci_width}}  {'p':>9}  change")
    for r in data["rows"]:
        if r["ratio"] is None:
            lines.append(f"{r['id']:<{width}}  not comparable: {r['reason']}"
                         + (f" ({r['depth']})" if r.get("depth") else ""))
            continue
        ci = _ci(r, shared)
        change = (r["change"] + rests_on(r.get("verdict_level")) + (" (over threshold)" if r.get("regression") else "")
                  + (f" (unstable: {r['unstable']})" if r.get("unstable") else "")
                  + (f" ({r['depth']})" if r.get("depth") else ""))
        lines.append(f"{r['id']:<{width}}  {_num(r['base_median']):>9}  {_num(r['new_median']):>9}  "
                     f"{_num(r['ratio']):>7}  {ci:<{ci_width}}  {_num(r['p_value']):>9}  {change}")
    counts = data["counts"]
    lines.append("")
    floor = data.get("noise_floor")
    lines.append(f"{counts['slower']} slower, {counts['faster']} faster, "
                 + (f"{counts['within noise']} within noise (at most {100 * floor:.1f}%, this host's "
                    "run-to-run drift), " if floor is not None else "")
                 + f"{counts['no significant difference']} no significant difference"
                 + (f", {counts['not comparable']} not comparable" if counts["not comparable"] else "")
                 + f" (Mann-Whitney U, p < {data['alpha']}, on round medians where measured in rounds; "
                 "interval overlap where they are few)")
    if data["shares"]:
        lines.append("share change (new - base, median over combinations, 95% CI, percentage points):")
        for s in data["shares"]:
            verdict = ("changed" if s["significant"] else
                       "too few combinations" if not s["ci_exact"] else "no significant change")
            lines.append(f"  {s['category']:<15} {100 * s['diff']:+.2f} "
                         f"[{100 * s['ci_low']:+.2f}, {100 * s['ci_high']:+.2f}]  {verdict}")
    if data["only_base"] or data["only_new"]:
        lines.append(f"only in base: {len(data['only_base'])}, only in new: {len(data['only_new'])}")
    if data["regressions"]:
        lines.append(f"FAIL: {data['regressions']} combination(s) significantly slower by more than "
                     f"{100 * data['threshold']:g}%")
    return "\n".join(lines) + "\n"
