"""The `Step` of each mode: what one measured iteration runs (``step()``), how it is put
back between iterations (``reset()``, untimed) and waited for (``sync()``): a forward or
prefill (`Step`); ``decode``, one token against a KV cache (`DecodeStep`); ``train``, the
forward with the model's loss, the backward and an AdamW step, and ``train-nooptim``,
forward and backward (`TrainStep`). `reportgen.profile.inputs` makes them with their
inputs."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from reportgen.vocabulary import TRAIN


class Step:
    """One measured iteration: ``step()`` runs the forward (no sync inside), ``reset()``
    restores state between iterations (untimed), ``sync()`` waits for the device."""

    def __init__(self, model: nn.Module, kwargs: dict[str, Any], *, device: torch.device,
                 inputs_info: dict[str, Any], backend: Any | None = None, mode: str = "forward") -> None:
        self.model = model
        self.kwargs = kwargs
        self.device = device
        self.inputs_info = inputs_info
        self.backend = backend
        self.mode = mode
        # torch.compile's wrapper of ``model`` when the combination is compiled; the KV
        # cache is still filled through the eager model (a prefill shape would compile a
        # graph the timed step never runs)
        self.compiled: Any = None

    def _kernel(self) -> contextlib.AbstractContextManager[Any]:
        if self.backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel(self.backend)

    def __call__(self) -> Any:
        model = self.model if self.compiled is None else self.compiled
        with torch.inference_mode(), self._kernel():
            return model(**self.kwargs)

    def reset(self) -> None:
        return None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


# The optimizer of mode ``train``: AdamW at torch's defaults (its states in the parameters'
# dtype, the implementation torch picks for the device). The learning rate is small so the
# weights stay ordinary numbers over many steps; timing does not depend on their values.
TRAIN_LR = 1e-5


def training_loss(output: Any) -> torch.Tensor:
    """The loss a training step differentiates: the model's own (a language model given
    ``labels`` computes its cross entropy), else, for a model without a head (an
    encoder's ``AutoModel``), the mean of each floating-point output tensor, summed: a
    stand-in whose backward reaches every parameter that produced an output (its own cost
    is one reduction per output)."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    values = output.values() if isinstance(output, Mapping) else (
        output if isinstance(output, (tuple, list)) else (output,))
    tensors = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()
               and v.requires_grad]
    if not tensors:
        raise RuntimeError("the model returned no floating-point output to train on")
    return sum(t.float().mean() for t in tensors)  # type: ignore[return-value]


class TrainStep(Step):
    """One training step (``train``): the forward with its loss, the backward, and an
    AdamW step; ``train-nooptim`` stops after the backward. ``reset()`` clears the
    gradients (``set_to_none``, as a training loop does before its next forward), outside
    the timed region. The model is in training mode (dropout as its config sets it).

    ``phase_hook``, when set, is called ``(phase, True)`` as each phase (``PHASES``)
    starts and ``(phase, False)`` as it ends: the profiled pass opens a profiler range
    there, the hooks method reads its clock. Unset (the timing pass), it costs nothing."""

    def __init__(self, model: nn.Module, kwargs: dict[str, Any], *, optimizer: bool, **kw: Any) -> None:
        super().__init__(model, kwargs, **kw)
        model.train()
        self.phase_hook: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        if optimizer:
            params = [p for p in model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(params, lr=TRAIN_LR)

    def __call__(self) -> Any:
        model = self.model if self.compiled is None else self.compiled
        hook = self.phase_hook
        with self._kernel():
            if hook is not None:
                hook("forward", True)
            loss = training_loss(model(**self.kwargs))
            if hook is not None:
                hook("forward", False)
                hook("backward", True)
            loss.backward()
            if hook is not None:
                hook("backward", False)
            if self.optimizer is not None:
                if hook is not None:
                    hook("optimizer", True)
                self.optimizer.step()
                if hook is not None:
                    hook("optimizer", False)
        return loss.detach()

    def reset(self) -> None:
        self.model.zero_grad(set_to_none=True)


def train_step(step: Step, mode: str) -> TrainStep:
    """A forward ``Step`` turned into the training step of ``mode`` (one of TRAIN_MODES)."""
    kwargs = dict(step.kwargs)
    info = dict(step.inputs_info)
    info["loss"] = ("cross entropy on the model's labels (the input tokens)" if "labels" in kwargs
                    else "mean of each output tensor, summed (no language-model head)")
    info["optimizer"] = "AdamW" if mode == TRAIN else None
    return TrainStep(step.model, kwargs, optimizer=mode == TRAIN, device=step.device,
                     inputs_info=info, backend=step.backend, mode=mode)


def _cache_of(output: Any) -> Any:
    for name in ("cache", "past_key_values"):
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    raise RuntimeError("the model returned no KV cache with use_cache=True")


class DecodeStep(Step):
    """One new token per sequence against a KV cache of ``kv_len`` tokens, built once
    (untimed); ``reset()`` crops the cache back so every iteration sees the same length."""

    def __init__(self, model: nn.Module, prefill_kwargs: dict[str, Any], decode_kwargs: dict[str, Any],
                 cache_arg: str, kv_len: int, **kw: Any) -> None:
        super().__init__(model, decode_kwargs, **kw)
        self.prefill_kwargs = prefill_kwargs
        self.cache_arg = cache_arg
        self.kv_len = kv_len
        self._croppable = True
        self._fill()

    def _fill(self) -> None:
        with torch.inference_mode(), self._kernel():
            out = self.model(**self.prefill_kwargs)
        self.cache = _cache_of(out)
        self.kwargs[self.cache_arg] = self.cache
        self.sync()

    def cache_len(self) -> int:
        return int(self.cache.get_seq_length())

    def reset(self) -> None:
        extra = self.cache_len() - self.kv_len
        if extra <= 0:
            return
        if self._croppable and getattr(self.cache, "is_croppable", True) and hasattr(self.cache, "crop"):
            try:
                with torch.inference_mode():
                    # negative: remove that many tokens (the one form every transformers version reads)
                    self.cache.crop(-extra)
                return
            except (RuntimeError, NotImplementedError):
                # a recurrent layer's state (state-space, linear attention) keeps no past
                # to roll back to: fill the cache anew, now and at every later reset
                self._croppable = False
        self._fill()
