"""Analytic memory traffic per category: the bytes one step moves between memory and the
processor, from the model's dimensions and the combination's shapes. Pure Python (both
sides): the profile side stores it in each record's ``flops`` section, the render side
recomputes it for records made before it was stored.

The model is the compulsory traffic of an unfused forward at the combination's dtype:

* ``weights``: each weight matrix read once per step (not per token), at the dtype's size;
  an embedding reads only the rows it gathers.
* ``activations_read`` / ``activations_written``: each category's inputs read once and
  its outputs written once per layer; a tensor made and used inside one category (the
  MLP's hidden activations) is written once and read once.
* ``scores``: an implementation that materialises the attention scores (``eager``,
  ``sdpa-math``, the micro-benchmark's ``naive`` variants) moves the B x H x Lq x Lk
  matrix ``SCORE_PASSES`` times: written by Q Kᵀ, read and written by the softmax, read by
  the product with V. Fused attention (sdpa's flash, efficient and cuDNN kernels,
  ``flash_attention_2``, and plain ``sdpa``, which dispatches to a fused kernel where one
  applies) keeps the scores on chip: 0 here, and Q, K and V are read once, the ideal of a
  tiled kernel (a real one re-reads K and V once per block of queries).
* ``kv_cache_read`` / ``kv_cache_written``: in decode the attention reads the whole cache
  (Lk = L + 1 positions of K and V per layer) and appends the new token's K and V.

Not counted: reuse through caches (a real kernel can move less than this), re-reads (the
separate q, k and v projections each reading their input; GQA's K and V repeated per
head by eager attention; DynamicCache re-writing the whole cache as it concatenates),
scaling and masking passes over the scores, norm and bias vectors, position embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from reportgen.categories import CATEGORIES
from reportgen.records import fields
from reportgen.vocabulary import DECODE_NOCACHE, TRAIN, TRAIN_MODES

# A training step: the backward moves about twice the forward's bytes (each matmul's
# gradient reads its output gradient and one of its inputs twice over, for the input's
# and the weight's gradient), so the forward's traffic counts three times; AdamW reads
# each parameter, its gradient and two moments and writes the parameter and the moments.
TRAIN_FACTOR = 3
ADAMW_ELEMENTS_PER_PARAMETER = 7
NOTE_TRAIN = ("training step: the forward's traffic three times over (forward and a backward of "
              "about twice its bytes); with the optimizer, AdamW's 7 elements per parameter "
              "(parameter, gradient and two moments read; parameter and moments written) under "
              "optimizer")

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}
PARTS: tuple[str, ...] = ("weights", "activations_read", "activations_written", "scores",
                          "kv_cache_read", "kv_cache_written")
SCORE_PASSES = 4
# Implementations that hold the whole Lq x Lk score matrix at once, and how many copies
# of it (scores and probabilities; an in-place softmax reuses one).
MATERIALISING: dict[str, int] = {"eager": 2, "sdpa-math": 2, "naive": 2, "naive-inplace": 1}
BYTE_CATEGORIES = tuple(c for c in CATEGORIES if c != "overhead")

NOTE_MODEL = ("analytic bytes: compulsory traffic of an unfused forward (each category's "
              "weights and inputs read once, outputs written once per layer; reuse through "
              "caches and re-reads are not modelled)")
NOTE_SCORES = ("attention.core materialises the scores: the B x H x Lq x Lk matrix moves "
               f"{SCORE_PASSES} times (written by Q K^T, read and written by the softmax, read "
               "by the product with V)")
NOTE_FUSED = ("attention.core is fused: no score matrix leaves the chip; Q, K and V are read "
              "once and the output written once (a tiled kernel re-reads K and V once per "
              "block of queries, so it moves more)")
NOTE_DECODE = ("decode reads the whole KV cache (L + 1 positions of K and V per layer) and "
               "appends one position; DynamicCache's re-write of the cache as it "
               "concatenates is not counted")
NOTE_COMPILED = "bytes are those of the eager forward: fusion by torch.compile moves fewer"


def cfg(info: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` set in the model's stored config."""
    config = info.get("config") or {}
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return None


def gated(info: Mapping[str, Any]) -> bool:
    """Whether the MLP is gated, from the config: T5's gated-* projections, or a SiLU MLP
    (the Llama family's SwiGLU)."""
    proj = cfg(info, "feed_forward_proj")
    if isinstance(proj, str) and proj.startswith("gated"):
        return True
    if cfg(info, "is_gated_act"):
        return True
    act = cfg(info, "hidden_act", "activation_function", "hidden_activation")
    return act in ("silu", "swish", "swiglu")


def shapes(arch: str, mode: str, batch: int, length: int) -> dict[str, int]:
    """Tokens per step ``t``, query and key lengths, and the tokens the head sees."""
    if arch == "decoder" and mode == "decode":
        return {"t": batch, "lq": 1, "lk": length + 1, "head_tokens": batch}
    if arch == "decoder" and mode == DECODE_NOCACHE:
        # the whole prefix and the new token, without a cache; logits of the last position
        return {"t": batch * (length + 1), "lq": length + 1, "lk": length + 1, "head_tokens": batch}
    t = batch * length
    # prefill keeps the logits of the last position only (inputs.make_step)
    return {"t": t, "lq": length, "lk": length, "head_tokens": batch if mode == "prefill" else t}


def attention_activation_bytes(info: dict[str, Any], combo: Any) -> int:
    """Bytes of attention scores live during one attention call, analytically.

    eager / sdpa-math materialise scores and probabilities: B*H*Lq*Lk*bytes*2 (in-place
    softmax: *1). Fused backends (sdpa flash/efficient/cudnn, flash_attention_2, and plain
    sdpa, which picks a fused kernel where one applies) keep O(L) state per row and no
    score matrix, counted here as 0.
    """
    copies = MATERIALISING.get(combo.attn_implementation, 0)
    heads = info.get("num_heads")
    if not copies or not heads:
        return 0
    # query and key lengths per mode: the same shapes the analytic FLOPs and bytes use
    s = shapes(str(info.get("architecture") or "decoder"), str(combo.mode),
                       int(combo.batch_size), int(combo.seq_len))
    return int(combo.batch_size) * int(heads) * s["lq"] * s["lk"] * DTYPE_BYTES[combo.dtype] * copies


def _zero() -> dict[str, dict[str, float]]:
    return {c: {p: 0.0 for p in PARTS} for c in BYTE_CATEGORIES}


def _attention(out: dict[str, dict[str, float]], *, b: int, t: int, lq: int, lk: int, d: int,
               h: int, kvh: int, hd: int, calls: int, scores: bool, decode: bool) -> None:
    """Elements ``calls`` attention calls move; ``t`` tokens through the projections."""
    q, kv = h * hd, 2 * kvh * hd
    qkv = out["attention.qkv"]
    qkv["weights"] += calls * d * (q + kv)
    qkv["activations_read"] += calls * t * d
    qkv["activations_written"] += calls * t * (q + kv)
    core = out["attention.core"]
    core["activations_read"] += calls * b * lq * q
    if decode:
        core["kv_cache_read"] += calls * b * lk * kv
        core["kv_cache_written"] += calls * b * kv
    else:
        core["activations_read"] += calls * b * lk * kv
    core["activations_written"] += calls * b * lq * q
    if scores:
        core["scores"] += calls * SCORE_PASSES * b * h * lq * lk
    o = out["attention.out"]
    o["weights"] += calls * q * d
    o["activations_read"] += calls * t * q
    o["activations_written"] += calls * t * d


def _mlp(out: dict[str, dict[str, float]], *, t: int, d: int, ff: int, weights: int,
         is_gated: bool, calls: int) -> None:
    # gated: gate and up written, read by the activation and the product, whose outputs
    # are written and read in turn (4 hidden tensors); plain: up and activation (2)
    hidden = 4 if is_gated else 2
    m = out["mlp"]
    m["weights"] += calls * weights
    m["activations_read"] += calls * (t * d + hidden * t * ff)
    m["activations_written"] += calls * (hidden * t * ff + t * d)


def _elementwise(part: dict[str, float], *, t: int, d: int, count: int, inputs: int) -> None:
    part["activations_read"] += count * inputs * t * d
    part["activations_written"] += count * t * d


def analytic_bytes(info: Mapping[str, Any], combo: Any, *, mlp_weight_elements: int | None = None,
                   pooler: bool | None = None) -> dict[str, Any]:
    """Bytes one step moves per category (the record's ``flops.analytic_bytes`` and
    friends): ``analytic_bytes`` {category: bytes}, ``analytic_bytes_parts`` {category:
    {part: bytes}}, ``total_analytic_bytes``, ``bytes_per_element`` and ``notes``.

    ``info`` is the record's ``model`` section, ``combo`` anything with the combination's
    fields. ``mlp_weight_elements`` (per block, from the structure) replaces the config's
    MLP shape; ``pooler`` says whether an encoder ends in a pooler.
    """
    size = DTYPE_BYTES.get(str(getattr(combo, "dtype", "fp32")), 4)
    elements = _zero()
    d, h, layers = info.get("hidden_size"), info.get("num_heads"), info.get("num_layers")
    notes = [NOTE_MODEL]
    if d and h and layers:
        _fill(elements, info, combo, mlp_weight_elements=mlp_weight_elements, pooler=pooler,
              notes=notes)
    mode = str(getattr(combo, "mode", "forward"))
    if mode in TRAIN_MODES:
        for parts_of in elements.values():
            for part in parts_of:
                parts_of[part] *= TRAIN_FACTOR
        if mode == TRAIN and info.get("parameters"):
            elements["optimizer"]["weights"] += ADAMW_ELEMENTS_PER_PARAMETER * int(info["parameters"])
        notes.append(NOTE_TRAIN)
    parts = {c: {p: v * size for p, v in ps.items()} for c, ps in elements.items()}
    per_category = {c: float(sum(ps.values())) for c, ps in parts.items()}
    if getattr(combo, "compile", "none") not in (None, "none"):
        notes.append(NOTE_COMPILED)
    return {"analytic_bytes": per_category,
            "analytic_bytes_parts": {c: ps for c, ps in parts.items() if per_category[c] > 0},
            "total_analytic_bytes": float(sum(per_category.values())),
            "bytes_per_element": size, "notes": notes}


def _fill(out: dict[str, dict[str, float]], info: Mapping[str, Any], combo: Any, *,
          mlp_weight_elements: int | None, pooler: bool | None, notes: list[str]) -> None:
    d, h, layers = int(info["hidden_size"]), int(info["num_heads"]), int(info["num_layers"])
    kvh = int(info.get("num_kv_heads") or h)
    hd = int(info.get("head_dim") or d // h)
    ff = int(info.get("intermediate_size") or 4 * d)
    vocab = int(info.get("vocab_size") or 0)
    b, length = int(combo.batch_size), int(combo.seq_len)
    mode = str(getattr(combo, "mode", "forward"))
    arch = str(info.get("architecture") or "encoder")
    s = shapes(arch, mode, b, length)
    t, decode = s["t"], arch == "decoder" and mode == "decode"
    scores = str(getattr(combo, "attn_implementation", "")) in MATERIALISING
    notes.append(NOTE_SCORES if scores else NOTE_FUSED)
    if decode:
        notes.append(NOTE_DECODE)
    dims: dict[str, Any] = {"d": d, "h": h, "kvh": kvh, "hd": hd, "b": b, "t": t, "lq": s["lq"], "lk": s["lk"],
            "scores": scores, "decode": decode}
    _attention(out, calls=layers, **dims)
    if arch == "attention":  # attention-micro: the attention call alone, no projections
        for cat in ("attention.qkv", "attention.out"):
            out[cat] = {p: 0.0 for p in PARTS}
        return
    is_gated = gated(info)
    weights = int(mlp_weight_elements or d * ff * (3 if is_gated else 2))
    _mlp(out, t=t, d=d, ff=ff, weights=weights, is_gated=is_gated, calls=layers)
    norms, residuals = 2 * layers + 1, 2 * layers
    if arch == "encoder-decoder":
        dec = int(cfg(info, "num_decoder_layers", "decoder_layers") or layers)
        _attention(out, calls=dec, **dims)  # decoder self-attention
        _attention(out, calls=dec, **dims)  # cross-attention
        _mlp(out, t=t, d=d, ff=ff, weights=weights, is_gated=is_gated, calls=dec)
        norms += 3 * dec + 1
        residuals += 3 * dec
    emb = out["embeddings"]
    emb["weights"] += t * d  # the gathered rows
    emb["activations_written"] += t * d
    _elementwise(out["norm"], t=t, d=d, count=norms, inputs=1)
    _elementwise(out["other"], t=t, d=d, count=residuals, inputs=2)
    head = out["head"]
    if arch == "encoder":
        if pooler:
            head["weights"] += d * d
            head["activations_read"] += b * d
            head["activations_written"] += b * d
    else:
        n = s["head_tokens"]
        head["weights"] += vocab * d
        head["activations_read"] += n * d
        head["activations_written"] += n * vocab


def record_bytes(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A record's analytic bytes: as stored, or recomputed from its model section and
    combination for a record made before they were stored (``source`` says which). The
    MLP's weight elements and whether an encoder has a pooler are read back from its
    analytic FLOPs, which were counted from the structure. None without a model."""
    flops = fields.get(record, "flops") or {}
    if isinstance(flops.get("analytic_bytes"), Mapping):
        return {"analytic_bytes": dict(flops["analytic_bytes"]),
                "analytic_bytes_parts": dict(flops.get("analytic_bytes_parts") or {}),
                "total_analytic_bytes": flops.get("total_analytic_bytes"),
                "bytes_per_element": flops.get("bytes_per_element"), "source": "recorded"}
    info, combination = fields.get(record, "model"), fields.get(record, "combination")
    if not isinstance(info, Mapping) or not isinstance(combination, Mapping):
        return None
    combo = SimpleNamespace(**{"mode": "forward", "compile": "none", **combination})
    analytic = flops.get("analytic") or {}
    arch = str(info.get("architecture") or "encoder")
    mlp_elements = None
    mlp_flops = analytic.get("mlp")
    layers = info.get("num_layers")
    if isinstance(mlp_flops, (int, float)) and mlp_flops > 0 and layers:
        blocks = int(layers)
        if arch == "encoder-decoder":
            blocks += int(cfg(info, "num_decoder_layers", "decoder_layers") or layers)
        t = shapes(arch, str(combo.mode), int(combo.batch_size), int(combo.seq_len))["t"]
        mlp_elements = round(mlp_flops / (2 * t * blocks))
    head_flops = analytic.get("head")
    pooler = isinstance(head_flops, (int, float)) and head_flops > 0
    out = analytic_bytes(info, combo, mlp_weight_elements=mlp_elements, pooler=pooler)
    out.pop("notes")
    return {**out, "source": "recomputed"}
