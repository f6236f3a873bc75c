"""Memory of a training step (modes ``train`` and ``train-nooptim``): the record's
``memory.training`` section.

* ``saved_activation_bytes``: what the forward keeps for the backward, per category. One
  training step runs with ``torch.autograd.graph.saved_tensors_hooks`` whose pack hook
  counts each saved tensor's storage once (parameters, which the model keeps anyway, are
  not counted), under module hooks that say which category is running (the module roles
  of ``reportgen.profile.structure``; an attention call outside its projections is
  ``attention.core``; outside every module, the loss included, ``other``).
* ``resident_bytes``: parameters, gradients and optimizer state as tensors after a step.
* ``step_peak_bytes``: the most memory allocated during a step. On a GPU, CUDA's
  allocator peak over one step; on a CPU (no allocator statistics), the parameters,
  optimizer state and inputs resident before a step plus the largest rise over the
  step's start that the profiler's memory events recorded (``step_peak_method`` says
  which).
* ``analytic_bytes``: the same parts from the config alone: parameters, gradients and
  AdamW's two moments at the dtype's size, and the attention scores every layer keeps
  for the backward where the implementation materialises them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from reportgen import traffic
from reportgen.categories import CATEGORIES
from reportgen.profile.step import StepLike, run_hooked
from reportgen.profile.structure import Structure
from reportgen.vocabulary import TRAIN

__all__ = ["resident_bytes", "saved_activation_bytes", "training_memory"]


def _role_category(role: str, category: str, proj: str | None) -> str:
    if role == "proj" and proj:
        return proj
    if role == "attn":
        return "attention.core"
    if role in ("block",):
        return "other"
    return category if category in CATEGORIES else "other"


def saved_activation_bytes(model: nn.Module, step: StepLike, structure: Structure) -> dict[str, int]:
    """Bytes the forward of one training step saves for its backward, per category
    (see the module docstring; ``structure``: the model's). Runs ``step()`` once, then
    ``step.reset()``."""
    modules = dict(model.named_modules())
    stack: list[str] = ["other"]
    handles = []
    for fqn, info in structure.roles.items():
        if info.role is None or fqn not in modules or not fqn:
            continue
        category = _role_category(info.role, info.category, structure.categories.get(fqn))

        def pre(_m: nn.Module, _a: Any, category: str = category) -> None:
            stack.append(category)

        def post(_m: nn.Module, _a: Any, _o: Any) -> None:
            if len(stack) > 1:
                stack.pop()

        handles.append(modules[fqn].register_forward_pre_hook(pre))
        handles.append(modules[fqn].register_forward_hook(post, always_call=True))
    kept = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: set[int] = set()
    out = {c: 0 for c in CATEGORIES}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            size = int(storage.nbytes())
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return tensor
        if key and key not in kept and key not in seen:
            seen.add(key)
            out[stack[-1]] += size
        return tensor

    run_hooked(step, handles, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
    return out


def _tensor_bytes(tensors: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        key = t.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += int(t.untyped_storage().nbytes())
    return total


def resident_bytes(model: nn.Module, step: StepLike) -> dict[str, int]:
    """Parameters, optimizer state and (after a backward) gradients, as tensors now."""
    optimizer = getattr(step, "optimizer", None)
    states: list[Any] = []
    if optimizer is not None:
        for state in optimizer.state.values():
            states += [v for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    return {"parameters": _tensor_bytes(model.parameters()),
            "gradients": _tensor_bytes(p.grad for p in model.parameters() if p.grad is not None),
            "optimizer_state": _tensor_bytes(states)}


def _gradient_bytes(model: nn.Module, step: StepLike) -> int:
    """Gradient bytes one step leaves before they are cleared: the forward and backward
    alone (the optimizer's phase clears them), then ``reset()``."""
    optimizer = getattr(step, "optimizer", None)
    hook = getattr(step, "phase_hook", None)
    try:
        step.optimizer = None  # type: ignore[attr-defined]
        step()
        step.sync()
        return resident_bytes(model, step)["gradients"]
    finally:
        step.optimizer = optimizer  # type: ignore[attr-defined]
        step.phase_hook = hook  # type: ignore[attr-defined]
        model.zero_grad(set_to_none=True)
        step.reset()


def _cuda_step_peak(step: StepLike) -> int:
    device = step.device
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    step.sync()
    peak = int(torch.cuda.max_memory_allocated(device))
    step.reset()
    return peak


def analytic_memory(info: dict[str, Any], combo: Any, scores_per_call: int) -> dict[str, int]:
    """Parameters, gradients, AdamW's moments and saved attention scores, from the config."""
    size = traffic.DTYPE_BYTES.get(str(combo.dtype), 4)
    params = int(info.get("parameters") or 0)
    layers = int(info.get("num_layers") or 0)
    return {"parameters": params * size, "gradients": params * size,
            "optimizer_state": 2 * params * size if combo.mode == TRAIN else 0,
            "attention_scores": int(scores_per_call) * layers}


def training_memory(model: nn.Module, step: StepLike, structure: Structure, combo: Any,
                    info: dict[str, Any], *, rise_bytes: int | None, scores_per_call: int) -> dict[str, Any]:
    """The record's ``memory.training`` section (see the module docstring; ``structure``:
    the model's). ``rise_bytes``: the profiled pass's largest rise over a step's start (CPU)."""
    saved = saved_activation_bytes(model, step, structure)
    resident = resident_bytes(model, step)
    with contextlib.suppress(AttributeError):
        resident["gradients"] = _gradient_bytes(model, step)
    inputs = _tensor_bytes(v for v in getattr(step, "kwargs", {}).values())
    if step.device.type == "cuda":
        peak: int | None = _cuda_step_peak(step)
        method = "CUDA allocator peak over one training step (weights and optimizer state included)"
    elif rise_bytes is not None:
        peak = resident["parameters"] + resident["optimizer_state"] + inputs + int(rise_bytes)
        method = ("parameters, optimizer state and inputs resident before the step plus the largest "
                  "rise over the step's start in the profiler's memory events")
    else:
        peak, method = None, "no memory events recorded"
    return {"saved_activation_bytes": saved,
            "saved_activation_bytes_total": int(sum(saved.values())),
            "resident_bytes": resident,
            "step_peak_bytes": peak,
            "step_peak_method": method,
            "analytic_bytes": analytic_memory(info, combo, scores_per_call)}
