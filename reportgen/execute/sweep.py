"""The architecture sweep: every architecture transformers ships, each built at tiny scale
and attributed (``profile/architectures.check``) in a fresh process of its own
(``execute.fresh``, forked from a fork server that imported torch and transformers once)
under a memory limit and a time limit, so a type that crashes, hangs or allocates without
end is a ``failed`` row with the reason, not a lost sweep.

    python -m reportgen.execute.sweep [--types mixtral,mamba] [--seq-len 32] [--mode forward]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reportgen.execute import fresh
from reportgen.execute.forkserver import ForkServer
from reportgen.profile import architectures
from reportgen.profile.architectures import CHECK_ALONE, CHECK_MODULES, MEMORY_GIB, TIMEOUT_S
from reportgen.records.status import COMBINATION_STATUSES, FAILED


def sweep(model_types: Iterable[str], *, workers: int = 2, timeout_s: float = TIMEOUT_S,
          memory_gib: float = MEMORY_GIB, log: Callable[[str], None] | None = None,
          **kwargs: Any) -> list[dict[str, Any]]:
    """``check`` for each type in a fresh process (``workers`` at a time), each under an
    address-space limit of ``memory_gib`` and a wall-clock limit of ``timeout_s``: a type
    whose process dies, runs out of memory or time is a ``failed`` row with the reason."""
    types = list(model_types)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="architectures-") as tmp:
        # torch, transformers and what check imports imported once, each type's process
        # forked from there
        server = ForkServer(log_dir=tmp, preload={"modules": list(CHECK_MODULES)})

        def one(name: str) -> dict[str, Any]:
            result = fresh.run(CHECK_ALONE, {"model_type": name, "kwargs": kwargs}, forkserver=server,
                               timeout_s=timeout_s, memory_bytes=int(memory_gib * (1 << 30)),
                               log_path=Path(tmp) / f"{name}.log")
            row = result.value if result.ok else {"model_type": name, "status": FAILED, "reason": result.reason}
            if log is not None:
                log(architectures.line(row))
            return dict(row)

        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            for name, row in zip(types, pool.map(one, types)):
                rows[name] = row
        finally:
            server.close()  # first: interrupted, the processes still running follow it at once
            pool.shutdown(cancel_futures=True)
    return [rows[name] for name in sorted(rows)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reportgen.execute.sweep",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--types", help="comma-separated model types (default: every text type)")
    parser.add_argument("--encoders", action="store_true",
                        help="the vision and speech encoders instead of the text types")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--mode", default="forward")
    parser.add_argument("--attn", default="eager")
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    args = parser.parse_args(argv)
    types = (args.types.split(",") if args.types
             else architectures.encoder_model_types() if args.encoders
             else architectures.text_model_types())
    rows = sweep(types, workers=args.workers, seq_len=args.seq_len, mode=args.mode, attn=args.attn,
                 log=lambda text: print(text, flush=True))
    counts = {s: sum(r["status"] == s for r in rows) for s in COMBINATION_STATUSES}
    print(", ".join(f"{counts[s]} {s}" for s in COMBINATION_STATUSES), flush=True)
    return 1 if counts[FAILED] else 0


if __name__ == "__main__":
    sys.exit(main())
