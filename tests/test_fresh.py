"""A measurement in a fresh process (``execute.fresh``): its value comes back, and every
other ending is one line naming it: an exception, a signal, the timeout, the memory limit,
the memory cgroup's OOM kill. The interpreter is a parameter: another one runs the call
with its own packages."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cgroups import CGROUP_OOM, limited_memory_cgroup

from reportgen.execute import forkserver, fresh

TESTS = Path(__file__).parent


def _gone(pid: int | None) -> bool:
    assert pid is not None
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def test_the_value_comes_back_from_another_process() -> None:
    result = fresh.run("support.fake_measure:add", {"a": 2, "b": 3})
    assert result.ok and result.reason is None
    assert result.value["sum"] == 5
    assert result.value["pid"] == result.pid != os.getpid()
    assert result.forked is False
    assert _gone(result.pid)


def test_an_exception_is_its_type_and_first_line(tmp_path: Path) -> None:
    result = fresh.run("support.fake_measure:fail", log_path=tmp_path / "call.log")
    assert not result.ok and result.ended is None
    assert result.reason == "ValueError: a bug in the measurement"
    assert result.traceback is not None and "second line" in result.traceback


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGSEGV, "SIGSEGV"), (signal.SIGKILL, "SIGKILL")])
def test_death_by_a_signal_is_named(signum: int, name: str) -> None:
    result = fresh.run("support.fake_measure:die", {"signum": int(signum)})
    assert not result.ok and result.ended is not None
    assert result.reason is not None and result.reason.startswith(f"process killed by {name} ({int(signum)}) after ")
    assert " GiB in use" in result.reason  # the host's memory while it ran
    assert result.ended.code == -signum and not result.ended.timed_out


def test_running_past_the_timeout_is_named_and_the_process_killed() -> None:
    result = fresh.run("support.fake_measure:sleep", {"seconds": 600}, timeout_s=1)
    assert result.reason == "timed out after 1 s"
    assert result.ended is not None and result.ended.timed_out and result.ended.code is None
    assert _gone(result.pid)


def test_the_memory_limit_is_named() -> None:
    limit = 1024**3
    result = fresh.run("support.fake_measure:allocate", {"gib": 2}, memory_bytes=limit)
    assert result.reason is not None
    assert result.reason.startswith("out of memory: over its memory limit of 1.0 GiB (MemoryError"), result.reason
    # under the limit the same call returns
    assert fresh.run("support.fake_measure:allocate", {"gib": 0.01}, memory_bytes=limit).value == int(0.01 * 1024**3)


def test_the_output_goes_to_its_log_and_its_tail_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "died.log"
    result = fresh.run("support.fake_measure:measure_and_die", log_path=log)
    assert "about to die" in log.read_text()
    assert "about to die" in result.log_tail


def test_a_scripts_function_runs_without_its_main_block(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import os\n\ndef pid() -> int:\n    return os.getpid()\n\n"
                      "if __name__ == '__main__':\n    raise SystemExit(3)\n")
    result = fresh.run(f"{script}:pid")
    assert result.ok and result.value == result.pid
    assert fresh.target_path(fresh.describe) == "reportgen.execute.fresh:describe"
    with pytest.raises(ValueError, match="module-level"):
        fresh.target_path(lambda: None)


def test_another_interpreter_runs_with_its_own_environment(tmp_path: Path) -> None:
    # the same executable through a link elsewhere: no pyvenv.cfg beside it, so it is the
    # base installation without this virtual environment's packages
    other = tmp_path / "bin" / "python3"
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    here = fresh.interpreter()
    there = fresh.interpreter(str(other))
    assert here["executable"] == sys.executable and here["prefix"] == sys.prefix
    assert there["executable"] == str(other) and there["pid"] != here["pid"]
    assert there["prefix"] == sys.base_prefix
    if sys.prefix != sys.base_prefix:  # run from a virtual environment: the other one is not it
        assert there["prefix"] != here["prefix"]
    # only this reportgen's source travels to it, not this environment's packages
    env = fresh.child_env({}, str(other))
    assert env["PYTHONPATH"].split(os.pathsep) == [str(TESTS.parent)]
    missing = fresh.run("support.fake_measure:add", {"a": 1, "b": 1}, python=str(other))
    assert missing.reason == "ModuleNotFoundError: No module named 'support'"


def test_an_interpreter_that_does_not_exist_is_said(tmp_path: Path) -> None:
    result = fresh.run("support.fake_measure:add", {"a": 1, "b": 1}, python=str(tmp_path / "no-python"))
    assert result.reason is not None and result.reason.startswith("the process could not start: ")
    with pytest.raises(fresh.StartError, match="no-python"):
        fresh.interpreter(str(tmp_path / "no-python"))


# --- forked from the fork server ------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[forkserver.ForkServer]:
    fs = forkserver.ForkServer(log_dir=tmp_path / "logs", preload={"modules": ["support.fake_measure"], "models": []})
    yield fs
    fs.close()


@pytest.mark.slow
def test_a_forked_call_ends_as_a_spawned_one_does(server: forkserver.ForkServer, tmp_path: Path) -> None:
    ok = fresh.run("support.fake_measure:add", {"a": 2, "b": 3}, forkserver=server, log_path=tmp_path / "ok.log")
    assert ok.ok and ok.forked and ok.value["sum"] == 5
    assert server.proc is not None and ok.value["pid"] != server.proc.pid
    assert "forked from the fork server" in (tmp_path / "ok.log").read_text()
    killed = fresh.run("support.fake_measure:die", {"signum": int(signal.SIGKILL)}, forkserver=server)
    assert killed.forked and killed.reason is not None
    assert killed.reason.startswith("process killed by SIGKILL (9) after ")
    late = fresh.run("support.fake_measure:sleep", {"seconds": 600}, forkserver=server, timeout_s=1)
    assert late.forked and late.reason == "timed out after 1 s"
    hungry = fresh.run("support.fake_measure:allocate", {"gib": 64}, forkserver=server, memory_bytes=8 * 1024**3)
    assert hungry.reason is not None and hungry.reason.startswith("out of memory: over its memory limit of 8.0 GiB")
    # another interpreter than the server's is spawned, never forked
    other = tmp_path / "python3"
    other.symlink_to(sys.executable)
    assert fresh.run(fresh.describe, python=str(other), forkserver=server).forked is False


@pytest.mark.slow
def test_a_real_out_of_memory_kill_is_named() -> None:
    with limited_memory_cgroup("reportgen-fresh") as group:
        result = fresh.run("support.fake_measure:hoard", {"cgroup": str(group)}, timeout_s=120)
    assert result.reason is not None and result.reason.startswith("process killed by SIGKILL (9) after ")
    assert CGROUP_OOM.search(result.reason), result.reason
