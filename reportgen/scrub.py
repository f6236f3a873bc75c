"""Local machine paths kept out of what is published (no torch here: both sides use it).

A run is committed and its records and traces are served by the site, so nothing in them
may name a place on the machine that measured it: the Python interpreter is recorded by
its file name, and a Chrome trace's ``traceName`` (torch.profiler writes the path it
exported to) is the trace's own place in its run, ``traces/<file>``.

``python -m reportgen.scrub RUNS_DIR`` rewrites runs written before this held: the
interpreter path in each ``run.json`` and every trace's name, with the record's
``trace_bytes`` brought along. It changes no measured value and is idempotent.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path, PurePath

from reportgen.records import paths
from reportgen.records.store import atomic_write_bytes, atomic_write_json

# "traceName": "<anything>" as torch.profiler writes it (one JSON string)
_TRACE_NAME = re.compile(rb'"traceName":\s*"(?:[^"\\]|\\.)*"')


def interpreter(executable: str) -> str:
    """The interpreter as a record states it: its file name (``python3.11``), not where
    it is installed."""
    return PurePath(executable).name if executable else executable


def trace_name(raw: bytes, name: str) -> bytes:
    """``raw`` (an exported Chrome trace) with its ``traceName`` set to ``name``."""
    return _TRACE_NAME.sub(lambda _m: b'"traceName": ' + json.dumps(name).encode(), raw, count=1)


def gzip_trace(data: bytes) -> bytes:
    """A trace as runs store it; mtime=0: the same trace gives the same bytes."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def scrub_run(run_dir: Path) -> list[str]:
    """Rewrite one run directory; returns the files changed (relative to it)."""
    changed: list[str] = []
    run_json = run_dir / "run.json"
    if run_json.is_file():
        record = json.loads(run_json.read_text(encoding="utf-8"))
        python = (record.get("environment") or {}).get("python") or {}
        if python.get("executable") and python["executable"] != interpreter(python["executable"]):
            python["executable"] = interpreter(python["executable"])
            atomic_write_json(run_json, record)
            changed.append("run.json")
    sizes: dict[str, int] = {}
    for trace in sorted((run_dir / "traces").glob("*.json.gz")):
        raw = gzip.decompress(trace.read_bytes())
        fixed = trace_name(raw, f"traces/{trace.name}")
        if fixed != raw:
            packed = gzip_trace(fixed)
            atomic_write_bytes(trace, packed)
            changed.append(f"traces/{trace.name}")
        sizes[f"traces/{trace.name}"] = trace.stat().st_size
    for path in paths.combination_files(run_dir):
        record = json.loads(path.read_text(encoding="utf-8"))
        sections = [record.get("profile") or {}, ((record.get("studies") or {}).get("tools") or {})]
        dirty = False
        for section in sections:
            rel = section.get("trace") if isinstance(section, dict) else None
            if rel in sizes and section.get("trace_bytes") != sizes[rel]:
                section["trace_bytes"] = sizes[rel]
                dirty = True
        if dirty:
            atomic_write_json(path, record)
            changed.append(f"combinations/{path.name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m reportgen.scrub RUNS_DIR", file=sys.stderr)
        return 2
    total = 0
    for run_json in sorted(Path(args[0]).glob("*/*/run.json")):
        changed = scrub_run(run_json.parent)
        total += len(changed)
        if changed:
            print(f"{run_json.parent}: {len(changed)} files")
    print(f"{total} files rewritten")
    return 0


# A path starts at a "/" that follows no word character or dot. The pattern opens with the
# "/" itself (the look-behind checks the character before it), so the regex engine skips
# from one "/" to the next instead of trying every character: the committed traces are
# gigabytes of text with few slashes in them.
_LOCAL_PATH = re.compile(r"/(?<![\w.]/)(?:root|home|work|tmp|Users)/[^\s\"'<>|)&]*")


def local_paths(text: str) -> list[str]:
    """Absolute paths into a home, a work tree or a temporary directory in ``text``."""
    return _LOCAL_PATH.findall(text)


if __name__ == "__main__":
    raise SystemExit(main())

