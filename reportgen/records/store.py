"""Atomic writes and the run directory (``runs/<hardware>/<suite>-<hash8>[-<stamp>]/``).

Runs are immutable once finished: the first run of a suite on a hardware is
``<suite>-<hash8>``, each later one (``profile --force``) ``<suite>-<hash8>-<UTC
yyyymmddThhmmss>``; an unfinished run resumes into its own directory.

Every file under runs/ is written to a temporary file in the same directory, flushed,
fsynced and renamed over the target, so a reader (or a resumed run) sees either the old
file or the new one, never half of one, even when the writer is killed.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reportgen.errors import UserError
from reportgen.records import paths
from reportgen.records.schema import (
    SCHEMA_FILES,
    load_combination,
    load_run,
    validate_record,
    validation_enabled,
)

if TYPE_CHECKING:
    from reportgen.suite import Suite


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The leading dot and .tmp suffix keep readers that glob "*.json" away from it.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; results are meant to be committed and read by others
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
        os.replace(tmp_name, path)
    except BaseException:  # includes KeyboardInterrupt: never leave a temp file behind
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every platform lets a directory be opened.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def to_json_data(obj: Any) -> Any:
    """Plain JSON data: NaN and infinities become null, numpy values become Python ones.

    Floats stay numbers at full precision; nothing is formatted before storing.
    """
    if isinstance(obj, float):  # numpy.float64 is a float subclass
        return float(obj) if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, Mapping):
        return {str(key): to_json_data(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json_data(value) for value in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, without importing numpy
        return to_json_data(obj.tolist())
    raise TypeError(f"cannot store {type(obj).__name__} as JSON: {obj!r}")


def dumps(obj: Any) -> str:
    # Insertion order is kept (records are built in a readable order) and is stable
    # because the builders are; indent keeps diffs of committed runs reviewable.
    return json.dumps(to_json_data(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    # Serialise first: an unserialisable value (or, with validation on, a record that does
    # not match its schema) must not even create the temp file.
    data = to_json_data(obj)
    if (validation_enabled() and isinstance(data, dict)
            and data.get("kind") in SCHEMA_FILES):
        validate_record(data)
    atomic_write_bytes(path, dumps(data).encode("utf-8"))


RUN_STAMP = "%Y%m%dT%H%M%S"


def run_names(hardware_dir: Path, base: str) -> list[str]:
    """The runs of one suite (``base`` = ``<suite>-<hash8>``) in ``hardware_dir``, oldest
    first: ``base`` itself, then ``base-<stamp>`` (``-<n>`` after a stamp taken twice)."""
    pattern = re.compile(re.escape(base) + r"(?:-(\d{8}T\d{6})(?:-(\d+))?)?")
    found = []
    for child in hardware_dir.iterdir() if hardware_dir.is_dir() else ():
        match = pattern.fullmatch(child.name)
        if match and child.is_dir():
            found.append(((match.group(1) or "", int(match.group(2) or 0)), child.name))
    return [name for _, name in sorted(found)]


def stamp_of(utc_iso: str) -> str:
    """``2026-12-02T13:00:05Z`` -> ``20261202T130005``: a new run's stamp from a UTC time."""
    digits = "".join(ch for ch in utc_iso if ch.isdigit())
    return f"{digits[:8]}T{digits[8:14]}"


class RunStore:
    """One run directory: ``<root>/<hardware>/<suite name>-<suite hash8>[-<stamp>]/``.

    Without ``name``, the latest run of the suite on this hardware (to resume it), or the
    first run's name when there is none; `new_run` names a new one.
    """

    def __init__(self, root: str | Path, hardware_slug: str, suite: Suite,
                 name: str | None = None, *, base: str | None = None) -> None:
        self.root = Path(root)
        self.hardware = hardware_slug
        self.suite = suite
        # ``base``: another series of runs of the suite (a history's release set:
        # ``<suite>-<hash8>-torch<version>-transformers<version>``)
        self.base = base or f"{suite.name}-{suite.hash[:8]}"
        existing = run_names(self.root / hardware_slug, self.base)
        self.name = name or (existing[-1] if existing else self.base)
        self.run_id = f"{hardware_slug}/{self.name}"
        self.run_dir = self.root / hardware_slug / self.name

    def new_run(self, now: float | None = None) -> RunStore:
        """A store for a new run of the same suite: the finished ones stay as they are."""
        existing = set(run_names(self.root / self.hardware, self.base))
        name = self.base if not existing else f"{self.base}-{time.strftime(RUN_STAMP, time.gmtime(now))}"
        return self._unique(name, existing)

    def forced_run(self, submitted_at: str) -> RunStore:
        """The new run that every task of one Slurm submission (``--force``) writes into:
        named from the submission time, so the tasks agree without talking."""
        return RunStore(self.root, self.hardware, self.suite, name=f"{self.base}-{stamp_of(submitted_at)}",
                        base=self.base)

    def _unique(self, name: str, existing: set[str]) -> RunStore:
        stamped, n = name, 1
        while stamped in existing:
            n += 1
            stamped = f"{name}-{n}"
        return RunStore(self.root, self.hardware, self.suite, name=stamped, base=self.base)

    @property
    def run_path(self) -> Path:
        return paths.run_path(self.run_dir)

    def combination_path(self, combo_id: str) -> Path:
        return paths.combination_path(self.run_dir, combo_id)

    def trace_path(self, combo_id: str) -> Path:
        return paths.trace_file(self.run_dir, combo_id)

    def done(self, combo_id: str) -> bool:
        """A readable record exists, whatever its status (``--force`` re-measures)."""
        path = self.combination_path(combo_id)
        if not path.is_file():
            return False
        try:
            record = load_combination(path)
        except UserError:
            return False  # unreadable: measure it again, the new record replaces it
        return record.get("id") == combo_id

    def read_run(self) -> dict[str, Any] | None:
        if not self.run_path.is_file():
            return None
        try:
            return load_run(self.run_dir).record
        except UserError:
            return None

    def write_combination(self, record: Mapping[str, Any]) -> Path:
        path = self.combination_path(str(record["id"]))
        atomic_write_json(path, record)
        return path

    def write_run(self, record: Mapping[str, Any]) -> Path:
        atomic_write_json(self.run_path, record)
        return self.run_path
