"""What a run record says about the machine it measured on: the one label a reader sees
for that host ("CPU · AMD EPYC · 2 cores", "GPU · NVIDIA H200 · 1 GPU") on every page, the
claims' evidence included, and the few facts the label rests on. Every field is optional:
older records and other hosts lack some, and the hardware slug stands in for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from reportgen.records import fields
from reportgen.records.releases import is_history

if TYPE_CHECKING:
    from reportgen.records.schema import Run

SEP = " · "

Record = Mapping[str, Any]


def run_of(env: Mapping[str, Any] | None) -> Record:
    """The run record around an environment section, so that its fields are read by their
    names in the run record (``environment.host.cpu_model``), as its JSON Schema has them."""
    return {"environment": env or {}}


def gpu_indices(run: Record) -> list[int]:
    """The indices of the GPU entries in ``environment.gpus``."""
    gpus = fields.run_get(run, "environment.gpus")
    if not isinstance(gpus, list | tuple):
        return []
    return [i for i, gpu in enumerate(gpus) if isinstance(gpu, Mapping)]


def _cores(run: Record) -> int | None:
    for value in (fields.run_get(run, "environment.host.usable_cores"),
                  fields.run_get(run, "environment.host.physical_cores"),
                  fields.run_get(run, "environment.host.logical_cores")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def cpu_name(env: Mapping[str, Any] | None) -> str | None:
    """The most specific CPU name the record holds (older runs name it in ``cpu``)."""
    run = run_of(env)
    for value in (fields.run_get(run, "environment.host.cpu_model"), fields.run_get(run, "environment.cpu.model"),
                  fields.run_get(run, "environment.device.name")
                  if fields.run_get(run, "environment.device.type") == "cpu" else None):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def hardware_label(slug: str, env: Mapping[str, Any] | None) -> str:
    """``GPU · NVIDIA H200 · 1 GPU`` or ``CPU · AMD EPYC · 2 cores``: the host a run
    measured on (its hardware ``slug`` and its ``environment`` section) as every page names
    it; the slug, tidied, when the record says too little."""
    run = run_of(env)
    gpus = gpu_indices(run)
    if gpus:
        names = sorted({str(fields.run_get(run, ("environment", "gpus", i, "name")) or "GPU") for i in gpus})
        return SEP.join(["GPU", " + ".join(names), plural(len(gpus), "GPU")])
    name = cpu_name(env)
    if name is not None:
        cores = _cores(run)
        return SEP.join(["CPU", name] + ([plural(cores, "core")] if cores else []))
    return _label_from_slug(slug)


def _label_from_slug(slug: str) -> str:
    parts = slug.split("-")
    if not parts or parts[0] not in ("cpu", "nvidia", "amd", "gpu"):
        return slug
    kind = "CPU" if parts[0] == "cpu" else "GPU"
    rest = parts[1:] if parts[0] == "cpu" else parts
    tail = rest[-1] if rest else ""
    count = None
    if tail[:-1].isdigit() and tail[-1:] in ("c", "x"):
        count = plural(int(tail[:-1]), "core" if tail.endswith("c") else "GPU")
        rest = rest[:-1]
    # short parts and model numbers are acronyms ("amd", "epyc", "h200"); names are not
    name = " ".join(p.upper() if len(p) <= 4 or any(ch.isdigit() for ch in p)
                    or p == "nvidia" else p.capitalize() for p in rest)
    return SEP.join([kind] + ([name] if name else []) + ([count] if count else []))


def has_gpu(env: Mapping[str, Any] | None) -> bool:
    run = run_of(env)
    return bool(gpu_indices(run)) or fields.run_get(run, "environment.device.type") == "cuda"


def host_environments(runs: Iterable[Run]) -> dict[str, Mapping[str, Any]]:
    """The environment section each hardware slug is described by: its latest run's (by
    ``updated``), a history's runs (other environments) only where it has no other. Every
    reader of a runs tree (the pages, the claims) names a host from this one choice."""
    chosen: dict[str, Mapping[str, Any]] = {}
    by_update = sorted(runs, key=lambda r: (not is_history(r.record),
                                            str(fields.run_get(r.record, "updated") or ""), r.run_id))
    for run in by_update:
        env = fields.run_get(run.record, "environment")
        if isinstance(env, Mapping) and env:
            chosen[run.hardware] = env
    return chosen


def host_labels(runs: Iterable[Run]) -> dict[str, str]:
    """Each hardware slug of ``runs`` -> its `hardware_label`, from `host_environments`."""
    runs = list(runs)
    envs = host_environments(runs)
    return {run.hardware: hardware_label(run.hardware, envs.get(run.hardware)) for run in runs}
