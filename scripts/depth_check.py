#!/usr/bin/env python
"""The --layers extrapolation against a full-depth measurement of a model that fits.

    python scripts/depth_check.py llama-small --layers 2,4,8 --seq-len 128 --out /tmp/depth-check

Measures the model whole and with each of the given layer counts in paired rounds (each
round the combinations back to back in a shuffled order, each in a fresh process:
``reportgen.bench.depth_rounds``), then prints, for each count, the extrapolated
whole-model latency against the whole model measured in the same rounds, with its 95%
interval over the rounds, and the category share furthest from its measured value
(``depth_check.model_figures``, what the bench's depth figure judges). Rerunning with the
same --out resumes a stopped run; a finished one is measured again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from reportgen.bench import depth_check

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--layers", default="2,4,8", help="layer counts to extrapolate from (default: 2,4,8)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--mode", default="prefill")
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing per combination and round")
    parser.add_argument("--rounds", type=int, default=depth_check.MIN_ROUNDS)
    parser.add_argument("--out", type=Path, default=Path("/tmp/depth-check"))
    args = parser.parse_args(argv)
    try:
        counts = tuple(int(n) for n in args.layers.split(",") if n.strip())
    except ValueError:
        parser.error(f"--layers: not a list of layer counts: {args.layers!r}")
    plan = depth_check.Plan(models=(depth_check.DepthModel("", args.model, args.model),), counts=counts,
                            mode=args.mode, seq_len=args.seq_len, budget_s=args.budget_s, rounds=args.rounds)
    fig = depth_check.run(plan, args.out)
    rows = fig.get("rows") or []
    if rows:
        print(f"{args.model}: measured whole {rows[0]['measured_ms']:.4g} ms "
              f"[{rows[0]['measured_low_ms']:.4g}, {rows[0]['measured_high_ms']:.4g}] over {rows[0]['rounds']} rounds")
    for row in rows:
        print(f"  {row['layers']} of {row['full_layers']} layers: extrapolated {row['rel_diff']:+.1%} "
              f"[{row['rel_diff_low']:+.1%}, {row['rel_diff_high']:+.1%}] of the whole, paired by round "
              f"(unpaired {row['unpaired_rel_diff']:+.1%}); share furthest off: {row['worst_share_category']} "
              f"{(row['worst_share_diff'] or 0) * 100:+.1f} points; {row['verdict']}")
    for note in fig["notes"][:1]:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
