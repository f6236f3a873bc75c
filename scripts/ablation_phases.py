#!/usr/bin/env python
"""Where a training step's ablation drop lies: forward, backward and optimizer, each
against the time the hooks method attributes to the category there, in one process.

    python scripts/ablation_phases.py bert-base --attn eager --seq-len 256 --pairs 160

Steps run in back-to-back pairs (with the category's work, with its stand-in; ABBA order),
as the bench's ablation runs them. Unprofiled pairs read a clock at each phase's start and
end (the step's ``phase_hook``: a clock read and nothing else); every ``--hooked-every``-th
pair runs under the hooks method's clocks, which give each phase's time per category. Per
phase it prints the drop (the Hodges-Lehmann estimate of the pairs' phase time that
disappeared, as a fraction of the step, times the median step), the removable time (what
the method attributes to the category there, less what it still attributes with the
stand-in in place), and the neighbours (how much the phase's other categories sped up in
the hooked pairs). A drop that exceeds the removable time in one phase and not the others
points at that phase; a drop matched by the neighbours is a cost the work puts on the code
around it.

On the 2-core Intel Xeon host, bert-base s256 with its SDPA core (``--attn sdpa --pairs
100``: 75 unprofiled pairs, 25 hooked): drop 137.6 ms against 131.0 ms removable (+5.0%);
forward 98.5 against 95.5 ms, backward 35.2 against 35.3 ms, and 3.6 ms from the AdamW
step, which holds no attention work but ran 1.4% faster after a step with the stand-in.

The pairs run in a fresh process (``--python`` another interpreter, ``--timeout`` a limit);
a process that dies says why in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--attn", default="eager")
    parser.add_argument("--mode", default="train", choices=("train", "train-nooptim"))
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--scale", default="reference")
    parser.add_argument("--category", default="attention.core")
    parser.add_argument("--pairs", type=int, default=40, help="ABBA pairs (default 40)")
    parser.add_argument("--hooked-every", type=int, default=4,
                        help="every N-th pair runs under the hooks method's clocks (default 4)")
    parser.add_argument("--warmup", type=int, default=2, help="pairs run first, unrecorded (default 2)")
    from reportgen.bench.common import measure_fresh, process_options

    process_options(parser)
    args = parser.parse_args(argv)
    if args.pairs < 2 * args.hooked_every:
        parser.error(f"--pairs {args.pairs}: at least two hooked pairs need {2 * args.hooked_every}")
    return measure_fresh(measure, args)


def measure(options: dict[str, Any]) -> dict[str, Any]:
    """The pairs, in the fresh process: each phase's drop, removable time and neighbours."""
    args = argparse.Namespace(**options)
    from reportgen.profile import heap

    held = heap.steady()
    import numpy as np

    from reportgen.attribution import PHASES
    from reportgen.bench.ablation import category_stand_in
    from reportgen.bench.common import build_frozen, combo_label
    from reportgen.profile import regions
    from reportgen.profile.structure import derive
    from reportgen.stats import hodges_lehmann, median

    combo, built = build_frozen(args.model, scale=args.scale, mode=args.mode, attn=args.attn,
                                seq_len=args.seq_len)
    step, model = built.step, built.model
    clock = regions.device_clock(step)
    structure = derive(model, step)

    def phased() -> tuple[float, dict[str, float]]:
        marks: dict[str, list[float]] = {}

        def hook(name: str, start: bool) -> None:
            marks.setdefault(name, [0.0, 0.0])[0 if start else 1] = time.perf_counter()

        step.phase_hook = hook
        try:
            t0 = time.perf_counter()
            step()
            step.sync()
            ms = (time.perf_counter() - t0) * 1e3
        finally:
            step.phase_hook = None
        return ms, {name: (end - start) * 1e3 for name, (start, end) in marks.items()}

    def one(stand_in: bool, hooked: bool) -> dict[str, Any]:
        with (category_stand_in(model, args.category, roles=structure.roles) if stand_in
              else contextlib.nullcontext()):
            if hooked:
                phases: list[dict[str, dict[str, float]]] = []
                ms, _ = regions.hooked_forward(model, step, clock, structure, phases=phases)
                out: dict[str, Any] = {"ms": ms, "phases": phases[0]}
            else:
                ms, phase_ms = phased()
                out = {"ms": ms, "phase_ms": phase_ms}
        step.reset()
        return out

    for _ in range(args.warmup):
        for hooked in (False, True):
            one(False, hooked)
            one(True, hooked)
    pairs: list[tuple[bool, dict[str, Any], dict[str, Any]]] = []
    for i in range(args.pairs):
        hooked = i % args.hooked_every == args.hooked_every - 1
        if i % 2 == 0:
            full, ablated = one(False, hooked), one(True, hooked)
        else:
            ablated = one(True, hooked)
            full = one(False, hooked)
        pairs.append((hooked, full, ablated))

    plain = [(f, a) for h, f, a in pairs if not h]
    hooked_pairs = [(f, a) for h, f, a in pairs if h]
    step_ms = median([f["ms"] for f, _ in plain])

    def estimate(values: list[float]) -> float:
        return float(hodges_lehmann(np.asarray(values))) * step_ms

    def in_phase(run: dict[str, Any], phase: str, *, target: bool) -> float:
        cats = run["phases"].get(phase, {})
        return sum(ms for c, ms in cats.items() if (c == args.category) == target)

    phases_out: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        if not all(phase in f["phase_ms"] for f, _ in plain):
            continue
        phases_out[phase] = {
            "full_ms": median([f["phase_ms"][phase] for f, _ in plain]),
            "drop_ms": estimate([(f["phase_ms"][phase] - a["phase_ms"][phase]) / f["ms"] for f, a in plain]),
            "removable_ms": estimate([(in_phase(f, phase, target=True) - in_phase(a, phase, target=True))
                                      / f["ms"] for f, a in hooked_pairs]),
            "neighbours_ms": estimate([(in_phase(f, phase, target=False) - in_phase(a, phase, target=False))
                                       / f["ms"] for f, a in hooked_pairs]),
        }
    drop = estimate([1 - a["ms"] / f["ms"] for f, a in plain])
    removable = estimate([sum(in_phase(f, p, target=True) - in_phase(a, p, target=True) for p in phases_out)
                          / f["ms"] for f, a in hooked_pairs])
    out = {"combination": combo_label(combo), "category": args.category, "heap": held,
           "pairs": len(plain), "hooked_pairs": len(hooked_pairs), "step_ms": step_ms,
           "drop_ms": drop, "removable_ms": removable,
           "rel_diff": drop / removable - 1.0 if removable > 0 else None, "phases": phases_out}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
