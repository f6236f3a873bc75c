"""The effort and contention figures of the bench, on recorded records; the busy process
the contention figure starts, for real."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from reportgen.bench import effort
from reportgen.bench.results import verdict


def _record(combo_id: str, median: float, low: float, high: float, *, unstable: str | None = None,
            contended: int = 0) -> dict[str, Any]:
    timing: dict[str, Any] = {"median": median, "ci_low": low, "ci_high": high, "contended_rounds": contended,
                              "rounds": [{"round": i, "n": 20} for i in range(6)]}
    if unstable:
        timing["unstable"] = unstable
    return {"id": combo_id, "status": "ok", "timing": timing, "duration_s": 2.0,
            "combination": {"seq_len": 128}}


def test_a_busy_run_passes_only_where_medians_hold_or_the_record_says_why() -> None:
    quiet = [_record("a", 10.0, 9.8, 10.2), _record("b", 10.0, 9.8, 10.2), _record("c", 10.0, 9.8, 10.2),
             _record("d", 10.0, 9.8, 10.2)]
    busy = [_record("a", 10.3, 10.0, 10.6),  # within 5%: fine unflagged
            _record("b", 14.0, 11.0, 40.0, unstable="another process used 48% of the CPU during 5 of 10 rounds",
                    contended=5),  # slow but flagged
            _record("c", 13.0, 12.0, 14.0),  # slow and silent: fails
            _record("d", 10.1, 5.0, 40.0)]  # median holds, but an unflagged interval 3.5 medians wide: fails
    rows = effort.contention_rows(quiet, busy)
    assert [r["ok"] for r in rows] == [True, True, False, False]
    assert rows[1]["unstable"].startswith("another process used 48%")
    fig = effort.contention_figure(rows, wall_s=100.0, quiet_wall_s=60.0)
    assert fig["status"] == "fail" and fig["value"] == 0.5
    assert fig["silent_wide"] == 1 and fig["flagged"] == 1 and fig["within"] == 2
    good = effort.contention_figure(rows[:2], wall_s=100.0, quiet_wall_s=60.0)
    assert good["status"] == "pass"


def test_the_tiny_effort_goal_is_per_combination() -> None:
    records = [_record(f"c{i}", 1.0, 0.99, 1.01) for i in range(32)]
    fast = effort.tiny_effort(effort.Measured(wall_s=120.0, records=records, run_dir=None, returncode=0))
    assert fast["status"] == "pass" and fast["value"] == 120.0 / 32
    slow = effort.tiny_effort(effort.Measured(wall_s=32 * 31.0, records=records, run_dir=None, returncode=0))
    assert slow["status"] == "fail"


def test_the_reference_effort_is_a_ratio_or_says_why_not() -> None:
    records = [_record("bert-base--forward--fp32--sdpa--b1--s128", 60.0, 59.0, 61.0)]
    measured = effort.Measured(wall_s=15.0, records=records, run_dir=None, returncode=0)
    fig = effort.reference_effort([measured], [38.0], "", {128: 0.061})
    assert fig["value"] == 15.0 / 38.0 and fig["status"] == "pass"
    assert fig["rows"][0]["optimum_benchmark_p50_ms"] == 61.0 and fig["rows"][0]["run"] == 1
    missing = effort.reference_effort([measured], [], "optimum-benchmark failed: OSError: no network", {})
    assert missing["status"] == "not measured"
    assert any("no network" in n for n in missing["notes"])
    assert verdict({"kind": "below", "target": 0.5}, 0.6) == "fail"


def test_the_reference_effort_goal_is_optimum_benchmarks_own_time() -> None:
    """reportgen's full answer passes in no more time than optimum-benchmark's latency alone."""
    measured = effort.Measured(wall_s=34.0, records=[], run_dir=None, returncode=0)
    level = effort.reference_effort([measured], [34.0], "", {})
    assert level["status"] == "pass" and level["goal"] == "at most 1.0x optimum-benchmark's time"
    slower = effort.reference_effort([effort.Measured(wall_s=35.0, records=[], run_dir=None, returncode=0)],
                                     [34.0], "", {})
    assert slower["status"] == "fail" and slower["goal_spec"] == {"kind": "below", "target": 1.0 + 1e-9}


def test_the_reference_effort_takes_the_median_of_alternating_runs() -> None:
    """Each side's figure is the median of its runs, and every run is kept: one slow run of
    either side moves its side by half the difference, not the whole."""
    runs = [effort.Measured(wall_s=w, records=[], run_dir=None, returncode=0) for w in (36.0, 40.0)]
    fig = effort.reference_effort(runs, [38.5, 37.5], "", {})
    assert fig["value"] == 38.0 / 38.0 and fig["status"] == "pass"
    assert fig["reportgen_runs_s"] == [36.0, 40.0] and fig["optimum_benchmark_runs_s"] == [38.5, 37.5]
    assert "(the median of 36.0, 40.0 s;" in fig["notes"][0]
    assert any(n.startswith("the runs alternate: reportgen, optimum-benchmark, optimum-benchmark, reportgen")
               for n in fig["notes"])
    assert effort.REFERENCE_ORDER == ("reportgen", "optimum", "optimum", "reportgen")


def test_optimum_benchmarks_download_is_served_from_disk(tmp_path: Path) -> None:
    """The script's stand-in for the Hub download copies config.json from the model
    directory into the cache directory optimum-benchmark asks for, as hf_hub_download does."""
    source = effort.OPTIMUM_SCRIPT
    start, end = source.index("def config_from_disk"), source.index("base.HF_API")
    scope: dict[str, object] = {"Path": Path, "shutil": __import__("shutil")}
    exec(source[start:end], scope)  # noqa: S102 - the function as the script defines it
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    got = Path(scope["config_from_disk"](str(model), "config.json", cache_dir=str(tmp_path / "cache")))  # type: ignore[operator]
    assert got.parent.parent == tmp_path / "cache"
    assert got.name == "config.json" and got.read_text() == '{"model_type": "bert"}'
    compile(source, "optimum-script", "exec")


def _cpu_of(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])  # field 39 of /proc/<pid>/stat: the CPU it last ran on


def test_the_busy_process_runs_on_its_core_and_is_stopped_by_its_pid() -> None:
    with effort.Hog() as hog:
        assert hog.proc is not None
        pid = hog.proc.pid
        time.sleep(0.5)
        assert os.sched_getaffinity(pid) == {hog.cpu}
        assert _cpu_of(pid) == hog.cpu
        assert hog.proc.poll() is None
    assert hog.proc.poll() is not None and not Path(f"/proc/{pid}").exists()


def test_a_relative_scratch_reaches_the_peer_as_an_absolute_path(tmp_path: Path, monkeypatch: Any) -> None:
    """The peer runs with the scratch as its working directory: the interpreter and the
    directories handed to it are absolute, whatever the command line gave."""
    seen: list[Path] = []

    def fake_run(suite_text: str, out: Path, **_: Any) -> effort.Measured:
        seen.append(out)
        return effort.Measured(1.0, [], None, 0)

    def fake_python(scratch: Path, log: Any) -> tuple[Path | None, str]:
        seen.append(scratch)
        return scratch / "optimum-venv" / "bin" / "python", ""

    def fake_optimum(python: Path, scratch: Path) -> tuple[float | None, str, dict[int, float]]:
        seen.extend((python, scratch))
        return None, "stopped here", {}

    class NoHog:
        proc = None
        cpu = 0

        def __enter__(self) -> NoHog:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(effort, "profile_run", fake_run)
    monkeypatch.setattr(effort, "optimum_python", fake_python)
    monkeypatch.setattr(effort, "optimum_run", fake_optimum)
    monkeypatch.setattr(effort, "Hog", NoHog)
    monkeypatch.setattr(effort, "tiny_effort", lambda m: {})
    monkeypatch.setattr(effort, "reference_effort", lambda *a: {})
    monkeypatch.setattr(effort, "contention_figure", lambda *a, **k: {})
    monkeypatch.chdir(tmp_path)
    effort.run(Path(".bench"), lambda m: None)
    assert seen and all(p.is_absolute() for p in seen), seen
    assert seen[0] == tmp_path.resolve() / ".bench" / "effort-tiny"
    # the peer is installed before either side is timed; a peer that fails is tried once
    runs = [p.name for p in seen if p.name.startswith("effort-")]
    assert runs == ["effort-tiny", "effort-bert-1", "effort-bert-2", "effort-busy"]
    assert seen.index(tmp_path.resolve() / ".bench") < seen.index(tmp_path.resolve() / ".bench" / "effort-bert-1")
    assert sum(1 for p in seen if p.name == "python") == 1


def test_reportgen_is_timed_with_its_bytecode_compiled_as_installed(tmp_path: Path, monkeypatch: Any) -> None:
    """The bytecode is written before the clock starts, untimed, as pip writes it when it
    installs the package; then the profile command runs in a fresh interpreter."""
    import subprocess

    import reportgen

    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(effort.subprocess, "run", fake_run)
    measured = effort.profile_run(effort.reference_suite(), tmp_path)
    assert calls[0][1:4] == ["-m", "compileall", "-q"] and calls[0][4] == str(Path(reportgen.__file__).parent)
    assert calls[1][1:4] == ["-m", "reportgen", "profile"] and len(calls) == 2
    assert measured.records == [] and measured.returncode == 0
