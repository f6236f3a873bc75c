"""``torch.compile`` as a measured axis: compile a step's model, pay compilation before
any sample is taken, and say what compilation did (the record's ``compile`` section).

Compilation is lazy: torch.compile traces and builds kernels on the first call, and again
whenever a guard fails (a new shape, a new cache length). So the first call is timed on
its own (``compile_s``: compilation plus that one run), then calls continue until
``QUIET_CALLS`` in a row compile nothing; their time, where they did compile, is
``recompile_s``. Only then does the ordinary warm-up (iteration times settle) and the
timed pass begin. Anything compiled after that is counted, so a record whose samples
include a compilation says so.

Counts come from ``torch._dynamo.utils.counters``: ``stats.unique_graphs`` (graphs
compiled), ``frames`` (Python frames dynamo was asked to compile) and ``graph_break``
(each reason a graph was split: those parts run eagerly, between compiled graphs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from reportgen.errors import Skip
from reportgen.profile.step import StepLike
from reportgen.vocabulary import COMPILE_NONE

__all__ = ["QUIET_CALLS", "compile_step", "compile_warm_up", "compiled_counts", "finish_record"]

QUIET_CALLS = 3  # consecutive calls without a compilation: compilation has stopped
MAX_COMPILE_CALLS = 30
BACKEND = "inductor"


def compiled_counts() -> dict[str, Any]:
    """Dynamo's counters now: graphs compiled, frames, graph breaks (with reasons)."""
    from torch._dynamo.utils import counters

    breaks = {str(reason): int(n) for reason, n in counters["graph_break"].items()}
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "frames": int(counters["frames"].get("total", 0)),
        "frames_ok": int(counters["frames"].get("ok", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": breaks,
    }


def _compiled_since(before: dict[str, Any], after: dict[str, Any]) -> int:
    return (after["graphs"] - before["graphs"]) + (after["frames"] - before["frames"])


def compile_step(step: StepLike, mode: str) -> None:
    """Give ``step`` a compiled model to call (``step.compiled``); nothing compiles yet.

    Dynamo's caches and counters start empty, so the counts describe this model alone.
    The CPU kernels are built with their profiler ranges, so the profiled pass sees each
    inductor kernel by name rather than one opaque compiled region.
    """
    if mode == COMPILE_NONE:
        return
    model = getattr(step, "model", None)
    if model is None or not hasattr(step, "compiled"):
        raise Skip(f"compile={mode} applies to transformers models; this step has no model to compile")
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    inductor_config.cpp.enable_kernel_profile = True
    step.compiled = torch.compile(model, mode=mode, backend=BACKEND)  # type: ignore[attr-defined]


def compile_warm_up(step: StepLike, mode: str, *,
                    clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Call ``step`` until compilation stops; returns the record's ``compile`` section
    so far (``finish_record`` adds what happened afterwards)."""
    before = compiled_counts()
    start = clock()
    step()
    step.sync()
    compile_s = clock() - start
    step.reset()
    first = compiled_counts()
    calls, quiet, recompiles, recompile_s = 1, 0, 0, 0.0
    last = first
    while quiet < QUIET_CALLS and calls < MAX_COMPILE_CALLS:
        start = clock()
        step()
        step.sync()
        elapsed = clock() - start
        step.reset()
        calls += 1
        now = compiled_counts()
        if _compiled_since(last, now):
            recompiles += 1
            recompile_s += elapsed
            quiet = 0
        else:
            quiet += 1
        last = now
    if _compiled_since(before, first) == 0 and first["frames_ok"] == 0:
        fallback = "nothing was compiled: the forward ran eagerly"
    elif last["graph_breaks"]:
        fallback = (f"{last['graph_breaks']} graph break(s): the parts between compiled graphs "
                    "ran eagerly")
    else:
        fallback = None
    return {
        "mode": mode,
        "backend": BACKEND,
        "torch": torch.__version__,
        "compile_s": compile_s,
        "recompile_s": recompile_s,
        "recompiles": recompiles,
        "calls_until_quiet": calls,
        "quiet": quiet >= QUIET_CALLS,
        "graphs": last["graphs"],
        "frames": last["frames"],
        "graph_breaks": last["graph_breaks"],
        "graph_break_reasons": dict(sorted(last["graph_break_reasons"].items(),
                                           key=lambda kv: -kv[1])[:10]),
        "fallback": fallback,
        "_counts": last,
    }


def finish_record(section: dict[str, Any]) -> dict[str, Any]:
    """Add compilations seen after warm-up (in the timed or profiled passes: their
    samples then include compile time) and drop the private snapshot."""
    out = {k: v for k, v in section.items() if not k.startswith("_")}
    now = compiled_counts()
    out["compiled_after_warmup"] = _compiled_since(section["_counts"], now)
    return out


def release() -> None:
    """Drop dynamo's caches (they hold the compiled model) between combinations."""
    import torch._dynamo

    torch._dynamo.reset()
