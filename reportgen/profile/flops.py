"""FLOPs per category two ways (METHOD.md rule 10): analytic from the config dims and
shapes, and counted by ``torch.utils.flop_counter`` over one step. The bytes each category
moves are ``reportgen.traffic``'s, the device peaks ``reportgen.peaks``'.

Conventions: one multiply-add is 2 FLOPs; norms, activations, softmax and embeddings
count 0 (neither way counts them); ``attention.core`` counts the full Lq x Lk score matrix
even for causal attention (what eager and the math backend compute; a causal flash kernel
skips about half of it, so its achieved FLOP/s reads low by up to 2x).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reportgen.categories import CATEGORIES
from reportgen.profile.layers import first as _first
from reportgen.profile.layers import is_int as _int
from reportgen.profile.shrink import TOP_K_NAMES
from reportgen.profile.structure import ModuleRole, is_attention, is_experts, is_projection
from reportgen.traffic import cfg, gated, shapes
from reportgen.vocabulary import TRAIN_MODES

CORE_NOTE = "attention.core counts the full Lq x Lk score matrix, not halved for causal masks"
PARTS_NOTE = ("experts, routers and token mixers are counted from the structure: 2 FLOPs per "
              "weight element a token meets (routed experts: the config's experts per token); "
              "a token mixer's scan or recurrence itself is not counted")


def _zero() -> dict[str, float]:
    return {c: 0.0 for c in CATEGORIES}


def _attention(out: dict[str, float], *, b: int, tq: int, tk: int, lq: int, lk: int, d: int, h: int, kvh: int,
               hd: int, calls: int) -> None:
    """``calls`` attention calls: tq query tokens and tk key/value tokens in all."""
    out["attention.qkv"] += calls * (2 * tq * d * h * hd + 2 * tk * d * 2 * kvh * hd)
    out["attention.core"] += calls * 4 * b * h * lq * lk * hd
    out["attention.out"] += calls * 2 * tq * h * hd * d


# A training step's backward computes each matmul's gradient with respect to its input
# and to its weight: twice the forward's FLOPs (the attention core's too: dQ, dK, dV and
# the scores' gradient); the optimizer's elementwise update counts 0 like norms do.
TRAIN_FLOPS_FACTOR = 3
TRAIN_NOTE = ("training step: analytic FLOPs are the forward's three times over (a backward "
              "of twice the forward's); the counter counts the backward's own ops")


def analytic(info: Mapping[str, Any], combo: Any, hints: Mapping[str, Any] | None = None) -> dict[str, float]:
    """FLOPs of one step per category, from the model's dims (`building.model_info`) and the
    combination's shapes. ``hints`` (`analytic_hints`) gives the MLP's weight
    elements from the structure; without it the MLP is read as gated or not from the
    config's activation. A training step counts its forward ``TRAIN_FLOPS_FACTOR`` times."""
    out = _forward_analytic(info, combo, hints)
    if getattr(combo, "mode", "forward") in TRAIN_MODES:
        out = {c: v * TRAIN_FLOPS_FACTOR for c, v in out.items()}
    return out


def _forward_analytic(info: Mapping[str, Any], combo: Any, hints: Mapping[str, Any] | None = None
                      ) -> dict[str, float]:
    out = _zero()
    hints = hints or {}
    d = info.get("hidden_size")
    h = info.get("num_heads")
    layers = info.get("num_layers")
    parts = hints.get("parts")
    if parts and not h and d and not parts["attention_calls"]:
        h = 1  # no softmax attention to count (a pure state-space model): heads unused
    if not (d and h and layers):
        return out
    kvh = info.get("num_kv_heads") or h
    hd = info.get("head_dim") or d // h
    ff = info.get("intermediate_size") or 4 * d
    vocab = info.get("vocab_size") or 0
    b, length = int(combo.batch_size), int(combo.seq_len)
    mode = getattr(combo, "mode", "forward")
    arch = info.get("architecture", "encoder")

    if hints.get("mlp_weight_elements"):
        mlp_per_token = 2 * int(hints["mlp_weight_elements"])
    else:
        mlp_per_token = 2 * d * ff * (3 if gated(info) else 2)

    s = shapes(arch, mode, b, length)
    t, lq, lk, head_tokens = s["t"], s["lq"], s["lk"], s["head_tokens"]
    dims = {"d": d, "h": h, "kvh": kvh, "hd": hd}

    if parts and arch != "encoder-decoder":
        # experts, routers, token mixers: the structure's weight elements a token meets in
        # each category (routed experts: top-k of them), 2 FLOPs each; softmax attention
        # only in the layers that have it. A mixer's scan is not counted (see notes).
        _attention(out, b=b, tq=t, tk=t, lq=lq, lk=lk, calls=int(parts["attention_calls"]), **dims)
        for category, elements in parts["weight_elements"].items():
            out[category] += 2 * t * int(elements)
        out["head"] += 2 * head_tokens * d * vocab
        return out
    _attention(out, b=b, tq=t, tk=t, lq=lq, lk=lk, calls=layers, **dims)
    if arch == "attention":  # attention-micro: the attention call alone, no projections
        out["attention.qkv"] = out["attention.out"] = 0.0
        return out
    out["mlp"] += layers * t * mlp_per_token
    if arch == "encoder-decoder":
        dec_layers = int(cfg(info, "num_decoder_layers", "decoder_layers") or layers)
        _attention(out, b=b, tq=t, tk=t, lq=lq, lk=lk, calls=dec_layers, **dims)  # decoder self
        _attention(out, b=b, tq=t, tk=t, lq=lq, lk=lk, calls=dec_layers, **dims)  # cross
        out["mlp"] += dec_layers * t * mlp_per_token
    if arch == "encoder":
        out["head"] += 2 * b * d * d if hints.get("pooler") else 0
    else:
        out["head"] += 2 * head_tokens * d * vocab
    return out


# --- counted -------------------------------------------------------------------------

# ops that do dense arithmetic: if one ran without a flop formula, the count is short
_COMPUTE_OP = re.compile(r"(mm|matmul|attention|attn|conv|einsum|linear|bmm|dot)", re.IGNORECASE)


def _op_name(op: Any) -> str:
    return str(getattr(op, "overloadpacket", op))


def _exclusive(inclusive: Mapping[str, float]) -> tuple[dict[str, float], bool]:
    """Per-module exclusive FLOPs from FlopCounterMode's inclusive ones: subtract each
    tracked module's count from its nearest tracked ancestor. A module shared between
    parents (one object, one name) can make a parent go negative; those are clamped and
    flagged."""
    names = set(inclusive)
    result = dict(inclusive)
    for name, value in inclusive.items():
        if name == "":
            continue
        parent = name
        while parent:
            parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            if parent in names:
                result[parent] -= value
                break
    clamped = any(v < 0 for v in result.values())
    return {k: max(0.0, v) for k, v in result.items()}, clamped


def _category_of(fqn: str, module_categories: Mapping[str, str]) -> str:
    name = fqn
    while True:
        if name in module_categories:
            return module_categories[name]
        if not name:
            return "other"
        name = name.rsplit(".", 1)[0] if "." in name else ""


@dataclass
class _OpRecorder:
    """Names of every aten op a step dispatches (to find the ones without a formula)."""

    ops: set[str]

    def __post_init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                recorder.ops.add(_op_name(func))
                return func(*args, **(kwargs or {}))

        self.mode = _Mode()


class FlopCount:
    """torch.utils.flop_counter over whatever runs inside ``counting()``: one ``step()``,
    counted alone (`counted`) or inside the forward another pass runs anyway (the
    structure's recorded forward, `reportgen.profile.measure`), so the count costs no
    forward of its own. `result` attributes what was counted."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self.recorder = _OpRecorder(set())
        self.counter = FlopCounterMode(display=False)

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        with self.counter, self.recorder.mode:
            yield

    def result(self, model: Any, module_categories: Mapping[str, str], *,
               analytic: Mapping[str, float] | None = None) -> tuple[dict[str, float], list[str]]:
        """FLOPs per category, attributed through ``module_categories`` (module FQN ->
        category; a module's own ops land in its category, a module without an entry
        inherits its nearest ancestor's). Notes name the compute ops that ran without a
        FLOP formula and, given ``analytic``, the categories the counter saw none of."""
        from torch.utils.flop_counter import flop_registry

        counter = self.counter
        root = type(model).__name__
        inclusive: dict[str, float] = {}
        for key, per_op in counter.get_flop_counts().items():
            if key == "Global":
                continue
            fqn = "" if key == root else key[len(root) + 1:] if key.startswith(root + ".") else key
            inclusive[fqn] = float(sum(per_op.values()))
        exclusive, clamped = _exclusive(inclusive)
        total = float(counter.get_total_flops())
        out = _zero()
        for fqn, value in exclusive.items():
            out[_category_of(fqn, module_categories)] += value
        # FLOPs outside the model's own forward (none for a plain step) still count somewhere
        outside = total - inclusive.get("", total)
        if outside > 0:
            out["other"] += outside

        notes: list[str] = []
        counted_ops = {str(k) for k in flop_registry}
        missing = sorted(op for op in self.recorder.ops if op not in counted_ops and _COMPUTE_OP.search(op))
        # aten.matmul/linear decompose into mm/bmm/addmm, which are counted; an sdpa entry
        # point that dispatched to a kernel with a formula was counted through that kernel
        seen = {_op_name(op) for per_op in counter.get_flop_counts().values() for op in per_op}
        missing = [op for op in missing if op not in ("aten.matmul", "aten.linear", "aten.einsum")
                   and not ("attention" in op and any("attention" in s for s in seen))]
        if missing:
            notes.append("flop_counter has no formula for " + ", ".join(missing))
        if clamped:
            notes.append("a module shared between parents made exclusive counts negative; clamped to 0")
        if analytic is not None:
            for category in CATEGORIES:
                a, c = analytic.get(category, 0.0), out.get(category, 0.0)
                if a > 0 and c == 0:
                    why = f" (ops without a formula: {', '.join(missing)})" if missing else ""
                    notes.append(f"flop_counter counted no FLOPs in {category} (analytic {a:.4g}){why}")
        return out, notes


def counted(model: Any, step: Any, module_categories: Mapping[str, str], *,
            analytic: Mapping[str, float] | None = None) -> tuple[dict[str, float], list[str]]:
    """FLOPs of one ``step()`` per category, counted by torch.utils.flop_counter in a
    forward of its own (`FlopCount`)."""
    count = FlopCount()
    with count.counting():
        step()
    step.sync()
    step.reset()
    return count.result(model, module_categories, analytic=analytic)


# --- what the analytic count reads from the model's structure ---------------------------


def _first_block(model: nn.Module) -> nn.Module | None:
    """The first item of a ModuleList that holds an attention module: a transformer block."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            first = module[0]
            if any(is_attention(m) for m in first.modules()):
                return first
    return None


def _mlp_projections(block: nn.Module) -> list[nn.Module]:
    found: list[nn.Module] = []

    def walk(module: nn.Module) -> None:
        for child in module.children():
            if is_attention(child):
                continue
            if is_projection(child):
                found.append(child)
            walk(child)

    walk(block)
    return found


def _mlp_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights of the first block's MLP projections."""
    block = _first_block(model)
    projs = _mlp_projections(block) if block is not None else []
    return [p.weight for p in projs]  # type: ignore[misc]


def mlp_width(model: nn.Module) -> int | None:
    return max((max(w.shape) for w in _mlp_weights(model)), default=None)


def analytic_hints(model: nn.Module, roles: Mapping[str, ModuleRole]) -> dict[str, Any]:
    """What the analytic FLOP count reads from the model's structure (``roles``: its
    `structure.classify`, a `structure.Structure`'s) rather than its config: the MLP's
    projections per block (3 when gated, 2 when a fused gate-up is one module), their
    weight elements (2 FLOPs each per token, whatever the fusion), and whether a pooler
    follows the encoder."""
    weights = _mlp_weights(model)
    width = max((max(w.shape) for w in weights), default=None)
    params = sum(int(w.numel()) for w in weights)
    pooler = any("Pooler" in type(m).__name__ for m in model.modules())
    hints: dict[str, Any] = {"mlp_projections": len(weights) or None, "mlp_width": width,
                             "mlp_weight_elements": params or None, "pooler": pooler}
    parts = _mixture_parts(model, roles)
    if parts is not None:
        hints["parts"] = parts
    return hints


def _mixture_parts(model: nn.Module, roles: Mapping[str, ModuleRole]) -> dict[str, Any] | None:
    """For a model with experts or token mixers (whose layers differ from a dense
    transformer's): weight elements a token meets in each category over the whole model,
    read from the structure. Routed experts count ``top_k`` of their experts per token
    (the config's experts per token); shared experts, routers, token mixers and dense
    MLPs all their projections; the modules that mix several residual streams their own
    weights (the mixing weights computed from the streams; the mixing itself, a product
    of the streams with a streams-by-streams matrix per token, is not counted); and how
    many softmax-attention calls a forward makes."""
    modules = dict(model.named_modules())
    if not any(r.role in ("mixer", "moe", "experts", "shared", "residual") for r in roles.values()):
        return None
    config: Any = getattr(model, "config", None)
    top_k = _first(config, TOP_K_NAMES) if config is not None else None
    found = {"mlp": 0, "moe.router": 0, "moe.experts": 0, "moe.shared": 0, "mixer": 0, "residual": 0}
    for fqn, info in roles.items():
        module = modules.get(fqn)
        if module is None:
            continue
        if info.role == "experts" and info.container == "moe" and is_experts(module):
            if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
                items = list(module.children())
                per_expert = sum(int(m.weight.numel()) for m in items[0].modules()  # type: ignore[operator,misc]
                                 if is_projection(m))
                count = len(items)
            else:
                stacked = [p for p in module.parameters(recurse=False) if p.dim() >= 3]
                count = max(int(p.shape[0]) for p in stacked)
                per_expert = sum(int(p.numel()) for p in stacked) // count
            found["moe.experts"] += per_expert * int(top_k if _int(top_k) else 1)
        elif is_projection(module) and info.category in found:
            found[info.category] += int(module.weight.numel())  # type: ignore[union-attr]
        elif info.role == "residual":
            # its own matrices (not a projection leaf's): the streams in, the weights out
            found["residual"] += sum(int(p.numel()) for p in module.parameters(recurse=False) if p.dim() == 2)
    attention = sum(1 for r in roles.values() if r.role == "attn")
    return {"weight_elements": found, "attention_calls": attention, "top_k": top_k if _int(top_k) else None}
