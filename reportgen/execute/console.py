"""The console while a suite runs: a progress display and nothing else.

Workers write to their logs (the profiler's own lines included); the console shows one
line per finished combination (a bar on a terminal), and for a failure its reason and
the tail of the worker's log.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from reportgen.intervals import unstable_reason
from reportgen.records.status import is_failed, is_ok
from reportgen.suite import Combination


class Progress:
    """A rich progress bar on a terminal; one line per combination otherwise (CI logs)."""

    def __init__(self, total: int, todo: int, resumed: int, *, enabled: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.total, self.todo, self.resumed = total, todo, resumed
        self.done = resumed
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.running: dict[str, str] = {}  # slot -> combination id
        self.lock = threading.Lock()

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        if self.resumed:
            self.note(f"resuming: {self.resumed} of {self.total} combinations already done")
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            # The bar counts only this invocation's work, so resumed ones don't skew ETA.
            self.bar = Bar(
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("", total=self.todo)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _describe(self) -> str:
        return "  ".join(f"{slot}: {combo_id}" for slot, combo_id in sorted(self.running.items()))

    def start(self, combo: Combination, slot: str) -> None:
        with self.lock:
            self.running[slot] = combo.id
            if self.bar is not None:
                self.bar.update(self.task, description=self._describe())

    def pause(self, slot: str) -> None:
        """A round ended; the combination has more to come."""
        with self.lock:
            self.running.pop(slot, None)
            if self.bar is not None:
                self.bar.update(self.task, description=self._describe())

    def finish(self, combo: Combination, slot: str, record: Mapping[str, Any], log_tail: str | None = None) -> None:
        with self.lock:
            self.running.pop(slot, None)
            self.done += 1
            if not self.enabled:
                return
            timing = record.get("timing") or {}
            median = timing.get("median")
            detail = f"{median:.4g} ms" if isinstance(median, (int, float)) else (record.get("reason") or "")
            where = f" on {slot}" if slot not in ("cpu", "inline") else ""
            line = (f"[{self.done}/{self.total}] {combo.id}{where}: {record['status']} {detail} "
                    f"({record['duration_s']:.1f} s)")
            lines = [line]
            unstable = unstable_reason(record) if is_ok(record) else None
            if unstable:
                lines.append(f"  unstable: {unstable}")
            reduced = ((record.get("preflight") or {}).get("reduced") or {}).get("reason")
            if reduced:  # too big for the device as asked: what was measured instead, and why
                lines.append(f"  {reduced}")
            if is_failed(record) and log_tail:
                lines.append("  worker log (last lines):")
                lines += ["  | " + text for text in log_tail.splitlines()]
            if self.bar is not None:
                self.bar.advance(self.task)
                self.bar.update(self.task, description=self._describe())
                if is_failed(record) or unstable or reduced:
                    for text in lines:
                        self.bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                for text in lines:
                    self.console.print(text, markup=False, highlight=False, soft_wrap=True)
