"""The paired measurement of the depth and expert-reduction figures (``depth_check``,
``experts_check``): a model built several ways (whole and with each of its layer counts,
or with every routed expert and with fewer), paired forward by forward, in rounds.

A round measures each unit (a model, and for the expert figure a mode; the units in a
shuffled order) in a fresh process of its own (forked from a fork server that has
imported torch, transformers and the models' modeling code once): the model built at
full width each way, all resident at once, each warmed up; then cycles, each one forward
of every build back to back in the cycle's own shuffled order, for the round's budget
(the pass's contention reading around them); then every build clocked by the hooks method
in cycles the same way (``regions.HooksPass``: category times and each layer's, what
``--layers N`` extrapolates by, ``reportgen.depth``), so that each build's proportions, as
its latencies, come from the moments the others' do. A reduced build gives its ``depth`` section, a
mixture of experts its routing (``routing.expert_load``), a build with fewer routed
experts the correction its figures are scaled by (``reportgen.profile.expertcost``). On a
shared 2-core host the speed wanders by tens of percent within a minute: the forwards of
one cycle fall within seconds of each other, so their ratio is steady where the ratio of
two medians taken minutes apart is not.

Each (round, unit) is written atomically to ``<scratch>/units/<unit>--r<round>.json``
the moment it arrives: a stopped run loses no unit and is resumed where it stopped; a
finished one (``complete`` written) is measured again from scratch.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reportgen.bench.common import build, stopwatch
from reportgen.records.store import atomic_write_json

WHOLE = "whole"
COMPLETE = "complete"



def key(layers: int | None) -> str:
    """A build's key in a unit: ``whole`` or the layer count."""
    return WHOLE if layers is None else str(layers)


def unit_name(model: str, index: int) -> str:
    """A unit's file name: the model (the characters a path keeps) and its round."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_")[-80:]
    return f"{safe}--r{index}.json"


def model_order(models: Sequence[str], index: int, seed: int = 0) -> list[str]:
    """Round ``index``'s models, in a seeded shuffle."""
    shuffled = list(models)
    random.Random(f"depth:{seed}:{index}").shuffle(shuffled)
    return shuffled


def cycles(builds: Sequence[str], budget_s: float, forward: Callable[[str], float], *, min_cycles: int,
           seed: str, wall: Callable[[], float] = time.monotonic) -> list[dict[str, float]]:
    """Cycles of one ``forward(build)`` (its ms) per build, back to back, each cycle in its own
    seeded shuffle of ``builds``, until ``budget_s`` has passed and ``min_cycles`` are done."""
    rng = random.Random(seed)
    out: list[dict[str, float]] = []
    started = wall()
    while len(out) < min_cycles or wall() - started < budget_s:
        order = list(builds)
        rng.shuffle(order)
        out.append({b: forward(b) for b in order})
    return out


PAIR = "correction:"  # a cycle's slot for a reduced build's correction pair, before the build's key


def builds_unit(model: str, builds: Sequence[Sequence[Any]], mode: str, seq_len: int, scale: str, budget_s: float,
                min_cycles: int, hooks_budget_s: float, hooks_iterations: int, seed: str) -> dict[str, Any]:
    """One model's round, in the process it is called in (a fresh one: ``measure`` forks it):
    the model built at full width once per ``builds`` entry (its key, its layers and its
    routed experts, None for all), each warmed up (for up to a third of ``budget_s``); an
    untimed cycle, then cycles of one forward of each for ``budget_s`` (at least
    ``min_cycles``); then the builds' hooks passes, interleaved the same way (cycles of one
    hooked forward of each, for ``hooks_budget_s`` a build, at least ``hooks_iterations``),
    and, for a mixture of experts, each build's routing. A build with fewer
    routed experts than its model also gets the correction reportgen scales its experts
    and router by (``reportgen.profile.expertcost``), in its ``depth`` section as a
    measurement's: its pairs (the widened experts' call and the build's own, then the
    routers') take a slot of each cycle of their own, in the cycle's shuffled order, so
    that the factor and the latencies it scales come from the same moments (on the 2-core
    host the factor, a memory-bound call's time over a compute-bound one's, moved by a
    tenth and more within a quarter of a minute)."""
    import dataclasses
    import gc

    from reportgen.profile import building, heap, regions, timing
    from reportgen.profile.contention import PassSampler
    from reportgen.profile.expertcost import Correction
    from reportgen.profile.measure import depth_section, expert_correction, reduced_experts
    from reportgen.profile.routing import expert_load
    from reportgen.profile.structure import derive
    from reportgen.suite import Combination

    heap.steady()
    base = Combination(model=model, scale=scale, mode=mode, dtype="fp32", attn_implementation="sdpa",
                       batch_size=1, seq_len=seq_len, device="cpu")
    started = time.time()
    built: dict[str, Any] = {}
    out: dict[str, Any] = {"model": model, "mode": mode, "started": started, "builds": {}}
    with stopwatch() as wall:
        # as in the suite's workers: what outlives the builds frozen, so a collection
        # during a timed forward costs milliseconds, not 0.2 s
        gc.collect()
        gc.freeze()
        corrections: dict[str, Correction] = {}
        try:
            for name, layers, experts in builds:
                combo = dataclasses.replace(base, layers=layers, experts=experts)
                one = built[name] = build(combo)
                timer = timing.default_timer(one.step)
                warmup = timing.warm_up(one.step, timer, max_warmup_s=budget_s / 3)
                section = depth_section(one.depth, combo) if one.depth is not None else None
                out["builds"][name] = {
                    "layers": layers, "experts": experts, "warmup_samples": warmup, "depth": section,
                    "full_layers": section["full_layers"] if section else one.info.get("num_layers")}
            structures = {name: derive(one.model, one.step) for name, one in built.items()}
            for (name, one), (_n, _l, experts) in zip(built.items(), builds):
                if out["builds"][name]["depth"] is not None and reduced_experts(
                        one, dataclasses.replace(base, experts=experts), None):
                    corrections[name] = expert_correction(one, structures[name], seed=0)
            corrections = {name: c for name, c in corrections.items() if c is not None}
            pairs: dict[str, dict[str, list[float]]] = {
                name: {"whole": [], "build": [], "router_whole": [], "router_build": []} for name in corrections}

            def forward(name: str) -> float:
                if name.startswith(PAIR):
                    own = name[len(PAIR):]
                    found, kept = corrections[own], pairs[own]
                    whole_ms, build_ms = found.experts_pair()
                    kept["whole"].append(whole_ms)
                    kept["build"].append(build_ms)
                    router = found.router_pair()
                    if router is not None:
                        kept["router_whole"].append(router[0])
                        kept["router_build"].append(router[1])
                    return whole_ms
                step = built[name].step
                ms = timer.time(step)
                step.reset()
                return ms

            slots = [*built, *(PAIR + name for name in corrections)]
            for name in slots:  # one untimed cycle: every build run once with all of them resident
                forward(name)
            for kept in pairs.values():
                for values in kept.values():
                    values.clear()
            sampler = PassSampler("cpu")
            sampler.start()
            timed = cycles(slots, budget_s, forward, min_cycles=min_cycles, seed=seed)
            reading = sampler.stop() or {}
            out["cycles"] = [{k: v for k, v in row.items() if k in built} for row in timed]
            out["contended"] = bool(reading.get("contended"))
            out["contention"] = reading.get("reason")
            # stated before the hooks passes; the widened copies are let go only after them
            # (``finally``): freed just before, gigabytes of them put a one-off stall of about a
            # quarter of a second into one hooked forward of the first cycles (qwen3's decode:
            # in 7 of 8 rounds tried, in its attention core; in none of 3 with them kept), which
            # the pass's mean over its iterations carries into that build's layers
            for name in corrections:
                section = out["builds"][name]["depth"]
                section["experts"] = {**section["experts"], "cost": _stated(corrections[name], pairs[name])}
            # the builds' hooked forwards interleaved as their timed ones were, each round of
            # them in its own shuffled order: every build's proportions from the same moments
            passes = {name: regions.HooksPass(one.model, one.step, structures[name]) for name, one in built.items()}
            cycles(list(passes), hooks_budget_s * len(passes), lambda name: passes[name].hooked(),
                   min_cycles=hooks_iterations, seed=f"{seed}:hooks")
            for name, one in built.items():
                structure = structures[name]
                # the hooks' own cost read against this build's cycle forwards: no bare ones
                hooks = passes[name].section(bare_ms=[row[name] for row in out["cycles"]])
                # what reportgen.depth reads of the method: its forward, categories and layers
                out["builds"][name]["hooks"] = {
                    "forward_ms": hooks["forward_ms"], "per_layer": hooks["per_layer"],
                    "categories": {c: {"ms": v["ms"], "share": v["share"]} for c, v in hooks["categories"].items()}}
                load = expert_load(one.model, one.step, structure)
                if load is not None:
                    out["builds"][name]["routing"] = {k: load[k] for k in ("max_over_mean", "mean_max_over_mean",
                                                                           "idle_experts", "routing") if k in load}
        finally:
            corrections.clear()
            for one in built.values():
                building.free(one)
    out["wall_s"] = wall[0]
    return out


def _stated(found: Any, kept: dict[str, list[float]]) -> dict[str, Any]:
    """A correction's figures from the pairs the cycles timed (``builds_unit``)."""
    from reportgen.profile.expertcost import method

    router = (kept["router_whole"], kept["router_build"]) if found.router is not None else None
    return dict(found.result((kept["whole"], kept["build"]), router,
                             method=method("one pair in each cycle of the build's forwards")))


def read_units(folder: Path) -> list[dict[str, Any]]:
    """The units measured into ``folder`` (unreadable files: not measured)."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return out


@contextmanager
def _fork_server(models: Sequence[str], tmp: str) -> Iterator[Any]:
    """A fork server that has imported torch, transformers and these models' modeling code."""
    from reportgen.execute.forkserver import ForkServer, preload_for
    from reportgen.suite import Combination

    combos = [Combination(model=m, scale="reference", mode="prefill", dtype="fp32", attn_implementation="sdpa",
                          batch_size=1, seq_len=8, device="cpu") for m in models]
    # what every unit imports before it builds anything, imported once here
    server = ForkServer(log_dir=tmp, preload=preload_for(combos, [
        f"{__name__}:builds_unit", "reportgen.profile.expertcost:prepare", "reportgen.profile.measure:measure",
        "reportgen.profile.regions:HooksPass",
        "reportgen.profile.routing:expert_load"]))
    try:
        yield server
    finally:
        server.close()


def measure(plan: Any, scratch: Path, *, log: Callable[[str], None] = print,
            stop: Callable[[], bool] = lambda: False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every unit of ``plan`` (``depth_check.Plan``) measured into ``scratch/units``
    (resumed where a stopped run left off): (every unit there, notes on units that
    failed or were not measured)."""
    models = [m.model for m in plan.models]

    def todo(index: int) -> list[tuple[str, str, dict[str, Any]]]:
        return [(unit_name(m, index), m, {
            "model": m, "builds": [[key(n), n, None] for n in plan.counts] + [[WHOLE, None, None]],
            "mode": plan.mode, "seq_len": plan.seq_len, "scale": plan.scale, "budget_s": plan.budget_s,
            "min_cycles": plan.min_cycles, "hooks_budget_s": plan.hooks_budget_s,
            "hooks_iterations": plan.hooks_iterations, "seed": f"depth:{index}:{m}"})
            for m in model_order(models, index)]

    return measure_units(scratch, plan.rounds, todo, models, timeout_s=plan.timeout_s, what="depth", log=log,
                         stop=stop)


def measure_units(scratch: Path, rounds: int, todo: Callable[[int], Sequence[tuple[str, str, dict[str, Any]]]],
                  models: Sequence[str], *, timeout_s: float, what: str, log: Callable[[str], None] = print,
                  stop: Callable[[], bool] = lambda: False) -> tuple[list[dict[str, Any]], list[str]]:
    """``rounds`` rounds of units measured into ``scratch/units``, each unit
    ``builds_unit(**kwargs)`` in a fresh process forked from a server that has imported
    ``models``' code: ``todo(round)`` lists the round's units in order as (file name,
    label, kwargs). A unit measured before (its file exists) is kept: a stopped run is
    resumed, a finished one (``complete`` written) measured again from scratch. Returns
    (every unit there, notes on units that failed or were not measured)."""
    from reportgen.execute import fresh

    folder = scratch / "units"
    if (scratch / COMPLETE).exists():
        shutil.rmtree(folder, ignore_errors=True)
        (scratch / COMPLETE).unlink()
    folder.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-{what}-") as tmp, _fork_server(models, tmp) as server:
        for index in range(rounds):
            units = [u for u in todo(index) if not (folder / u[0]).exists()]
            for done, (name, label, kwargs) in enumerate(units):
                if stop():
                    notes.append(f"time limit reached in round {index + 1}: {len(units) - done} of its units "
                                 "not measured")
                    return read_units(folder), notes
                result = fresh.run(builds_unit, kwargs, forkserver=server, timeout_s=timeout_s,
                                   log_path=Path(tmp) / name.replace(".json", ".log"))
                if not result.ok:
                    notes.append(f"{label} round {index + 1}: {result.reason}")
                    log(f"  {what} {label} round {index + 1}: FAILED {result.reason}")
                    continue
                unit = {**result.value, "round": index}
                atomic_write_json(folder / name, unit)
                log(f"  {what} {label} round {index + 1}: {len(unit['cycles'])} cycles in {unit['wall_s']:.0f} s"
                    + (" (contended)" if unit["contended"] else ""))
    (scratch / COMPLETE).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n", encoding="utf-8")
    return read_units(folder), notes
