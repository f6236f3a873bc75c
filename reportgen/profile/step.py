"""`StepLike`: what timing, profiling, structure and FLOP counting need of one measured
iteration. `reportgen.profile.models.Step` and the micro-benchmark's step implement it."""

from __future__ import annotations

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
