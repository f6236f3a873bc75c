"""``reportgen history``: measure one suite once per torch and transformers release set.

Every release set is measured in a virtual environment of its own with exactly those
versions (``reportgen.execute.history``); each becomes an ordinary run under runs/ whose
run.json names its release set, shown on the History pages. Everything is validated
(suite, flags, release lists) before anything is installed or written; rerunning the
same command resumes.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from reportgen.errors import UserError
from reportgen.records.releases import (
    LIBRARIES,
    ReleaseSet,
    is_final,
    is_history,
    parse_spec,
    public,
    release_of,
    release_sets,
    resolve,
    version_key,
)

DEFAULT_SUITE = "history"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "history",
        help="measure a suite once per torch and transformers release, each in its own environment",
        description="Measure one suite once per release set (each torch release with each transformers "
        "release), each in a virtual environment with exactly those versions, built once in a cache "
        "directory and reused. Each release set's run is an ordinary run under --out that names its "
        "releases; the History pages set them side by side. A release that cannot be installed is one "
        "line and the rest go on; rerunning resumes.",
    )
    parser.add_argument("--suite", default=DEFAULT_SUITE, metavar="NAME|PATH",
                        help=f"built-in suite name or a suite TOML file (default: {DEFAULT_SUITE})")
    parser.add_argument("--torch", metavar="VERSIONS",
                        help="torch releases: 2.13,2.14.1 (a minor release: its newest patch) or last:N "
                        "(default: the torch this interpreter has)")
    parser.add_argument("--transformers", metavar="VERSIONS",
                        help="transformers releases: 5.15,5.20,5.25 or last:N (default: the transformers "
                        "this interpreter has)")
    parser.add_argument("--releases", metavar="VERSIONS",
                        help="the same as --transformers (e.g. last:6: the six newest transformers releases)")
    parser.add_argument("--bisect", metavar="COMBINATION",
                        help="for this combination, measure the releases between two measured ones whose "
                        "step is beyond this host's drift, halving until the first release with the change "
                        "is named: torch's steps with each --transformers release held, transformers' "
                        "with each --torch release held")
    parser.add_argument("--bench", default="bench", metavar="DIR",
                        help="bench results (<hardware>.json), whose re-measurement gives this host's "
                        "run-to-run drift (for --bisect; default: bench)")
    parser.add_argument("--cache", metavar="DIR",
                        help="where the environments are kept (default: ~/.cache/reportgen/history)")
    parser.add_argument("--out", default="runs", metavar="DIR", help="results root (default: runs)")
    parser.add_argument("--threads", metavar="N",
                        help="CPU threads of each measurement (OMP_NUM_THREADS; default: torch's own). "
                        "On a host other work shares, 1 keeps a busy core from stretching every "
                        "thread's barrier; each record states its thread count")
    parser.add_argument("--timeout", dest="timeout_s", metavar="SECONDS",
                        help="stop a combination's worker after this long and record it failed")
    parser.add_argument("--list", action="store_true",
                        help="print the release sets and their environments and exit; installs and writes nothing")
    parser.set_defaults(func=run)


def _installed(package: str) -> str:
    try:
        return public(metadata.version(package))
    except metadata.PackageNotFoundError:
        raise UserError(f"--{package}: {package} is not installed here; name its releases") from None


def plan(args: argparse.Namespace, *, index: Callable[[str], list[str] | None]) -> tuple[list[ReleaseSet], list[str]]:
    """The release sets to measure, oldest first, and one line per release that is not
    on the index. ``index(package)`` gives a package's versions (None: unreadable); it is
    asked only where a flag needs it (``last:N``, a minor release)."""
    if args.releases is not None and args.transformers is not None:
        raise UserError("--releases: the same as --transformers; give one of them")
    specs = {"torch": parse_spec(args.torch, "--torch"),
             "transformers": parse_spec(args.transformers if args.transformers is not None else args.releases,
                                        "--transformers" if args.transformers is not None else "--releases")}
    if specs["torch"] is None and specs["transformers"] is None and getattr(args, "bisect", None) is None:
        raise UserError("history: name the releases to measure: --torch, --transformers or --releases "
                        "(e.g. --transformers 5.15,5.20,5.25 or --releases last:6)")
    versions: dict[str, list[str]] = {}
    lines: list[str] = []
    for package, spec in specs.items():
        if spec is None:
            versions[package] = [_installed(package)]
            continue
        needs_index = isinstance(spec, int) or any(len(v.split(".")) < 3 for v in spec)
        found, missing = resolve(spec, index(package) if needs_index else None, package)
        versions[package] = found
        lines += missing
    return release_sets(versions["torch"], versions["transformers"]), lines


def command_line(args: argparse.Namespace) -> str:
    parts = ["reportgen", "history"]
    for flag, dest in (("--suite", "suite"), ("--torch", "torch"), ("--transformers", "transformers"),
                       ("--releases", "releases"), ("--bisect", "bisect"), ("--cache", "cache"),
                       ("--threads", "threads"), ("--timeout", "timeout_s")):
        value = getattr(args, dest)
        if value is not None and not (dest == "suite" and value == DEFAULT_SUITE):
            parts += [flag, str(value)]
    if args.out != "runs":
        parts += ["--out", args.out]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from reportgen.commands.profile import _timeout
    from reportgen.suite import load_suite

    suite = load_suite(args.suite, {})
    if suite.settings.device not in ("cpu", "cuda"):
        raise UserError(f"--suite: {suite.name} measures on {suite.settings.device!r}; a history needs the "
                        "device named (cpu or cuda) in its settings")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out: '{out}' exists and is not a directory")
    timeout_s = _timeout(args.timeout_s)
    threads = getattr(args, "threads", None)
    if threads is not None:
        if not str(threads).isdigit() or int(threads) < 1:
            raise UserError(f"--threads: a number of threads, 1 or more, not {threads!r}")
        import os

        # the workers and their fork server inherit it; each record states torch's thread count
        os.environ["OMP_NUM_THREADS"] = str(int(threads))
    from reportgen.execute import history

    cache = Path(args.cache).expanduser().resolve() if args.cache else history.default_cache()
    if cache.exists() and not cache.is_dir():
        raise UserError(f"--cache: '{cache}' exists and is not a directory")
    if args.bisect is not None and args.bisect not in {c.id for c in suite.combinations()}:
        raise UserError(f"--bisect: {args.bisect!r} is not a combination of {suite.name} "
                        "(reportgen profile --suite NAME --list prints them)")
    sets, lines = plan(args, index=history.index_versions)
    for line in lines:
        print(line)
    if not sets:
        print("nothing to measure: none of the releases asked for is on the package index")
        return 1
    if args.list:
        for release in sets:
            print(f"{release.label}: {history.release_env(cache, release)}")
        return 0
    if args.bisect is not None:
        if not args.list:
            measure_all(suite, sets, cache=cache, out=out, timeout_s=timeout_s, command=command_line(args))
        return bisect(suite, args.bisect, sets, cache=cache, out=out,
                      timeout_s=timeout_s, command=command_line(args), bench=Path(args.bench),
                      index=history.index_versions)
    outcomes = measure_all(suite, sets, cache=cache, out=out, timeout_s=timeout_s, command=command_line(args))
    return 0 if all(o.get("run_id") for o in outcomes) else 1


def measure_all(suite: Any, sets: list[ReleaseSet], *, cache: Path, out: Path, timeout_s: float | None,
                command: str) -> list[dict[str, Any]]:
    """Each release set's environment, then its run; one line for each that cannot be
    installed, and the rest go on. A summary line per release set at the end."""
    outcomes = []
    t_all = time.monotonic()
    for release in sets:
        outcomes.append(measure_one(suite, release, cache=cache, out=out, timeout_s=timeout_s, command=command))
    print(f"history of {suite.name}: {len(sets)} release set(s) in {time.monotonic() - t_all:.0f} s")
    for o in outcomes:
        print(f"  {o['label']}: {o['line']}")
    return outcomes


def measure_one(suite: Any, release: ReleaseSet, *, cache: Path, out: Path, timeout_s: float | None,
                command: str) -> dict[str, Any]:
    from reportgen.execute import history, runner

    outcome: dict[str, Any] = {"label": release.label, "run_id": None}
    done = history.complete_run(out, history.this_hardware(suite.settings.device), suite, release)
    if done is not None:
        # a finished run is kept as it is: nothing to resume, so no environment to build
        outcome["run_id"] = done
        outcome["line"] = f"{done}: complete, nothing to measure (its environment was not built)"
        print(f"{release.label}: {outcome['line']}", flush=True)
        return outcome
    t0 = time.monotonic()
    try:
        built = history.ensure_release(cache, release, log=lambda text: print(text, flush=True))
        environment = history.collect_environment(built.python, suite.settings.device)
    except history.InstallError as exc:
        outcome["line"] = f"not measured: {exc}"
        print(f"{release.label}: not measured: {exc}", flush=True)
        return outcome
    if built.seconds is not None:
        print(f"{release.label}: environment built in {built.seconds:.0f} s, {built.megabytes:.0f} MB"
              + "".join(f"; {note}" for note in built.notes), flush=True)
    installed = time.monotonic() - t0
    executor = runner.local_executor(suite, timeout_s=timeout_s, python=str(built.python))
    result = runner.run_suite(suite, out=out, command=command, executor=executor, environment=environment,
                              release=release.as_dict())
    counts = {s: result.count(s) for s in ("ok", "skipped", "failed")}
    outcome["run_id"] = result.store.run_id
    outcome["line"] = (f"{result.store.run_id}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                       + (f" ({len(result.resumed)} done before)" if result.resumed else "")
                       + f"; environment {installed:.0f} s, measuring {time.monotonic() - t0 - installed:.0f} s")
    for record in result.records:
        if record.get("status") == "skipped":
            print(f"  {record.get('id')}: skipped: {record.get('reason')}", flush=True)
    return outcome


BISECT_STEPS = 12  # at most this many releases measured by one --bisect, per step


def bisect(suite: Any, combo_id: str, sets: list[ReleaseSet], *, cache: Path, out: Path,
           timeout_s: float | None, command: str, bench: Path,
           index: Callable[[str], list[str] | None]) -> int:
    """Halve each step of ``combo_id`` beyond this host's drift (``render.history.steps``
    over the runs under ``out``), in either library with the other's release held as in
    ``sets``, until its two releases are neighbours on the index, then name the first
    release with the change. Each release measured is an ordinary run of the whole suite
    (its History page shows it)."""
    from reportgen.render.compare import read_drift

    drift = read_drift(bench)
    found: list[str] = []
    for library in LIBRARIES:
        other = "transformers" if library == "torch" else "torch"
        held_releases = sorted({getattr(s, other) for s in sets}, key=version_key)
        runs_of = {held: _runs_holding(suite, out, other, held) for held in held_releases}
        # a library with one measured release under every held release has no step to halve
        if all(len({release_of(r.record)[library] for r in runs}) < 2 for runs in runs_of.values()):
            continue
        available = index(library)
        if available is None:
            raise UserError(f"--bisect: {library}'s releases could not be read from the package index")
        ordered = sorted({public(v) for v in available if is_final(public(v))}, key=version_key)
        for held in held_releases:
            found.extend(_bisect_line(suite, combo_id, library, held, ordered, drift, cache=cache, out=out,
                                      timeout_s=timeout_s, command=command))
    if not found:
        print(f"--bisect: no two releases of one library measured for {suite.name} under {out}: "
              "measure some releases first")
        return 1
    for line in found:
        print(line)
    return 0


def _runs_holding(suite: Any, out: Path, other: str, held: str) -> list[Any]:
    from reportgen.records.load import load_runs

    return [r for r in load_runs(out) if is_history(r.record)
            and (r.record.get("suite") or {}).get("hash") == suite.hash
            and release_of(r.record)[other] == held]


def _bisect_line(suite: Any, combo_id: str, library: str, held: str, ordered: list[str],
                 drift: dict[str, Any], *, cache: Path, out: Path, timeout_s: float | None,
                 command: str) -> list[str]:
    """Bisect ``library``'s steps of ``combo_id`` with the other library at ``held``."""
    from reportgen.render import history as pages

    other = "transformers" if library == "torch" else "torch"
    for _ in range(BISECT_STEPS + 1):
        runs = _runs_holding(suite, out, other, held)
        if len({release_of(r.record)[library] for r in runs}) < 2:
            return []
        hardware = runs[-1].hardware
        floor = (drift.get(hardware) or {}).get("floor")
        pts = [p for p in pages.points([r for r in runs if r.hardware == hardware]) if p.combo_id == combo_id]
        marked = [s for s in pages.steps(pts, library, floor) if s.marked]
        between = {s.new: [v for v in ordered if version_key(s.base) < version_key(v) < version_key(s.new)]
                   for s in marked}
        open_steps = [s for s in marked if between[s.new]]
        if not open_steps:
            if not marked:
                return [f"{combo_id} with {other} {held}: no step between measured {library} releases "
                        "is beyond the noise" + (f" ({floor:.1%} drift)" if floor else "")]
            return [f"first {library} release with the change: {s.new} ({other} {held}): {s.text()}"
                    for s in marked]
        step = open_steps[0]
        middle = between[step.new][len(between[step.new]) // 2]
        print(f"bisecting {step.text()}: measuring {library} {middle}", flush=True)
        release = ReleaseSet(middle, held) if library == "torch" else ReleaseSet(held, middle)
        outcome = measure_one(suite, release, cache=cache, out=out, timeout_s=timeout_s, command=command)
        if outcome["run_id"] is None:
            return [f"bisection stopped: {library} {middle} could not be measured ({outcome['line']})"]
    return [f"bisection of {library} with {other} {held} stopped after {BISECT_STEPS} releases"]
