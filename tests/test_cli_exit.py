"""How the ``reportgen`` process ends: its exit code and every byte of its output, without
the interpreter's teardown where nothing else is left to run, and with it where a
non-daemon thread is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          check=False, timeout=120)


def test_the_exit_code_and_all_output_survive_the_quick_exit() -> None:
    proc = _run("import sys\nfrom reportgen import cli\n"
                "def main():\n    print('x' * 200000, end='')\n    print('last line', file=sys.stderr)\n    return 3\n"
                "cli.main = main\ncli.entry()\n")
    assert proc.returncode == 3
    assert proc.stdout == "x" * 200000 and proc.stderr == "last line\n"


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    done = tmp_path / "done"
    proc = _run("import sys, threading, time\nfrom pathlib import Path\nfrom reportgen import cli\n"
                "def late():\n    time.sleep(0.5)\n    Path(sys.argv[1]).write_text('ok')\n"
                "def main():\n    threading.Thread(target=late).start()\n    return 0\n"
                "cli.main = main\ncli.entry()\n", str(done))
    assert proc.returncode == 0 and done.read_text() == "ok"


def test_the_command_line_ends_as_main_says() -> None:
    ok = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--suite", "cpu-default", "--list"],
                        capture_output=True, text=True, cwd=ROOT, check=False, timeout=120)
    assert ok.returncode == 0 and "bert-base--forward--fp32--eager--b1--s128" in ok.stdout.splitlines()
    bad = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--suite", "no-such-suite", "--list"],
                         capture_output=True, text=True, cwd=ROOT, check=False, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("reportgen: error:") and not bad.stdout
