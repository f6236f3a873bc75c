"""Records under runs/: round trip, JSON Schema, migration, refusal, atomic writes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reportgen.errors import UserError
from reportgen.records.schema import (
    COMBINATION_KIND,
    RUN_KIND,
    SCHEMA_VERSION,
    RecordInvalid,
    iter_runs,
    json_schema,
    load_combination,
    load_run,
    validation_enabled,
)
from reportgen.records.store import RunStore, atomic_write_bytes, atomic_write_json
from reportgen.suite import load_suite

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

DATA = Path(__file__).parent / "data" / "schema"
GOLDEN = DATA / "v1" / "combination-ok.json"
V0_RUN = DATA / "v0" / "cpu-amd-epyc-7b13-2c" / "cpu-default-0a0b0c0d"


def _validate(record: dict[str, Any], kind: str) -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema(kind))
    jsonschema.Draft202012Validator(json_schema(kind)).validate(record)


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def test_golden_record_matches_the_json_schema() -> None:
    record = load_combination(GOLDEN)
    assert record["schema_version"] == SCHEMA_VERSION
    _validate(record, COMBINATION_KIND)


def test_schema_rejects_a_wrong_record() -> None:
    record = _golden()
    record["status"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        _validate(record, COMBINATION_KIND)
    ok_with_reason = _golden()
    ok_with_reason["reason"] = "should be null"
    with pytest.raises(jsonschema.ValidationError):
        _validate(ok_with_reason, COMBINATION_KIND)


def test_every_record_written_in_the_tests_is_validated(tmp_path: Path) -> None:
    # conftest turns validation on for the whole test session.
    assert validation_enabled()
    record = _golden()
    record["attribution"]["categories"]["mlp"]["share"] = "a lot"
    path = tmp_path / "combinations" / "c.json"
    with pytest.raises(RecordInvalid, match=r"attribution\.categories\.mlp\.share"):
        atomic_write_json(path, record)
    assert not path.parent.exists() or not any(path.parent.iterdir())  # nothing half-written
    run = {"kind": RUN_KIND, "schema_version": SCHEMA_VERSION}
    with pytest.raises(RecordInvalid, match="reportgen.run record"):
        atomic_write_json(tmp_path / "run.json", run)
    atomic_write_json(tmp_path / "other.json", {"kind": "something else"})  # not a record


def test_device_record_with_per_forward_means_validates() -> None:
    # Per-forward means over the profiled iterations are fractional where an op or kernel
    # happens in some iterations only; the schema says number there, integer elsewhere.
    from reportgen.attribution import ATTRIBUTION_KEYS, analyse_trace

    trace = json.loads((DATA.parent / "gpu_trace_threads.json").read_text())
    result = analyse_trace(trace)
    record = _golden()
    record["attribution"] = {k: result[k] for k in ATTRIBUTION_KEYS}
    record["ops"] = [{**op, "calls": op["calls"] + 0.5} for op in result["ops"]]
    record["attribution"]["categories"]["mlp"]["launches"] = 2.5
    _validate(record, COMBINATION_KIND)
    record["memory"]["peak_allocated_bytes"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        _validate(record, COMBINATION_KIND)


def test_round_trip_is_exact(tmp_path: Path) -> None:
    record = _golden()
    path = tmp_path / "c.json"
    atomic_write_json(path, record)
    assert load_combination(path) == record
    # Floats are stored as numbers, never strings.
    assert isinstance(json.loads(path.read_text())["timing"]["median"], float)


def test_nan_and_numpy_values_are_stored_as_json(tmp_path: Path) -> None:
    import numpy as np  # a dependency of the profile side: its absence must fail
    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": float("nan"), "b": np.float64(1.5), "c": np.arange(3), "d": np.int64(7),
                             "e": [float("inf"), np.float32(float("nan"))], "f": np.bool_(True)})
    assert json.loads(path.read_text()) == {"a": None, "b": 1.5, "c": [0, 1, 2], "d": 7, "e": [None, None], "f": True}
    assert "NaN" not in path.read_text()


def test_v0_run_migrates_to_v1_step_by_step() -> None:
    run = load_run(V0_RUN)
    assert run.record["kind"] == RUN_KIND and run.record["schema_version"] == 1
    _validate(run.record, RUN_KIND)
    records = {r["id"]: r for r in run.combination_records()}
    assert set(records) == {"bert-base--forward--fp32--sdpa--b1--s128", "gpt2--decode--fp32--sdpa--b1--s128"}
    ok = records["bert-base--forward--fp32--sdpa--b1--s128"]
    raw = json.loads((V0_RUN / "combinations" / "bert-base--forward--fp32--sdpa--b1--s128.json").read_text())
    assert "latency" not in ok and ok["kind"] == COMBINATION_KIND
    assert ok["timing"]["median"] == raw["latency"]["median"]
    assert [ok["timing"]["ci_low"], ok["timing"]["ci_high"]] == raw["latency"]["ci"]
    assert ok["timing"]["samples"] == raw["latency"]["samples"]
    assert ok["attribution"] is None and ok["profile"] is None
    skipped = records["gpt2--decode--fp32--sdpa--b1--s128"]
    assert skipped["timing"] is None and skipped["reason"] == "decode needs a KV cache"
    for record in records.values():
        _validate(record, COMBINATION_KIND)


def test_newer_version_is_refused(tmp_path: Path) -> None:
    record = _golden()
    record["schema_version"] = 7
    path = tmp_path / "y.json"
    path.write_text(json.dumps(record))
    with pytest.raises(UserError) as info:
        load_combination(path)
    assert str(info.value) == (
        f"{path}: schema_version 7 is newer than this reportgen understands ({SCHEMA_VERSION}); upgrade reportgen"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("{", "not valid JSON"), ("[1]", "expected a JSON object"),
     ('{"kind": "reportgen.run", "schema_version": 1}', "'reportgen.run' where 'reportgen.combination'"),
     ('{"kind": "reportgen.combination", "schema_version": 1}', "missing id"),
     ('{"kind": "reportgen.combination", "schema_version": "1"}', "not a version number")],
)
def test_broken_records_are_one_line_user_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "z.json"
    path.write_text(text)
    with pytest.raises(UserError, match=fragment):
        load_combination(path)


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a run directory"):
        load_run(tmp_path)


def test_iter_runs_finds_every_run() -> None:
    runs = list(iter_runs(DATA))
    assert [r.run_id for r in runs] == ["cpu-amd-epyc-7b13-2c/cpu-default-0a0b0c0d"]
    assert [r.run_id for r in iter_runs(V0_RUN)] == [runs[0].run_id]


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    atomic_write_json(path, {"v": 1})

    def broken_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_json(path, {"v": 2, "big": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]


def test_unserialisable_value_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "c.json", {"v": object()})
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_never_leaves_a_partial_target(tmp_path: Path) -> None:
    # A child writes a large file slowly and is SIGKILLed mid-write: the target is either
    # absent or the previous complete version, and readers ignore the temp file.
    target = tmp_path / "c.json"
    atomic_write_json(target, {"v": "old"})
    code = f"""
import os, sys, time
from reportgen.records import store
real_write = os.fdopen
class Slow:
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *a): self.f.close()
    def write(self, data):
        for i in range(0, len(data), 1024):
            self.f.write(data[i:i+1024]); self.f.flush()
            if i == 4096: print("writing", flush=True); time.sleep(60)
    def flush(self): self.f.flush()
    def fileno(self): return self.f.fileno()
store.os.fdopen = lambda fd, mode: Slow(real_write(fd, mode))
store.atomic_write_json({str(target)!r}, {{"v": "new", "pad": "x" * 100000}})
"""
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          cwd=Path(__file__).parent.parent) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "writing"
        child.kill()
        child.wait()
    assert json.loads(target.read_text()) == {"v": "old"}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "c.json"]
    assert all(name.startswith(".c.json.") and name.endswith(".tmp") for name in leftovers)


def test_atomic_write_bytes_creates_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "t.gz"
    atomic_write_bytes(path, b"\x1f\x8b")
    assert path.read_bytes() == b"\x1f\x8b"


def test_run_store_layout_and_done(tmp_path: Path) -> None:
    suite = load_suite("tiny").with_device("cpu")
    store = RunStore(tmp_path, "cpu-test-2c", suite)
    assert store.run_dir == tmp_path / "cpu-test-2c" / f"tiny-{suite.hash[:8]}"
    assert store.run_id == f"cpu-test-2c/tiny-{suite.hash[:8]}"
    record = _golden()
    combo_id = record["id"]
    assert not store.done(combo_id)
    store.write_combination(record)
    assert store.done(combo_id)
    assert store.combination_path(combo_id).is_file()
    # A truncated record (written by something that was not atomic) is not done.
    store.combination_path(combo_id).write_text(json.dumps(record)[:100])
    assert not store.done(combo_id)
    other = copy.deepcopy(record)
    other["id"] = "something-else"
    store.combination_path(combo_id).write_text(json.dumps(other))
    assert not store.done(combo_id)
    assert store.trace_path(combo_id).name == f"{combo_id}.trace.json.gz"
