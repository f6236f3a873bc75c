"""Readers for runs/: version stamps, step-by-step migration, refusal of newer versions.

Two record kinds live under runs/: ``reportgen.run`` (run.json) and
``reportgen.combination`` (combinations/<id>.json). Their JSON Schemas are in
``reportgen/schemas/`` (documentation and tests; this module needs only the stdlib).
Loading an older record migrates it one version at a time to ``SCHEMA_VERSION``; a newer
one is refused, because guessing at fields we do not know would publish wrong numbers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from reportgen.errors import UserError
from reportgen.records import paths
from reportgen.records.releases import is_history
from reportgen.records.status import COMBINATION_STATUSES, COMPLETE

SCHEMA_VERSION = 1
RUN_KIND = "reportgen.run"
COMBINATION_KIND = "reportgen.combination"
SCHEMAS_DIR = Path(__file__).parent.parent / "schemas"
SCHEMA_FILES = {RUN_KIND: "run.schema.json", COMBINATION_KIND: "combination.schema.json"}

STATUSES: tuple[str, ...] = COMBINATION_STATUSES
# Measurement sections: objects on an "ok" record, null on "skipped" / "failed".
SECTIONS: tuple[str, ...] = ("model", "inputs", "timing", "profile", "attribution", "ops", "memory", "flops")
ENVELOPE_KEYS: tuple[str, ...] = (
    "kind",
    "schema_version",
    "id",
    "run_id",
    "combination",
    "status",
    "reason",
    "started",
    "finished",
    "duration_s",
    "git",
)
RUN_KEYS: tuple[str, ...] = ("kind", "schema_version", "run_id", "hardware", "suite", "combinations")

Record = dict[str, Any]
Migration = Callable[[Record], Record]


# --- migrations: MIGRATIONS[kind][v] turns a version-v record into version v+1 ---------


def _combination_0_to_1(record: Record) -> Record:
    # v0 called the timing section "latency", stored the interval as a "ci" pair and had
    # no "kind"; sections a v0 run did not measure are null in v1.
    out: Record = {"kind": COMBINATION_KIND, "schema_version": 1}
    for key, value in record.items():
        if key in ("schema_version", "latency"):
            continue
        out[key] = value
    latency = record.get("latency")
    timing: Record | None = None
    if isinstance(latency, dict):
        timing = {k: v for k, v in latency.items() if k != "ci"}
        ci = latency.get("ci")
        low, high = (ci if isinstance(ci, list) and len(ci) == 2 else (None, None))
        timing.setdefault("unit", "ms")
        timing["ci_low"] = low
        timing["ci_high"] = high
        timing.setdefault("confidence", 0.95)
        timing.setdefault("ci_method", "order-statistic")
    out["timing"] = timing
    for section in SECTIONS:
        out.setdefault(section, None)
    return out


def _run_0_to_1(record: Record) -> Record:
    out: Record = {"kind": RUN_KIND, "schema_version": 1}
    out.update({k: v for k, v in record.items() if k != "schema_version"})
    return out


MIGRATIONS: dict[str, dict[int, Migration]] = {
    COMBINATION_KIND: {0: _combination_0_to_1},
    RUN_KIND: {0: _run_0_to_1},
}


def migrate(record: Record, kind: str, where: str) -> Record:
    """Bring ``record`` of ``kind`` to ``SCHEMA_VERSION``, one step at a time."""
    version = record.get("schema_version", 0)  # v0 records may lack the stamp
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise UserError(f"{where}: schema_version {version!r} is not a version number")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{where}: schema_version {version} is newer than this reportgen understands "
            f"({SCHEMA_VERSION}); upgrade reportgen"
        )
    while version < SCHEMA_VERSION:
        step = MIGRATIONS[kind].get(version)
        if step is None:
            raise UserError(f"{where}: no migration from schema_version {version} for {kind}")
        record = step(record)
        version += 1
        record["schema_version"] = version
    found = record.get("kind")
    if found != kind:
        raise UserError(f"{where}: kind {found!r} where {kind!r} was expected")
    return record


def _read_json(path: Path) -> Record:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _require(record: Record, keys: tuple[str, ...], where: str, kind: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise UserError(f"{where}: not a {kind} record (missing {', '.join(missing)})")


def load_combination(path: str | Path) -> Record:
    """A combination record at ``SCHEMA_VERSION`` (migrated if older)."""
    path = Path(path)
    record = migrate(_read_json(path), COMBINATION_KIND, str(path))
    _require(record, ("id", "combination", "status"), str(path), COMBINATION_KIND)
    if record["status"] not in STATUSES:
        raise UserError(f"{path}: status {record['status']!r}; valid: {', '.join(STATUSES)}")
    return record


@dataclass(frozen=True)
class StoredCombination:
    """A combination record as a run stores it, and where its files are (what a suite asks
    to measure is ``reportgen.suite.Combination``)."""

    record: Record
    path: Path  # the combination JSON
    trace: Path | None  # the gzipped Chrome trace of its profiled pass, where it exists


@dataclass(frozen=True)
class Run:
    """A stored run: its directory, its run.json record (at ``SCHEMA_VERSION``) and, where
    they were loaded (``records.load.load_runs``), its combination records, sorted by file
    name."""

    path: Path  # the run directory
    record: Record
    rel: str  # the run directory relative to the runs tree it was read from, with forward slashes
    combinations: tuple[StoredCombination, ...] = ()

    @property
    def run_id(self) -> str:
        return str(self.record.get("run_id") or self.rel)

    @property
    def hardware(self) -> str:
        return str(self.record.get("hardware") or self.rel.split("/")[0])

    def combination_ids(self) -> list[str]:
        """Ids of the suite, in suite order, then any extra records found on disk."""
        ids = [str(i) for i in self.record.get("combinations", [])]
        known = set(ids)
        extra = sorted(p.stem for p in paths.combination_files(self.path) if p.stem not in known)
        return ids + extra

    def combination_path(self, combo_id: str) -> Path:
        return paths.combination_path(self.path, combo_id)

    def combination_records(self) -> Iterator[Record]:
        """Records that exist, read from disk in suite order; combinations not measured yet
        are absent."""
        for combo_id in self.combination_ids():
            path = self.combination_path(combo_id)
            if path.is_file():
                yield load_combination(path)


def load_run(path: str | Path) -> Run:
    """A run from its directory (or its run.json)."""
    path = Path(path)
    run_dir = path.parent if path.name == "run.json" else path
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        hint = ""
        if run_dir.is_dir():
            found = [str(p.parent) for p in sorted(run_dir.rglob("run.json"))[:3]]
            if found:
                hint = f"; runs under it: {', '.join(found)}"
        raise UserError(f"{run_dir}: not a run directory (no run.json){hint}")
    record = migrate(_read_json(run_json), RUN_KIND, str(run_json))
    _require(record, ("run_id", "suite", "combinations"), str(run_json), RUN_KIND)
    return Run(path=run_dir, record=record, rel=run_dir.name)


def iter_runs(root: str | Path) -> Iterator[Run]:
    """Every run under ``root`` (``runs/``), sorted by path; ``root`` may be a run."""
    root = Path(root)
    if (root / "run.json").is_file():
        yield load_run(root)
        return
    for run_json in sorted(root.rglob("run.json")):
        yield load_run(run_json.parent)


class _HasRecord(Protocol):
    @property
    def record(self) -> Mapping[str, Any]: ...

    @property
    def run_id(self) -> str: ...


R = TypeVar("R", bound=_HasRecord)


def series_key(record: Mapping[str, Any], run_id: str) -> tuple[str, str]:
    """Runs of one series: the same suite on the same hardware (runs made with flags that
    replaced the matrix form one series per suite hash)."""
    suite = record.get("suite") or {}
    name = str(suite.get("name") or "")
    if name == "custom":
        name = f"custom-{str(suite.get('hash') or '')[:8]}"
    return (str(record.get("hardware") or run_id.split("/")[0]), name)


def run_started(record: Mapping[str, Any], run_id: str) -> tuple[str, str]:
    """Sort key of runs within a series, oldest first."""
    return (str(record.get("started") or record.get("updated") or ""), run_id)


def series(runs: Iterable[R]) -> dict[tuple[str, str], list[R]]:
    """Runs grouped by `series_key`, each group oldest first."""
    out: dict[tuple[str, str], list[R]] = {}
    for run in runs:
        out.setdefault(series_key(run.record, run.run_id), []).append(run)
    return {k: sorted(v, key=lambda r: run_started(r.record, r.run_id)) for k, v in sorted(out.items())}


def current_runs(runs: Iterable[R]) -> list[R]:
    """The run each series is read from: its latest complete run (or, while none is
    complete, its latest). Earlier runs stay on disk and keep their meaning.

    A history's runs (``reportgen history``: one per torch and transformers release set,
    run.json's ``release``) are never current: the History pages set them against the
    releases, and every other page reads the runs ``reportgen profile`` measured with the
    installed releases."""
    out = []
    for group in series(r for r in runs if not is_history(r.record)).values():
        complete = [r for r in group if r.record.get("status") == COMPLETE]
        out.append((complete or group)[-1])
    return sorted(out, key=lambda r: r.run_id)


def json_schema(kind: str) -> Record:
    """The JSON Schema (draft 2020-12) of a record kind, for validators in any language."""
    return _read_json(SCHEMAS_DIR / SCHEMA_FILES[kind])


VALIDATE_ENV = "REPORTGEN_VALIDATE_RECORDS"


class RecordInvalid(ValueError):
    """A record about to be written does not match its kind's JSON Schema."""


def validation_enabled() -> bool:
    """Whether records are checked against their JSON Schema when written: on in the tests
    and the bench (``REPORTGEN_VALIDATE_RECORDS=1``), off by default so that a bare GPU
    host needs no ``jsonschema``."""
    return os.environ.get(VALIDATE_ENV, "") not in ("", "0")


def validate_record(record: Record) -> None:
    """Check a run or combination record (plain JSON data) against its kind's JSON
    Schema; raises `RecordInvalid` naming the record, the field and what is wrong.
    Needs ``jsonschema`` (imported here only)."""
    kind = record.get("kind")
    if kind not in SCHEMA_FILES:
        raise RecordInvalid(f"record of unknown kind {kind!r}")
    try:
        import jsonschema
    except ImportError as exc:
        raise RecordInvalid(f"{VALIDATE_ENV} is set but jsonschema is not installed") from exc
    validator = jsonschema.Draft202012Validator(json_schema(str(kind)))
    error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise RecordInvalid(f"{kind} record {record.get('id') or record.get('run_id')!r} does "
                            f"not match its schema at {where}: {error.message}")
