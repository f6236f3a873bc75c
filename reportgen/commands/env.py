"""``reportgen env``: print the environment record a run would store (METHOD.md rule 11)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "env",
        help="print the environment record stored with every run",
        description="Print the environment record (host, libraries, torch flags, GPUs, "
        "driver, git) that every stored result carries. Secrets are never included.",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="device the record is for (default: auto, cuda when available)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: readable sections; json: the record as stored (default: text)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from reportgen.errors import require_profile_extra

    require_profile_extra("env")
    from reportgen.profile import env  # imports torch; keep `reportgen --help` fast

    record = env.collect(args.device)
    if args.format == "json":
        json.dump(record, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
        return 0
    print_text(record, hardware=env.hardware_slug(record))
    return 0


def print_text(record: Mapping[str, Any], hardware: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]hardware[/bold]  {hardware}")
    for section, value in record.items():
        table = Table(title=section, title_justify="left", show_header=False, box=None)
        table.add_column("key", style="cyan", no_wrap=True)
        table.add_column("value", overflow="fold")
        rows = list(flatten(value))
        if not rows:
            rows = [("", "(none)")]
        for key, item in rows:
            table.add_row(key, _show(item))
        console.print()
        console.print(table)


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested dicts and lists as ``(dotted.key, leaf)`` rows."""
    if isinstance(value, Mapping):
        if not value and prefix:
            yield prefix, "{}"
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value and any(isinstance(v, (Mapping, list)) for v in value):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "[]"
    return str(value)
