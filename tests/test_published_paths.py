"""No local machine path in what is published: committed records and traces, the pages
and their downloads; runs written before that rule are rewritten by ``reportgen.scrub``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from reportgen import scrub

REPO = Path(__file__).resolve().parents[1]


def test_committed_runs_and_pages_name_no_local_path() -> None:
    found: list[str] = []
    for path in sorted((REPO / "runs").rglob("*")):
        if path.name.endswith(".json.gz"):
            text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        elif path.suffix in (".json", ".md", ".csv"):
            text = path.read_text(encoding="utf-8")
        else:
            continue
        found += [f"{path.relative_to(REPO)}: {p}" for p in scrub.local_paths(text)]
    for path in sorted((REPO / "docs").rglob("*")):
        if path.suffix in (".md", ".json", ".csv"):
            found += [f"{path.relative_to(REPO)}: {p}"
                      for p in scrub.local_paths(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found[:20])


def test_local_paths_finds_homes_work_trees_and_temporary_directories() -> None:
    text = 'x "/root/.pyenv/bin/python3" /home/me/a.json (/tmp/run/t.json) runs/x.json /usr/bin/x'
    assert scrub.local_paths(text) == ["/root/.pyenv/bin/python3", "/home/me/a.json", "/tmp/run/t.json"]


def test_a_run_written_before_is_rewritten_once(tmp_path: Path) -> None:
    run = tmp_path / "hw" / "suite-1234abcd"
    (run / "traces").mkdir(parents=True)
    (run / "combinations").mkdir()
    raw = (b'{"schemaVersion": 1, "traceName": "/work/main/runs/hw/x/traces/.a.trace.json.gz.q1.json", '
           b'"traceEvents": []}')
    (run / "traces" / "a.trace.json.gz").write_bytes(gzip.compress(raw))
    (run / "run.json").write_text(json.dumps(
        {"environment": {"python": {"executable": "/root/.pyenv/versions/3.11.7/bin/python3.11"}}}))
    (run / "combinations" / "a.json").write_text(json.dumps(
        {"profile": {"trace": "traces/a.trace.json.gz", "trace_bytes": 1}}))

    changed = scrub.scrub_run(run)
    assert sorted(changed) == ["combinations/a.json", "run.json", "traces/a.trace.json.gz"]
    trace = json.loads(gzip.decompress((run / "traces" / "a.trace.json.gz").read_bytes()))
    assert trace["traceName"] == "traces/a.trace.json.gz" and trace["traceEvents"] == []
    record = json.loads((run / "run.json").read_text())
    assert record["environment"]["python"]["executable"] == "python3.11"
    combo = json.loads((run / "combinations" / "a.json").read_text())
    assert combo["profile"]["trace_bytes"] == (run / "traces" / "a.trace.json.gz").stat().st_size
    assert scrub.scrub_run(run) == []  # idempotent
    assert scrub.main([str(tmp_path)]) == 0
