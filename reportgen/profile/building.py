"""Building a combination's model: its transformers config (`reportgen.profile.modelspec`) with
seeded random weights on its device, in its dtype and attention implementation, the
record's ``model`` section, its `Step` with inputs (`reportgen.profile.inputs`) and one
trial iteration (`build` -> `BuiltModel`); `free` drops it all. Nothing here downloads
weights."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reportgen.errors import Skip, UserError
from reportgen.profile.autoclass import architecture, auto_class, main_input, meta_model
from reportgen.profile.dtypes import TORCH_DTYPES
from reportgen.profile.flops import analytic_hints, mlp_width
from reportgen.profile.inputs import fit_sequence, make_step, modality_step
from reportgen.profile.layers import LAYER_NAMES as _LAYER_NAMES
from reportgen.profile.layers import first as _first
from reportgen.profile.layers import layer_stack
from reportgen.profile.modelspec import MICRO, DepthPlan, ModelSpec, spec_of
from reportgen.profile.modes import train_step
from reportgen.profile.routing import even_routing
from reportgen.profile.shrink import (
    FF_NAMES,
    HEAD_DIM_NAMES,
    HEAD_NAMES,
    HIDDEN_NAMES,
    KV_HEAD_NAMES,
    shrink_config,
)
from reportgen.profile.step import StepLike
from reportgen.profile.structure import classify
from reportgen.vocabulary import (
    ATTN_IMPLEMENTATIONS,
    DTYPES,
    MICRO_ONLY,
    SDPA_BACKENDS,
    TRAIN_MODES,
    positions_needed,
)


def torch_dtype(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise UserError(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}") from None


def attn_backend(impl: str, device: torch.device, dtype: torch.dtype) -> tuple[str, Any | None]:
    """(transformers attn_implementation, SDPBackend or None) for one of
    ATTN_IMPLEMENTATIONS; Skip where the device cannot run it."""
    if impl not in ATTN_IMPLEMENTATIONS:
        raise UserError(f"unknown attn_implementation {impl!r}; choose from {', '.join(ATTN_IMPLEMENTATIONS)}")
    if impl in MICRO_ONLY:
        raise Skip(f"attn_implementation {impl} applies only to {MICRO}")
    if impl == "flash_attention_2":
        if device.type != "cuda":
            raise Skip("flash_attention_2 needs a CUDA device")
        if importlib.util.find_spec("flash_attn") is None:
            raise Skip("flash_attention_2 needs the flash_attn package, which is not installed")
        if dtype not in (torch.float16, torch.bfloat16):
            raise Skip("flash_attention_2 runs only in fp16 or bf16")
        return impl, None
    if impl in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend

        if impl in ("sdpa-efficient", "sdpa-cudnn") and device.type != "cuda":
            raise Skip(f"{impl} needs a CUDA device")
        return "sdpa", getattr(SDPBackend, SDPA_BACKENDS[impl])
    return impl, None


def check_dtype(dtype: torch.dtype, device: torch.device) -> None:
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise Skip(f"bf16 is not supported on {torch.cuda.get_device_name(device)}")


@dataclass
class BuiltModel:
    model: nn.Module
    info: dict[str, Any]
    step: StepLike
    # the build's trial iteration, host-clocked around the call and its sync (ms): the
    # timing pass counts it as its first warm-up sample
    trial_ms: float | None = None
    # --layers: `depth_facts`
    depth: dict[str, Any] | None = None
    # what a later build must ask for to reuse this model (`free` with ``keep``; None:
    # never reused), and its modules' hooks as built (`_wiring`)
    key: tuple[Any, ...] | None = None
    wiring: tuple[Any, ...] = ()
    # what ``build``'s ``trial`` returned, where it ran as the trial iteration
    trial_result: Any = None


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    return str(value)


def depth_facts(plan: DepthPlan, model: nn.Module, name: str, arch: str) -> dict[str, Any]:
    """The record's ``depth`` section as built (`reportgen.depth` adds the whole-model
    figures once the timing is final), and the whole model's info and analytic hints
    (``_full_info``, ``_full_hints``: for its FLOP count, not stored)."""
    depth = plan.depth
    full = meta_model(plan.full_config)
    fqns = layer_stack(model)
    info = model_info(name, full, arch)
    info.pop("config", None)
    return {
        **({"experts": dict(plan.experts)} if plan.experts is not None else {}),
        "layers": len(depth.chosen), "full_layers": len(depth.kinds),
        "measured": depth.measured, "full": depth.full,
        "measured_layers": [{"index": i, "kind": depth.kinds[i], "layer": fqn}
                            for i, fqn in zip(depth.chosen, fqns)],
        "parameters": sum(p.numel() for p in model.parameters()),
        "full_parameters": info["parameters"],
        "_full_info": info, "_full_hints": analytic_hints(full, classify(full)),
    }


def model_info(name: str, model: nn.Module, arch: str) -> dict[str, Any]:
    """The record's ``model`` section."""
    config: Any = model.config
    hidden = _first(config, HIDDEN_NAMES[:3])
    heads = _first(config, HEAD_NAMES)
    kv_heads = _first(config, KV_HEAD_NAMES) or heads
    head_dim = _first(config, HEAD_DIM_NAMES)
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    ff = _first(config, FF_NAMES) or mlp_width(model)
    return {
        "name": name,
        "model_type": config.model_type,
        "architecture": arch,
        "class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_layers": _first(config, _LAYER_NAMES),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": ff,
        "vocab_size": _first(config, ("vocab_size",)),
        "config": _json_safe(config.to_diff_dict()),
    }


def check_positions(model: nn.Module, needed: int, name: str) -> None:
    """Learned position tables cannot index past their size (on a GPU that would be a
    device-side assert, which poisons the context), so refuse up front."""
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and "position" in module_name.lower():
            if module.num_embeddings < needed:
                raise Skip(f"{name} has {module.num_embeddings} learned positions ({module_name}); "
                           f"this combination needs {needed}")


# Seeded random weights without transformers' per-module initialisation (normal draws
# from a serial generator, most of a reference model's build time): one block of uniform
# values with HF's usual standard deviation, laid into each weight from its own random
# offset; norm scales 1, biases 0 (what the usual initialisation gives them). Timing does
# not depend on the values, only on their being ordinary finite numbers.
INIT_STD = 0.02
INIT_BLOCK = 1 << 20


def fast_init(model: nn.Module, seed: int) -> None:
    """Fill ``model``'s parameters with seeded random values (see INIT_STD)."""
    gen = torch.Generator().manual_seed(seed)
    bound = INIT_STD * 3.0 ** 0.5
    block = torch.empty(INIT_BLOCK).uniform_(-bound, bound, generator=gen)
    blocks: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
    seen: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            for name, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue  # a tied weight is filled once
                seen.add(id(param))
                if name == "bias":
                    param.zero_()
                elif param.ndim == 1 and type(module).__name__.endswith("Norm"):
                    param.fill_(1.0)
                else:
                    offset = int(torch.randint(0, INIT_BLOCK, (1,), generator=gen))
                    key = (param.device, param.dtype)
                    if key not in blocks:
                        blocks[key] = block.to(device=param.device, dtype=param.dtype)
                    _lay(param.view(-1), blocks[key], offset)


def _lay(flat: torch.Tensor, block: torch.Tensor, offset: int) -> None:
    """Fill ``flat`` with ``block`` rotated by ``offset`` (``torch.roll(block, offset)``),
    repeated: copied from the block's two halves straight into the weight, with no rolled
    copy of the block made for each weight."""
    size = block.numel()
    head, tail = block[size - offset:], block[: size - offset]  # the rolled block's two parts
    for start in range(0, flat.numel(), size):
        length = min(flat.numel() - start, size)
        first = min(length, offset)
        flat[start:start + first].copy_(head[:first])
        if length > offset:
            flat[start + offset:start + length].copy_(tail[: length - offset])


def _instantiate(config: Any, arch: str, impl: str, dtype: torch.dtype, device: torch.device,
                 seed: int = 0, remote_code: bool = False, mode: str = "forward") -> nn.Module:
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers: its own initialisation, then ours over it
        no_init_weights = contextlib.nullcontext  # type: ignore[assignment]
    cls = auto_class(config, arch, mode)
    extra = {"trust_remote_code": True} if remote_code else {}
    try:
        with torch.device(device), no_init_weights():
            model = cls.from_config(config, attn_implementation=impl, dtype=dtype, **extra)
        model.tie_weights()  # skipped with the initialisation
        fast_init(model, seed)
    except (ValueError, ImportError, NotImplementedError) as exc:
        message = str(exc)
        if "attn" in message.lower() or "attention" in message.lower():
            # an older transformers release may lack what a newer one has: say which release
            import transformers

            raise Skip(f"{config.model_type}: {impl} not in transformers {transformers.__version__} "
                       f"(does not support attn_implementation={impl}: {message})") from exc
        raise
    return model.to(device).eval()


def _default_builds(spec: ModelSpec, impl: str, exc: Exception) -> None:
    """Where a model type's tiny build failed, whether transformers' own default config of
    that type builds at all (on the meta device: no memory, no weights); if it does not
    either, the type cannot be measured from its defaults, and that is the Skip's line."""
    if spec.source != "model_type":
        return
    try:
        config = spec.make_config("reference")
        arch = architecture(config)
        with torch.device("meta"):
            auto_class(config, arch).from_config(config, attn_implementation=impl)
    except Exception as default_exc:  # noqa: BLE001 - any failure of transformers' own build
        first = (str(default_exc).strip().splitlines() or [type(default_exc).__name__])[0]
        raise Skip(f"transformers' default {spec.model_type} config does not build either: "
                   f"{type(default_exc).__name__}: {first[:200]}") from exc


_SKIP_RUNTIME = ("No available kernel", "not implemented for", "No viable backend")


def _trial(step: StepLike, run: Callable[[], Any] | None = None) -> tuple[float, Any]:
    """One iteration outside the samples: lazy initialisation stays out of them, and a
    backend the shapes/dtype/device cannot use surfaces as a Skip, not a failure.
    Returns its milliseconds (host clock around the call and its sync) and what ``run``
    returned: ``run`` (which runs the step once and resets it) in place of a plain call."""
    result = None
    try:
        step.sync()
        start = time.perf_counter_ns()
        if run is None:
            step()
        else:
            result = run()
        step.sync()
        elapsed = (time.perf_counter_ns() - start) / 1e6
    except RuntimeError as exc:
        if isinstance(exc, torch.OutOfMemoryError):
            raise
        message = str(exc)
        if any(s in message for s in _SKIP_RUNTIME):
            raise Skip(message.strip().splitlines()[0]) from exc
        raise
    if run is None:
        step.reset()
    return elapsed, result


def build(combo: Any, device: torch.device | str | None = None, *, seed: int = 0,
          reuse: bool = False, trial: Callable[[BuiltModel], Any] | None = None) -> BuiltModel:
    """Build ``combo``'s model with random weights on ``device`` (default combo.device),
    its info dict and its Step. Raises Skip for combinations that cannot run here.
    ``reuse``: take the model `free` kept (``keep``) where it is the very model this
    combination builds; a kept model that is not is dropped before anything is built.
    ``trial`` runs as the trial iteration in place of a plain forward (one forward of the
    step, reset after it: the structure's recorded forward), its result kept as
    ``trial_result``."""
    if combo.model == MICRO:
        _drop_kept()
        from reportgen.profile import (
            micro,  # written alongside; imported only when asked for
        )

        module, info, step = micro.build(combo, device if device is not None else combo.device, seed=seed)
        return BuiltModel(module, info, step)
    spec = spec_of(combo)
    dev = torch.device(device if device is not None else combo.device)
    dtype = torch_dtype(combo.dtype)
    check_dtype(dtype, dev)
    impl, backend = attn_backend(combo.attn_implementation, dev, dtype)
    scale = getattr(combo, "scale", "reference")
    try:
        return _build(combo, spec, dev, dtype, impl, backend, seed, scale, reuse=reuse, trial=trial)
    except (Skip, UserError, torch.OutOfMemoryError):
        raise
    except Exception as exc:
        if scale != "tiny" or getattr(combo, "layers", None) is not None or getattr(combo, "experts", None) is not None:
            raise
        first = exc
    # A tiny shrink that broke a width some part of the model ties to another: the same
    # architecture again at its own widths, shrunk in depth (and experts) alone
    free(None)
    try:
        built = _build(combo, spec, dev, dtype, impl, backend, seed, "tiny-depth", trial=trial)
    except (Skip, UserError, torch.OutOfMemoryError):
        raise
    except Exception as second:
        _default_builds(spec, impl, first)
        if (spec.source == "model_type" and type(second) is type(first)
                and str(second) == str(first)):
            # not the shrink: the default config fails the same way at its own widths
            line = (str(first).strip().splitlines() or [""])[0][:200]
            raise Skip(f"transformers' default {spec.model_type} config fails the same way at its "
                       f"own widths: {type(first).__name__}: {line}") from first
        first.add_note(f"at the reference widths too: {type(second).__name__}: "
                       f"{str(second).strip()[:200]}")
        raise first from None
    built.info["tiny"] = ("depth only: the widths are the reference's (shrinking them failed: "
                          f"{type(first).__name__}: {str(first).strip().splitlines()[0][:160]})")
    return built


def _build(combo: Any, spec: ModelSpec, dev: torch.device, dtype: torch.dtype, impl: str,
           backend: Any, seed: int, scale: str, *, reuse: bool = False,
           trial: Callable[[BuiltModel], Any] | None = None) -> BuiltModel:
    needed = positions_needed(combo.mode, combo.seq_len)
    if scale == "tiny-depth":
        config = spec.make_config("reference")
        shrink_config(config, min_positions=needed, widths=False)
        plan = None
    else:
        config, plan = spec.depth_config(scale, min_positions=needed, layers=getattr(combo, "layers", None),
                                         experts=getattr(combo, "experts", None))
    arch = architecture(config)
    if combo.mode != "forward" and combo.mode not in TRAIN_MODES and arch != "decoder":
        raise Skip(f"{combo.mode} applies to causal LMs; {spec.name} is an {arch}")
    main = main_input(config, arch)
    if main != "input_ids":
        fit_sequence(config, spec.name, main, combo.seq_len)
    key = _model_key(config, arch, impl, dtype, dev, seed, spec.remote_code, combo.mode) \
        if reuse and plan is None else None
    model, wiring = _take_kept(key)
    if model is None:
        # the seed fixes the random weights too (without touching the caller's RNG state),
        # so a rerun computes on the same numbers
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(seed)
            model = _instantiate(config, arch, impl, dtype, dev, seed, remote_code=spec.remote_code,
                                 mode=combo.mode)
        # a random router does not spread tokens as a trained one: the experts run an even
        # draw (reportgen.profile.routing), part of the model as built (kept with it)
        even_routing(model, seed)
        wiring = _wiring(model) if key is not None else ()
    main = getattr(model, "main_input_name", main)
    info = model_info(spec.name, model, arch)
    if spec.hub is not None:
        info["source"] = _json_safe(spec.hub)
    depth = depth_facts(plan, model, spec.name, arch) if plan is not None else None
    built_step: StepLike
    if main == "input_ids":
        check_positions(model, needed, spec.name)
        built_step = make_step(model, model.config, arch, combo.mode, batch_size=combo.batch_size,
                               seq_len=combo.seq_len, device=dev, backend=backend, seed=seed, name=spec.name)
    else:
        built_step = modality_step(model, model.config, main, batch_size=combo.batch_size,
                                   seq_len=combo.seq_len, device=dev, backend=backend, seed=seed,
                                   name=spec.name)
        if combo.mode in TRAIN_MODES:
            built_step = train_step(built_step, combo.mode)
    built = BuiltModel(model, info, built_step, None, depth, key, wiring)
    try:
        built.trial_ms, built.trial_result = _trial(built_step, None if trial is None else lambda: trial(built))
    except BaseException:
        free(BuiltModel(model, info, built_step))
        raise
    return built


def free(result: BuiltModel | None, *, keep: bool = False) -> None:
    """Drop the model, its inputs and any KV cache, then return cached CUDA blocks.
    ``keep``: the model itself (one built with ``reuse``) stays for the next `build` that
    asks for the same one; its inputs, step and cache go."""
    if result is not None:
        step = result.step
        for attr in ("model", "compiled", "kwargs", "cache", "prefill_kwargs", "optimizer"):
            with contextlib.suppress(AttributeError):
                delattr(step, attr)
        if keep and result.key is not None and result.model is not None:
            _drop_kept()
            _kept.append(_Kept(result.key, result.model, result.wiring))
        result.model = None  # type: ignore[assignment]
        result.step = None  # type: ignore[assignment]
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- one model kept between the combinations a worker measures in a row ----------------
# A worker measures a round's combinations one after another; BERT-base at 128 and at 512
# tokens is one model (one config, dtype, attention, device and seed), built and filled
# with the same weights twice. The measuring process keeps the model of the combination it
# just measured (`free` with ``keep``) and the next build that would make the very same
# model takes it (``reuse``): its step, inputs, trial iteration and warm-up are its own.
# Only a model left as it was built is taken (no hook, no forward replaced on a module); a
# training step's or a compiled one's is never kept (`measure` decides), nor a model cut
# to fewer layers or experts. At most one model is kept, and only in the process that asked.


@dataclass
class _Kept:
    key: tuple[Any, ...]
    model: nn.Module
    wiring: tuple[Any, ...]


_kept: list[_Kept] = []


def _wiring(model: nn.Module) -> tuple[Any, ...]:
    """Each module's hooks and instance ``forward``: what a measurement may add to a model
    and must take away again."""
    return tuple((len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks),
                  len(m._backward_pre_hooks), "forward" in vars(m)) for m in model.modules())


def _model_key(config: Any, arch: str, impl: str, dtype: torch.dtype, dev: torch.device, seed: int,
               remote_code: bool, mode: str) -> tuple[Any, ...] | None:
    """What makes two builds the same model; None where the config cannot say."""
    try:
        text = config.to_json_string(use_diff=False)
        cls = auto_class(config, arch, mode)
    except Exception:  # noqa: BLE001 - a config that cannot be written out is simply built
        return None
    return (text, arch, impl, str(dtype), str(dev), seed, remote_code, f"{cls.__module__}.{cls.__qualname__}")


def _take_kept(key: tuple[Any, ...] | None) -> tuple[nn.Module | None, tuple[Any, ...]]:
    """(the kept model, its wiring as built) when it is ``key``'s and still wired as it was
    built; otherwise the kept model (if any) is dropped, before anything new is allocated,
    and (None, ())."""
    if _kept and key is not None and _kept[0].key == key and _wiring(_kept[0].model) == _kept[0].wiring:
        kept = _kept.pop()
        return kept.model, kept.wiring
    _drop_kept()
    return None, ()


def _drop_kept() -> None:
    import gc
    import weakref

    if not _kept:
        return
    gone = weakref.ref(_kept.pop().model)
    gc.collect()
    if gone() is not None:
        # frozen by the worker between its combinations (`worker.release_memory`): only a
        # full collection of the frozen objects frees what refers to itself
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def kept_model() -> nn.Module | None:
    """The model kept for the next build, if any."""
    return _kept[0].model if _kept else None
