"""A clock for the hooks method that reads the number of aten ops dispatched so far, in
place of the host clock: what the method attributes to a category becomes a count of the
ops that ran inside it, the same on every host and under any load. Tests of attribution
assert on those counts; host time is the bench's to measure."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpClock:
    """``regions``' clock interface (begin, mark, finish, resolve) over an op count."""

    method = "op-count"

    def __init__(self) -> None:
        self.ops = 0

    def begin(self) -> None:
        return None

    def mark(self) -> int:
        return self.ops

    def finish(self, step: Any) -> int:
        step.sync()
        return self.ops

    def resolve(self, marks: Sequence[int]) -> list[float]:
        return [float(m - marks[0]) for m in marks]


class _Counting(TorchDispatchMode):
    def __init__(self, clock: OpClock) -> None:
        super().__init__()
        self.clock = clock

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.clock.ops += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting_ops() -> Iterator[OpClock]:
    """An OpClock that counts every aten op run while the block runs."""
    clock = OpClock()
    with _Counting(clock):
        yield clock
