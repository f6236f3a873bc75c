"""Attribute a profiled forward to categories from its Chrome trace (no torch here).

The trace is what ``torch.profiler`` exports: host ``cpu_op`` and ``user_annotation``
events (complete events, ``ph == "X"``, microseconds) on every host thread,
``cuda_runtime`` launches, device ``kernel``/``gpu_memcpy``/``gpu_memset`` events on every
stream linked to their launch by ``correlation`` (or the ``ac2g`` flow arrow, or the op's
``External id``), and ``[memory]`` instants. The hooks in ``reportgen.profile.structure`` open ``rg|<role>|<fqn>``
ranges around modules and ``rg|iteration`` around each profiled forward.

A training step (``reportgen.profile.modes.TrainStep``) also opens ``rg|phase|<phase>``
ranges (forward, backward, optimizer: ``PHASES``). No module range is open while the
backward runs, so a backward op (``autograd::engine::evaluate_function: <Node>``) takes
the category of the forward op that created its autograd node: the op with the same
``Sequence number``, the last forward op to record it (what torch.profiler's ``fwdbwd``
flow arrows join). A backward op
with no forward op (``AccumulateGrad``, which adds a parameter's gradient into ``.grad``)
takes the category of the backward op before it on its thread, the one that produced
that gradient. Every op of the optimizer phase is ``optimizer``.

Both the render side and tests on recorded GPU traces call this, hence pure Python.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reportgen.categories import CATEGORIES, OPTIMIZER

LABEL_PREFIX = "rg|"
ITERATION_LABEL = "rg|iteration"
PHASE_ROLE = "phase"  # rg|phase|<forward|backward|optimizer>: the parts of a training step
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function:"
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CORE_OP_MARKERS = ("attention", "attn", "softmax", "bmm", "baddbmm", "matmul")
# Host ops torch.compile wraps a compiled forward in. They do no work of their own: the
# kernels inside them are the ops, and their own time (the generated wrapper's Python,
# guard checks) is overhead like any other time between ops.
COMPILED_REGION_OPS = ("Torch-Compiled Region", "## Call CompiledFxGraph", "CompiledFunction")
# The compiled runtime's own bookkeeping around a graph call (guard checks, the code
# dynamo runs before the graph, AOTAutograd's wrapper): overhead, like any time between ops.
RUNTIME_OPS = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper")
# Inside a compiled graph an op keeps a category only when its name alone says it: an
# unfused library call of the attention core (e.g. aten::_scaled_dot_product_*). Fused
# kernels and matmuls could belong to several modules and land in "compiled".
COMPILED_CORE_MARKERS = ("attention", "softmax")

# Categories a range role fixes regardless of where in the module call it sits.
ROLE_CATEGORY: dict[str, str] = {
    "embed": "embeddings",
    "norm": "norm",
    "head": "head",
    "act": "mlp",
    "core": "attention.core",
    "mixer": "mixer",
    "moe": "moe.router",
    "experts": "moe.experts",
    "shared": "moe.shared",
    "indexer": "attention.indexer",
    "residual": "residual",
    "block": "other",
    # a layer that keeps several residual streams: its own ops are their mixing
    "streams": "residual",
}
# The roles of a layer: one stream of hidden states, or several residual streams
LAYER_ROLES: tuple[str, ...] = ("block", "streams")

# Keys of analyse_trace's result that form the record's "attribution" section.
ATTRIBUTION_KEYS = ("basis", "forward_ms", "categories", "per_layer", "launches_per_forward",
                    "device_idle_ms", "memory_ops_per_forward", "unlinked_device_events",
                    "unlinked_device_ms", "phases")


def is_core_op(name: str) -> bool:
    """Whether an op (aten name or torch function name) is an attention core op."""
    lowered = name.lower()
    return any(marker in lowered for marker in CORE_OP_MARKERS)


def parse_label(name: str) -> tuple[str, str] | None:
    """``"rg|proj|encoder.layer.0.attention.self.query"`` -> ``("proj", fqn)``."""
    if not name.startswith(LABEL_PREFIX) or name == ITERATION_LABEL:
        return None
    role, _, fqn = name[len(LABEL_PREFIX):].partition("|")
    return role, fqn


def split_attention(items: Sequence[tuple[str, float, float]]) -> list[str]:
    """Categories for the pieces of one attention-container call.

    ``items`` are ``(kind, start, end)`` with kind ``"proj"`` (one projection call),
    ``"core"`` (a core op) or ``"op"`` (anything else directly in the container).
    Projections before the last core op feed it (qkv); those after it are the output
    projection; without any core op the last projection is taken as the output one.
    Ops from the end of the first output projection on (dropout, residual add) are
    ``other``; every other op is ``attention.core``.
    """
    cores = [(s, e) for kind, s, e in items if kind == "core"]
    proj_starts = sorted(s for kind, s, _ in items if kind == "proj")
    if cores:
        last_core_end = max(e for _, e in cores)
        is_out = [kind == "proj" and s >= last_core_end for kind, s, _ in items]
    elif proj_starts:
        is_out = [kind == "proj" and s == proj_starts[-1] for kind, s, _ in items]
    else:
        is_out = [False] * len(items)
    out_ends = [e for (_, _, e), out in zip(items, is_out) if out]
    first_out_end = min(out_ends) if out_ends else float("inf")
    result: list[str] = []
    for (kind, start, _), out in zip(items, is_out):
        if kind == "proj":
            result.append("attention.out" if out else "attention.qkv")
        elif kind == "op" and start >= first_out_end:
            result.append("other")
        else:
            result.append("attention.core")
    return result


def split_mlp(items: Sequence[tuple[str, float, float]]) -> list[str]:
    """Categories for the pieces of one MLP-container call: ops that start after the
    container's last projection ends (residual add, dropout) are ``other``."""
    proj_ends = [e for kind, _, e in items if kind == "proj"]
    last_end = max(proj_ends) if proj_ends else float("inf")
    return ["other" if kind == "op" and s >= last_end else "mlp" for kind, s, _ in items]


@dataclass
class _Ctx:
    """What encloses an event on the host thread (indices into the parse lists)."""

    range: int | None = None
    op: int | None = None
    block: int | None = None
    attn: int | None = None
    mlp: int | None = None
    compiled: bool = False  # inside a torch.compile'd region


@dataclass
class _Range:
    role: str
    fqn: str
    ts: float
    end: float
    ctx: _Ctx
    category: str | None = None  # settled category of an attention projection call


@dataclass
class _Op:
    name: str
    ts: float
    dur: float
    iteration: int | None  # None: outside every profiled iteration
    ctx: _Ctx
    main: bool  # on the thread that holds the rg|iteration ranges
    category: str = "other"
    thread: Any = None
    seq: Any = None  # autograd sequence number (forward ops that record a node, backward ops)
    backward: bool = False  # an autograd engine op: the backward of a forward op
    link: int | None = None  # backward: the outermost forward op of its node


@dataclass
class _Launch:
    iteration: int | None
    op: int | None
    range: int | None
    compiled: bool = False
    ts: float = 0.0


@dataclass
class _Parsed:
    iterations: list[tuple[float, float]] = field(default_factory=list)
    ranges: list[_Range] = field(default_factory=list)
    ops: list[_Op] = field(default_factory=list)
    launches: dict[Any, _Launch] = field(default_factory=dict)
    launches_at: dict[tuple[Any, Any, float], _Launch] = field(default_factory=dict)
    external_ops: dict[Any, _Launch] = field(default_factory=dict)
    memory: list[tuple[int, dict[str, Any], _Ctx]] = field(default_factory=list)
    # training steps: (iteration, start, phase) of each rg|phase range; forward op of
    # each autograd sequence number
    phases: list[tuple[int, float, str]] = field(default_factory=list)
    fwd_seq: dict[Any, int] = field(default_factory=dict)

    def phase_at(self, iteration: int | None, ts: float) -> str | None:
        """The phase of a training step that holds ``ts``: phases tile their iteration,
        each from its start to the next one's (the first from the iteration's start, the
        last to its end), so every instant of a training step is in exactly one."""
        if iteration is None:
            return None
        found = None
        for it, start, name in self.phases:
            if it != iteration:
                continue
            if found is None or start <= ts:
                found = name
            if start > ts:
                break
        return found

    def tiles(self, iteration: int) -> list[tuple[str, float, float]]:
        """The iteration's phases as (phase, start, end) tiles covering its host span."""
        it_start, it_end = self.iterations[iteration]
        mine = [(start, name) for it, start, name in self.phases if it == iteration]
        out = []
        for i, (start, name) in enumerate(mine):
            begin = it_start if i == 0 else start
            end = mine[i + 1][0] if i + 1 < len(mine) else it_end
            out.append((name, begin, end))
        return out

    def iteration_at(self, ts: float) -> int | None:
        """The profiled iteration whose host span ``[start, end)`` holds ``ts``."""
        i = bisect.bisect_right(self.iterations, (ts, float("inf"))) - 1
        if i >= 0 and ts < self.iterations[i][1]:
            return i
        return None


def _events(trace: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(trace, list):
        return trace
    return list(trace.get("traceEvents", []))


# Sort order at equal start: longer first, ranges before ops before points, so that an
# enclosing event is always on the stack when its children arrive.
_KIND_ORDER = {"range": 0, "op": 1, "launch": 2, "memory": 3}


def _host_kind(e: dict[str, Any]) -> str | None:
    cat = e.get("cat")
    if e.get("ph") == "X" and cat == "user_annotation" and parse_label(e.get("name", "")):
        return "range"
    if e.get("ph") == "X" and cat == "cpu_op":
        return "op"
    if e.get("ph") == "X" and cat in ("cuda_runtime", "cuda_driver"):
        return "launch"
    if e.get("ph") == "i" and e.get("name") == "[memory]":
        return "memory"
    return None


def _parse(events: Iterable[dict[str, Any]]) -> _Parsed:
    """Host events of every thread, nested per thread by time.

    The iterations are the ``rg|iteration`` ranges of the thread that holds them; an event
    on any thread belongs to the iteration whose host span holds its start. Ranges and ops
    are read on every thread (a launch is attributed through the op and the ``rg|`` ranges
    around it on its own thread); host time, the op table and memory come from the
    iteration thread alone.
    """
    events = list(events)
    iters = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and e.get("name") == ITERATION_LABEL and e.get("ph") == "X"),
                   key=lambda e: float(e["ts"]))
    if not iters:
        raise ValueError(f"trace has no {ITERATION_LABEL!r} ranges: was it recorded "
                         "with reportgen.profile.profiling?")
    main_thread = (iters[0].get("pid"), iters[0].get("tid"))
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in iters]
    parsed = _Parsed(iterations=spans)

    threads: dict[tuple[Any, Any], list[tuple[float, float, int, str, dict[str, Any]]]] = {}
    for e in events:
        kind = _host_kind(e)
        if kind is None:
            continue
        ts = float(e["ts"])
        dur = float(e.get("dur", 0.0)) if kind != "memory" else 0.0
        threads.setdefault((e.get("pid"), e.get("tid")), []).append(
            (ts, -dur, _KIND_ORDER[kind], kind, e))
    # The iteration thread first: its ops keep the order of the host timeline.
    order = sorted(threads, key=lambda t: t != main_thread)
    for thread in order:
        host_events = threads[thread]
        host_events.sort(key=lambda item: item[:3])
        main = thread == main_thread
        stack: list[tuple[float, _Ctx]] = []
        for ts, neg_dur, _, kind, e in host_events:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            ctx = stack[-1][1] if stack else _Ctx()
            end = ts - neg_dur
            it = parsed.iteration_at(ts)
            if kind == "range":
                role, fqn = parse_label(e["name"]) or ("", "")
                if role == PHASE_ROLE:
                    # transparent: it tells when a phase starts, not what encloses an op
                    if main and it is not None:
                        parsed.phases.append((it, ts, fqn))
                    stack.append((end, ctx))
                    continue
                index = len(parsed.ranges)
                parsed.ranges.append(_Range(role, fqn, ts, end, ctx))
                inner = _Ctx(range=index, op=None, block=ctx.block, attn=ctx.attn,
                             mlp=ctx.mlp, compiled=ctx.compiled)
                if role in LAYER_ROLES:
                    inner.block = index
                elif role == "attn":
                    inner.attn = index
                elif role == "mlp":
                    inner.mlp = index
                stack.append((end, inner))
            elif kind == "op" and ctx.op is None and _is_wrapper(e.get("name", "")):
                inner = dataclasses.replace(
                    ctx, compiled=ctx.compiled or not e["name"].startswith(RUNTIME_OPS))
                stack.append((end, inner))
            elif kind == "op":
                seq = (e.get("args") or {}).get("Sequence number")
                if ctx.op is None:
                    index = len(parsed.ops)
                    name = e.get("name", "?")
                    parsed.ops.append(_Op(name, ts, -neg_dur, it, ctx, main, thread=thread, seq=seq,
                                          backward=name.startswith(BACKWARD_OP_PREFIX)))
                    inner = _Ctx(ctx.range, index, ctx.block, ctx.attn, ctx.mlp, ctx.compiled)
                else:
                    inner = ctx
                if seq is not None and inner.op is not None and not parsed.ops[inner.op].backward:
                    # an op records the sequence number the next autograd node will take,
                    # so the node's creator is the last op recording it (ops before it that
                    # created no node show the same number): its outermost op
                    parsed.fwd_seq[seq] = inner.op
                ext = (e.get("args") or {}).get("External id")
                if ext is not None:
                    parsed.external_ops[ext] = _Launch(parsed.ops[inner.op].iteration
                                                       if inner.op is not None else it,
                                                       inner.op, inner.range, inner.compiled)
                stack.append((end, inner))
            elif kind == "launch":
                # Every launch is kept, inside an iteration or not: a kernel launched
                # outside (a reset between forwards) is then known as such, not unlinked.
                launch = _Launch(it, ctx.op, ctx.range, ctx.compiled, ts)
                parsed.launches_at[(thread[0], thread[1], ts)] = launch
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    parsed.launches[corr] = launch
            elif main and it is not None:
                parsed.memory.append((it, e.get("args") or {}, ctx))
    return parsed


def _is_wrapper(name: str) -> bool:
    return name.startswith(COMPILED_REGION_OPS) or name.startswith(RUNTIME_OPS)


def compiled_op_category(name: str) -> str:
    """Category of an op inside a compiled graph that no module range encloses."""
    lowered = name.lower()
    if lowered.startswith("aten::") and any(m in lowered for m in COMPILED_CORE_MARKERS):
        return "attention.core"
    return "compiled"


def _resolve(parsed: _Parsed) -> None:
    """Give every outermost op its category (attention and MLP splits per call)."""
    ranges = parsed.ranges
    # Pieces of each container call: (kind, start, end, is_range, index).
    Piece = tuple[str, float, float, bool, int]
    attn_items: dict[int, list[Piece]] = defaultdict(list)
    mlp_items: dict[int, list[Piece]] = defaultdict(list)
    for index, r in enumerate(ranges):
        if r.role == "proj" and r.ctx.attn is not None:
            attn_items[r.ctx.attn].append(("proj", r.ts, r.end, True, index))
        elif r.role == "proj" and r.ctx.mlp is not None:
            mlp_items[r.ctx.mlp].append(("proj", r.ts, r.end, True, index))
    for index, op in enumerate(parsed.ops):
        where = op.ctx.range
        role = ranges[where].role if where is not None else None
        if where is None and op.ctx.compiled:
            op.category = compiled_op_category(op.name)
        elif where is None or role is None:
            op.category = "other"
        elif role in ROLE_CATEGORY:
            op.category = ROLE_CATEGORY[role]
        elif role == "attn":
            kind = "core" if is_core_op(op.name) else "op"
            attn_items[where].append((kind, op.ts, op.ts + op.dur, False, index))
        elif role == "mlp":
            mlp_items[where].append(("op", op.ts, op.ts + op.dur, False, index))
        elif role == "proj":
            op.category = "mlp"  # attention projections are settled with their range below
        else:
            op.category = "other"
    proj_category: dict[int, str] = {}
    for items in attn_items.values():
        items.sort(key=lambda item: item[1])
        for (_, _, _, is_range, index), cat in zip(items, split_attention(
                [(k, s, e) for k, s, e, _, _ in items])):
            if is_range:
                proj_category[index] = cat
            else:
                parsed.ops[index].category = cat
    for items in mlp_items.values():
        for (_, _, _, is_range, index), cat in zip(items, split_mlp(
                [(k, s, e) for k, s, e, _, _ in items])):
            if not is_range:
                parsed.ops[index].category = cat
    for op in parsed.ops:
        if op.ctx.range in proj_category:
            op.category = proj_category[op.ctx.range]  # type: ignore[index]
    for index, r in enumerate(ranges):
        r.category = proj_category.get(index)
    _resolve_training(parsed)


def _resolve_training(parsed: _Parsed) -> None:
    """A training step's backward ops take their forward op's category, and the
    optimizer phase's ops are ``optimizer`` (see the module docstring)."""
    if not parsed.phases and not any(op.backward for op in parsed.ops):
        return
    previous: dict[Any, str] = {}
    for op in parsed.ops:
        if op.backward:
            source = parsed.fwd_seq.get(op.seq) if op.seq is not None else None
            if source is not None:
                op.link = source
                op.category = parsed.ops[source].category
            else:
                op.category = previous.get(op.thread, "other")
            previous[op.thread] = op.category
        if parsed.phases and parsed.phase_at(op.iteration, op.ts) == OPTIMIZER:
            op.category = OPTIMIZER


def _range_category(parsed: _Parsed, index: int | None, compiled: bool = False) -> str:
    """Category of work done directly in a range outside any op (rare: a launch or an
    allocation issued from Python between ops; in a compiled region, a CUDA graph's
    replay or a kernel the generated wrapper launches itself)."""
    if index is None:
        return "compiled" if compiled else "other"
    r = parsed.ranges[index]
    if r.role in ROLE_CATEGORY:
        return ROLE_CATEGORY[r.role]
    if r.role in ("attn", "mlp"):
        return "attention.core" if r.role == "attn" else "mlp"
    if r.role == "proj":
        return r.category or "mlp"
    return "other"


def _launch_category(parsed: _Parsed, launch: _Launch) -> str:
    if launch.op is not None:
        return parsed.ops[launch.op].category
    if parsed.phases and parsed.phase_at(launch.iteration, launch.ts) == OPTIMIZER:
        return OPTIMIZER
    return _range_category(parsed, launch.range, launch.compiled)


def _op_block(parsed: _Parsed, op: _Op) -> int | None:
    """The block range of an op: its own, or for a backward op its forward op's."""
    if op.ctx.block is None and op.link is not None:
        return parsed.ops[op.link].ctx.block
    return op.ctx.block


def classify_ops(trace: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every outermost host op inside a profiled iteration with its category, the label
    of its innermost ``rg|`` range and its layer (block FQN or None)."""
    parsed = _parse(_events(trace))
    _resolve(parsed)
    rows = []
    for op in parsed.ops:
        if op.iteration is None or not op.main:
            continue
        r = parsed.ranges[op.ctx.range] if op.ctx.range is not None else None
        block = parsed.ranges[op.ctx.block].fqn if op.ctx.block is not None else None
        rows.append({"name": op.name, "category": op.category, "iteration": op.iteration,
                     "ts": op.ts, "dur": op.dur, "role": r.role if r else None,
                     "fqn": r.fqn if r else None, "layer": block})
    return rows


def _union_split(intervals: list[tuple[float, float, int]]) -> tuple[dict[int, float], float]:
    """Exclusive device time per interval id: where kernels overlap (several streams),
    the overlapped time is split evenly among them, so the parts sum to the union."""
    points: list[tuple[float, int, int]] = []
    for start, end, key in intervals:
        if end > start:
            points.append((start, 1, key))
            points.append((end, -1, key))
    points.sort(key=lambda p: (p[0], p[1]))
    share: dict[int, float] = defaultdict(float)
    active: set[int] = set()
    union = 0.0
    last = points[0][0] if points else 0.0
    for t, delta, key in points:
        if active and t > last:
            piece = (t - last) / len(active)
            for k in active:
                share[k] += piece
            union += t - last
        last = t
        if delta > 0:
            active.add(key)
        else:
            active.discard(key)
    return dict(share), union


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _memory(parsed: _Parsed, device_type: int, n_iter: int) -> dict[str, Any]:
    by_cat = {c: 0.0 for c in CATEGORIES}
    per_device: dict[Any, list[tuple[int, dict[str, Any], _Ctx]]] = defaultdict(list)
    for it, args, ctx in parsed.memory:
        if int(args.get("Device Type", -1)) == device_type:
            per_device[args.get("Device Id")].append((it, args, ctx))
    if not per_device:
        return {"by_category_bytes": {c: 0 for c in CATEGORIES}, "peak_allocated_bytes": None}
    events = max(per_device.values(), key=len)
    first: dict[int, float] = {}
    top: dict[int, float] = {}
    for it, args, ctx in events:
        size = float(args.get("Bytes", 0))
        total = float(args.get("Total Allocated", 0))
        if size > 0:
            if ctx.op is not None:
                cat = parsed.ops[ctx.op].category
            else:
                cat = _range_category(parsed, ctx.range, ctx.compiled)
            by_cat[cat] += size
        first.setdefault(it, total - size)
        top[it] = max(top.get(it, total), total)
    peak = max(max(0.0, top[it] - first[it]) for it in top)
    return {"by_category_bytes": {c: int(round(v / n_iter)) for c, v in by_cat.items()},
            "peak_allocated_bytes": int(peak)}


def _table(rows: dict[tuple[str, str], list[float]], n_iter: int,
           forward_ms: float) -> list[dict[str, Any]]:
    table: list[tuple[float, str, str, dict[str, Any]]] = []
    for (name, cat), (calls, total_us) in rows.items():
        total_ms = total_us / 1000.0 / n_iter
        row = {"name": name, "category": cat, "calls": _number(calls / n_iter),
               "total_ms": total_ms, "mean_ms": total_ms * n_iter / calls,
               "share": total_ms / forward_ms if forward_ms > 0 else 0.0}
        table.append((-total_ms, name, cat, row))
    table.sort(key=lambda item: item[:3])
    return [item[3] for item in table]


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as sorted disjoint intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(intervals: Sequence[tuple[float, float]], begin: float, end: float) -> float:
    return sum(max(0.0, min(e, end) - max(s, begin)) for s, e in intervals)


def _phase_section(phase_us: dict[str, float], phase_cats: dict[str, dict[str, float]],
                   n_iter: int, step_ms: float) -> dict[str, Any] | None:
    """Per phase of a training step: ms per step, its share of the step, and its time by
    category (``overhead`` is the phase's time outside every op; on a device, idle)."""
    if not phase_us:
        return None
    out: dict[str, Any] = {}
    for name in sorted(phase_us, key=lambda p: PHASES.index(p) if p in PHASES else len(PHASES)):
        ms = phase_us[name] / 1000.0 / n_iter
        cats = {c: phase_cats[name].get(c, 0.0) / 1000.0 / n_iter for c in CATEGORIES}
        out[name] = {"ms": ms, "share": ms / step_ms if step_ms > 0 else 0.0, "categories": cats}
    return out


def _shares(ms: dict[str, float], forward_ms: float) -> dict[str, float]:
    shares = {c: (ms[c] / forward_ms if forward_ms > 0 else 0.0) for c in CATEGORIES
              if c != "overhead"}
    # Overhead is the remainder, so the shares sum to exactly 1 by construction.
    shares["overhead"] = 1.0 - sum(shares.values())
    return shares


class UnlinkedDeviceTrace(ValueError):
    """A device trace whose device events cannot be linked to any launch in the profiled
    iterations: device time cannot be attributed, and the host basis would misstate it."""


@dataclass
class _DeviceEvent:
    start: float
    end: float
    name: str
    kind: str  # kernel, gpu_memcpy or gpu_memset
    iteration: int
    launch: _Launch | None  # None: no launch record (counted as ``other``)


def _device_events(events: list[dict[str, Any]], parsed: _Parsed) -> tuple[list[_DeviceEvent], int]:
    """Device events of the profiled iterations, on every stream, and how many device
    events the trace holds in all.

    A device event is linked to its launch by ``correlation`` (torch's link from
    ``cudaLaunchKernel`` to the kernel), else by its ``ac2g`` flow arrow, else by its op's
    ``External id``. A linked event belongs to the iteration its launch lies in, whatever
    the launching thread; one launched outside every iteration (a reset between forwards)
    is not part of a forward. An event with no launch record belongs to the iteration
    whose host span holds its start.
    """
    flow_start: dict[Any, tuple[Any, Any, float]] = {}
    flow_end: dict[tuple[Any, Any, float], Any] = {}
    for e in events:
        if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            where = (e.get("pid"), e.get("tid"), float(e.get("ts", 0.0)))
            if e["ph"] == "s":
                flow_start[e.get("id")] = where
            else:
                flow_end[where] = e.get("id")
    found: list[_DeviceEvent] = []
    total = 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS:
            continue
        total += 1
        args = e.get("args") or {}
        start = float(e["ts"])
        launch = parsed.launches.get(args.get("correlation"))
        if launch is None:
            flow = flow_end.get((e.get("pid"), e.get("tid"), start))
            launch = parsed.launches_at.get(flow_start.get(flow, (None, None, 0.0)))
        if launch is None:
            launch = parsed.external_ops.get(args.get("External id"))
        iteration = launch.iteration if launch is not None else parsed.iteration_at(start)
        if iteration is None:
            continue
        found.append(_DeviceEvent(start, start + float(e.get("dur", 0.0)), e.get("name", "?"),
                                  e["cat"], iteration, launch))
    return found, total


def _cpu_phases(parsed: _Parsed, forward_ms: float) -> dict[str, Any] | None:
    if not parsed.phases:
        return None
    n_iter = len(parsed.iterations)
    phase_us: dict[str, float] = defaultdict(float)
    cats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for it in range(n_iter):
        for name, begin, end in parsed.tiles(it):
            phase_us[name] += end - begin
    for op in parsed.ops:
        if op.iteration is None or not op.main:
            continue
        phase = parsed.phase_at(op.iteration, op.ts)
        if phase is not None:
            cats[phase][op.category] += op.dur
    for name, total in phase_us.items():
        cats[name]["overhead"] = total - sum(v for c, v in cats[name].items() if c != "overhead")
    return _phase_section(dict(phase_us), cats, n_iter, forward_ms)


def _cpu_result(parsed: _Parsed, cpu_ms: dict[str, float], layer_cpu: dict[str, dict[str, float]],
                op_rows: dict[tuple[str, str], list[float]], host_total_us: float,
                iteration_ms: list[float]) -> dict[str, Any]:
    n_iter = len(parsed.iterations)
    forward_ms = host_total_us / 1000.0 / n_iter
    shares = _shares(cpu_ms, forward_ms)
    categories = {c: {"ms": cpu_ms[c], "share": shares[c], "cpu_ms": cpu_ms[c],
                      "device_ms": None, "launches": None} for c in CATEGORIES}
    per_layer = [{"layer": fqn, "categories": {c: v / 1000.0 / n_iter for c, v in cats.items()}}
                 for fqn, cats in layer_cpu.items()]
    return {"basis": "cpu", "forward_ms": forward_ms, "categories": categories,
            "per_layer": per_layer, "launches_per_forward": None, "device_idle_ms": None,
            "memory_ops_per_forward": None, "unlinked_device_events": None,
            "unlinked_device_ms": None, "phases": _cpu_phases(parsed, forward_ms),
            "ops": _table(op_rows, n_iter, forward_ms),
            "memory": _memory(parsed, 0, n_iter), "iteration_ms": iteration_ms}


def _device_result(parsed: _Parsed, found: list[_DeviceEvent], cpu_ms: dict[str, float],
                   layers: Iterable[str], iteration_ms: list[float]) -> dict[str, Any]:
    n_iter = len(parsed.iterations)
    dev_us = {c: 0.0 for c in CATEGORIES}
    kernels = {c: 0 for c in CATEGORIES}
    memory_ops = {c: 0 for c in CATEGORIES}
    layer_dev: dict[str, dict[str, float]] = {fqn: {c: 0.0 for c in CATEGORIES}
                                               for fqn in layers}
    kernel_rows: dict[tuple[str, str], list[float]] = {}
    window_us = idle_us = unlinked_us = 0.0
    unlinked = 0
    phase_us: dict[str, float] = defaultdict(float)
    phase_cats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for it, (it_start, _) in enumerate(parsed.iterations):
        mine = [(i, d) for i, d in enumerate(found) if d.iteration == it]
        share, union = _union_split([(d.start, d.end, i) for i, d in mine])
        # The window opens when the forward starts on the host, so the device's wait for
        # the first launch (a launch-bound forward) is idle time, not left out.
        start = min([it_start] + [d.start for _, d in mine])
        window = max([start] + [d.end for _, d in mine]) - start
        window_us += window
        idle_us += window - union
        tiles = parsed.tiles(it) if parsed.phases else []
        if tiles:
            # a training step's idle device time goes to the phase whose host span holds
            # it (the first phase from the window's start, the last to its end)
            busy = _merged((d.start, d.end) for _, d in mine)
            for k, (name, begin, end) in enumerate(tiles):
                begin = start if k == 0 else begin
                end = start + window if k == len(tiles) - 1 else end
                idle = max(0.0, end - begin) - _overlap(busy, begin, end)
                phase_us[name] += idle
                phase_cats[name]["overhead"] += idle
        for i, d in mine:
            cat = _launch_category(parsed, d.launch) if d.launch is not None else "other"
            dev_us[cat] += share.get(i, 0.0)
            if tiles:
                name = (parsed.phase_at(d.launch.iteration, d.launch.ts) if d.launch is not None
                        else parsed.phase_at(it, d.start)) or tiles[0][0]
                phase_us[name] += share.get(i, 0.0)
                phase_cats[name][cat] += share.get(i, 0.0)
            (kernels if d.kind == "kernel" else memory_ops)[cat] += 1
            if d.launch is None:
                unlinked += 1
                unlinked_us += share.get(i, 0.0)
            op = d.launch.op if d.launch is not None else None
            block = _op_block(parsed, parsed.ops[op]) if op is not None else None
            if block is not None:
                layer_dev.setdefault(parsed.ranges[block].fqn, {c: 0.0 for c in CATEGORIES})
                layer_dev[parsed.ranges[block].fqn][cat] += share.get(i, 0.0)
            row = kernel_rows.setdefault((d.name, cat), [0, 0.0])
            row[0] += 1
            row[1] += d.end - d.start
    dev_us["overhead"] = idle_us
    dev_ms = {c: v / 1000.0 / n_iter for c, v in dev_us.items()}
    forward_ms = window_us / 1000.0 / n_iter
    shares = _shares(dev_ms, forward_ms)
    categories = {c: {"ms": dev_ms[c], "share": shares[c], "cpu_ms": cpu_ms[c],
                      "device_ms": dev_ms[c], "launches": _number(kernels[c] / n_iter),
                      "memory_ops": _number(memory_ops[c] / n_iter)}
                  for c in CATEGORIES}
    per_layer = [{"layer": fqn, "categories": {c: v / 1000.0 / n_iter for c, v in cats.items()
                                               if c != "overhead"}}
                 for fqn, cats in layer_dev.items()]
    return {"basis": "device", "forward_ms": forward_ms, "categories": categories,
            "per_layer": per_layer,
            "launches_per_forward": _number(sum(kernels.values()) / n_iter),
            "device_idle_ms": idle_us / 1000.0 / n_iter,
            "memory_ops_per_forward": _number(sum(memory_ops.values()) / n_iter),
            "unlinked_device_events": _number(unlinked / n_iter),
            "unlinked_device_ms": unlinked_us / 1000.0 / n_iter,
            "phases": _phase_section(dict(phase_us), phase_cats, n_iter, forward_ms),
            "ops": _table(kernel_rows, n_iter, forward_ms),
            "memory": _memory(parsed, 1, n_iter), "iteration_ms": iteration_ms}


def analyse_trace(trace: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
    """Attribute the ``rg|iteration`` forwards of a torch.profiler Chrome trace.

    Returns the record's attribution keys (``ATTRIBUTION_KEYS``) plus ``ops`` (the op
    table, kernels and memory copies/sets on a device trace), ``memory``
    (``by_category_bytes``, ``peak_allocated_bytes``: the largest rise over an iteration's
    starting level) and ``iteration_ms`` (host wall time of each iteration). Every figure
    is per forward, averaged over the profiled iterations.

    CPU basis (no device events): op time is host self time of the outermost ops on the
    iteration thread, and ``overhead`` is the iteration's time outside them.

    Device basis: every device event of the iterations, on every stream, whichever host
    thread launched it (see ``_device_events``). Its time goes to the category of the op
    that launched it, read from the ``rg|`` ranges on the launching thread (``other`` where
    there are none); events with no launch record go to ``other`` and are counted in
    ``unlinked_device_events`` / ``unlinked_device_ms``. Overlapping events (several
    streams) share the overlap evenly, so the categories sum to the union of busy time.
    ``forward_ms`` is the device window from the iteration's host start to the end of its
    last device event, and ``overhead`` is the idle time in it. ``launches`` count kernels;
    ``memory_ops`` count memory copies and sets. ``cpu_ms`` keeps the iteration thread's
    host figures. Per-layer rows carry ``overhead`` (gaps inside the block's range) on the
    CPU basis only. Raises `UnlinkedDeviceTrace` when the trace holds device events but
    none of them is linked to a launch in the iterations.
    """
    events = _events(trace)
    parsed = _parse(events)
    _resolve(parsed)
    n_iter = len(parsed.iterations)
    iteration_ms = [(end - start) / 1000.0 for start, end in parsed.iterations]
    host_total_us = sum(end - start for start, end in parsed.iterations)

    cpu_us = {c: 0.0 for c in CATEGORIES}
    layer_cpu: dict[str, dict[str, float]] = {}
    block_span: dict[str, float] = defaultdict(float)
    for r in parsed.ranges:
        if r.role in LAYER_ROLES and parsed.iteration_at(r.ts) is not None:
            layer_cpu.setdefault(r.fqn, {c: 0.0 for c in CATEGORIES})
            block_span[r.fqn] += r.end - r.ts
    op_rows: dict[tuple[str, str], list[float]] = {}
    layer_fwd_us: dict[str, float] = defaultdict(float)  # ops inside the block's own range
    for op in parsed.ops:
        if op.iteration is None or not op.main:
            continue
        cpu_us[op.category] += op.dur
        block = _op_block(parsed, op)
        if block is not None:
            layer_cpu.setdefault(parsed.ranges[block].fqn, {c: 0.0 for c in CATEGORIES})
            layer_cpu[parsed.ranges[block].fqn][op.category] += op.dur
            if not op.backward and block == op.ctx.block:
                layer_fwd_us[parsed.ranges[block].fqn] += op.dur
        row = op_rows.setdefault((op.name, op.category), [0, 0.0])
        row[0] += 1
        row[1] += op.dur
    cpu_us["overhead"] = host_total_us - sum(v for c, v in cpu_us.items() if c != "overhead")
    for fqn, cats in layer_cpu.items():
        # gaps inside the block's forward range (a training step's backward ops of the
        # block are in its categories, but not in its range)
        cats["overhead"] = block_span[fqn] - layer_fwd_us[fqn]
    cpu_ms = {c: v / 1000.0 / n_iter for c, v in cpu_us.items()}

    found, total = _device_events(events, parsed)
    if not total:
        return _cpu_result(parsed, cpu_ms, layer_cpu, op_rows, host_total_us, iteration_ms)
    if not any(d.launch is not None for d in found):
        raise UnlinkedDeviceTrace(
            f"the trace holds {total} device events but none is linked to a launch inside "
            f"the profiled iterations (no matching correlation id, flow event or External "
            f"id), so device time cannot be attributed")
    return _device_result(parsed, found, cpu_ms, layer_cpu, iteration_ms)


def profiler_iterations(trace: dict[str, Any] | list[dict[str, Any]],
                        phases_out: list[dict[str, Any]] | None = None
                        ) -> list[tuple[float, dict[str, float]]]:
    """(forward ms, category ms) of each profiled iteration, each attributed alone by
    ``analyse_trace`` on the trace with only that iteration's range kept. Pure: the
    profile side stores it as the profiler method, the render side reads it from the
    traces of records written before per-iteration series were stored. For a training
    step, ``phases_out`` (when given) receives each iteration's phases
    (``{phase: {"ms", "categories"}}``)."""
    events = trace if isinstance(trace, list) else list(trace.get("traceEvents", []))
    marker = [i for i, e in enumerate(events) if e.get("name") == ITERATION_LABEL
              and e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    out = []
    for keep in marker:
        dropped = set(marker) - {keep}
        alone = [e for i, e in enumerate(events) if i not in dropped]
        result = analyse_trace({"traceEvents": alone})
        cats = {c: float(v["ms"]) for c, v in result["categories"].items()}
        out.append((float(result["forward_ms"]), cats))
        if phases_out is not None and result.get("phases"):
            phases_out.append({name: {"ms": float(p["ms"]), "categories": dict(p["categories"])}
                               for name, p in result["phases"].items()})
    return out
