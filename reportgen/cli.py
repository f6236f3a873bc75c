"""Entry point: ``reportgen <command>``; a UserError becomes one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys

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


if __name__ == "__main__":
    raise SystemExit(main())
