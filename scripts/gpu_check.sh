#!/usr/bin/env bash
# One prepared GPU check (issue 6): environment, gpu-smoke, attention-micro, a small trace
# fixture, then a short table. Runs from a copied tree with PYTHONPATH, nothing fetched.
#   scripts/gpu_check.sh OUT_DIR            (on the GPU host)
#   REPORTGEN_DEVICE=cpu scripts/gpu_check.sh /tmp/x --models bert-base --scale tiny   (dry run)
set -euo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [extra profile flags]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
device=${REPORTGEN_DEVICE:-cuda}
mkdir -p "$out/runs"

python3 -m reportgen env --device "$device" --format json >"$out/environment.json"
python3 -m reportgen profile --suite gpu-smoke --device "$device" --out "$out/runs" "$@"
python3 -m reportgen profile --suite attention-micro --device "$device" --out "$out/runs" "$@"

# The smallest trace that has kernels becomes the CPU-side test fixture (under 2 MB).
python3 - "$out" <<'PY'
import gzip, shutil, sys
from pathlib import Path
out = Path(sys.argv[1])
traces = sorted((p for p in out.glob("runs/*/*/traces/*.trace.json.gz")), key=lambda p: p.stat().st_size)
for p in traces:
    if p.stat().st_size < 2_000_000 and b'"kernel"' in gzip.decompress(p.read_bytes()):
        shutil.copyfile(p, out / "fixture.trace.json.gz")
        print(f"fixture: {p.name} ({p.stat().st_size} bytes)")
        break
PY

for run in "$out"/runs/*/*/; do
    python3 -m reportgen summary "$run" --format table
done
