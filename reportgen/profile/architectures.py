"""Every architecture transformers ships, built at tiny scale and attributed: the sweep
that shows the categories hold beyond the models they were written for.

The model types come from transformers' own auto mappings (``text_model_types``: causal
LM, masked LM and sequence-to-sequence classes; ``encoder_model_types``: vision and
speech encoders), never from a list typed here. ``check`` builds one type at
``--scale tiny`` with random weights, runs its trial forward and one forward under the
hooks method's clocks, and says ``ok`` with the category shares, ``skipped`` with the
one line the build gave, or ``failed`` with the error. ``sweep`` runs each type in a
fresh process (``execute.fresh``, forked from a fork server that imported torch and
transformers once) with a memory limit and a time limit, so a type that crashes, hangs or
allocates without end is a ``failed`` row with the reason, not a lost sweep.

    python -m reportgen.profile.architectures [--types mixtral,mamba] [--seq-len 32] [--mode forward]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reportgen.categories import CATEGORIES
from reportgen.execute import fresh
from reportgen.execute.forkserver import ForkServer
from reportgen.records.status import COMBINATION_STATUSES, FAILED, OK, SKIPPED

TIMEOUT_S = 120.0
CHECK_ALONE = "reportgen.profile.architectures:check_alone"
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
    from reportgen.profile import models, regions
    from reportgen.suite import Combination

    row: dict[str, Any] = {"model_type": model_type, "mode": mode, "seq_len": seq_len}
    started = time.perf_counter()
    built = None
    try:
        combo = Combination(model=model_type, scale="tiny", mode=mode, dtype="fp32",
                            attn_implementation=attn, batch_size=1, seq_len=seq_len, device="cpu")
        built = models.build(combo, "cpu")
        section = regions.hooks_method(built.model, built.step, min_iterations=ITERATIONS,
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
        models.free(built)
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


def sweep(model_types: Iterable[str], *, workers: int = 2, timeout_s: float = TIMEOUT_S,
          memory_gib: float = MEMORY_GIB, log: Callable[[str], None] | None = None,
          **kwargs: Any) -> list[dict[str, Any]]:
    """``check`` for each type in a fresh process (``workers`` at a time), each under an
    address-space limit of ``memory_gib`` and a wall-clock limit of ``timeout_s``: a type
    whose process dies, runs out of memory or time is a ``failed`` row with the reason."""
    types = list(model_types)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="architectures-") as tmp:
        # torch and transformers imported once, each type's process forked from there
        server = ForkServer(log_dir=tmp, preload={"modules": [CHECK_ALONE.partition(":")[0]]})

        def one(name: str) -> dict[str, Any]:
            result = fresh.run(CHECK_ALONE, {"model_type": name, "kwargs": kwargs}, forkserver=server,
                               timeout_s=timeout_s, memory_bytes=int(memory_gib * (1 << 30)),
                               log_path=Path(tmp) / f"{name}.log")
            row = result.value if result.ok else {"model_type": name, "status": FAILED, "reason": result.reason}
            if log is not None:
                log(line(row))
            return dict(row)

        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            for name, row in zip(types, pool.map(one, types)):
                rows[name] = row
        finally:
            server.close()  # first: interrupted, the processes still running follow it at once
            pool.shutdown(cancel_futures=True)
    return [rows[name] for name in sorted(rows)]


def line(row: dict[str, Any]) -> str:
    """One row as a line: type, status, then the shares over 0.5% or the reason."""
    head = f"{row['model_type']:26s} {row['status']:8s}"
    if row["status"] != OK:
        return f"{head} {row.get('reason', '')}"
    shares = " ".join(f"{c} {row['shares'][c]:.1%}" for c in CATEGORIES
                      if row["shares"].get(c, 0.0) >= 0.005)
    return f"{head} {shares}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reportgen.profile.architectures",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", help="comma-separated model types (default: every text type)")
    parser.add_argument("--encoders", action="store_true",
                        help="the vision and speech encoders instead of the text types")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--mode", default="forward")
    parser.add_argument("--attn", default="eager")
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    args = parser.parse_args(argv)
    types = (args.types.split(",") if args.types
             else encoder_model_types() if args.encoders else text_model_types())
    rows = sweep(types, workers=args.workers, seq_len=args.seq_len, mode=args.mode, attn=args.attn,
                 log=lambda text: print(text, flush=True))
    counts = {s: sum(r["status"] == s for r in rows) for s in COMBINATION_STATUSES}
    print(", ".join(f"{counts[s]} {s}" for s in COMBINATION_STATUSES), flush=True)
    return 1 if counts[FAILED] else 0


if __name__ == "__main__":
    sys.exit(main())
