"""reportgen.records: where a run's files live, the status words, a category's share."""

from __future__ import annotations

import json
from pathlib import Path

from reportgen.records import paths, status
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, iter_runs, json_schema
from reportgen.records.shares import Share, category_share
from reportgen.records.store import RunStore

ROOT = Path(__file__).parent.parent


def test_paths_are_the_run_layout(tmp_path: Path) -> None:
    assert paths.run_path(tmp_path) == tmp_path / "run.json"
    assert paths.combination_path(tmp_path, "a--b") == tmp_path / "combinations" / "a--b.json"
    assert paths.trace_file(tmp_path, "a--b") == tmp_path / "traces" / "a--b.trace.json.gz"
    assert paths.trace_file(str(tmp_path), "a--b", "tools") == tmp_path / "traces" / "a--b.tools.trace.json.gz"
    assert paths.trace_ref(paths.trace_file(tmp_path, "a--b")) == "traces/a--b.trace.json.gz"
    assert paths.combination_files(tmp_path) == []
    (tmp_path / "combinations").mkdir()
    for name in ("b.json", "a.json", "a.json.tmp"):
        (tmp_path / "combinations" / name).write_text("{}")
    assert [p.name for p in paths.combination_files(tmp_path)] == ["a.json", "b.json"]


def test_the_store_and_the_reader_use_the_same_paths(tmp_path: Path) -> None:
    from reportgen.suite import load_suite

    store = RunStore(tmp_path, "cpu-x-2c", load_suite("tiny"))
    assert store.run_path == paths.run_path(store.run_dir)
    assert store.combination_path("c") == paths.combination_path(store.run_dir, "c")
    assert store.trace_path("c") == paths.trace_file(store.run_dir, "c")


def test_trace_path_stays_inside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "c.trace.json.gz").write_bytes(b"x")
    (tmp_path / "outside.json.gz").write_bytes(b"x")
    assert paths.trace_path(run, {"profile": {"trace": "traces/c.trace.json.gz"}}) == run / "traces" / "c.trace.json.gz"
    assert paths.trace_path(run, {"profile": {"trace": "../outside.json.gz"}}) is None
    assert paths.trace_path(run, {"profile": {"trace": "traces/missing.trace.json.gz"}}) is None
    assert paths.trace_path(run, {"profile": {"trace": None}}) is None
    assert paths.trace_path(run, {"profile": None}) is None and paths.trace_path(run, {}) is None


def test_every_committed_record_names_a_trace_that_is_there() -> None:
    found = 0
    for run in iter_runs(ROOT / "runs"):
        for record in run.combination_records():
            if record.get("status") == status.OK and (record.get("profile") or {}).get("trace"):
                assert paths.trace_path(run.path, record) is not None, record["id"]
                found += 1
    assert found > 0


def test_statuses_are_the_schemas_own() -> None:
    assert set(json_schema(COMBINATION_KIND)["properties"]["status"]["enum"]) == set(status.COMBINATION_STATUSES)
    assert set(json_schema(RUN_KIND)["properties"]["status"]["enum"]) == set(status.RUN_STATUSES)
    assert status.PENDING not in status.COMBINATION_STATUSES


def test_study_and_tool_statuses_are_the_schemas_own() -> None:
    """Every status a study, an instrument or a tool may carry in the combination schema
    is one of the words `records.status` names (and no word there is unused)."""
    enums: list[set[str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found = (node.get("properties") or {}).get("status") if isinstance(node.get("properties"), dict) else None
            if isinstance(found, dict) and "enum" in found:
                enums.append(set(found["enum"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json_schema(COMBINATION_KIND)["$defs"])
    walk(json_schema(COMBINATION_KIND)["properties"]["studies"])
    words = set().union(*enums)
    assert words - set(status.COMBINATION_STATUSES) == {status.NOT_APPLICABLE, status.NOT_AVAILABLE,
                                                          status.MEASURED, status.MISSING}
    assert set(status.STUDY_STATUSES) <= words


def _record(**categories: dict[str, object]) -> dict[str, object]:
    return {"attribution": {"categories": categories}}


def test_category_share_reads_the_value_and_its_interval() -> None:
    record = _record(mlp={"ms": 2.0, "share": 0.4, "share_low": 0.35, "share_high": 0.46},
                     norm={"ms": 0.1, "share": 0.02})
    assert category_share(record, "mlp") == Share(0.4, 0.35, 0.46)
    assert category_share(record, "norm") == Share(0.02, None, None)  # no interval stored
    assert category_share(record, "mixer") is None  # a category the model lacks: absent, not 0
    assert category_share({"attribution": None}, "mlp") is None
    assert category_share({}, "mlp") is None
    half = _record(mlp={"share": 0.4, "share_low": 0.3})
    assert category_share(half, "mlp") == Share(0.4, None, None)
    assert category_share(_record(mlp={"share": None}), "mlp") is None
    assert category_share(_record(mlp={"share": float("nan")}), "mlp") is None
    assert category_share(_record(mlp={"share": True}), "mlp") is None


def test_category_share_reads_the_committed_records_as_stored() -> None:
    """Through the reader (which migrates older records) the shares are the stored ones."""
    checked = 0
    for run in iter_runs(ROOT / "runs"):
        for record in run.combination_records():
            if record.get("status") != status.OK:
                continue
            raw = json.loads(run.combination_path(str(record["id"])).read_text())
            for category, entry in ((raw.get("attribution") or {}).get("categories") or {}).items():
                share = category_share(record, category)
                assert share is not None and share.value == entry["share"]
                if "share_low" in entry and entry["share_low"] is not None:
                    assert (share.low, share.high) == (entry["share_low"], entry["share_high"])
                checked += 1
    assert checked > 0
