"""A short probe of a CPU's attainable peaks, for the roofline of runs on that CPU (a CPU
has no datasheet figure the way a GPU does): memory bandwidth from a large tensor copy
and fp32 matmul FLOP/s at the thread count the run measures with. Best of a few repeats,
well under three seconds in all; recorded in the run's environment (``cpu_probe``).

These are attainable figures on this host at this moment, not the hardware's theoretical
peaks: another process on the same cores lowers them, as it lowers every measurement.
"""

from __future__ import annotations

import time
from typing import Any

COPY_MIB = 128  # well past any last-level cache, so the copy streams through memory
MATMUL_N = 1024
REPEATS = 5
BUDGET_S = 2.5

METHOD = (f"copy: best of up to {REPEATS} torch.Tensor.copy_ of a {COPY_MIB} MiB fp32 "
          "tensor into another (bandwidth = bytes read + bytes written over the time); "
          f"matmul: best of up to {REPEATS} fp32 torch.mm of two {MATMUL_N} x {MATMUL_N} "
          "matrices (2 n^3 FLOPs over the time) at torch.get_num_threads() threads; one "
          "untimed warm-up of each; repeats stop early when the probe's time budget is spent")


def _best(run: Any, repeats: int, deadline: float) -> list[float]:
    run()  # warm-up: first-touch page faults and kernel selection stay out of the samples
    samples: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return samples


def _copy_seconds(n_elements: int, repeats: int, deadline: float) -> list[float]:
    """Timed copies between two fp32 tensors, freed on return."""
    import torch

    # a copy moves the same bytes whatever they hold: a constant source is written in a
    # fraction of the time a random draw of 128 MiB takes (the probe delays the first worker)
    src = torch.full((n_elements,), 1.0, dtype=torch.float32)
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), repeats, deadline)


def cpu_probe(*, copy_mib: int = COPY_MIB, matmul_n: int = MATMUL_N, repeats: int = REPEATS,
              budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Copy bandwidth (bytes/s) and fp32 matmul rate (FLOP/s) of this CPU, best of
    ``repeats``, with every sample kept and the method stated."""
    import torch

    began = time.perf_counter()
    n_elements = copy_mib * 2**20 // 4
    copy_s = _copy_seconds(n_elements, repeats, began + budget_s / 2)
    moved = 2 * n_elements * 4  # every byte read once and written once
    gen = torch.Generator().manual_seed(0)
    a = torch.rand((matmul_n, matmul_n), generator=gen, dtype=torch.float32)
    b = torch.rand((matmul_n, matmul_n), generator=gen, dtype=torch.float32)
    deadline = time.perf_counter() + budget_s / 2
    mm_s = _best(lambda: torch.mm(a, b), repeats, deadline)
    flop = 2 * matmul_n**3
    return {
        "method": METHOD,
        "threads": int(torch.get_num_threads()),
        "copy_bytes": moved,
        "copy_samples_s": copy_s,
        "copy_bandwidth_bytes_per_s": moved / min(copy_s),
        "matmul_n": matmul_n,
        "matmul_flop": flop,
        "matmul_samples_s": mm_s,
        "matmul_flops_per_s": flop / min(mm_s),
        "duration_s": time.perf_counter() - began,
    }
