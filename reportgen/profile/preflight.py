"""Pre-flight memory check: will this combination fit, decided before anything real is
allocated (METHOD.md rule 16: an out-of-memory costs that combination only).

A combination that cannot fit is recorded ``skipped`` within seconds ("needs ~27.0 GiB,
21.9 GiB available") instead of the OS OOM-killing the worker half-way through building
it (``--models llama`` at reference scale is ``LlamaConfig()``'s defaults: 6.7B
parameters, 27 GB in fp32).

The estimate comes from the config alone:

* **parameters** (and buffers) are counted exactly by building the model on the ``meta``
  device through the very path `building.build` uses (`modelspec.spec_of`,
  `ModelSpec.make_config` with ``--scale``, `autoclass.architecture`, `autoclass.auto_class`);
  meta tensors have shapes and dtypes and no storage, so a 70B config takes well under a
  second and allocates nothing. transformers' ``no_init_weights`` is deliberately *not*
  used: it also skips weight tying (GPT-2's tied head would be counted twice), and
  initialisation on meta costs nothing anyway.
* **weights** = parameter and buffer bytes, each at the dtype it is built in.
* **build_transient**: transformers allocates every tied weight (GPT-2's and T5's LM
  head, T5's per-stack token embeddings) before ``post_init`` ties it to the shared one,
  so building briefly holds the bytes of each duplicate too: the parameter bytes counted
  with duplicates (``named_parameters(remove_duplicate=False)``) less those without.
  Measured on this CPU: GPT-2 +147 MiB, T5-small +188 MiB, exactly this figure.
* **kv_cache** (prefill, decode; a causal LM's only; decode-nocache keeps none) = every
  layer's cache after ``seq_len + 1`` tokens by the kind of its mixer (`kvcache`: keys and
  values of full attention, a sliding window's capped at the window, MLA's latent, a
  sparse attention's indexer keys, a state-space or linear-attention layer's constant
  state), plus the largest layer's once more: the transient copy while a layer's cache
  grows by concatenation; ``x batch x bytes``. For plain attention that is
  ``2 (K, V) x (layers + 1) x kv_heads x head_dim x (seq_len + 1) x batch x bytes``. An
  encoder-decoder's decoder keeps that formula and adds its cross-attention cache,
  ``seq_len`` long.
* **activations**: one forward under inference mode frees each layer's intermediates
  when the layer returns, so the working set is one layer's, not the sum over layers:
  ``batch x tokens x bytes x (ACT_HIDDEN_TENSORS x width + ACT_FF_TENSORS x ff)``, where
  width = max(hidden, heads x head_dim) and ff the MLP width (residual, normed input,
  q/k/v, rotary copies, attention output, projection output: 8 width-sized tensors; the
  MLP's up, gate and activation output: 3 ff-sized ones), plus the inputs (ids, mask,
  positions: int64), one additive mask ``batch x Lq x Lk x bytes`` per stack, the
  encoder's output for an encoder-decoder, a relative position bias ``batch x heads x Lq x
  Lk`` per attention kind for configs that have one (``relative_attention_num_buckets``,
  T5-style: the bias is computed once and passed through every layer), the logits
  ``batch x positions x vocab x bytes`` for a model with an LM head (x2 with
  ``final_logit_softcapping``; positions = 1 where the model keeps only the last
  position's logits in prefill/decode, as `inputs.make_step` asks), and, for an
  implementation that materialises scores, one more score-sized tensor ``batch x heads x
  Lq x Lk x bytes``: scaling, masking and softmax each hold input and output at once, so
  even naive-inplace (which `traffic.attention_activation_bytes` counts x1) peaks at two.
  The sum is multiplied by ``WORKING_SET_SLACK`` (1.5) for allocator retention and
  fragmentation: on the CPU freed blocks stay in glibc's heap, and peak RSS ran up to
  1.35x the live tensors for bert-base eager s512 and llama-small eager s1024 (1.64x for
  attention-micro naive-inplace before the extra score tensor was counted). Tokens per
  forward: seq_len for forward and prefill; for decode too, because building a decode
  step runs the prefill first; seq_len + 1 for decode-nocache (prefix and new token).
* **attention_scores**: exactly `traffic.attention_activation_bytes` (eager, sdpa-math
  and naive hold scores and probabilities, ``B x H x Lq x Lk x bytes x 2``; naive-inplace
  x1; fused backends 0). For decode the larger of the decode step's and the prefill's
  that builds its cache.
* **profiler**: the profiled pass keeps its trace in host memory (kineto's events, the
  exported JSON read back, the parsed dict and the attribution's tables):
  ``PROFILER_FIXED_BYTES + PROFILER_EVENT_BYTES x PROFILER_EVENTS_PER_LAYER x layers x
  (iterations + 1 warm-up)``. Measured on this CPU (cpu-default suite, torch 2.13):
  210-390 trace events per layer per forward, and the profiled pass's peak RSS growth
  ~3-11 KiB per event (t5-small: 188 MiB for 12 layers x 4 forwards); the allowance
  rounds both up (500 events, 12 KiB). On CUDA the trace is host
  memory, not device memory, so it is not part of the device estimate.
* **training** (``train``, ``train-nooptim``): the forward keeps every layer's
  intermediates for the backward, so ``activations`` adds the one-layer working set once
  per layer (and ``attention_scores`` counts every layer's, plus one); **gradients** are
  one more copy of the parameters and **optimizer_state** AdamW's two moments (``train``
  only); the profiler allowance counts ``TRAIN_EVENTS_FACTOR`` times the events (the
  backward's and the optimizer's ops).
* **runtime**: a fixed allowance for the process: on the CPU ``RUNTIME_CPU_BYTES``
  (torch + transformers imported, the modeling code and profiler loaded lazily,
  allocator slack and thread arenas; ~0.3 GiB measured after import); on CUDA
  ``RUNTIME_CUDA_BYTES`` (cuBLAS/cuDNN workspaces and caching-allocator rounding). The
  CUDA context itself is not counted: `torch.cuda.mem_get_info` creates it before it
  answers, so its free figure is already net of the context.

Where the combination does not fit at the depth it asks for (the whole model, or its
``--layers``) it is measured depth-reduced instead, with the most layers that fit, every
kind of layer kept, as ``--layers`` measures; a mixture of experts that does not fit even
at its fewest layers is built with fewer routed experts per layer, the largest count that
fits (`fitting.reduce`). The section's ``reduced`` says what and why ("measured 6 of 61
layers with 16 of 256 experts: the whole model needs ~1250.3 GiB, 21.9 GiB available (host
memory)"), its ``estimate_bytes`` are of what is measured and ``requested_estimate_bytes``
of what was asked for; the worker builds the combination as reduced (`fitting.applied`).
Only where nothing fits is it skipped.

The check compares the estimate with ``SAFETY_MARGIN`` (95%) of what is available: on
the CPU ``MemAvailable`` from /proc/meminfo, or less where a cgroup memory limit leaves
less; on CUDA the free bytes of `torch.cuda.mem_get_info`.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from reportgen import kvcache, traffic
from reportgen.errors import Skip, UserError
from reportgen.profile import autoclass, building, dtypes, experts, fitting, inputs, modelspec
from reportgen.profile.layers import first
from reportgen.vocabulary import ATTENTION_MICRO, DECODE_NOCACHE, TRAIN, TRAIN_MODES, positions_needed

__all__ = ["SAFETY_MARGIN", "available", "check", "estimate", "format_gib"]

GIB = 1024**3
_LAYER_COUNT_NAMES = ("num_hidden_layers", "num_layers", "n_layer")
MIB = 1024**2
METHOD = "meta-device parameter count + analytic working set"

SAFETY_MARGIN = 0.95  # the estimate may use at most this share of what is available

# per-layer working set of one forward, in tensors of batch x tokens x (width | ff)
ACT_HIDDEN_TENSORS = 8
ACT_FF_TENSORS = 3
INPUT_TENSORS = 3  # input ids, attention mask, position ids: int64 each
WORKING_SET_SLACK = 1.5  # allocator retention and fragmentation; see the module docstring

PROFILER_FIXED_BYTES = 64 * MIB
PROFILER_EVENTS_PER_LAYER = 500  # per forward; 210-390 measured on CPU traces
# A training step records its backward's ops (about twice the forward's) and the
# optimizer's besides the forward's.
TRAIN_EVENTS_FACTOR = 4
# AdamW keeps two moments per parameter (exp_avg, exp_avg_sq) in the parameter's dtype.
ADAMW_STATES = 2
PROFILER_EVENT_BYTES = 12 * 1024  # kineto's record + raw JSON + parsed dict + analysis; <= 11 KiB measured
PROFILE_ITERATIONS = 3  # the suite default (settings.profile_iterations)
PROFILE_WARMUP = 1  # profiling.profile_step's default

RUNTIME_CPU_BYTES = 512 * MIB
RUNTIME_CUDA_BYTES = 512 * MIB

MEMINFO_PATH = "/proc/meminfo"
CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP_PATH = "/proc/self/cgroup"

_UNLIMITED = 2**62  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def format_gib(n: int) -> str:
    """``n`` bytes as GiB with one decimal: ``format_gib(27 * 2**30) == "27.0 GiB"``."""
    return f"{n / GIB:.1f} GiB"


# --- the estimate ----------------------------------------------------------------------


def _field(combo: Any, name: str, default: Any = None) -> Any:
    if isinstance(combo, dict):
        return combo.get(name, default)
    return getattr(combo, name, default)


def _bytes_of(tensors: Any) -> tuple[int, int]:
    """(elements, bytes) of distinct tensors (tied weights count once)."""
    seen: set[int] = set()
    elements = size = 0
    for tensor in tensors:
        if tensor is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        elements += tensor.numel()
        size += tensor.numel() * tensor.element_size()
    return elements, size


def _micro_model(combo: Any) -> tuple[int, int, dict[str, Any]]:
    """(parameters, weight bytes, info) of attention-micro from its known sizes: the same
    classes `micro.build` uses, on meta."""
    from reportgen.profile import micro

    variant = str(_field(combo, "attn_implementation", "naive"))
    dtype = dtypes.TORCH_DTYPES.get(str(_field(combo, "dtype", "fp32")), torch.float32)
    with torch.device("meta"):
        attn = micro.PostAttention(variant if variant in micro.VARIANTS else "sdpa-math",
                                   micro.HIDDEN_SIZE // micro.NUM_HEADS)
        module = micro.MicroModel(attn).to(dtype=dtype)
    # No weights: the module is the attention call alone. Its inputs (q, k, v and the
    # L x L boolean mask, 1/64 of one fp32 score matrix of 16 heads) are working set.
    params, param_bytes = _bytes_of(module.parameters())
    info: dict[str, Any] = {"num_layers": 1, "hidden_size": micro.HIDDEN_SIZE, "num_heads": micro.NUM_HEADS,
                            "num_kv_heads": micro.NUM_HEADS, "head_dim": micro.HIDDEN_SIZE // micro.NUM_HEADS,
                            "intermediate_size": 0, "vocab_size": None, "architecture": "attention"}
    return params, param_bytes, info


def _meta_model(combo: Any) -> tuple[torch.nn.Module, Any, str, str]:
    """(model on meta, config, architecture, spec name): `building.build`'s config path."""
    spec = modelspec.spec_of(combo)
    needed = positions_needed(str(combo.mode), int(combo.seq_len))
    config = spec.make_config(_field(combo, "scale", "reference"), min_positions=needed,
                              layers=_field(combo, "layers", None), experts=_field(combo, "experts", None))
    arch = autoclass.architecture(config)
    cls = autoclass.auto_class(config, arch, str(combo.mode))
    dtype = building.torch_dtype(combo.dtype)
    # meta init draws no random numbers, but the caller's RNG state is not ours to touch
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        model = cls.from_config(config, dtype=dtype, **({"trust_remote_code": True} if spec.remote_code else {}))
    return model, config, arch, spec.name


def _layers(config: Any, info: dict[str, Any], arch: str) -> tuple[int, int]:
    """(encoder layers, decoder layers); an encoder-only or decoder-only model has one."""
    layers = int(info.get("num_layers") or 1)
    if arch != "encoder-decoder":
        return (0, layers) if arch == "decoder" else (layers, 0)
    enc = first(config, ("encoder_layers", "num_layers", "num_hidden_layers")) or layers
    dec = first(config, ("num_decoder_layers", "decoder_layers")) or enc
    return int(enc), int(dec)


@dataclass(frozen=True)
class _Shape:
    """What the analytic terms read beyond the record's ``model`` section."""

    arch: str
    enc_layers: int
    dec_layers: int
    lm_head: bool = False  # the model returns logits over the vocabulary
    keeps_last_logits: bool = False  # forward takes logits_to_keep (make_step passes 1)
    relative_bias: bool = False  # T5-style bias, computed once and passed through the stack
    logit_softcapping: bool = False  # logits / cap -> tanh -> * cap: two logits tensors live
    cache: tuple[kvcache.LayerMemory, ...] = ()  # a decoder's layers' caches by kind


def _analytic(combo: Any, info: dict[str, Any], shape: _Shape) -> dict[str, int]:
    """kv_cache, activations and attention_scores in bytes (formulas: module docstring)."""
    mode = str(combo.mode)
    nbytes = building.torch_dtype(combo.dtype).itemsize
    batch = int(combo.batch_size)
    length = int(combo.seq_len)
    hidden = int(info.get("hidden_size") or 0)
    heads = int(info.get("num_heads") or 0)
    head_dim = int(info.get("head_dim") or (hidden // heads if heads else 0))
    kv_heads = int(info.get("num_kv_heads") or heads)
    ff = info.get("intermediate_size")
    ff = int(ff) if ff is not None else 4 * hidden
    width = max(hidden, heads * head_dim)
    encoder_decoder = shape.arch == "encoder-decoder"

    kv = 0
    if mode in ("prefill", "decode") and shape.cache:
        elements = [layer.elements(length + 1) for layer in shape.cache]
        kv = (sum(elements) + max(elements)) * batch * nbytes
    elif mode in ("prefill", "decode"):
        per_token_layer = 2 * kv_heads * head_dim * batch * nbytes
        layers = shape.dec_layers or shape.enc_layers
        kv = per_token_layer * (layers + 1) * (length + 1)
        if encoder_decoder:
            kv += per_token_layer * layers * length  # cross-attention keys/values

    # decode builds its cache with a full-length prefill first; decode-nocache reads the
    # prefix and the new token at once
    tokens = length + 1 if mode == DECODE_NOCACHE else length
    stacks = 2 if encoder_decoder else 1
    working = batch * tokens * nbytes * (ACT_HIDDEN_TENSORS * width + ACT_FF_TENSORS * ff)
    working += INPUT_TENSORS * stacks * batch * tokens * 8
    working += stacks * batch * tokens * tokens * nbytes  # one additive mask per stack
    if encoder_decoder:
        working += batch * tokens * hidden * nbytes  # the encoder's output, kept for cross-attention
    if shape.relative_bias:
        kinds = 3 if encoder_decoder else 1  # encoder self, decoder self, decoder cross
        working += kinds * batch * heads * tokens * tokens * nbytes
    if shape.lm_head:
        vocab = int(info.get("vocab_size") or 0)
        positions = 1 if (mode != "forward" and shape.keeps_last_logits) else tokens
        working += (2 if shape.logit_softcapping else 1) * batch * positions * vocab * nbytes
    scores = traffic.attention_activation_bytes(info, combo)
    if mode in TRAIN_MODES:
        # a training step keeps every layer's intermediates (and scores) for the backward,
        # and the backward works on one layer's more at a time
        layers = max(1, shape.enc_layers + shape.dec_layers)
        layer_working = batch * tokens * nbytes * (ACT_HIDDEN_TENSORS * width + ACT_FF_TENSORS * ff)
        working += layers * layer_working
        scores *= layers + 1
    if mode == "decode":
        prefill = SimpleNamespace(**{**_as_dict(combo), "mode": "prefill"})
        scores = max(scores, traffic.attention_activation_bytes(info, prefill))
    if scores:
        # scaling, masking and softmax each hold input and output at once: one score-sized
        # tensor beyond the live scores measure counts (naive-inplace peaks at two as well)
        working += batch * heads * tokens * tokens * nbytes
    activations = int(WORKING_SET_SLACK * working)
    return {"kv_cache": int(kv), "activations": activations, "attention_scores": int(scores)}


def _as_dict(combo: Any) -> dict[str, Any]:
    if isinstance(combo, dict):
        return dict(combo)
    if hasattr(combo, "as_dict"):
        return dict(combo.as_dict())
    return dict(vars(combo))


def _device_type(device: str | torch.device | None) -> str:
    if device is None or str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device).type


def estimate(combo: Any, *, device: str | None = None, profile_iterations: int = PROFILE_ITERATIONS) -> dict[str, Any]:
    """Peak memory of measuring ``combo`` on ``device`` (default ``combo.device``), from
    its config alone; nothing real is allocated. Raises `UserError` for a model name
    `building.build` would refuse too. Formulas: the module docstring."""
    combo = combo if not isinstance(combo, dict) else SimpleNamespace(**combo)
    dev = _device_type(device if device is not None else _field(combo, "device", "cpu"))
    if combo.model == ATTENTION_MICRO:
        params, weights, info = _micro_model(combo)
        transient = 0
        shape = _Shape(arch="attention", enc_layers=1, dec_layers=0)
    else:
        model, config, arch, name = _meta_model(combo)
        params, param_bytes = _bytes_of(model.parameters())
        _, buffer_bytes = _bytes_of(model.buffers())
        weights = param_bytes + buffer_bytes
        with_duplicates = sum(p.numel() * p.element_size() for _, p in model.named_parameters(remove_duplicate=False))
        transient = with_duplicates - param_bytes
        info = building.model_info(name, model, arch)
        enc_layers, dec_layers = _layers(config, info, arch)
        shape = _Shape(arch=arch, enc_layers=enc_layers, dec_layers=dec_layers,
                       lm_head=model.get_output_embeddings() is not None,  # type: ignore[operator]
                       keeps_last_logits="logits_to_keep" in inputs.forward_params(model),
                       relative_bias=bool(getattr(config, "relative_attention_num_buckets", None)),
                       logit_softcapping=bool(getattr(config, "final_logit_softcapping", None)),
                       cache=tuple(kvcache.layer_memory(config)) if arch == "decoder" else ())
        del model
    parts: dict[str, int] = {"weights": int(weights), "build_transient": int(transient)}
    parts.update(_analytic(combo, info, shape))
    if str(combo.mode) in TRAIN_MODES:
        # gradients of every parameter; AdamW's moments in mode train
        parts["gradients"] = int(params * building.torch_dtype(combo.dtype).itemsize)
        parts["optimizer_state"] = ADAMW_STATES * parts["gradients"] if str(combo.mode) == TRAIN else 0
    if dev == "cuda":
        parts["profiler"] = 0  # the trace lives in host memory, not on the device
        parts["runtime"] = RUNTIME_CUDA_BYTES
    else:
        layers = max(1, shape.enc_layers + shape.dec_layers)
        events = PROFILER_EVENTS_PER_LAYER * layers * (profile_iterations + PROFILE_WARMUP)
        if str(combo.mode) in TRAIN_MODES:
            events *= TRAIN_EVENTS_FACTOR
        parts["profiler"] = PROFILER_FIXED_BYTES + PROFILER_EVENT_BYTES * events
        parts["runtime"] = RUNTIME_CPU_BYTES
    return {"estimate_bytes": int(sum(parts.values())), "parts": parts, "parameters": int(params),
            "method": METHOD}


def layers_that_fit(combo: Any, budget: float, *, device: str | None = None,
                    profile_iterations: int = PROFILE_ITERATIONS) -> int | None:
    """The most layers of ``combo``'s model (``--layers``: every kind kept, at full width)
    whose estimate is within ``budget`` bytes, or None where even the fewest do not fit,
    the combination already names its layers, or its model cannot be cut."""
    if _field(combo, "layers", None) is not None:
        return None
    found = _model_counts(combo)
    if found is None:
        return None
    return fitting.most_layers(_fits(combo, budget, device, profile_iterations), _field(combo, "experts", None),
                               found[0] - 1)


def reduction(combo: Any, budget: float, *, device: str | None = None,
              profile_iterations: int = PROFILE_ITERATIONS) -> fitting.Reduction | None:
    """What of ``combo`` fits within ``budget`` bytes where it does not as asked: fewer
    layers, else (a mixture of experts not given ``--experts``) fewer routed experts
    (`fitting.reduce`); None where nothing fits or the model cannot be cut."""
    found = _model_counts(combo)
    if found is None:
        return None
    total, route = found
    return fitting.reduce(_fits(combo, budget, device, profile_iterations), total=total,
                          layers=_field(combo, "layers", None), experts=_field(combo, "experts", None), route=route)


def _model_counts(combo: Any) -> tuple[int, experts.Routing | None] | None:
    """(layers, routing) of ``combo``'s model at its scale; None where it cannot be cut."""
    if _field(combo, "model", None) == ATTENTION_MICRO:
        return None
    try:
        config = modelspec.spec_of(combo).make_config(_field(combo, "scale", "reference"))
    except Exception:  # noqa: BLE001 - a config the estimate could read but not cut
        return None
    total = first(config, _LAYER_COUNT_NAMES)
    if not isinstance(total, int) or total < 2:
        return None
    return total, experts.routing(config)


def _fits(combo: Any, budget: float, device: str | None, profile_iterations: int) -> fitting.Fits:
    def fits(layers: int, count: int | None) -> bool | None:
        """Whether ``layers`` layers with ``count`` experts fit; None where the cut is refused."""
        try:
            needed = estimate(_reduced(combo, layers, count), device=device, profile_iterations=profile_iterations)
        except UserError:
            return None
        return int(needed["estimate_bytes"]) <= budget

    return fits


def _reduced(combo: Any, layers: int | None, count: int | None) -> SimpleNamespace:
    return SimpleNamespace(**{**_as_dict(combo), "layers": layers, "experts": count})


# --- what is available ----------------------------------------------------------------


def _read(path: str | os.PathLike[str]) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def meminfo_available(text: str) -> int | None:
    """``MemAvailable`` (bytes) from /proc/meminfo text."""
    match = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _int_file(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _UNLIMITED else value


def _inactive_file(stat_path: Path) -> int:
    """Reclaimable page cache charged to the cgroup (``inactive_file`` in memory.stat):
    the kernel drops it before it OOM-kills, so it counts as available."""
    text = _read(stat_path) or ""
    match = re.search(r"^(?:total_)?inactive_file\s+(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def cgroup_available(cgroup_root: str | os.PathLike[str] = CGROUP_ROOT,
                     self_cgroup_path: str | os.PathLike[str] = SELF_CGROUP_PATH) -> tuple[int, str] | None:
    """(limit - usage + reclaimable cache, source) of the tightest cgroup memory limit
    over this process's cgroup and its mount root, v2 (memory.max / memory.current) or v1
    (memory/memory.limit_in_bytes / memory.usage_in_bytes); None where there is no limit."""
    root = Path(cgroup_root)
    own_v2 = own_v1 = ""
    for line in (_read(self_cgroup_path) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            own_v2 = parts[2].strip("/")
        elif "memory" in parts[1].split(","):
            own_v1 = parts[2].strip("/")
    candidates: list[tuple[Path, str, str, str]] = []
    for sub in dict.fromkeys((own_v2, "")):
        candidates.append((root / sub if sub else root, "memory.max", "memory.current", "v2"))
    for sub in dict.fromkeys((own_v1, "")):
        base = root / "memory"
        candidates.append((base / sub if sub else base, "memory.limit_in_bytes", "memory.usage_in_bytes", "v1"))
    best: tuple[int, str] | None = None
    for folder, limit_name, usage_name, version in candidates:
        limit = _int_file(folder / limit_name)
        if limit is None:
            continue
        usage = _int_file(folder / usage_name) or 0
        free = max(0, limit - usage + _inactive_file(folder / "memory.stat"))
        free = min(free, limit)
        if best is None or free < best[0]:
            best = (free, f"cgroup {version} {folder / limit_name} - {usage_name} + inactive_file")
    return best


def available(device: str, *, meminfo_path: str | os.PathLike[str] = MEMINFO_PATH,
              cgroup_root: str | os.PathLike[str] = CGROUP_ROOT,
              self_cgroup_path: str | os.PathLike[str] = SELF_CGROUP_PATH) -> tuple[int, str]:
    """(bytes available to a new allocation on ``device``, where the figure came from).

    CPU: ``MemAvailable`` from /proc/meminfo, or a cgroup's limit minus its usage where
    that is lower. CUDA: the free bytes of `torch.cuda.mem_get_info` (net of this
    process's CUDA context, which the call creates first)."""
    kind = _device_type(device)
    if kind == "cuda":
        dev = torch.device(device) if str(device) != "auto" else torch.device("cuda")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        return int(free), f"torch.cuda.mem_get_info(cuda:{index}) free"
    text = _read(meminfo_path)
    host = meminfo_available(text) if text is not None else None
    best: tuple[int, str] | None = (host, f"{meminfo_path} MemAvailable") if host is not None else None
    limited = cgroup_available(cgroup_root, self_cgroup_path)
    if limited is not None and (best is None or limited[0] < best[0]):
        best = limited
    if best is None:
        raise RuntimeError(f"cannot tell how much memory is available: no MemAvailable in {meminfo_path}")
    return best


def _where(device: str) -> str:
    if _device_type(device) != "cuda":
        return "host memory"
    dev = torch.device(device) if str(device) != "auto" else torch.device("cuda")
    index = dev.index
    if index is None:
        with contextlib.suppress(Exception):
            index = torch.cuda.current_device()
    return f"GPU {index if index is not None else 0} free memory"


def check(combo: Any, device: str | None = None, *, profile_iterations: int = PROFILE_ITERATIONS,
          margin: float = SAFETY_MARGIN, meminfo_path: str | os.PathLike[str] = MEMINFO_PATH,
          cgroup_root: str | os.PathLike[str] = CGROUP_ROOT,
          self_cgroup_path: str | os.PathLike[str] = SELF_CGROUP_PATH,
          reusable_bytes: int = 0) -> dict[str, Any]:
    """The record's pre-flight section when ``combo`` fits on ``device`` (default
    ``combo.device``); else `Skip` ("needs ~27.0 GiB, 21.9 GiB available (host memory)")
    with the section (``fits`` False) attached as ``exc.preflight``. Fits means
    estimate <= ``margin`` x available.

    The estimate runs first, so the imports it needs (torch, transformers, the model's
    modeling code: the ones the build needs next) are already out of the available figure.
    A model the meta device cannot build (custom code that reads tensor values while it
    initialises) is not refused for that: the section comes back with ``fits`` None,
    ``estimate_bytes``/``parts``/``parameters`` None and the error in ``method``, and the
    real build goes ahead. `UserError` (an unknown model) propagates, as from the build."""
    device = str(device if device is not None else _field(combo, "device", "cpu"))
    try:
        est: dict[str, Any] = estimate(combo, device=device, profile_iterations=profile_iterations)
    except (UserError, Skip):
        raise
    except Exception as exc:  # noqa: BLE001 - a guard that cannot estimate must not fail the combination
        first = (str(exc).strip().splitlines() or [""])[0]
        est = {"estimate_bytes": None, "parts": None, "parameters": None,
               "method": f"{METHOD} (not estimated: {type(exc).__name__}: {first})"}
    avail, source = available(device, meminfo_path=meminfo_path, cgroup_root=cgroup_root,
                              self_cgroup_path=self_cgroup_path)
    if reusable_bytes > 0 and _device_type(device) != "cuda":
        # memory this worker freed but keeps (the previous model's heap): in use for the
        # host, yet the next model is built into it first
        avail += int(reusable_bytes)
        source += f" + {format_gib(int(reusable_bytes))} this worker holds free"
    fits = None if est["estimate_bytes"] is None else bool(est["estimate_bytes"] <= margin * avail)
    section: dict[str, Any] = {
        "estimate_bytes": est["estimate_bytes"],
        "parts": est["parts"],
        "parameters": est["parameters"],
        "available_bytes": int(avail),
        "available_source": source,
        "reusable_bytes": int(reusable_bytes) if _device_type(device) != "cuda" else 0,
        "fits": fits,
        "method": est["method"],
    }
    if fits is False:
        short = f"~{format_gib(est['estimate_bytes'])}, {format_gib(avail)} available ({_where(device)})"
        found = reduction(combo, margin * avail, device=device, profile_iterations=profile_iterations)
        if found is None:
            skip = Skip(f"needs {short}; not even its fewest layers"
                        + (" with the fewest experts" if _field(combo, "experts", None) is None
                           and experts.routing(_config_of(combo)) is not None else "") + " fit")
            skip.preflight = section  # type: ignore[attr-defined]
            raise skip
        measured = estimate(_reduced(combo, found.layers if found.layers is not None else _field(combo, "layers"),
                                     found.experts if found.experts is not None else _field(combo, "experts")),
                            device=device, profile_iterations=profile_iterations)
        asked = (f"{_field(combo, 'layers')} layers need" if _field(combo, "layers", None) is not None
                 else "the whole model needs")
        section.update(fits=True, estimate_bytes=measured["estimate_bytes"], parts=measured["parts"],
                       parameters=measured["parameters"], requested_estimate_bytes=est["estimate_bytes"],
                       reduced={"layers": found.layers, "experts": found.experts,
                                "reason": f"{found.words()}: {asked} {short}"})
    return section


def _config_of(combo: Any) -> Any:
    try:
        return modelspec.spec_of(combo).make_config(_field(combo, "scale", "reference"))
    except Exception:  # noqa: BLE001 - a config that cannot be read has no experts to reduce
        return None


def plan_line(combo: Any, device: str | None = None, **paths: Any) -> str:
    """One line for ``reportgen profile --dry-run``: what `check` would let ``combo``
    measure on ``device`` (default ``combo.device``): as asked, reduced and why, or skipped
    and why. ``paths`` are `check`'s (the tests' memory figures)."""
    try:
        section = check(combo, device, **paths)
    except Skip as exc:
        return f"{combo.id}: skipped: {exc}"
    reduced = section.get("reduced")
    if reduced:
        return f"{combo.id}: {reduced['reason']}"
    if section.get("fits") is None:
        return f"{combo.id}: runs unchecked ({section['method']})"
    return (f"{combo.id}: fits: needs ~{format_gib(int(section['estimate_bytes']))}, "
            f"{format_gib(int(section['available_bytes']))} available ({_where(str(device or combo.device))})")
