"""Attribute a profiled forward to categories from its Chrome trace (no torch here).

The trace is what ``torch.profiler`` exports: host ``cpu_op`` and ``user_annotation``
events (complete events, ``ph == "X"``, microseconds), ``cuda_runtime`` launches, device
``kernel``/``gpu_memcpy``/``gpu_memset`` events linked to their launch by ``correlation``,
and ``[memory]`` instants. The hooks in ``reportgen.profile.structure`` open ``rg|<role>|<fqn>``
ranges around modules and ``rg|iteration`` around each profiled forward.

Both the render side and tests on recorded GPU traces call this, hence pure Python.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from reportgen.categories import CATEGORIES

LABEL_PREFIX = "rg|"
ITERATION_LABEL = "rg|iteration"
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
    "block": "other",
}

# Keys of analyse_trace's result that form the record's "attribution" section.
ATTRIBUTION_KEYS = ("basis", "forward_ms", "categories", "per_layer", "launches_per_forward",
                    "device_idle_ms")


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
    iteration: int
    ctx: _Ctx
    category: str = "other"


@dataclass
class _Launch:
    iteration: int
    op: int | None
    range: int | None
    compiled: bool = False


@dataclass
class _Parsed:
    iterations: list[tuple[float, float]] = field(default_factory=list)
    ranges: list[_Range] = field(default_factory=list)
    ops: list[_Op] = field(default_factory=list)
    launches: dict[Any, _Launch] = field(default_factory=dict)
    external_ops: dict[Any, _Launch] = field(default_factory=dict)
    memory: list[tuple[int, dict[str, Any], _Ctx]] = field(default_factory=list)


def _events(trace: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(trace, list):
        return trace
    return list(trace.get("traceEvents", []))


def _parse(events: Iterable[dict[str, Any]]) -> _Parsed:
    events = list(events)
    iters = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and e.get("name") == ITERATION_LABEL and e.get("ph") == "X"),
                   key=lambda e: float(e["ts"]))
    if not iters:
        raise ValueError(f"trace has no {ITERATION_LABEL!r} ranges: was it recorded "
                         "with reportgen.profile.profiling?")
    host = (iters[0].get("pid"), iters[0].get("tid"))
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in iters]
    parsed = _Parsed(iterations=spans)

    # Sort order at equal start: longer first, ranges before ops before points, so that
    # an enclosing event is always on the stack when its children arrive.
    kind_order = {"range": 0, "op": 1, "launch": 2, "memory": 3}
    host_events: list[tuple[float, float, int, str, dict[str, Any]]] = []
    for e in events:
        if (e.get("pid"), e.get("tid")) != host:
            continue
        cat = e.get("cat")
        if e.get("ph") == "X" and cat == "user_annotation" and parse_label(e.get("name", "")):
            kind = "range"
        elif e.get("ph") == "X" and cat == "cpu_op":
            kind = "op"
        elif e.get("ph") == "X" and cat in ("cuda_runtime", "cuda_driver"):
            kind = "launch"
        elif e.get("ph") == "i" and e.get("name") == "[memory]":
            kind = "memory"
        else:
            continue
        ts = float(e["ts"])
        dur = float(e.get("dur", 0.0)) if kind in ("range", "op", "launch") else 0.0
        host_events.append((ts, -dur, kind_order[kind], kind, e))
    host_events.sort(key=lambda item: item[:3])

    it = 0
    stack: list[tuple[float, _Ctx]] = []
    for ts, neg_dur, _, kind, e in host_events:
        while it < len(spans) and ts >= spans[it][1]:
            it += 1
            stack.clear()
        if it >= len(spans):
            break
        if ts < spans[it][0]:
            continue
        while stack and stack[-1][0] <= ts:
            stack.pop()
        ctx = stack[-1][1] if stack else _Ctx()
        end = ts - neg_dur
        if kind == "range":
            role, fqn = parse_label(e["name"]) or ("", "")
            index = len(parsed.ranges)
            parsed.ranges.append(_Range(role, fqn, ts, end, ctx))
            inner = _Ctx(range=index, op=None, block=ctx.block, attn=ctx.attn, mlp=ctx.mlp,
                         compiled=ctx.compiled)
            if role == "block":
                inner.block = index
            elif role == "attn":
                inner.attn = index
            elif role == "mlp":
                inner.mlp = index
            stack.append((end, inner))
        elif kind == "op" and ctx.op is None and _is_wrapper(e.get("name", "")):
            inner = dataclasses.replace(ctx, compiled=ctx.compiled or not e["name"].startswith(RUNTIME_OPS))
            stack.append((end, inner))
        elif kind == "op":
            if ctx.op is None:
                index = len(parsed.ops)
                parsed.ops.append(_Op(e.get("name", "?"), ts, -neg_dur, it, ctx))
                inner = _Ctx(ctx.range, index, ctx.block, ctx.attn, ctx.mlp, ctx.compiled)
            else:
                inner = ctx
            ext = (e.get("args") or {}).get("External id")
            if ext is not None:
                parsed.external_ops[ext] = _Launch(it, inner.op, inner.range, inner.compiled)
            stack.append((end, inner))
        elif kind == "launch":
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                parsed.launches[corr] = _Launch(it, ctx.op, ctx.range, ctx.compiled)
        else:
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
    return _range_category(parsed, launch.range, launch.compiled)


def classify_ops(trace: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every outermost host op inside a profiled iteration with its category, the label
    of its innermost ``rg|`` range and its layer (block FQN or None)."""
    parsed = _parse(_events(trace))
    _resolve(parsed)
    rows = []
    for op in parsed.ops:
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


def _shares(ms: dict[str, float], forward_ms: float) -> dict[str, float]:
    shares = {c: (ms[c] / forward_ms if forward_ms > 0 else 0.0) for c in CATEGORIES
              if c != "overhead"}
    # Overhead is the remainder, so the shares sum to exactly 1 by construction.
    shares["overhead"] = 1.0 - sum(shares.values())
    return shares


def analyse_trace(trace: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
    """Attribute the ``rg|iteration`` forwards of a torch.profiler Chrome trace.

    Returns the record's attribution keys (``basis``, ``forward_ms``, ``categories``,
    ``per_layer``, ``launches_per_forward``, ``device_idle_ms``) plus ``ops`` (the op
    table, kernels on a device trace), ``memory`` (``by_category_bytes``,
    ``peak_allocated_bytes``: the largest rise over an iteration's starting level) and
    ``iteration_ms`` (host wall time of each iteration). Every figure is per forward,
    averaged over the profiled iterations.

    CPU basis (no device events): op time is host self time of outermost ops, and
    ``overhead`` is the iteration's time outside them. Device basis: kernel time by the
    category of the op that launched it (overlapping kernels share the overlap evenly),
    ``forward_ms`` is the device window from first kernel start to last kernel end, and
    ``overhead`` is device idle time in it; ``cpu_ms`` keeps the host figures. Per-layer
    rows carry ``overhead`` (gaps inside the block's range) on the CPU basis only.
    """
    events = _events(trace)
    parsed = _parse(events)
    _resolve(parsed)
    n_iter = len(parsed.iterations)
    iteration_ms = [(end - start) / 1000.0 for start, end in parsed.iterations]
    host_total_us = sum(end - start for start, end in parsed.iterations)

    cpu_us = {c: 0.0 for c in CATEGORIES}
    layer_cpu: dict[str, dict[str, float]] = {}
    for r in parsed.ranges:
        if r.role == "block" and r.fqn not in layer_cpu:
            layer_cpu[r.fqn] = {c: 0.0 for c in CATEGORIES}
    block_span: dict[str, float] = defaultdict(float)
    for r in parsed.ranges:
        if r.role == "block":
            block_span[r.fqn] += r.end - r.ts
    op_rows: dict[tuple[str, str], list[float]] = {}
    for op in parsed.ops:
        cpu_us[op.category] += op.dur
        if op.ctx.block is not None:
            layer_cpu[parsed.ranges[op.ctx.block].fqn][op.category] += op.dur
        row = op_rows.setdefault((op.name, op.category), [0, 0.0])
        row[0] += 1
        row[1] += op.dur
    cpu_us["overhead"] = host_total_us - sum(v for c, v in cpu_us.items() if c != "overhead")
    for fqn, cats in layer_cpu.items():
        cats["overhead"] = block_span[fqn] - sum(v for c, v in cats.items() if c != "overhead")
    cpu_ms = {c: v / 1000.0 / n_iter for c, v in cpu_us.items()}

    kernels = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS:
            continue
        args = e.get("args") or {}
        launch = parsed.launches.get(args.get("correlation"))
        if launch is None:
            launch = parsed.external_ops.get(args.get("External id"))
        if launch is None:
            continue  # launched outside the profiled iterations (reset, warm-up)
        start = float(e["ts"])
        kernels.append((start, start + float(e.get("dur", 0.0)), e.get("name", "?"), launch))

    if not kernels:
        forward_ms = host_total_us / 1000.0 / n_iter
        shares = _shares(cpu_ms, forward_ms)
        categories = {c: {"ms": cpu_ms[c], "share": shares[c], "cpu_ms": cpu_ms[c],
                          "device_ms": None, "launches": None} for c in CATEGORIES}
        per_layer = [{"layer": fqn, "categories": {c: v / 1000.0 / n_iter
                                                   for c, v in cats.items()}}
                     for fqn, cats in layer_cpu.items()]
        return {"basis": "cpu", "forward_ms": forward_ms, "categories": categories,
                "per_layer": per_layer, "launches_per_forward": None, "device_idle_ms": None,
                "ops": _table(op_rows, n_iter, forward_ms),
                "memory": _memory(parsed, 0, n_iter), "iteration_ms": iteration_ms}

    dev_us = {c: 0.0 for c in CATEGORIES}
    launches = {c: 0 for c in CATEGORIES}
    layer_dev: dict[str, dict[str, float]] = {fqn: {c: 0.0 for c in CATEGORIES}
                                               for fqn in layer_cpu}
    kernel_rows: dict[tuple[str, str], list[float]] = {}
    window_us = 0.0
    idle_us = 0.0
    for it in range(n_iter):
        mine = [(i, k) for i, k in enumerate(kernels) if k[3].iteration == it]
        if not mine:
            continue
        share, union = _union_split([(k[0], k[1], i) for i, k in mine])
        window = max(k[1] for _, k in mine) - min(k[0] for _, k in mine)
        window_us += window
        idle_us += window - union
        for i, (start, end, name, launch) in mine:
            cat = _launch_category(parsed, launch)
            dev_us[cat] += share.get(i, 0.0)
            launches[cat] += 1
            block = parsed.ops[launch.op].ctx.block if launch.op is not None else None
            if block is not None:
                layer_dev[parsed.ranges[block].fqn][cat] += share.get(i, 0.0)
            row = kernel_rows.setdefault((name, cat), [0, 0.0])
            row[0] += 1
            row[1] += end - start
    dev_us["overhead"] = idle_us
    dev_ms = {c: v / 1000.0 / n_iter for c, v in dev_us.items()}
    forward_ms = window_us / 1000.0 / n_iter
    shares = _shares(dev_ms, forward_ms)
    categories = {c: {"ms": dev_ms[c], "share": shares[c], "cpu_ms": cpu_ms[c],
                      "device_ms": dev_ms[c], "launches": _number(launches[c] / n_iter)}
                  for c in CATEGORIES}
    per_layer = [{"layer": fqn, "categories": {c: v / 1000.0 / n_iter for c, v in cats.items()
                                               if c != "overhead"}}
                 for fqn, cats in layer_dev.items()]
    return {"basis": "device", "forward_ms": forward_ms, "categories": categories,
            "per_layer": per_layer,
            "launches_per_forward": _number(sum(launches.values()) / n_iter),
            "device_idle_ms": idle_us / 1000.0 / n_iter,
            "ops": _table(kernel_rows, n_iter, forward_ms),
            "memory": _memory(parsed, 1, n_iter), "iteration_ms": iteration_ms}
