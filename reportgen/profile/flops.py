"""FLOPs per category two ways (METHOD.md rule 10): analytic from the config dims and
shapes, and counted by ``torch.utils.flop_counter`` over one step; plus the peak dense
FLOP/s table the percent-of-peak figures divide by.

Conventions: one multiply-add is 2 FLOPs; norms, activations, softmax and embeddings
count 0 (neither way counts them); ``attention.core`` counts the full Lq x Lk score matrix
even for causal attention (what eager and the math backend compute; a causal flash kernel
skips about half of it, so its achieved FLOP/s reads low by up to 2x).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reportgen.categories import CATEGORIES
from reportgen.vocabulary import DECODE_NOCACHE

CORE_NOTE = "attention.core counts the full Lq x Lk score matrix, not halved for causal masks"


def _zero() -> dict[str, float]:
    return {c: 0.0 for c in CATEGORIES}


def _cfg(info: Mapping[str, Any], *names: str) -> Any:
    config = info.get("config") or {}
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return None


def _gated(info: Mapping[str, Any]) -> bool:
    """Fallback when the structure is unknown: T5's gated-* projections, or a SiLU MLP
    (the Llama family's SwiGLU)."""
    proj = _cfg(info, "feed_forward_proj")
    if isinstance(proj, str) and proj.startswith("gated"):
        return True
    if _cfg(info, "is_gated_act"):
        return True
    act = _cfg(info, "hidden_act", "activation_function", "hidden_activation")
    return act in ("silu", "swish", "swiglu")


def _attention(out: dict[str, float], *, b: int, tq: int, tk: int, lq: int, lk: int, d: int, h: int, kvh: int,
               hd: int, calls: int) -> None:
    """``calls`` attention calls: tq query tokens and tk key/value tokens in all."""
    out["attention.qkv"] += calls * (2 * tq * d * h * hd + 2 * tk * d * 2 * kvh * hd)
    out["attention.core"] += calls * 4 * b * h * lq * lk * hd
    out["attention.out"] += calls * 2 * tq * h * hd * d


def analytic(info: Mapping[str, Any], combo: Any, hints: Mapping[str, Any] | None = None) -> dict[str, float]:
    """FLOPs of one step per category, from the model's dims (`models.model_info`) and the
    combination's shapes. ``hints`` (`models.analytic_hints`) gives the MLP's weight
    elements from the structure; without it the MLP is read as gated or not from the
    config's activation."""
    out = _zero()
    hints = hints or {}
    d = info.get("hidden_size")
    h = info.get("num_heads")
    layers = info.get("num_layers")
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
        mlp_per_token = 2 * d * ff * (3 if _gated(info) else 2)

    if arch == "decoder" and mode == "decode":
        t, lq, lk, head_tokens = b, 1, length + 1, b
    elif arch == "decoder" and mode == DECODE_NOCACHE:
        # the whole prefix and the new token, without a cache; logits of the last position
        t, lq, lk, head_tokens = b * (length + 1), length + 1, length + 1, b
    else:
        t, lq, lk = b * length, length, length
        # prefill keeps the logits of the last position only (models.make_step)
        head_tokens = b if mode == "prefill" else t
    dims = {"d": d, "h": h, "kvh": kvh, "hd": hd}

    _attention(out, b=b, tq=t, tk=t, lq=lq, lk=lk, calls=layers, **dims)
    if arch == "attention":  # attention-micro: the attention call alone, no projections
        out["attention.qkv"] = out["attention.out"] = 0.0
        return out
    out["mlp"] += layers * t * mlp_per_token
    if arch == "encoder-decoder":
        dec_layers = int(_cfg(info, "num_decoder_layers", "decoder_layers") or layers)
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


def counted(model: Any, step: Any, module_categories: Mapping[str, str], *,
            analytic: Mapping[str, float] | None = None) -> tuple[dict[str, float], list[str]]:
    """FLOPs of one ``step()`` per category, counted by torch.utils.flop_counter and
    attributed through ``module_categories`` (module FQN -> category; a module's own ops
    land in its category, a module without an entry inherits its nearest ancestor's).
    Notes name the compute ops that ran without a FLOP formula and, given ``analytic``,
    the categories the counter saw none of."""
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    recorder = _OpRecorder(set())
    counter = FlopCounterMode(display=False)
    with counter, recorder.mode:
        step()
    step.sync()
    step.reset()

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
    missing = sorted(op for op in recorder.ops if op not in counted_ops and _COMPUTE_OP.search(op))
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


# --- peak ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peak:
    gpu: str
    match: str  # regex over the lower-cased device name
    tflops: Mapping[str, float | None]  # dense (no sparsity), by reportgen dtype name
    source: str


# Dense tensor-core peaks (the "with sparsity" figures halved); fp32 is the non-tensor
# FP32 rate, since PyTorch does not use TF32 for fp32 matmuls by default. More specific
# rows come first (H100 PCIe before H100 SXM, H200 NVL before H200).
PEAK_FLOPS: tuple[Peak, ...] = (
    Peak("H200 NVL", r"h200\s*nvl", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
         "NVIDIA H200 product page (H200 NVL column), https://www.nvidia.com/en-us/data-center/h200/"),
    Peak("H200 SXM", r"h200", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
         "NVIDIA H200 product page (H200 SXM column), https://www.nvidia.com/en-us/data-center/h200/"),
    Peak("H100 PCIe", r"h100.*pcie", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
         "NVIDIA H100 Tensor Core GPU datasheet (PCIe column), "
         "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    Peak("H100 SXM", r"h100", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
         "NVIDIA H100 Tensor Core GPU datasheet (SXM column), "
         "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    Peak("A100 80GB SXM", r"a100.*(sxm.*80|80.*sxm)", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
         "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
         "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    Peak("A100 40GB", r"a100.*40", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
         "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
         "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    Peak("A100", r"a100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
         "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe has the same dense rates), "
         "https://www.nvidia.com/content/dam/en-zz/Solutions/"
         "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    Peak("L4", r"\bl4\b", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
         "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/"),
    Peak("RTX 4090", r"rtx\s*4090", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
         "NVIDIA Ada GPU Architecture whitepaper, Appendix A (FP16/BF16 tensor with FP32 accumulate), "
         "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"),
    Peak("V100 SXM2", r"v100.*sxm", {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None},
         "NVIDIA Tesla V100 datasheet, https://images.nvidia.com/content/technologies/volta/pdf/"
         "tesla-volta-v100-datasheet-letter-fnl-web.pdf"),
    Peak("V100 PCIe", r"v100", {"fp32": 14.0, "tf32": None, "fp16": 112.0, "bf16": None},
         "NVIDIA Tesla V100 datasheet, https://images.nvidia.com/content/technologies/volta/pdf/"
         "tesla-volta-v100-datasheet-letter-fnl-web.pdf"),
)


def peak_row(gpu_name: str | None) -> Peak | None:
    if not gpu_name:
        return None
    name = gpu_name.lower()
    for row in PEAK_FLOPS:
        if re.search(row.match, name):
            return row
    return None


def peak_flops(gpu_name: str | None, dtype: str) -> float | None:
    """Peak dense FLOP/s (not TFLOP/s) of ``gpu_name`` (as torch/NVML report it) in
    ``dtype``; None for an unknown GPU or a dtype it has no tensor-core rate for."""
    row = peak_row(gpu_name)
    if row is None:
        return None
    tflops = row.tflops.get(dtype)
    return None if tflops is None else tflops * 1e12
