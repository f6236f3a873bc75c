#!/usr/bin/env python
"""The --layers extrapolation against a full-depth measurement of a model that fits.

    python scripts/depth_check.py llama-small --layers 4,2 --seq-len 128 --out /tmp/depth-check

Measures the model whole and with each of the given layer counts in one run (a suite of
those combinations, in rounds, on the CPU: ``reportgen.bench.depth_check.suite_text``),
then prints, for each count, the extrapolated whole-model median with its interval beside
the median measured whole, their ratio, whether the measured median lies in the interval,
and the category share furthest from its measured value (``depth_check.rows``, what the
bench's depth figure compares). Rerunning with the same --out resumes the run.

On the 2-core AMD EPYC host, llama-small forward s128 fp32 (three rounds of 4 s, the host
busy with other work in most rounds): measured whole 274.6 ms; 4 of 12 layers extrapolated
262.7 ms [223.1, 2695] (0.957x), 2 of 12 layers 286.0 ms [218.8, 1873] (1.041x), the measured
median inside both intervals.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from reportgen import cli
    from reportgen.bench import depth_check
    from reportgen.records.schema import iter_runs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--layers", default="4,2", help="layer counts to extrapolate from (default: 4,2)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--mode", default="forward")
    parser.add_argument("--budget-s", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/depth-check"))
    args = parser.parse_args(argv)
    counts = tuple(int(n) for n in args.layers.split(",") if n.strip())
    plan = depth_check.Plan(models=(depth_check.DepthModel("", args.model, args.model),), counts=counts,
                            mode=args.mode, seq_len=args.seq_len, budget_s=args.budget_s, rounds=args.rounds,
                            min_rounds=args.rounds)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "depth-check.toml"
        path.write_text(depth_check.suite_text(plan))
        status = cli.main(["profile", "--suite", str(path), "--out", str(args.out)])
    if status:
        return int(status)
    runs = sorted(iter_runs(args.out), key=lambda run: run.run_id)
    rows = depth_check.rows(list(runs[-1].combination_records()))
    if rows:
        print(f"{args.model}: measured whole {rows[0]['measured_ms']:.4g} ms "
              f"[{rows[0]['measured_low_ms']:.4g}, {rows[0]['measured_high_ms']:.4g}]")
    for row in rows:
        print(f"  {row['layers']} of {row['full_layers']} layers: extrapolated {row['extrapolated_ms']:.4g} ms "
              f"[{row['extrapolated_low_ms']:.4g}, {row['extrapolated_high_ms']:.4g}] ({row['ratio']:.3f}x the "
              f"measured), measured median {'inside' if row['inside'] else 'OUTSIDE'} the interval; share "
              f"furthest off: {row['worst_share_category']} {(row['worst_share_diff'] or 0) * 100:+.1f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
