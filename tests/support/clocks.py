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


class DispatchOpClock(TorchDispatchMode):
    """A clock every aten op advances by one: the categories come out in ops, exactly, so
    two labellings of the same forward can be compared without timing noise."""

    method = "host-clock"

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.paused = 0  # inside the instrumentation's own work (``uncounted``)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not self.paused:
            self.ops += 1
        return func(*args, **(kwargs or {}))

    def uncounted(self, fn: Any) -> Any:
        """``fn`` with the ops it runs left out of the count."""
        def run(*args: Any, **kwargs: Any) -> Any:
            self.paused += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused -= 1
        return run

    def begin(self) -> None:
        return None

    def mark(self) -> int:
        return self.ops

    def finish(self, step: Any) -> int:
        return self.ops

    def resolve(self, marks: Any) -> list[float]:
        return [float(m - marks[0]) for m in marks]
