"""The depth figure's measurement (``depth_check``'s figure): each model whole and with
each of its layer counts, paired forward by forward, in rounds.

A round measures each model (the models in a shuffled order) in a fresh process of its
own (forked from a fork server that has imported torch, transformers and the models'
modeling code once): the model built at full width whole and with each layer count, all
resident at once, each warmed up; then cycles, each one forward of every build back to
back in the cycle's own shuffled order, for the round's budget (the pass's contention
reading around them); then each build clocked by the hooks method (``regions.hooks_method``:
category times and each layer's, what ``--layers N`` extrapolates by, ``reportgen.depth``).
A reduced build gives its ``depth`` section, a mixture of experts its routing
(``routing.expert_load``). On a shared 2-core host the speed wanders by tens of percent
within a minute: the forwards of one cycle fall within seconds of each other, so their
ratio is steady where the ratio of two medians taken minutes apart is not.

Each (round, model) is one unit, written atomically to
``<scratch>/units/<model>--r<round>.json`` the moment it arrives: a stopped run loses no
unit and is resumed where it stopped; a finished one (``complete`` written) is measured
again from scratch.
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


def depth_unit(model: str, counts: Sequence[int], mode: str, seq_len: int, scale: str, budget_s: float,
               min_cycles: int, hooks_budget_s: float, hooks_iterations: int, seed: str) -> dict[str, Any]:
    """One model's round, in the process it is called in (a fresh one: ``measure`` forks it):
    the model built whole and with each of ``counts`` layers, each warmed up (for up to
    a third of ``budget_s``); an untimed cycle, then cycles of one forward of each for
    ``budget_s`` (at least ``min_cycles``); each build's hooks pass (at least
    ``hooks_iterations`` forwards, ``hooks_budget_s``) and, for a mixture of experts, its
    routing."""
    import dataclasses
    import gc

    from reportgen.profile import building, heap, regions, timing
    from reportgen.profile.contention import PassSampler
    from reportgen.profile.measure import depth_section
    from reportgen.profile.routing import expert_load
    from reportgen.profile.structure import derive
    from reportgen.suite import Combination

    heap.steady()
    base = Combination(model=model, scale=scale, mode=mode, dtype="fp32", attn_implementation="sdpa",
                       batch_size=1, seq_len=seq_len, device="cpu")
    started = time.time()
    built: dict[str, Any] = {}
    out: dict[str, Any] = {"model": model, "started": started, "builds": {}}
    with stopwatch() as wall:
        # as in the suite's workers: what outlives the builds frozen, so a collection
        # during a timed forward costs milliseconds, not 0.2 s
        gc.collect()
        gc.freeze()
        try:
            for layers in [*counts, None]:
                combo = dataclasses.replace(base, layers=layers)
                one = built[key(layers)] = build(combo)
                timer = timing.default_timer(one.step)
                warmup = timing.warm_up(one.step, timer, max_warmup_s=budget_s / 3)
                section = depth_section(one.depth, combo) if one.depth is not None else None
                out["builds"][key(layers)] = {
                    "layers": layers, "warmup_samples": warmup, "depth": section,
                    "full_layers": section["full_layers"] if section else one.info.get("num_layers")}

            def forward(name: str) -> float:
                step = built[name].step
                ms = timer.time(step)
                step.reset()
                return ms

            for name in built:  # one untimed cycle: every build run once with all of them resident
                forward(name)
            sampler = PassSampler("cpu")
            sampler.start()
            out["cycles"] = cycles(list(built), budget_s, forward, min_cycles=min_cycles, seed=seed)
            reading = sampler.stop() or {}
            out["contended"] = bool(reading.get("contended"))
            out["contention"] = reading.get("reason")
            for name, one in built.items():
                structure = derive(one.model, one.step)
                # the hooks' own cost read against this build's cycle forwards: no bare ones
                hooks = regions.hooks_method(one.model, one.step, structure, budget_s=hooks_budget_s,
                                             min_iterations=hooks_iterations,
                                             bare_ms=[row[name] for row in out["cycles"]])
                # what reportgen.depth reads of the method: its forward, categories and layers
                out["builds"][name]["hooks"] = {
                    "forward_ms": hooks["forward_ms"], "per_layer": hooks["per_layer"],
                    "categories": {c: {"ms": v["ms"], "share": v["share"]} for c, v in hooks["categories"].items()}}
                load = expert_load(one.model, one.step, structure)
                if load is not None:
                    out["builds"][name]["routing"] = {k: load[k] for k in ("max_over_mean", "mean_max_over_mean",
                                                                           "idle_experts", "routing") if k in load}
        finally:
            for one in built.values():
                building.free(one)
    out["wall_s"] = wall[0]
    return out


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
        f"{__name__}:depth_unit", "reportgen.profile.measure:measure", "reportgen.profile.regions:hooks_method",
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
    from reportgen.execute import fresh

    folder = scratch / "units"
    if (scratch / COMPLETE).exists():
        shutil.rmtree(folder, ignore_errors=True)
        (scratch / COMPLETE).unlink()
    folder.mkdir(parents=True, exist_ok=True)
    models = [m.model for m in plan.models]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-depth-") as tmp, _fork_server(models, tmp) as server:
        for index in range(plan.rounds):
            todo = [m for m in model_order(models, index) if not (folder / unit_name(m, index)).exists()]
            for done, model in enumerate(todo):
                if stop():
                    notes.append(f"time limit reached in round {index + 1}: {len(todo) - done} of its models "
                                 "not measured")
                    return read_units(folder), notes
                result = fresh.run(depth_unit, {
                    "model": model, "counts": list(plan.counts), "mode": plan.mode, "seq_len": plan.seq_len,
                    "scale": plan.scale, "budget_s": plan.budget_s, "min_cycles": plan.min_cycles,
                    "hooks_budget_s": plan.hooks_budget_s, "hooks_iterations": plan.hooks_iterations,
                    "seed": f"depth:{index}:{model}"}, forkserver=server, timeout_s=plan.timeout_s,
                    log_path=Path(tmp) / unit_name(model, index).replace(".json", ".log"))
                if not result.ok:
                    notes.append(f"{model} round {index + 1}: {result.reason}")
                    log(f"  depth {model} round {index + 1}: FAILED {result.reason}")
                    continue
                unit = {**result.value, "round": index}
                atomic_write_json(folder / unit_name(model, index), unit)
                log(f"  depth {model} round {index + 1}: {len(unit['cycles'])} cycles in {unit['wall_s']:.0f} s"
                    + (" (contended)" if unit["contended"] else ""))
    (scratch / COMPLETE).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n", encoding="utf-8")
    return read_units(folder), notes
