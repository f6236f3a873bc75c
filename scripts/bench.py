#!/usr/bin/env python
"""Validation and benchmark suite (`nox -s bench`): see reportgen/bench/.

    python scripts/bench.py [--out bench/results.json] [--quick] [--only suite,latency,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reportgen.bench.orchestrate import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
