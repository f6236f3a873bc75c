#!/usr/bin/env python
"""Minor page faults and time per step, with a category's work and with its stand-in, in
one process: what the ablation's pairs cost the kernel besides the work itself.

    python scripts/ablation_faults.py bert-base --attn eager --mode train --seq-len 256

``--mmap`` lets blocks over glibc's largest mmap threshold (32 MiB) come from fresh
``mmap`` pages, as they did before measurements kept them on the heap: then a bert-base
s256 training step with its eager core takes 22,900 or 45,800 faults (its 94 MB embedding
gradient, once or twice) and the same step with the stand-in 1 or 2.

The steps run in a fresh process (``--python`` another interpreter, ``--timeout`` a limit);
a process that dies says why in one line.
"""

from __future__ import annotations

import argparse
import ctypes
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--attn", default="eager")
    parser.add_argument("--mode", default="train")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--scale", default="reference")
    parser.add_argument("--category", default="attention.core")
    parser.add_argument("--pairs", type=int, default=8, help="ABBA pairs timed (default 8)")
    parser.add_argument("--warmup", type=int, default=3, help="pairs run first, untimed (default 3)")
    parser.add_argument("--mmap", action="store_true",
                        help="blocks over 32 MiB from mmap, as before the steady heap kept them")
    from reportgen.bench.common import measure_fresh, process_options

    process_options(parser)
    return measure_fresh(measure, parser.parse_args(argv))


def measure(options: dict[str, Any]) -> dict[str, Any]:
    """The pairs, in the fresh process: faults and time of each step."""
    args = argparse.Namespace(**options)
    from reportgen.profile import heap

    held = heap.steady()
    if args.mmap:
        ctypes.CDLL(None).mallopt(heap.M_MMAP_MAX, 65536)  # glibc's default
        held = {**held, "mmap_max_blocks": 65536}
    from reportgen.bench.ablation import category_stand_in
    from reportgen.bench.common import build_frozen, combo_label
    from reportgen.profile.structure import derive
    from reportgen.stats import median

    combo, built = build_frozen(args.model, scale=args.scale, mode=args.mode, attn=args.attn,
                                seq_len=args.seq_len)
    roles = derive(built.model, built.step).roles  # once: every stand-in below reads it

    def step(stand_in: bool) -> tuple[float, int]:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        if stand_in:
            with category_stand_in(built.model, args.category, roles=roles):
                built.step()
        else:
            built.step()
        ms = (time.perf_counter() - start) * 1e3
        return ms, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    for _ in range(args.warmup):
        step(False)
        step(True)
    runs: dict[bool, list[tuple[float, int]]] = {False: [], True: []}
    for i in range(args.pairs):
        for stand_in in ((False, True) if i % 2 == 0 else (True, False)):
            runs[stand_in].append(step(stand_in))
    drops = [1 - a[0] / f[0] for f, a in zip(runs[False], runs[True])]
    out = {"combination": combo_label(combo),
           "category": args.category, "heap": held, "pairs": args.pairs,
           **{name: {"median_ms": median([r[0] for r in runs[s]]),
                     "median_faults": median([float(r[1]) for r in runs[s]]),
                     "faults": [r[1] for r in runs[s]]}
              for name, s in (("full", False), ("stand_in", True))},
           "median_drop": median(drops)}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
