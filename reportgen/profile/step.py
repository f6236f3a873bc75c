"""`StepLike`: what timing, profiling, structure and FLOP counting need of one measured
iteration. `reportgen.profile.modes.Step` and the micro-benchmark's step implement it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol


class StepLike(Protocol):
    device: Any  # torch.device
    inputs_info: dict[str, Any]

    def __call__(self) -> Any:
        """Run one forward (no synchronisation inside)."""

    def reset(self) -> None:
        """Restore state between iterations (untimed), e.g. crop a KV cache."""

    def sync(self) -> None:
        """Wait for the device."""


def run_hooked(step: StepLike, handles: Iterable[Any], within: Any = None) -> None:
    """One untimed iteration of ``step`` while the hooks behind ``handles`` watch it
    (inside the context manager ``within``, if any); the hooks are removed and the step
    reset afterwards, whatever happens."""
    try:
        with within if within is not None else contextlib.nullcontext():
            step()
        step.sync()
    finally:
        for handle in handles:
            handle.remove()
        step.reset()
