"""Every architecture transformers ships, built at tiny scale and attributed: the sweep
that shows the categories hold beyond the models they were written for.

The model types come from transformers' own auto mappings (``text_model_types``: causal
LM, masked LM and sequence-to-sequence classes; ``encoder_model_types``: vision and
speech encoders), never from a list typed here. ``check`` builds one type at
``--scale tiny`` with random weights, runs its trial forward and one forward under the
hooks method's clocks, and says ``ok`` with the category shares, ``skipped`` with the
one line the build gave, or ``failed`` with the error. The sweep that runs each type in
a process of its own is ``execute/sweep.py``.
"""

from __future__ import annotations

import time
from typing import Any

from reportgen.categories import CATEGORIES
from reportgen.records.status import FAILED, OK, SKIPPED

TIMEOUT_S = 120.0
CHECK_ALONE = "reportgen.profile.architectures:check_alone"
# What ``check`` imports beyond torch and transformers, and what nearly every modeling
# module imports (the layers' base class, the attention masks): the sweep's fork server
# imports them once, so a type's process imports only its own modeling module.
CHECK_MODULES = ("reportgen.profile.architectures", "reportgen.profile.building", "reportgen.profile.regions",
                 "reportgen.profile.structure", "reportgen.suite", "transformers.modeling_layers",
                 "transformers.masking_utils")
ITERATIONS = 7  # hooked forwards per type: shares of the tiny forward, not of its first call
MEMORY_GIB = 10  # address space, not resident memory: torch alone maps several GiB


def text_model_types() -> list[str]:
    """Model types with a class for text generation or encoding (causal LM, masked LM,
    sequence-to-sequence LM), as transformers lists them."""
    from transformers.models.auto import modeling_auto as auto

    names = (set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
             | set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES))
    return sorted(names)


def encoder_model_types() -> list[str]:
    """Vision encoders (image classification) and speech models (speech recognition), as
    transformers lists them."""
    from transformers.models.auto import modeling_auto as auto

    names = (set(auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)
             | set(auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
             | set(auto.MODEL_FOR_CTC_MAPPING_NAMES))
    return sorted(names)


def check(model_type: str, *, seq_len: int = 32, mode: str = "forward",
          attn: str = "eager") -> dict[str, Any]:
    """One model type at tiny scale: status, reason, category shares, parameters."""
    from reportgen.errors import Skip
    from reportgen.profile import building, regions
    from reportgen.profile.structure import derive
    from reportgen.suite import Combination

    row: dict[str, Any] = {"model_type": model_type, "mode": mode, "seq_len": seq_len}
    started = time.perf_counter()
    built = None
    try:
        combo = Combination(model=model_type, scale="tiny", mode=mode, dtype="fp32",
                            attn_implementation=attn, batch_size=1, seq_len=seq_len, device="cpu")
        built = building.build(combo, "cpu")
        section = regions.hooks_method(built.model, built.step, derive(built.model, built.step),
                                       min_iterations=ITERATIONS,
                                       max_iterations=ITERATIONS, budget_s=0.0)
        shares = median_shares(section)
        row.update(status=OK, shares=shares, parameters=int(built.info["parameters"]),
                   model_class=built.info["class"], architecture=built.info["architecture"],
                   input=built.step.inputs_info.get("input", "input_ids"))
    except Skip as exc:
        reason = str(exc).strip().splitlines()[0]
        if _ran_out_of_memory(exc):
            # the build hit the process's memory limit: a type that allocates without end
            row.update(status=FAILED, reason=f"out of memory: {reason}")
        else:
            row.update(status=SKIPPED, reason=reason)
    except Exception as exc:  # noqa: BLE001 - a failing architecture is the finding
        notes = " ".join(getattr(exc, "__notes__", []))
        row.update(status=FAILED,
                   reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}" + (f" ({notes})" if notes else ""))
    finally:
        building.free(built)
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def _ran_out_of_memory(exc: BaseException) -> bool:
    """Whether an allocation failed on the way to ``exc`` (a MemoryError among its causes)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def median_shares(section: dict[str, Any]) -> dict[str, float]:
    """Each category's median time over the hooked iterations, as shares of their sum: at
    tiny scale a forward takes a millisecond, so a stall of one iteration (the CPU lost
    to another process) would outweigh the rest in a mean and land in whichever category
    it fell in."""
    cats = section["categories"]
    medians = {}
    for c, v in cats.items():
        values = sorted(v.get("per_iteration_ms") or [])
        if not values:
            return {c: float(v["share"]) for c, v in cats.items()}
        mid = len(values) // 2
        medians[c] = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    total = sum(medians.values())
    return {c: (m / total if total > 0 else 0.0) for c, m in medians.items()}


def check_alone(model_type: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``check`` as the sweep runs it, in a fresh process of its own: on one thread, so
    two types at a time share a 2-core host without contending."""
    import torch

    torch.set_num_threads(1)
    return check(model_type, **kwargs)


def line(row: dict[str, Any]) -> str:
    """One row as a line: type, status, then the shares over 0.5% or the reason."""
    head = f"{row['model_type']:26s} {row['status']:8s}"
    if row["status"] != OK:
        return f"{head} {row.get('reason', '')}"
    shares = " ".join(f"{c} {row['shares'][c]:.1%}" for c in CATEGORIES
                      if row["shares"].get(c, 0.0) >= 0.005)
    return f"{head} {shares}"
