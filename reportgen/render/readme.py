"""The README's measured figures, written from runs/ and bench/ (METHOD.md rule 14: no
figure is typed by hand; templates in ``templates/readme``). ``python -m reportgen.readme``
rewrites the marked blocks; a test fails when the README no longer matches the committed
data.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reportgen import fmt
from reportgen.errors import UserError
from reportgen.records import fields
from reportgen.records.schema import Run, current_runs, iter_runs
from reportgen.records.status import COMBINATION_STATUSES, is_ok
from reportgen.render.runtable import run_rows
from reportgen.render.templating import make_environment
from reportgen.vocabulary import PHASES

BLOCKS = ("runs", "today", "long", "train", "bench")
_TEMPLATE = make_environment("reportgen.render", folder="templates/readme", filters=fmt.FILTERS)


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- figures:{name} (written by `python -m reportgen.readme`; do not edit) -->",
            f"<!-- /figures:{name} -->")


def run_figures(run: Run) -> dict[str, Any]:
    """Per-combination figures of one run, and the run's totals."""
    rows = []
    for row in run_rows(run):
        shares = row.get("shares") or {}
        rows.append({**row, "other_overhead": (shares.get("other", 0.0) + shares.get("overhead", 0.0)
                                               if shares else None)})
    records = {str(c.get("id")): c for c in run.combination_records()}
    durations = [c.get("duration_s") or 0.0 for c in records.values()]
    ok = [r for r in rows if is_ok(r)]
    sums = [sum(r["shares"].values()) for r in ok]
    return {
        "run_id": run.run_id,
        "command": fields.run_get(run.record, "command"),
        "rows": rows,
        "counts": {s: sum(1 for r in rows if r["status"] == s) for s in COMBINATION_STATUSES},
        "measure_s": sum(durations),
        "max_share_error": max((abs(s - 1.0) for s in sums), default=None),
        "records": records,  # each combination's record by id, read once
    }


def today_figures(run: Run) -> dict[str, Any]:
    """``run_figures`` with each combination's attention, experts, mixer shares and the
    busiest expert's load against the mean (today's architectures)."""
    from reportgen.categories import ATTENTION_CATEGORIES, MOE_CATEGORIES

    figures = run_figures(run)
    for row in figures["rows"]:
        shares = row.get("shares") or {}
        row["attention"] = sum(shares.get(c, 0.0) for c in ATTENTION_CATEGORIES)
        row["moe"] = sum(shares.get(c, 0.0) for c in MOE_CATEGORIES)
        row["mixer"] = shares.get("mixer", 0.0)
        moe = fields.get(figures["records"].get(row["id"]), "moe")
        row["load"] = (moe or {}).get("max_over_mean")
    return figures


def long_figures(run: Run) -> dict[str, Any]:
    """``run_figures`` with attention's share at each length of every (model, mode)
    measured at three or more, and where attention overtakes the rest of the layer, in
    the words of the hardware table (``crossover_short``)."""
    from reportgen.records.load import with_combinations
    from reportgen.render import analysis, longcontext, templating

    figures = run_figures(run)
    frame = analysis.combinations_frame([with_combinations(run)])
    short = templating.environment().from_string(
        '{% from "_macros.md.j2" import crossover_short %}{{ crossover_short(c, unit) }}')
    figures["lines"] = [{**line, "crossover_text": short.render(c=line["crossover"], unit=line["sequence"])}
                        for line in longcontext.share_lines(frame, {run.hardware: run.hardware})]
    return figures


def train_figures(run: Run) -> dict[str, Any]:
    """``run_figures`` with each training combination's phases (forward, backward,
    optimizer: share and interval), its attention core's share of the step and the step's
    peak memory (the combination page's "Training step" rows)."""
    from reportgen.render.training import training_rows

    figures = run_figures(run)
    rows = []
    for row in figures["rows"]:
        record = figures["records"].get(row["id"])
        trained = training_rows([(record, None)]) if record is not None else []
        if trained:
            core = (row.get("shares") or {}).get("attention.core")
            rows.append({**trained[0], "train": True, "core": core, "wide": row.get("wide")})
        else:
            rows.append({"combo_id": row["id"], "train": False, "status": row["status"],
                         "reason": row.get("reason") or "not a training step"})
    figures["rows"] = rows
    return figures


def latest_run(runs_root: Path, suite: str) -> Run | None:
    runs = [r for r in current_runs(iter_runs(runs_root)) if fields.run_get(r.record, "suite.name") == suite]
    return max(runs, key=lambda r: str(fields.run_get(r.record, "updated") or ""), default=None)


def bench_figures(bench_dir: Path) -> list[Mapping[str, Any]]:
    """Every host's results file in ``bench_dir`` with its path, newest first: a figure
    holds on the hardware it was measured on, so each host keeps its own table."""
    from reportgen.records.bench import bench_files

    return [{"path": f"{bench_dir.name}/{path.name}", "hardware": path.stem, **doc}
            for path, doc in bench_files(bench_dir)]


def blocks(runs_root: Path, bench_dir: Path) -> dict[str, str]:
    from reportgen.render.validation import figure_interval, figure_value

    run = latest_run(runs_root, "cpu-default")
    today = latest_run(runs_root, "cpu-today")
    long = latest_run(runs_root, "cpu-long")
    train = latest_run(runs_root, "cpu-train")
    benches = bench_figures(bench_dir)
    return {
        "runs": _TEMPLATE.get_template("readme_runs.md.j2").render(
            run=run_figures(run) if run else None),
        "today": _TEMPLATE.get_template("readme_today.md.j2").render(
            run=today_figures(today) if today else None),
        "long": _TEMPLATE.get_template("readme_long.md.j2").render(
            run=long_figures(long) if long else None),
        "train": _TEMPLATE.get_template("readme_train.md.j2").render(
            run=train_figures(train) if train else None, phases=PHASES),
        "bench": _TEMPLATE.get_template("readme_bench.md.j2").render(
            benches=benches, figure_value=figure_value, figure_interval=figure_interval),
    }


def update(readme: str, new_blocks: Mapping[str, str]) -> str:
    """``readme`` with each marked block replaced; a block whose markers are missing is
    an error (the README is a promise: its figures must have a place)."""
    for name, body in new_blocks.items():
        start, end = _markers(name)
        found = re.search(re.escape(start) + r".*?" + re.escape(end), readme, re.DOTALL)
        if not found:
            raise ValueError(f"README.md: no {start!r} ... {end!r} block")
        readme = readme[:found.start()] + f"{start}\n{body.strip()}\n{end}" + readme[found.end():]
    return readme


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    root = Path(args[0]) if args else Path(".")
    path = root / "README.md"
    text = path.read_text(encoding="utf-8")
    try:
        new = update(text, blocks(root / "runs", root / "bench"))
    except UserError as exc:
        print(f"reportgen.readme: {exc}", file=sys.stderr)
        return exc.exit_code
    if new != text:
        path.write_text(new, encoding="utf-8")
        print(f"{path}: figures updated")
    else:
        print(f"{path}: figures already current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
