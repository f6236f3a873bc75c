"""Entry point: ``reportgen <command>``; a UserError becomes one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading

from reportgen import __version__
from reportgen.commands import COMMANDS
from reportgen.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reportgen",
        description="Profile transformer models and publish where their time goes.",
    )
    parser.add_argument("--version", action="version", version=f"reportgen {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"reportgen.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"reportgen.commands.{name}":
                raise
            continue  # a command not built yet
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"reportgen: error: {exc}", file=sys.stderr)
        return UserError.exit_code
    except KeyboardInterrupt:
        print("reportgen: interrupted; finished combinations are saved", file=sys.stderr)
        return 130


def entry() -> None:
    """The ``reportgen`` process: `main`, then out. Once every thread but this one is done
    (a daemon's aside), nothing is left to run but the interpreter's teardown, which with
    torch and transformers imported takes longer than some commands' own work (about a
    second on a 2-core host): the process leaves without it, its output flushed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if all(t.daemon or t is threading.main_thread() for t in threading.enumerate()):
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
