"""One combination end to end: build, unprofiled timing, profiled pass, FLOPs, memory.

Returns the record's measurement sections (ARCHITECTURE.md): model, inputs, timing,
profile, attribution, ops, memory, flops, and ``studies`` when the suite asks for any
(``reportgen.profile.studies``). A combination that cannot run here raises
`reportgen.errors.Skip`; anything else propagates and the runner records ``failed``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from reportgen import peaks, traffic
from reportgen.errors import Skip
from reportgen.profile import building, compiling, flops, heap
from reportgen.profile import flops as flops_mod
from reportgen.profile.step import StepLike
from reportgen.profile.structure import Structure, derive
from reportgen.profile.timing import BUDGET_FLOOR, ROUND_BUDGET_FLOOR, ROUND_MIN_SAMPLES, time_step
from reportgen.records.paths import trace_file
from reportgen.vocabulary import COMPILE_NONE, TRAIN_MODES

__all__ = ["WORKER_IMPORTS", "OutOfMemory", "expert_cost", "measure", "measure_in_worker", "reduced_experts"]

# imported inside `measure` (a caller that only builds or times does without them): a
# worker's fork server imports them once beforehand (``execute.forkserver``)
WORKER_IMPORTS = ("reportgen.profile.contention", "reportgen.profile.profiling", "reportgen.profile.regions",
                  "reportgen.profile.routing", "torch.profiler", "torch.utils.flop_counter")



class OutOfMemory(RuntimeError):
    """The device ran out of memory; the message is the record's failure reason."""


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peaks(device: torch.device) -> tuple[int | None, int | None]:
    if device.type != "cuda":
        return None, None
    return int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device))


@contextlib.contextmanager
def _eager(step: StepLike) -> Iterator[None]:
    """A compiled step calls its eager model meanwhile: the same arithmetic and module
    calls, where a counting mode or a recorded forward around the compiled model would
    only make it compile again."""
    compiled = getattr(step, "compiled", None)
    if compiled is None:
        yield
        return
    step.compiled = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        step.compiled = compiled  # type: ignore[attr-defined]


def _derive_counting(built: building.BuiltModel) -> tuple[Structure, flops_mod.FlopCount | Exception]:
    """The model's structure, with the FLOP counter counting the one forward it records
    (on the eager model: FLOPs are counted on it), so the count costs no forward of its
    own; where the counter fails, the structure is recorded again without it, and the
    counter's failure is what the FLOP section says."""
    with _eager(built.step):
        count = flops_mod.FlopCount()
        try:
            with count.counting():
                return derive(built.model, built.step), count
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the counter is a cross-check, not the measurement
            with contextlib.suppress(Exception):
                built.step.reset()
            return derive(built.model, built.step), exc


def profiler_warmup(device: torch.device, first: bool) -> int:
    """The profiled pass's warm-up forwards: one on a GPU (CUPTI starts in it) or where
    the structure is recorded there (``first``); none on a CPU otherwise: the timing pass
    has warmed the model, and the profiler's own start costs a CPU forward nothing
    measurable (BERT-base's first profiled forward in a fresh worker as fast as the
    others, at 128 and 512 tokens)."""
    return 1 if first or device.type == "cuda" else 0


def _flops_section(built: building.BuiltModel, structure: Structure, combo: Any, median_ms: float,
                   device: torch.device, count: flops_mod.FlopCount | Exception) -> dict[str, Any]:
    hints = flops.analytic_hints(built.model, structure.roles)
    analytic = flops_mod.analytic(built.info, combo, hints)
    notes = [flops_mod.CORE_NOTE]
    if combo.mode in TRAIN_MODES:
        notes.append(flops_mod.TRAIN_NOTE)
    if hints.get("parts"):
        notes.append(flops_mod.PARTS_NOTE)
    counted: dict[str, float] | None = None
    try:
        if isinstance(count, Exception):
            raise count
        counted, counter_notes = count.result(built.model, structure.categories, analytic=analytic)
        notes += counter_notes
    except Exception as exc:  # noqa: BLE001 - the counter is a cross-check, not the measurement
        counted = None
        notes.append(f"flop_counter failed: {type(exc).__name__}: {exc}")
    analytic.pop("overhead", None)
    if counted is not None:
        counted.pop("overhead", None)
    total = float(sum(analytic.values()))
    achieved = total / (median_ms / 1e3) if median_ms > 0 else None
    peak = None
    if device.type == "cuda":
        peak = peaks.peak_flops(torch.cuda.get_device_name(device), combo.dtype)
        if peak is None:
            notes.append(f"no peak FLOP/s on record for {torch.cuda.get_device_name(device)} in {combo.dtype}")
    moved = traffic.analytic_bytes(built.info, combo, mlp_weight_elements=hints.get("mlp_weight_elements"),
                                   pooler=bool(hints.get("pooler")))
    notes += moved.pop("notes")
    return {
        "analytic": analytic,
        "counted": counted,
        "total_analytic": total,
        "total_counted": None if counted is None else float(sum(counted.values())),
        "achieved_flops_per_s": achieved,
        "peak_flops_per_s": peak,
        "percent_of_peak": 100.0 * achieved / peak if peak and achieved is not None else None,
        **moved,
        "notes": notes,
    }


def reduced_experts(built: building.BuiltModel, combo: Any, compiled: Any) -> bool:
    """Whether ``built`` has fewer routed experts than its model (an inference step, eager):
    its experts' and router's correction is measured (``reportgen.profile.expertcost``)."""
    counts = (built.depth or {}).get("experts")
    return (isinstance(counts, dict) and int(counts["measured"]) < int(counts["full"])
            and combo.mode not in TRAIN_MODES and compiled is None)


def _correction_counts(built: building.BuiltModel) -> dict[str, int]:
    counts = (built.depth or {})["experts"]
    return {"full": int(counts["full"]), "top_k": int(counts["top_k"]),
            "tokens": int(built.step.inputs_info.get("tokens") or 0)}


def expert_cost(built: building.BuiltModel, structure: Structure, *, budget_s: float | None = None,
                seed: int, round_of_several: bool = False) -> dict[str, Any] | None:
    """The correction of an expert-reduced build (``reduced_experts``), measured on it now;
    ``budget_s``: the pairs' timing budget past the fewest (default: the probe's own);
    ``round_of_several``: one of the rounds it is pooled over, which takes fewer pairs."""
    from reportgen.profile.expertcost import BUDGET_S, MIN_REPS, ROUND_MIN_REPS, probe

    return probe(built.model, built.step, structure, **_correction_counts(built), seed=seed,
                 budget_s=BUDGET_S if budget_s is None else budget_s,
                 min_reps=ROUND_MIN_REPS if round_of_several else MIN_REPS)


def expert_correction(built: building.BuiltModel, structure: Structure, *, seed: int) -> Any:
    """The correction's calls on an expert-reduced build, ready to time pair by pair
    (``expertcost.prepare``: a ``Correction``, or None where there is nothing to widen)."""
    from reportgen.profile.expertcost import prepare

    return prepare(built.model, built.step, structure, **_correction_counts(built), seed=seed)


def depth_section(facts: dict[str, Any], combo: Any) -> dict[str, Any]:
    """``--layers``: the layers measured by kind, the whole model's, and its exact
    parameter, weight and analytic FLOP counts (the whole-model timing figures follow
    once the timing is final: `reportgen.depth.finish`)."""
    out = {k: v for k, v in facts.items() if not k.startswith("_")}
    info, hints = facts["_full_info"], facts["_full_hints"]
    by_category = flops_mod.analytic(info, combo, hints)
    by_category.pop("overhead", None)
    width = traffic.DTYPE_BYTES[combo.dtype]
    out["flops_analytic"] = float(sum(by_category.values()))
    out["flops_by_category"] = by_category
    out["weight_bytes"] = int(facts["parameters"]) * width
    out["full_weight_bytes"] = int(out["full_parameters"]) * width
    return out


def _measure(combo: Any, *, run_dir: Path, combo_id: str, budget_s: float, seed: int,
             profile_iterations: int, holder: list[building.BuiltModel], profiled: bool = True,
             studies: Sequence[str] = (), study_budget_s: float | None = None,
             converge: bool = True, target_rel_halfwidth: float | None = None,
             gpu_index: int | None = None, reuse: bool = False,
             round_of_several: bool = False) -> dict[str, Any]:
    from reportgen.profile.contention import PassSampler
    from reportgen.profile.profiling import profile_step
    from reportgen.profile.regions import attribute

    device = torch.device(combo.device)
    compile_mode = getattr(combo, "compile", COMPILE_NONE)
    if compile_mode != COMPILE_NONE and combo.mode in TRAIN_MODES:
        raise Skip(f"{combo.mode} is measured eagerly only: a compiled training step's backward "
                   "keeps no module boundaries and is not attributed yet")
    steady_heap = heap.steady()  # before the build: the model's own blocks too
    # the profiled round of an eager step records the model's structure as the build's
    # trial iteration (one recorded forward, the FLOP counter counting it), which the
    # timing counts as its first warm-up sample: the structure costs no forward of its own
    built = building.build(combo, device, seed=seed, reuse=reuse,
                           trial=_derive_counting if profiled and compile_mode == COMPILE_NONE else None)
    holder.append(built)
    compiled: dict[str, Any] | None = None
    if compile_mode != COMPILE_NONE:
        compiling.compile_step(built.step, compile_mode)
        compiled = compiling.compile_warm_up(built.step, compile_mode)
    # after the build: the peak covers weights and the steady-state forward, not
    # transients of random initialisation
    _reset_peak(device)
    # the build's trial iteration is the first warm-up sample (a compiled step's warm-up
    # is its own: the trial ran before compilation)
    prior = [built.trial_ms] if built.trial_ms is not None and compiled is None else []
    sampler = PassSampler(device.type, gpu_index)
    until: dict[str, Any] = {} if target_rel_halfwidth is None else {"target_rel_halfwidth": target_rel_halfwidth}
    if round_of_several:
        # its median joins the interval across rounds: it stops within its budget, at two
        # samples or more, except in the profiled round, which takes three, its samples
        # being also the hooks pass's bare reference (``regions.hooks_method``)
        until.update(min_samples=ROUND_MIN_SAMPLES, within_budget=True,
                     budget_floor=BUDGET_FLOOR if profiled else ROUND_BUDGET_FLOOR)
    timing = time_step(built.step, budget_s=budget_s, prior_warmup=prior, sampler=sampler,
                       **(until if converge else {**until, "target_rel_halfwidth": None}))
    timing["heap"] = steady_heap
    timing["threads"] = {"torch": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    peak_allocated, peak_reserved = _peaks(device)
    if not profiled:
        # a later round of a combination measured in rounds: its timing only, and where the
        # build has fewer routed experts than the model, its correction measured again
        # beside this round's timing (``execute.rounds.merged_sections`` pools them)
        out = {"model": built.info, "inputs": dict(built.step.inputs_info), "timing": timing}
        if reduced_experts(built, combo, compiled):
            with _eager(built.step):
                structure = derive(built.model, built.step)
            cost = expert_cost(built, structure, budget_s=budget_s, seed=seed, round_of_several=True)
            if cost is not None:
                out["expert_cost"] = cost
        return out

    # the model's structure, once (one recorded forward, on the eager model, the FLOP
    # counter counting it): everything below that reads the structure is handed this one.
    # An eager step recorded it as its trial iteration; a model built without one (the
    # micro-benchmark) records it as the profiled pass's first warm-up forward, whose
    # events the profiler drops. Module hooks cannot fire inside a compiled graph: a
    # compiled forward is read from its kernels alone (reportgen.attribution, category
    # "compiled"), its structure recorded on the eager model beforehand
    derived: list[tuple[Structure, flops_mod.FlopCount | Exception]] = []
    if isinstance(built.trial_result, tuple):
        derived.append(built.trial_result)
    elif compiled is not None:
        derived.append(_derive_counting(built))

    def structure_forward() -> Any:
        derived.append(_derive_counting(built))
        return derived[0][0].labels

    first = structure_forward if not derived else None
    trace_path = trace_file(run_dir, combo_id)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    sampler.start()
    recorded = profile_step(built.step, built.model, iterations=profile_iterations, trace_path=trace_path,
                            labels=derived[0][0].labels if derived and compiled is None else None, first=first,
                            warmup=profiler_warmup(device, first is not None))
    pass_reading = sampler.stop()
    structure, count = derived[0]
    profile = dict(recorded["profile"])
    if pass_reading is not None:
        # a profiled pass that fell into a busy moment would report the host's load as
        # the profiler's cost: the record says so, and a round measured in rounds repeats it
        profile["contention"] = pass_reading
    profile["overhead_ratio"] = (profile["median_ms"] / timing["median"]
                                 if timing["median"] and profile.get("median_ms") is not None else None)

    memory = dict(recorded.get("memory") or {})
    # CUDA's allocator statistics where there are any; on the CPU the profiler's memory
    # events (the forward's own peak above its starting point) are all there is
    if peak_allocated is not None:
        memory["peak_allocated_bytes"] = peak_allocated
    memory.setdefault("peak_allocated_bytes", None)
    memory["peak_reserved_bytes"] = peak_reserved
    activation = dict(memory.get("attention_activation_bytes") or {})
    activation["analytic"] = traffic.attention_activation_bytes(built.info, combo)
    if activation.get("measured") is None:
        activation["measured"] = (memory.get("by_category_bytes") or {}).get("attention.core")
    memory["attention_activation_bytes"] = activation
    if combo.mode in TRAIN_MODES:
        from reportgen.profile.training import training_memory

        # after the profiled pass (whose memory events give a CPU's rise over a step)
        memory["training"] = training_memory(
            built.model, built.step, structure, combo, built.info,
            rise_bytes=(recorded.get("memory") or {}).get("peak_allocated_bytes"),
            scores_per_call=activation["analytic"])

    result = {
        "model": built.info,
        "inputs": dict(built.step.inputs_info),
        "timing": timing,
        "profile": profile,
        # both attribution methods; the hooks pass (unprofiled) runs after the profiled one
        # the hooks' cost against this pass's own timing samples (no bare forwards of its own)
        "attribution": attribute(recorded, built.model, built.step, structure, budget_s=budget_s / 3,
                                 hooks=compiled is None, bare_ms=timing.get("samples") or None),
        "ops": recorded["ops"],
        "memory": memory,
        "flops": _flops_section(built, structure, combo, timing["median"], device, count),
    }
    if built.depth is not None:
        result["depth"] = depth_section(built.depth, combo)
    if compiled is not None:
        result["compile"] = compiling.finish_record(compiled)
    else:
        from reportgen.profile.routing import expert_load

        # one more forward, untimed: where the router sent this step's tokens
        load = expert_load(built.model, built.step, structure)
        if load is not None:
            result["moe"] = load
        counts = (result.get("depth") or {}).get("experts")
        if isinstance(counts, dict) and reduced_experts(built, combo, compiled):
            # fewer experts than the model: what its experts would take with all of them
            cost = expert_cost(built, structure, seed=seed)
            if cost is not None:
                counts["cost"] = cost
    if studies:
        from reportgen.profile.studies import run_studies

        # after attribution, on the warm model; a study that fails is recorded, never raised
        result["studies"] = run_studies(studies, built, structure, combo, run_dir=Path(run_dir), combo_id=combo_id,
                                        budget_s=study_budget_s or budget_s, reset=built.step.reset)
    return result


def measure(combo: Any, *, run_dir: Path, combo_id: str, budget_s: float, seed: int = 0,
            profile_iterations: int = 3, profiled: bool = True, studies: Sequence[str] = (),
            study_budget_s: float | None = None, converge: bool = True,
            target_rel_halfwidth: float | None = None, gpu_index: int | None = None,
            keep_model: bool = False, round_of_several: bool = False) -> dict[str, Any]:
    """Measure one combination; see the module docstring. Out-of-memory becomes
    `OutOfMemory` ("out of memory: ..."), raised after the model is freed. With
    ``profiled`` False only the unprofiled timing pass runs (``model``, ``inputs`` and
    ``timing``): the later rounds of a combination measured in rounds. ``studies``
    (``reportgen.profile.studies``) run in the profiled pass only, each with
    ``study_budget_s`` (default ``budget_s``), into the ``studies`` section. With
    ``converge`` False the timing pass spends its whole budget (one round of several:
    ``reportgen.profile.timing.time_step``); ``target_rel_halfwidth`` replaces its default
    target; ``round_of_several``: one round of a combination measured in several, whose
    timing takes `timing.ROUND_MIN_SAMPLES` and `timing.ROUND_BUDGET_FLOOR`
    (``reportgen.execute.rounds``). ``gpu_index`` (the GPU's NVML index) lets each pass read the device's side of
    contention (``reportgen.profile.contention``). ``keep_model``: the model stays in this
    process after a clean measurement, for the next combination of the same model to take
    instead of building it again (`building.free`; on the CPU only, and never a training
    step's, a compiled one's or one that ran studies)."""
    holder: list[building.BuiltModel] = []
    oom: str | None = None
    compiled = getattr(combo, "compile", COMPILE_NONE) != COMPILE_NONE
    # a training step changes its weights, a compiled one is its compiler's, and a study
    # may replace modules: their models are not the one a build makes. On the CPU only: the
    # pre-flight counts a worker's kept heap as available to it, not a GPU's kept memory
    reuse = (keep_model and not compiled and combo.mode not in TRAIN_MODES and not studies
             and torch.device(combo.device).type == "cpu")
    done = False
    try:
        result = _measure(combo, run_dir=run_dir, combo_id=combo_id, budget_s=budget_s, seed=seed,
                          profile_iterations=profile_iterations, holder=holder, profiled=profiled,
                          studies=studies, study_budget_s=study_budget_s, converge=converge,
                          target_rel_halfwidth=target_rel_halfwidth, gpu_index=gpu_index, reuse=reuse,
                          round_of_several=round_of_several)
        done = True
        return result
    except torch.OutOfMemoryError as exc:
        # only the message leaves this block: the traceback's frames pin the tensors
        oom = "out of memory: " + (str(exc).strip().splitlines() or ["(no message)"])[0]
    finally:
        building.free(holder.pop() if holder else None, keep=reuse and done)
        if compiled:
            compiling.release()
    raise OutOfMemory(oom)


def measure_in_worker(combo: Any, **options: Any) -> dict[str, Any]:
    """`measure` as a worker process runs it (``execute.devices.MEASURE``): the model of
    one combination is kept for the next one of the same model this process measures,
    which takes it instead of building and filling it again (``keep_model``)."""
    return measure(combo, keep_model=True, **options)
