"""The module-boundary attribution method: clocks at module calls in an unprofiled pass.

The same modules ``reportgen.profile.structure`` labels for the profiler (embeddings,
attention calls and their projections, MLP containers and their last projection, norms,
activations outside an MLP's projections, heads, the blocks: a `Structure`'s ``labels``),
plus the model's own forward, get forward pre/post hooks that read a clock and nothing
else: ``time.perf_counter_ns`` on a CPU; on a GPU a CUDA event recorded on the
current stream, read only after the iteration's synchronise. No profiler, no
``record_function``, no per-op recording. ``reportgen.shares.categorise`` turns each
iteration's timed calls into the categories (``attention.core`` = the attention call less
its projections, norms and position-bias embeddings; ``other`` = the model's and blocks'
own time; ``overhead`` = the iteration outside the model's forward).

A training step (``reportgen.profile.modes.TrainStep``) is clocked at its phases
(forward, backward, optimizer: the step's ``phase_hook``) and, in its backward, at the
same modules' backward boundaries: when the gradient of a call's outputs is ready and
when the gradient of its inputs is (an identity autograd node on each side, as
``register_full_backward_pre_hook`` / ``register_full_backward_hook`` place them, here on
keyword inputs too, which transformers passes hidden states as). A call none of whose
inputs needs a gradient (an embedding of token ids) has no end to clock: its backward
runs until the next call outside it starts, or the backward ends.

It also gives the profiler method per iteration (``reportgen.attribution.profiler_iterations``:
each profiled iteration attributed alone), so both methods give share intervals from
repetition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from reportgen import shares
from reportgen.attribution import profiler_iterations
from reportgen.profile.step import StepLike
from reportgen.profile.structure import Structure
from reportgen.stats import bootstrap_ratio, median

__all__ = ["attribute", "attribution_section", "clocked", "device_clock", "hooked_forward", "hooks_method",
           "layer_means", "profiler_iterations", "profiler_method"]

_ITERATION = -1
# what a clock reading in the recorder's log marks
_FWD_START, _FWD_END, _BWD_START, _BWD_END, _BWD_OPEN, _PHASE_START, _PHASE_END = range(7)


def _grad_tensors(values: Any) -> list[tuple[Any, torch.Tensor]]:
    """(place, tensor) of the top-level tensors of ``values`` that need a gradient: a
    tensor, the items of a tuple or list, the values of a mapping (a ModelOutput)."""
    if isinstance(values, torch.Tensor):
        items: list[tuple[Any, Any]] = [(None, values)]
    elif isinstance(values, (tuple, list)):
        items = list(enumerate(values))
    elif isinstance(values, dict):
        items = list(values.items())
    else:
        return []
    return [(k, v) for k, v in items if isinstance(v, torch.Tensor) and v.requires_grad]


def _identity_node(tensors: list[torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], Any]:
    """The tensors passed through one identity autograd node (the node full backward
    hooks use), and that node."""
    from torch.nn.modules._functions import BackwardHookFunction

    new = BackwardHookFunction.apply(*tensors)
    if isinstance(new, torch.Tensor):
        new = (new,)
    node = next((t.grad_fn for t in new if t.grad_fn is not None), None)
    return tuple(new), node


def _replace(values: Any, places: list[Any], new: tuple[torch.Tensor, ...]) -> Any:
    if isinstance(values, torch.Tensor):
        return new[0]
    if isinstance(values, dict):
        for k, t in zip(places, new):
            values[k] = t
        return values
    items = list(values)
    for k, t in zip(places, new):
        items[k] = t
    return type(values)(items) if isinstance(values, list) else tuple(items)


class _HostClock:
    method = "host-clock"

    def begin(self) -> None:
        return None

    def mark(self) -> int:
        return time.perf_counter_ns()

    def finish(self, step: StepLike) -> int:
        step.sync()
        return time.perf_counter_ns()

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        first = marks[0]
        return [(m - first) / 1e6 for m in marks]


class _EventClock:
    """CUDA events from a pool (no allocation inside the iteration), recorded on the
    current stream; elapsed times are read after a synchronise."""

    method = "cuda-events"

    def __init__(self, event_factory: Callable[..., Any] | None = None,
                 synchronize: Callable[[], None] | None = None) -> None:
        self.event_factory = event_factory or torch.cuda.Event
        self.synchronize = synchronize or torch.cuda.synchronize
        self.pool: list[Any] = []
        self.used = 0

    def begin(self) -> None:
        self.used = 0

    def mark(self) -> Any:
        if self.used == len(self.pool):
            self.pool.append(self.event_factory(enable_timing=True))
        event = self.pool[self.used]
        self.used += 1
        event.record()
        return event

    def finish(self, step: StepLike) -> Any:
        return self.mark()

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        self.synchronize()
        first = marks[0]
        return [0.0] + [float(first.elapsed_time(m)) for m in marks[1:]]


class _Recorder:
    """Hooks that append ``(key, event, stamp)`` at every labelled module call (and, for
    a training step, at its phases and its modules' backward boundaries)."""

    def __init__(self, model: nn.Module, clock: Any, structure: Structure,
                 training: bool = False) -> None:
        self.clock = clock
        self.log: list[tuple[int, int, Any]] = []
        self.keys: list[tuple[str, str | None]] = []  # (role, settled category)
        self.fqns: list[str | None] = []
        self.training = training
        self._handles: list[Any] = []
        modules = dict(model.named_modules())
        targets: list[tuple[str, str, str | None]] = [("", "model", None)]
        for fqn, info in structure.labels.items():
            if info.role is not None and fqn in modules:
                targets.append((fqn, info.role, structure.categories.get(fqn) if info.role == "proj"
                                else None))
        log, mark = self.log, clock.mark
        self.phase_keys: dict[str, int] = {}
        for fqn, role, category in targets:
            key = len(self.keys)
            self.keys.append((role, category))
            self.fqns.append(fqn)
            module = modules[fqn]
            if training:
                self._handles += self._training_hooks(module, key)
                continue

            def pre(_m: nn.Module, _a: Any, key: int = key) -> None:
                log.append((key, _FWD_START, mark()))

            def post(_m: nn.Module, _a: Any, _o: Any, key: int = key) -> None:
                log.append((key, _FWD_END, mark()))

            self._handles.append(module.register_forward_pre_hook(pre))
            self._handles.append(module.register_forward_hook(post, always_call=True))
        if training:
            from reportgen.attribution import PHASES

            for name in PHASES:
                self.phase_keys[name] = len(self.keys)
                self.keys.append(("phase", name))
                self.fqns.append(None)

    def _training_hooks(self, module: nn.Module, key: int) -> list[Any]:
        """Forward clocks as above, and identity nodes on the call's inputs and outputs
        whose backward reads the clock (see the module docstring)."""
        log, mark = self.log, self.clock.mark
        ends: list[bool] = []  # per open call: whether its inputs need a gradient

        def pre(_m: nn.Module, args: Any, kwargs: Any, key: int = key) -> Any:
            log.append((key, _FWD_START, mark()))
            if not torch.is_grad_enabled():
                ends.append(False)
                return None
            found = [(("a", k), t) for k, t in _grad_tensors(args)]
            found += [(("k", k), t) for k, t in _grad_tensors(kwargs)]
            ends.append(bool(found))
            if not found:
                return None
            new, node = _identity_node([t for _, t in found])
            if node is not None:
                node.register_hook(lambda _gi, _go, key=key: log.append((key, _BWD_END, mark())))
            args = _replace(args, [k for (w, k), _ in found if w == "a"],
                            tuple(t for ((w, _), _), t in zip(found, new) if w == "a"))
            kwargs = _replace(kwargs, [k for (w, k), _ in found if w == "k"],
                              tuple(t for ((w, _), _), t in zip(found, new) if w == "k"))
            return args, kwargs

        def post(_m: nn.Module, _a: Any, output: Any, key: int = key) -> Any:
            log.append((key, _FWD_END, mark()))
            has_end = ends.pop() if ends else False
            found = _grad_tensors(output) if torch.is_grad_enabled() else []
            if not found:
                return None
            new, node = _identity_node([t for _, t in found])
            if node is None:
                return None
            event = _BWD_START if has_end else _BWD_OPEN
            node.register_prehook(lambda _go, key=key, event=event: log.append((key, event, mark())))
            return _replace(output, [k for k, _ in found], new)

        return [module.register_forward_pre_hook(pre, with_kwargs=True),
                module.register_forward_hook(post, always_call=True)]

    def _phase(self, name: str, start: bool) -> None:
        self.log.append((self.phase_keys[name], _PHASE_START if start else _PHASE_END, self.clock.mark()))

    def _inside(self, outer: int, inner: int) -> bool:
        """Whether module key ``inner`` lies inside module key ``outer`` (by name)."""
        a, b = self.fqns[outer], self.fqns[inner]
        return a is not None and b is not None and (a == "" or b == a or b.startswith(a + "."))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def iteration(self, step: StepLike, sources: dict[str, float] | None = None,
                  phases: list[dict[str, dict[str, float]]] | None = None,
                  layers: list[dict[str, dict[str, float]]] | None = None
                  ) -> tuple[float, dict[str, float], int]:
        """One hooked iteration: (wall ms, category ms, module calls timed); ``sources``
        accumulates where ``other`` and ``overhead`` came from; for a training step,
        ``phases`` receives the iteration's ``{phase: {category: ms}}``; ``layers``, when
        given, receives its ``{layer: {category: ms}}`` (``shares.categorise_layers``)."""
        self.log.clear()
        self.clock.begin()
        hooked = self.training and hasattr(step, "phase_hook")
        if hooked:
            step.phase_hook = self._phase  # type: ignore[attr-defined]
        try:
            start = self.clock.mark()
            step()
            end = self.clock.finish(step)
        finally:
            if hooked:
                step.phase_hook = None  # type: ignore[attr-defined]
        log = list(self.log)
        times = self.clock.resolve([start, *(m for _, _, m in log), end])
        calls = self._calls(log, times)
        if phases is not None:
            split = shares.categorise_phases(calls)
            if split is not None:
                phases.append(split)
        if layers is not None:
            layers.append(shares.categorise_layers(calls))
        forward_calls = sum(1 for _, event, _ in log if event == _FWD_END)
        return times[-1], shares.categorise(calls, sources), forward_calls

    def _calls(self, log: Sequence[tuple[int, int, Any]], times: Sequence[float]) -> list[shares.Call]:
        calls = [shares.Call("iteration", times[0], times[-1], None)]
        stack = [0]  # forward calls and phases
        back: list[tuple[int, int, bool]] = []  # open backward calls: (call, key, has an end)

        def close(index: int, t: float) -> None:
            c = calls[index]
            calls[index] = shares.Call(c.role, c.start, t, c.parent, c.category, c.backward, c.fqn)

        for (key, event, _), t in zip(log, times[1:-1]):
            role, category = self.keys[key]
            fqn = self.fqns[key]
            if event in (_FWD_START, _PHASE_START):
                calls.append(shares.Call(role, t, t, stack[-1], category, fqn=fqn))
                stack.append(len(calls) - 1)
            elif event in (_FWD_END, _PHASE_END):
                if event == _PHASE_END:
                    while back:  # the backward's calls end with it at the latest
                        close(back.pop()[0], t)
                if len(stack) > 1:
                    close(stack.pop(), t)
            elif event in (_BWD_START, _BWD_OPEN):
                # a call with no end to clock closes when a call outside it starts
                while back and not back[-1][2] and not self._inside(back[-1][1], key):
                    close(back.pop()[0], t)
                parent = back[-1][0] if back else stack[-1]
                calls.append(shares.Call(role, t, t, parent, category, True, fqn))
                back.append((len(calls) - 1, key, event == _BWD_START))
            elif event == _BWD_END:
                keys = [k for _, k, _ in back]
                if key in keys:
                    while back:
                        index, k, _ = back.pop()
                        close(index, t)
                        if k == key:
                            break
        while back:
            close(back.pop()[0], times[-1])
        return calls


def hooked_forward(model: nn.Module, step: StepLike, clock: Any, structure: Structure,
                   phases: list[dict[str, dict[str, float]]] | None = None) -> tuple[float, dict[str, float]]:
    """One ``step()`` under the method's clocks, installed for it alone: (wall ms,
    category ms). ``structure``: the model's (`structure.derive`). A training step is clocked
    in its backward too (its categories are the whole step's); ``phases``, when given,
    receives its ``{phase: {category: ms}}`` (the phases tile the step)."""
    recorder = _Recorder(model, clock, structure, training=hasattr(step, "phase_hook"))
    try:
        ms, categories, _ = recorder.iteration(step, phases=phases)
    finally:
        recorder.remove()
    return ms, categories


def device_clock(step: StepLike) -> Any:
    """The method's clock for ``step``'s device: CUDA events on a GPU, else the host clock."""
    on_cuda = getattr(getattr(step, "device", None), "type", None) == "cuda"
    return _EventClock() if on_cuda else _HostClock()


@contextmanager
def clocked(model: nn.Module, clock: Any, structure: Structure) -> Iterator[Callable[[], None]]:
    """The method's clock hooks installed on ``model`` (``structure``: the model's), for
    running forwards under them; yields a callable that readies
    them for the next forward (its clock readings cleared, the event pool reused)."""
    recorder = _Recorder(model, clock, structure)

    def ready() -> None:
        recorder.log.clear()
        clock.begin()

    try:
        yield ready
    finally:
        recorder.remove()


def _bare(step: StepLike, clock: Any) -> float:
    clock.begin()
    start = clock.mark()
    step()
    end = clock.finish(step)
    return clock.resolve([start, end])[1]


class HooksPass:
    """The hooks method's iterations on one model, taken one at a time (``hooked``,
    ``bare``) and stated as the method's record section (``section``): ``hooks_method``
    runs them in its own loop; a caller timing several models may interleave theirs."""

    def __init__(self, model: nn.Module, step: StepLike, structure: Structure, clock: Any | None = None) -> None:
        self.model, self.step, self.structure = model, step, structure
        self.clock = device_clock(step) if clock is None else clock
        self.training = hasattr(step, "phase_hook")  # a training step: its phases and backward too
        self.phases: list[dict[str, dict[str, float]]] = []
        self.layers: list[dict[str, dict[str, float]]] = []
        self.per_iteration: list[dict[str, float]] = []
        self.walls: list[float] = []
        self.bare_walls: list[float] = []
        self.calls = 0
        self.sources: dict[str, float] = {}

    def hooked(self) -> float:
        """One iteration under the module-boundary clocks; its wall milliseconds."""
        recorder = _Recorder(self.model, self.clock, self.structure, training=self.training)
        try:
            ms, cats, self.calls = recorder.iteration(self.step, self.sources, self.phases, self.layers)
        finally:
            recorder.remove()
        self.step.reset()
        self.walls.append(ms)
        self.per_iteration.append(cats)
        return ms

    def bare(self) -> float:
        """One iteration without the clocks, the hooks' cost's reference."""
        ms = _bare(self.step, self.clock)
        self.step.reset()
        self.bare_walls.append(ms)
        return ms

    def section(self, bare_ms: Sequence[float] | None = None) -> dict[str, Any]:
        """The method's record section from the iterations taken; ``bare_ms``: the bare
        reference taken elsewhere (the same process's timing samples of this step), in
        place of the pass's own bare iterations (which are then paired with the hooked)."""
        walls = self.walls
        if bare_ms is None:
            bare = self.bare_walls
            ratio, low, high = _ratio(walls, bare, paired=True)
            reference = "alternated"
        else:
            bare = [float(x) for x in bare_ms]
            ratio, low, high = _ratio(walls, bare, paired=False)
            reference = "timing samples"
        return shares.method_section(
            self.per_iteration, walls, phases=self.phases if self.training else None, clock=self.clock.method,
            basis="device" if self.clock.method == "cuda-events" else "cpu",
            calls_per_forward=self.calls, per_layer=layer_means(self.layers),
            other_sources_ms={k: v / len(walls) for k, v in sorted(self.sources.items())},
            cost={"hooked_ms": _median(walls), "bare_ms": _median(bare), "ratio": ratio,
                  "ratio_low": low, "ratio_high": high, "pairs": len(bare) if bare_ms is None else 0,
                  "hooked": len(walls), "bare": len(bare), "bare_reference": reference,
                  "bare_iteration_ms": bare})


def hooks_method(model: nn.Module, step: StepLike, structure: Structure, *, min_iterations: int = 6,
                 max_iterations: int = 40, budget_s: float = 2.0,
                 wall: Callable[[], float] = time.monotonic,
                 clock: Any | None = None, bare_ms: Sequence[float] | None = None) -> dict[str, Any]:
    """Attribute ``step`` by module-boundary clocks; returns the method's record section.

    Hooked iterations run until ``budget_s`` (at least ``min_iterations``): they give the
    per-iteration category times. The hooks' own cost is their median over a bare
    forward's: with ``bare_ms`` (the same process's timing samples of this step, taken
    just before) against those, each side resampled alone; without, bare iterations
    alternate with the hooked ones in ABBA order (hooked, bare, bare, hooked, ...) and
    the pairs are resampled together. Reusing the timing pass's samples spares a bare
    forward per hooked one, half the pass, where the forward is long.
    """
    one = HooksPass(model, step, structure, clock)
    started = wall()
    while len(one.walls) < max_iterations and (len(one.walls) < min_iterations
                                               or wall() - started < budget_s):
        if bare_ms is not None:
            one.hooked()
        elif len(one.walls) % 2 == 0:
            one.hooked()
            one.bare()
        else:
            one.bare()
            one.hooked()
    return one.section(bare_ms)


def layer_means(layers: Sequence[Mapping[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    """Each layer's mean category times over the iterations (``{layer: {category: ms}}``
    each), as the profiler's ``per_layer`` has them: in the order the layers ran, the
    categories with no time in a layer left out."""
    n = len(layers)
    names = list(dict.fromkeys(name for row in layers for name in row))
    out = []
    for name in names:
        total: dict[str, float] = {}
        for row in layers:
            for c, ms in (row.get(name) or {}).items():
                total[c] = total.get(c, 0.0) + ms
        out.append({"layer": name, "categories": {c: ms / n for c, ms in total.items() if ms > 0}})
    return out


def _median(xs: Sequence[float]) -> float:
    return median(xs) if xs else float("nan")


def _ratio(a: Sequence[float], b: Sequence[float], *, paired: bool, reps: int = 1000,
           seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b) with a percentile-bootstrap interval widened to hold it:
    ``paired``, a[i] and b[i] resampled together (ABBA pairs); else each side alone."""
    point = _median(a) / _median(b)
    n = min(len(a), len(b)) if paired else None
    _, low, high = bootstrap_ratio(a[:n], b[:n], paired=paired, reps=reps, seed=seed)
    return point, min(point, low), max(point, high)


def profiler_method(rows: Sequence[tuple[float, dict[str, float]]], basis: str,
                    phases: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The profiler method's record section from ``profiler_iterations`` (per-iteration
    category times, shares with bootstrap intervals over the profiled iterations; a
    training step's ``phases`` from its ``phases_out``)."""
    split = [{name: dict(p["categories"]) for name, p in row.items()} for row in phases or ()]
    return shares.method_section([cats for _, cats in rows], [ms for ms, _ in rows],
                                 phases=split if split and len(split) == len(rows) else None,
                                 clock="torch.profiler", basis=basis)


def attribute(profiled: dict[str, Any], model: nn.Module, step: StepLike, structure: Structure, *,
              budget_s: float, hooks: bool = True, bare_ms: Sequence[float] | None = None) -> dict[str, Any]:
    """Both methods for a profiled combination (``profiling.profile_step``'s result):
    the hooks pass runs here, unprofiled; returns the record's ``attribution``.
    ``hooks=False`` (a compiled forward, whose modules no longer run as modules) keeps
    the profiler's method alone."""
    methods = {"profiler": profiler_method(profiled["per_iteration"],
                                           profiled["attribution"]["basis"],
                                           profiled.get("per_iteration_phases"))}
    failed = None
    if hooks:
        try:
            methods["hooks"] = hooks_method(model, step, structure, budget_s=budget_s, bare_ms=bare_ms)
        except RuntimeError as exc:
            if not hasattr(step, "phase_hook"):
                raise
            # a training step whose model modifies a clocked call's input or output in
            # place cannot carry the backward clocks' identity nodes: profiler alone
            failed = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            step.reset()
    out = attribution_section(profiled["attribution"], methods, step.device.type)
    if not hooks:
        out["headline_reason"] = shares.HEADLINE_REASON["profiler-only"]
    elif failed is not None:
        out["headline_reason"] = f"the hooks method could not clock this training step ({failed})"
    return out


def attribution_section(profiled: dict[str, Any], methods: dict[str, dict[str, Any]],
                        device_type: str) -> dict[str, Any]:
    """The record's ``attribution``: the profiler's section (basis, per layer, launches),
    both methods under ``methods``, and under ``categories`` / ``forward_ms`` the figures
    of the method the device's headline uses (``headline_method``, ``headline_reason``).
    Launch counts stay the profiler's: they are counts, not times."""
    out = dict(profiled)
    headline = shares.headline_method(device_type)
    if headline not in methods:
        headline = "profiler"
    out["methods"] = methods
    out["headline_method"] = headline
    out["headline_reason"] = shares.HEADLINE_REASON[headline]
    chosen = methods.get(headline)
    if chosen is None:
        return out
    prof_cats = profiled.get("categories") or {}
    categories = {}
    for c, entry in chosen["categories"].items():
        base = dict(prof_cats.get(c) or {})
        if headline != "profiler":
            on_device = chosen.get("basis") == "device"
            base.update(ms=entry["ms"], share=entry["share"],
                        cpu_ms=base.get("cpu_ms") if on_device else entry["ms"],
                        device_ms=entry["ms"] if on_device else None)
        base.update(share_low=entry["share_low"], share_high=entry["share_high"])
        base.setdefault("launches", None)
        categories[c] = base
    out["categories"] = categories
    out["forward_ms"] = chosen["forward_ms"]
    if chosen.get("phases"):
        # a training step's phases from the headline method (with their intervals)
        out["phases"] = {name: {k: v for k, v in p.items() if k != "per_iteration_ms"}
                         for name, p in chosen["phases"].items()}
    return out
