"""``python scripts/bench.py``: every figure of the bench, in one process, into one file.

Order: the suite run first (its records feed the profiler-overhead, FLOPs, trace and
efficiency figures), then the interleaved comparisons, the architecture sweep, the
ablation, the training step's figures, the depth- and expert-reduced measurements and render
scaling.
The results file is rewritten (atomically) after each figure, so an interrupted bench
leaves what it finished.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reportgen.bench import results as R
from reportgen.records.bench import load_results
from reportgen.records.stamps import utc_now

REPO = Path(__file__).resolve().parents[2]
SCRATCH = REPO / ".bench"
FIGURE_GROUPS: tuple[str, ...] = ("suite", "coverage", "effort", "isolation", "latency", "instrumentation",
                                  "architectures", "ablation", "training", "depth", "experts", "render")


@dataclass(frozen=True)
class AblationCase:
    """One combination of the ablation and the category whose work its stand-in replaces.
    ``group`` is what ``--ablation-models`` selects by."""

    group: str
    model: str
    mode: str
    attn: str
    seq_len: int
    category: str = "attention.core"


# --ablation-models: the attention core of the dense models, a mixture-of-experts model's
# experts, a hybrid's token mixers
ABLATION_GROUPS: tuple[str, ...] = ("attention", "moe", "hybrid")


def ablation_cases(seq_len: int) -> tuple[AblationCase, ...]:
    """The ablation's mixture-of-experts and hybrid combinations (``presets.PRESETS``, as the
    cpu-today suite measures them): ibm-granite/granite-3.0-1b-a400m's widths and experts
    (32, 8 per token) at 4 of its 24 layers, whose experts stand in (the router kept);
    tiiuae/Falcon-H1-0.5B's widths (attention beside a Mamba-2 mixer in every layer) at 4 of
    its 36, whose mixers stand in. Forward, eager attention: on a 2-core CPU at 512 tokens
    the hooks method gave the experts 60% of the forward and the mixers 40%, far above the
    rule's resolution."""
    return (AblationCase("moe", "granitemoe-1b-a400m-4l", "forward", "eager", seq_len, "moe.experts"),
            AblationCase("hybrid", "falcon-h1-0.5b-4l", "forward", "eager", seq_len, "mixer"))


@dataclass(frozen=True)
class Plan:
    """Sizes of everything; ``quick`` is a smoke test, not a validation."""

    quick: bool
    suite_overrides: dict[str, Any]
    latency_rounds: int
    latency_budget_s: float
    timer_min_run_s: float
    instr_rounds: int
    instr_budget_s: float
    architectures: tuple[str, ...]
    ablation: tuple[AblationCase, ...]
    ablation_scale: str
    ablation_rounds: int  # each combination in a freshly spawned process; at least this many
    ablation_max_rounds: int  # more rounds, up to this many, while an interval is wider than
    ablation_precision: float  # this either side of its estimate
    ablation_min_pairs: int  # unprofiled pairs per combination and round, at least
    ablation_budget_s: float  # of paired forwards, per combination and round
    render_sizes: tuple[int, ...]


def plan(quick: bool) -> Plan:
    from reportgen.bench.attribution_check import ARCHITECTURES, QUICK_ARCHITECTURES

    if quick:
        return Plan(
            quick=True,
            suite_overrides={"scale": "tiny", "seq_lens": [32], "attn": ["sdpa"], "budget_s": 0.3},
            latency_rounds=2, latency_budget_s=0.3, timer_min_run_s=0.2,
            instr_rounds=2, instr_budget_s=0.2,
            architectures=QUICK_ARCHITECTURES,
            ablation=(AblationCase("attention", "bert-base", "forward", "sdpa", 64),
                      AblationCase("attention", "llama-small", "prefill", "sdpa", 64),
                      *ablation_cases(64)),
            ablation_scale="tiny", ablation_rounds=2, ablation_max_rounds=2,
            ablation_precision=0.05, ablation_min_pairs=4, ablation_budget_s=0.3,
            render_sizes=(5, 10, 20),
        )
    return Plan(
        quick=False, suite_overrides={},
        latency_rounds=6, latency_budget_s=0.6, timer_min_run_s=0.4,
        instr_rounds=4, instr_budget_s=0.5,
        architectures=ARCHITECTURES,
        ablation=(AblationCase("attention", "bert-base", "forward", "sdpa", 512),
                  AblationCase("attention", "llama-small", "prefill", "sdpa", 512),
                  AblationCase("attention", "bert-base", "forward", "eager", 512),
                  AblationCase("attention", "llama-small", "prefill", "eager", 512),
                  *ablation_cases(512)),
        ablation_scale="reference", ablation_rounds=4, ablation_max_rounds=10, ablation_precision=0.05,
        ablation_min_pairs=12, ablation_budget_s=60.0,
        render_sizes=(50, 500, 2000),
    )


def log(message: str) -> None:
    stamp = _dt.datetime.now().strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", flush=True)


def _validate_records() -> bool:
    """Every record the bench writes (its own runs included, in their workers too) is
    checked against its JSON Schema, where ``jsonschema`` is installed."""
    from reportgen.records.schema import VALIDATE_ENV

    if importlib.util.find_spec("jsonschema") is None:
        log("jsonschema is not installed: records are written without schema validation")
        return False
    os.environ[VALIDATE_ENV] = "1"
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default: bench/<hardware>.json; quick: .bench/quick-<hardware>.json)")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny models, short budgets")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of: {', '.join(FIGURE_GROUPS)}")
    parser.add_argument("--resummarise", action="store_true",
                        help="measure nothing: recompute the latency, instrumentation, "
                             "coverage and depth verdicts of --out from their stored rows (the "
                             "depth figure's from its scratch run's records) and what the "
                             "ablations' rows say caused each failing row")
    parser.add_argument("--merge", action="store_true",
                        help="with --only: keep the other figures of an existing results file")
    parser.add_argument("--ablation-models", default=None, metavar="GROUPS",
                        help="comma-separated subset of the ablation's combinations: "
                             f"{', '.join(ABLATION_GROUPS)} (default all: the dense models' "
                             "attention core, a mixture-of-experts model's experts, a hybrid's "
                             "token mixers); with --merge the other groups' rows of the existing "
                             "results file are kept")
    parser.add_argument("--suite", default="cpu-default", help="suite measured (default cpu-default)")
    parser.add_argument("--time-limit", type=float, default=7200.0, metavar="S",
                        help="stop starting new measurements after S seconds (default 7200: on "
                             "2 cores the steps took 4,359 s when last measured, the suite twice "
                             "in eight rounds and the ablation's pairs the largest parts, before "
                             "the ablation's mixture-of-experts and hybrid combinations, whose "
                             "forwards take seconds each, were added; the ablation adds rounds, "
                             "up to 10, while its intervals are wide)")
    parser.add_argument("--wait-quiet", type=float, default=60.0, metavar="S",
                        help="before each figure wait up to S seconds for other processes to use "
                             "under 10%% of the CPU (default 60; 0: do not wait)")
    args = parser.parse_args(argv)
    only = set(FIGURE_GROUPS) if not args.only else {s.strip() for s in args.only.split(",")}
    unknown = only - set(FIGURE_GROUPS)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(FIGURE_GROUPS)}")
    ablation_groups = (set(ABLATION_GROUPS) if not args.ablation_models
                       else {s.strip() for s in args.ablation_models.split(",")})
    unknown = ablation_groups - set(ABLATION_GROUPS)
    if unknown:
        parser.error(f"--ablation-models: unknown {sorted(unknown)}; choose from {', '.join(ABLATION_GROUPS)}")

    if args.resummarise:
        return resummarise(args.out or REPO / "bench" / f"{_hardware_guess()}.json")

    import torch

    from reportgen.bench.common import (
        environment_summary,
        other_cpu_busy,
        wait_until_quiet,
    )

    t_start = time.perf_counter()
    created = utc_now(fraction=False)
    p = plan(args.quick)
    environment = environment_summary("cpu")
    environment["load_average_at_start"] = _load()
    environment["records_validated"] = _validate_records()
    hardware = environment["hardware"]
    out = args.out or ((SCRATCH / f"quick-{hardware}.json") if args.quick else REPO / "bench" / f"{hardware}.json")
    command = "python scripts/bench.py" + ("" if argv is None and len(sys.argv) <= 1
                                           else " " + shlex.join(argv if argv is not None else sys.argv[1:]))
    torch.manual_seed(0)
    from reportgen.profile import heap

    environment["heap"] = heap.steady()  # as every measured combination holds it
    log(f"bench: {'quick' if p.quick else 'full'} on {hardware}, {torch.get_num_threads()} threads -> {out}")
    figures: dict[str, dict[str, Any]] = {}
    if args.merge and out.is_file():
        previous = load_results(out)
        if bool(previous.get("quick")) != p.quick:
            parser.error("--merge: the existing results file was measured in the other mode")
        figures.update(previous["figures"])
        environment["merged_with"] = {"created": previous.get("created"),
                                      "duration_s": previous.get("duration_s"),
                                      "command": previous.get("command")}
        log(f"merging into {out}: keeping {', '.join(figures)} unless re-measured")

    def stop() -> bool:
        return time.perf_counter() - t_start > args.time_limit

    def save() -> None:
        doc = R.results_document(figures, environment=environment, created=created, quick=p.quick,
                                 duration_s=time.perf_counter() - t_start, command=command)
        R.write_results(out, doc)

    def step(name: str, fn: Callable[[], dict[str, dict[str, Any]]]) -> None:
        log(f"{name} ...")
        busy_before = (wait_until_quiet(0.10, args.wait_quiet, log) if args.wait_quiet > 0
                       else other_cpu_busy())
        load_before = _load()
        t0 = time.perf_counter()
        try:
            got = fn()
        except Exception as exc:  # noqa: BLE001 - one broken figure must not lose the others
            import traceback

            traceback.print_exc()
            got = {f"{name}_error": R.not_measured(name, f"The {name} step failed.", "-",
                                                   f"{type(exc).__name__}: {exc}")}
        for fig in got.values():
            # other processes on a 2-core host move every timing figure: record the load
            fig["load_average"] = {"before": load_before, "after": _load()}
            fig["other_cpu_busy_before"] = busy_before
            fig["measured_at"] = utc_now(fraction=False)
        figures.update(got)
        save()
        log(f"{name} done in {time.perf_counter() - t0:.0f} s: "
            + ", ".join(f"{k}={v['status']}" for k, v in got.items()))

    from reportgen.suite import load_suite

    suite = load_suite(args.suite, p.suite_overrides or None).with_device("cpu")
    combos = suite.combinations()

    if "suite" in only:
        step("suite", lambda: _suite_figures(suite, p))
    if "coverage" in only:
        step("coverage", lambda: {"interval_coverage": _coverage(suite)})
    if "effort" in only:
        from reportgen.bench import effort

        # the quiet runs wait for a quiet host like every figure; the busy one brings its own
        step("effort", lambda: effort.run(SCRATCH / "effort", log, optimum=not p.quick))
    if "isolation" in only:
        from reportgen.bench import isolation

        # process isolation is a cost per combination, not a statistic: one round at the
        # single-round budget keeps the two extra suite runs this step makes short
        one_round = load_suite(args.suite, {**(p.suite_overrides or {}), "rounds": 1,
                                            "budget_s": min(suite.settings.budget_s, 3.0)}).with_device("cpu")
        step("isolation", lambda: isolation.run(one_round, SCRATCH, log))
    if "latency" in only:
        from reportgen.bench import latency

        step("latency", lambda: {"latency_agreement": latency.run(
            combos, rounds=p.latency_rounds, budget_s=p.latency_budget_s,
            min_run_time=p.timer_min_run_s, log=log, stop=stop)})
    if "instrumentation" in only:
        from reportgen.bench import overhead

        step("instrumentation", lambda: {"instrumentation_overhead": overhead.instrumentation_overhead(
            combos, rounds=p.instr_rounds, budget_s=p.instr_budget_s, log=log, stop=stop)})
    if "architectures" in only:
        from reportgen.bench import attribution_check

        step("architectures", lambda: {"attribution_architectures": attribution_check.architectures(
            p.architectures, log=log, stop=stop)})
    if "ablation" in only:
        from reportgen.bench import attribution_check

        abl = ablation_targets(p, ablation_groups)
        merge_into = figures.get("attribution_ablation") if ablation_groups != set(ABLATION_GROUPS) else None

        def ablation_figure() -> dict[str, dict[str, Any]]:
            fig = attribution_check.ablation(
                abl, rounds=p.ablation_rounds, max_rounds=p.ablation_max_rounds,
                precision=p.ablation_precision, min_pairs=p.ablation_min_pairs,
                budget_s=p.ablation_budget_s, log=log, stop=stop)
            if merge_into and merge_into.get("rows"):  # --merge: the groups not measured stay
                fig = attribution_check.merge_ablation(merge_into, fig)
            return {"attribution_ablation": fig}

        step("ablation", ablation_figure)
    if "training" in only:
        from reportgen.bench import training_check

        # figures 1 and 3b on training steps (train, train-nooptim)
        step("training", lambda: training_check.run(quick=p.quick, log=log, stop=stop))
    if "depth" in only:
        from reportgen.bench import depth_check

        # --layers N against the same models measured whole: a dense, a mixture-of-experts
        # and a hybrid model (quick: the dense one at 32 tokens)
        step("depth", lambda: {depth_check.NAME: depth_check.run(
            depth_check.QUICK if p.quick else depth_check.Plan(), SCRATCH / "depth", log=log, stop=stop)})
    if "experts" in only:
        from reportgen.bench import experts_check

        # --experts N against the same model built with every expert, at the same depth,
        # paired forward by forward (quick: the tiny granitemoe at 32 tokens)
        step("experts", lambda: {experts_check.NAME: experts_check.run(
            experts_check.QUICK if p.quick else experts_check.Plan(), SCRATCH / "experts", log=log, stop=stop)})
    if "render" in only:
        from reportgen.bench import render_scaling

        step("render", lambda: {"render_scaling": render_scaling.run(
            REPO, SCRATCH / "render", sizes=p.render_sizes, log=log, stop=stop)})

    save()
    doc = load_results(out)
    log(f"bench finished in {doc['duration_s']:.0f} s: {doc['summary']}")
    for name, fig in doc["figures"].items():
        log(f"  {name}: {fig['status']} value={fig['value']} interval={fig['interval']} goal={fig['goal']}")
    return 0


def ablation_targets(p: Plan, groups: set[str] | frozenset[str] = frozenset(ABLATION_GROUPS)) -> list[Any]:
    """The ablation's ``attribution_check.Target`` items of ``groups``, in the plan's order."""
    from reportgen.bench.attribution_check import Target
    from reportgen.suite import Combination

    return [Target(Combination(model=c.model, scale=p.ablation_scale, mode=c.mode, dtype="fp32",
                               attn_implementation=c.attn, batch_size=1, seq_len=c.seq_len,
                               device="cpu"), c.category)
            for c in p.ablation if c.group in groups]


def resummarise(path: Path) -> int:
    """Recompute figure verdicts that are pure functions of their stored rows (the
    coverage's rows and the depth figure's units read again from the bench's scratch runs
    where they are on disk, and only for this host's own file: another host's figures
    were measured there, not in this host's scratch)."""
    from reportgen.bench import coverage, depth_check, experts_check, latency, overhead
    from reportgen.bench.ablation_figure import with_causes
    from reportgen.bench.depth_rounds import read_units

    doc = load_results(path)
    figures = dict(doc["figures"])
    here = path.stem == _hardware_guess()
    p = plan(bool(doc.get("quick")))
    lat = figures.get("latency_agreement")
    if lat and lat.get("rows"):
        new = latency.summarise(lat["rows"], rounds=lat.get("rounds") or lat["rows"][0]["rounds"],
                                budget_s=lat.get("budget_s", p.latency_budget_s),
                                min_run_time=lat.get("min_run_time", p.timer_min_run_s),
                                duration_s=lat.get("duration_s"))
        figures["latency_agreement"] = {**lat, **new}
    ins = figures.get("instrumentation_overhead")
    if ins and ins.get("rows"):
        new = overhead.instrumentation_summary(
            ins["rows"], rounds=ins.get("rounds") or len(ins["rows"][0].get("bare_rounds_ms", [])),
            budget_s=ins.get("budget_s", p.instr_budget_s), duration_s=ins.get("duration_s"))
        figures["instrumentation_overhead"] = {**ins, **new}
    cov = figures.get("interval_coverage")
    if cov and cov.get("rows"):
        table = cov["rows"]
        runs = [_scratch_run(SCRATCH / "runs"), _scratch_run(SCRATCH / "runs-again")] if here else [None]
        if all(run is not None for run in runs):
            # the re-measured intervals, where the rows predate them and the runs are still here
            table = coverage.rows_from_runs(runs[0], runs[1], table) or table  # type: ignore[arg-type]
        new = coverage.summarise(table, duration_s=cov.get("duration_s"))
        figures["interval_coverage"] = {**cov, **new}
    for name in ("attribution_ablation", "training_ablation"):
        if figures.get(name, {}).get("rows"):
            # what caused each failing row, said from the row's own measurements
            figures[name] = with_causes(figures[name])
    for check, folder in ((depth_check, "depth"), (experts_check, "experts")):
        fig = figures.get(check.NAME)
        units = read_units(SCRATCH / folder / "units") if here else []
        if fig and units and isinstance(fig.get("plan"), dict) and "hooks_iterations" in fig["plan"]:
            # the figure's verdict again from the units of its scratch run, where still here
            stored = check.plan_of(fig["plan"], check.QUICK if doc.get("quick") else check.Plan())
            figures[check.NAME] = {**fig, **check.summarise(units, stored, duration_s=fig.get("duration_s"))}
    out = R.results_document(figures, environment=doc["environment"], created=doc["created"],
                             quick=doc["quick"], duration_s=doc["duration_s"], command=doc["command"])
    R.write_results(path, out)
    for name in ("latency_agreement", "instrumentation_overhead", "interval_coverage", depth_check.NAME,
                 experts_check.NAME):
        if name in figures:
            f = out["figures"][name]
            log(f"{name}: {f['status']} value={f['value']} interval={f['interval']}")
    return 0


def _hardware_guess() -> str:
    from reportgen.profile import env

    return env.hardware_slug(env.collect("cpu"))


def _load() -> list[float] | None:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _scratch_run(root: Path) -> Path | None:
    """The one run a bench step measured into ``root``; None where there is none (or
    several: not one step's)."""
    from reportgen.records.schema import iter_runs

    found = [r.path for r in iter_runs(root)] if root.is_dir() else []
    return found[0] if len(found) == 1 else None


def _coverage(suite: Any) -> dict[str, Any]:
    """The suite measured again, against the intervals of the suite step's run."""
    from reportgen.bench import coverage

    first = _scratch_run(SCRATCH / "runs")
    if first is None:
        return coverage.summarise([], notes=["the suite step has not run: nothing to compare with"])
    return coverage.run(suite, coverage.first_records(first), SCRATCH / "runs-again")


def _suite_figures(suite: Any, p: Plan) -> dict[str, dict[str, Any]]:
    from reportgen.bench import (
        attribution_check,
        efficiency,
        flops_check,
        overhead,
        trace_check,
    )

    runs = SCRATCH / "runs"
    if runs.exists():
        shutil.rmtree(runs)
    run = efficiency.run_suite(suite, runs)
    figures = efficiency.figures(run, reference_size=not p.quick)
    figures["profiler_overhead"] = overhead.profiler_overhead(run.records)
    figures["attribution_remainder"] = attribution_check.other_overhead(run.records)
    figures["trace_agreement"] = trace_check.run(run.records, run.run_dir, log=log)
    combos_by_id = {c.id: c for c in suite.combinations()}
    figures["flops_agreement"] = flops_check.run(run.records, combos_by_id, log=log)
    if not p.quick:
        from reportgen.bench import report_time

        # the rest of `nox -s report -- --force` after this run: render, check, site build
        figures["report_time"] = report_time.run(REPO, run.run_dir, run.wall_s, SCRATCH, log=log)
    return figures
