"""Measures for the runner's inline executor (``run_suite(measure=...)``): the golden
record's sections for every combination, decode skipped, an interrupt on request."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reportgen.errors import Skip
from reportgen.records.schema import SECTIONS
from reportgen.suite import Combination
from support.fake_measure import GOLDEN


class InProcessMeasure:
    """A measure callable for the inline executor (run_suite(measure=...))."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.interrupt_at = interrupt_at

    def __call__(self, combo: Combination, *, run_dir: Path, combo_id: str, budget_s: float,
                 seed: int, profile_iterations: int) -> Mapping[str, Any]:
        self.calls.append(combo_id)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if combo.mode == "decode":
            raise Skip("no decode here")
        return {name: GOLDEN[name] for name in SECTIONS}
