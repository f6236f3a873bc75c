#!/usr/bin/env python
"""The --layers extrapolation against a full-depth measurement of a model that fits.

    python scripts/depth_check.py llama-small --layers 4,2 --seq-len 128 --out /tmp/depth-check

Measures the model whole and with each of the given layer counts in one run (a suite of
those combinations, in rounds, on this host's default device), then prints, for each count,
the extrapolated whole-model median with its interval beside the median measured whole,
their ratio, and whether the measured median lies in the interval (``reportgen.depth.check``).
Rerunning with the same --out resumes the run.

On the 2-core AMD EPYC host, llama-small forward s128 fp32 (three rounds of 4 s, the host
busy with other work in most rounds): measured whole 274.6 ms; 4 of 12 layers extrapolated
262.7 ms [223.1, 2695] (0.957x), 2 of 12 layers 286.0 ms [218.8, 1873] (1.041x), the measured
median inside both intervals.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def suite_text(model: str, counts: list[int], seq_len: int, mode: str, budget_s: float, rounds: int) -> str:
    entry = (f'[[matrix]]\nmodels = [{json.dumps(model)}]\nmodes = ["{mode}"]\nseq_lens = [{seq_len}]\n'
             'attn = ["sdpa"]\n')
    return (f'name = "depth-check"\n[settings]\nscale = "reference"\nbudget_s = {budget_s}\n'
            f'rounds = {rounds}\n\n' + entry + "".join(f"\n{entry}layers = {n}\n" for n in counts))


def main(argv: list[str] | None = None) -> int:
    from reportgen import cli, depth
    from reportgen.records import fields
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
    counts = [int(n) for n in args.layers.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "depth-check.toml"
        path.write_text(suite_text(args.model, counts, args.seq_len, args.mode, args.budget_s, args.rounds))
        status = cli.main(["profile", "--suite", str(path), "--out", str(args.out)])
    if status:
        return int(status)
    runs = sorted(iter_runs(args.out), key=lambda run: run.run_id)
    records = list(runs[-1].combination_records())
    whole = next(r for r in records if fields.get(r, "combination.layers") is None)
    print(f"{fields.get(whole, 'id')}: measured whole {fields.number(whole, 'timing.median'):.4g} ms")
    for record in records:
        found = depth.check(whole, record)
        if found is not None:
            print(f"  {found['layers']} of {found['full_layers']} layers: extrapolated "
                  f"{found['extrapolated_ms']:.4g} ms [{found['ci_low_ms']:.4g}, {found['ci_high_ms']:.4g}] "
                  f"({found['ratio']:.3f}x the measured), measured median "
                  f"{'inside' if found['within'] else 'OUTSIDE'} the interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
