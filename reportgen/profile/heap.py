"""A steady host heap for measurements.

By default glibc's malloc serves large blocks from fresh ``mmap`` pages (above a threshold
that starts at 128 KiB and moves with what was freed) and hands freed heap memory back to
the kernel. A forward's large tensors then page-fault anew on every iteration: about 9,000
minor faults per bert-base s256 forward on a 2-core EPYC host, some 10% of its time. Where
those faults land depends on what was freed just before, so replacing one part of the model
(the attention ablation) moves page-fault time between the parts that are left, and the
kernel's cost of a fault varies with the host's state from minute to minute.

Measurements therefore keep freed memory in the process: ``M_MMAP_THRESHOLD`` at glibc's
largest value (32 MiB on 64-bit, which also stops the threshold from moving),
``M_TRIM_THRESHOLD`` and ``M_TOP_PAD`` large, and ``M_MMAP_MAX`` at 0, so that blocks
above 32 MiB come from the heap too. Without that last setting a training step's
embedding gradient (94 MB for bert-base, more than glibc's largest threshold) came from
fresh ``mmap`` pages whenever no free heap region was large enough: 45,784 minor faults
in a bert-base s256 step with its eager attention core, 2 with the core replaced, whose
freed tensors left such a region. The ablation then read the faults as time the core
saved its neighbours.
A user who set any ``MALLOC_*_`` variable keeps theirs; elsewhere than glibc nothing is
changed. Either way the timing section records what held.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MIB = 1024**2
SETTINGS = {  # mallopt parameter -> bytes
    "mmap_threshold_bytes": (M_MMAP_THRESHOLD, 32 * MIB),
    "trim_threshold_bytes": (M_TRIM_THRESHOLD, 2**31 - 1),  # mallopt takes a C int
    "top_pad_bytes": (M_TOP_PAD, 256 * MIB),
    "mmap_max_blocks": (M_MMAP_MAX, 0),  # no block from mmap, however large
}
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
               "MALLOC_ARENA_MAX", "MALLOC_CONF", "LD_PRELOAD")


def steady(environ: Any = None) -> dict[str, Any]:
    """Keep freed memory in this process's heap (see the module docstring); returns what
    holds, for the timing section. Calling it again changes nothing."""
    environ = os.environ if environ is None else environ
    chosen = {name: environ[name] for name in ENVIRONMENT if environ.get(name)}
    if chosen:
        return {"allocator": "as the environment set it", "environment": chosen}
    if platform.libc_ver()[0] != "glibc":
        return {"allocator": "the platform's default (not glibc: left as it is)"}
    libc = ctypes.CDLL(None)
    done = {name: value for name, (param, value) in SETTINGS.items() if libc.mallopt(param, value) == 1}
    return {"allocator": "glibc, freed memory kept", **done}
