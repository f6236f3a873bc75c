"""Synthetic runs trees that follow the record format of ARCHITECTURE.md.

Used for the committed test fixture, the golden pages and ``nox -s bench`` (which finds
this file in the source checkout; it is not part of the installed package). The numbers
follow plausible scaling laws (attention core grows with s^2, projections and MLP with s)
so that fits and crossovers on the rendered pages have something to find; they are not
measurements and never go into runs/.

    python tests/support/synthetic.py OUT_DIR --combinations 500
    python tests/support/synthetic.py tests/data/runs_fixture --fixture
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import math
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from reportgen.categories import CATEGORIES, OPTIONAL_CATEGORIES

SCHEMA_VERSION = 1
_TIME = "2026-12-02T13:00:00Z"


@dataclass(frozen=True)
class SyntheticModel:
    name: str
    model_type: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    vocab_size: int


@dataclass(frozen=True)
class SyntheticHardware:
    slug: str
    device: str
    flops_per_s: float  # effective matmul throughput
    launch_ms: float  # fixed cost per op call
    peak_flops_per_s: float | None
    dtype: str


MODELS: tuple[SyntheticModel, ...] = (
    SyntheticModel("bert-base", "bert", "encoder", 12, 768, 12, 3072, 30522),
    SyntheticModel("gpt2", "gpt2", "decoder", 12, 768, 12, 3072, 50257),
    SyntheticModel("llama-tiny", "llama", "decoder", 4, 512, 8, 1376, 32000),
    SyntheticModel("t5-small", "t5", "encoder-decoder", 6, 512, 8, 2048, 32128),
    SyntheticModel("vit-base", "vit", "encoder", 12, 768, 12, 3072, 1000),
)

HARDWARE: tuple[SyntheticHardware, ...] = (
    SyntheticHardware("cpu-synthetic-epyc-2c", "cpu", 6.0e10, 0.004, None, "fp32"),
    SyntheticHardware("nvidia-synthetic-h200-1x", "cuda", 2.0e14, 0.006, 9.89e14, "bf16"),
    SyntheticHardware("nvidia-synthetic-l4-1x", "cuda", 4.0e13, 0.008, 1.21e14, "bf16"),
)

ATTN_IMPLS: tuple[str, ...] = ("sdpa", "eager", "flash_attention_2", "sdpa-math", "sdpa-efficient")
SEQ_LENS: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192)

# How much slower than the matmul peak each attention implementation runs its core.
_CORE_EFFICIENCY = {"sdpa": 0.35, "eager": 0.12, "flash_attention_2": 0.5,
                    "sdpa-math": 0.12, "sdpa-efficient": 0.3}


def slug(text: str) -> str:
    out = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return out or "x"


def analytic_flops(model: SyntheticModel, batch: int, seq: int) -> dict[str, float]:
    h, inter, layers = model.hidden_size, model.intermediate_size, model.num_layers
    tokens = batch * seq
    head = 2.0 * tokens * h * model.vocab_size if model.architecture == "decoder" else 0.0
    return {
        "embeddings": 0.0,
        "attention.qkv": 2.0 * tokens * h * 3 * h * layers,
        "attention.core": 4.0 * batch * seq * seq * h * layers,
        "attention.out": 2.0 * tokens * h * h * layers,
        "mlp": 4.0 * tokens * h * inter * layers,
        "norm": 10.0 * tokens * h * layers,
        "head": head,
        "other": 2.0 * tokens * h * layers,
        "overhead": 0.0,
    }


def _ms(hw: SyntheticHardware, model: SyntheticModel, flops: dict[str, float], attn: str,
        rng: random.Random) -> dict[str, float]:
    calls = {"embeddings": 2, "attention.qkv": 3, "attention.core": 4, "attention.out": 1,
             "mlp": 3, "norm": 2, "head": 1, "other": 3, "overhead": 0}
    out: dict[str, float] = {}
    # synthetic records are of eager dense models, written as records were before
    # "compiled" and the architecture categories (mixer, moe.*) existed
    for cat in (c for c in CATEGORIES if c != "compiled" and c not in OPTIONAL_CATEGORIES):
        eff = _CORE_EFFICIENCY.get(attn, 0.3) if cat == "attention.core" else 0.7
        if cat in ("norm", "other", "embeddings"):
            eff = 0.05
        compute = flops[cat] / (hw.flops_per_s * eff) * 1e3
        launch = calls[cat] * model.num_layers * hw.launch_ms
        out[cat] = (compute + launch) * rng.uniform(0.97, 1.03)
    out["overhead"] = 0.04 * sum(out.values()) * rng.uniform(0.8, 1.2)
    return out


def _kernel_names(device: str) -> dict[str, list[str]]:
    if device == "cpu":
        return {"attention.qkv": ["aten::addmm"], "attention.core": ["aten::bmm", "aten::_softmax"],
                "attention.out": ["aten::addmm"], "mlp": ["aten::addmm", "aten::gelu"],
                "norm": ["aten::native_layer_norm"], "embeddings": ["aten::embedding"],
                "head": ["aten::mm"], "other": ["aten::add"], "overhead": []}
    return {"attention.qkv": ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"],
            "attention.core": ["pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>",
                               "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"],
            "attention.out": ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x128x64"],
            "mlp": ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64",
                    "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>"],
            "norm": ["void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>"],
            "embeddings": ["void at::native::indexSelectLargeIndex<c10::BFloat16, long>"],
            "head": ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"],
            "other": ["void at::native::elementwise_kernel<128, 2>"], "overhead": []}


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def combination_record(hw: SyntheticHardware, model: SyntheticModel, attn: str, seq: int,
                       run_id: str, batch: int = 1, mode: str = "forward",
                       status: str = "ok", reason: str | None = None) -> dict[str, object]:
    combo_id = f"{slug(model.name)}--{mode}--{hw.dtype}--{attn}--b{batch}--s{seq}"
    combination = {"model": model.name, "scale": "reference", "mode": mode, "dtype": hw.dtype,
                   "attn_implementation": attn, "batch_size": batch, "seq_len": seq,
                   "device": hw.device}
    base: dict[str, object] = {
        "kind": "reportgen.combination", "schema_version": SCHEMA_VERSION, "id": combo_id,
        "run_id": run_id, "combination": combination, "status": status, "reason": reason,
        "started": _TIME, "finished": _TIME, "duration_s": 0.0,
        "git": {"commit": "0" * 40, "dirty": False},
    }
    if status != "ok":
        base.update({k: None for k in ("model", "inputs", "timing", "profile", "attribution",
                                       "ops", "memory", "flops")})
        return base
    rng = random.Random(f"{hw.slug}|{combo_id}")
    flops = analytic_flops(model, batch, seq)
    cat_ms = _ms(hw, model, flops, attn, rng)
    forward = sum(cat_ms.values())
    median = forward / rng.uniform(1.02, 1.12)  # the profiler slows the forward down
    samples = sorted(median * rng.gauss(1.0, 0.015) for _ in range(30))
    samples_kept = [round(s, 6) for s in samples]
    rng.shuffle(samples_kept)
    lo_i, hi_i = 9, 20  # order-statistic 95% CI of the median for n=30
    device = hw.device != "cpu"
    categories = {
        # the share's bootstrap interval, as records carry it (a fixed +-4% here)
        cat: {"ms": ms, "share": ms / forward, "share_low": 0.96 * ms / forward,
              "share_high": min(1.0, 1.04 * ms / forward), "cpu_ms": None if device else ms,
              "device_ms": ms if device else None,
              "launches": (4 * model.num_layers if device and cat != "overhead" else None)}
        for cat, ms in cat_ms.items()
    }
    ops: list[dict[str, object]] = []
    for cat, names in _kernel_names(hw.device).items():
        for i, name in enumerate(names):
            total = cat_ms[cat] * (0.7 if i == 0 and len(names) > 1 else 1.0 / len(names))
            calls = model.num_layers * (i + 1)
            ops.append({"name": name, "category": cat, "calls": calls, "total_ms": total,
                        "mean_ms": total / calls, "share": total / forward})
    ops.sort(key=lambda op: (-float(op["total_ms"]), str(op["name"])))  # type: ignore[arg-type]
    bytes_per = 4 if hw.dtype == "fp32" else 2
    act = batch * model.num_heads * seq * seq * bytes_per
    total_flops = sum(flops.values())
    achieved = total_flops / (median / 1e3)
    params = model.num_layers * (4 * model.hidden_size ** 2 + 2 * model.hidden_size
                                 * model.intermediate_size) + model.vocab_size * model.hidden_size
    base.update({
        "duration_s": round(median * 40 / 1e3, 3),
        "model": {"name": model.name, "model_type": model.model_type,
                  "architecture": model.architecture, "class": f"{model.model_type.title()}Model",
                  "parameters": params, "num_layers": model.num_layers,
                  "hidden_size": model.hidden_size, "num_heads": model.num_heads,
                  "num_kv_heads": model.num_heads,
                  "head_dim": model.hidden_size // model.num_heads,
                  "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
                  "config": {"hidden_act": "gelu", "layer_norm_eps": 1e-12}},
        "inputs": {"seed": 0, "input_shape": [batch, seq], "tokens": batch * seq, "kv_len": None},
        "timing": {"method": "cuda-events" if device else "host-clock", "unit": "ms",
                   "samples": samples_kept, "warmup_samples": [round(median * 1.3, 6)] * 3,
                   "n": len(samples), "median": _quantile(samples, 0.5),
                   "ci_low": samples[lo_i], "ci_high": samples[hi_i], "confidence": 0.95,
                   "ci_method": "order-statistic", "mean": sum(samples) / len(samples),
                   "p5": _quantile(samples, 0.05), "p25": _quantile(samples, 0.25),
                   "p75": _quantile(samples, 0.75), "p95": _quantile(samples, 0.95),
                   "stop_reason": "converged", "target_rel_halfwidth": 0.02, "budget_s": 3.0},
        "profile": {"iterations": 3, "per_iteration_ms": [forward] * 3, "median_ms": forward,
                    "overhead_ratio": forward / median,
                    "trace": f"traces/{combo_id}.trace.json.gz", "trace_bytes": 0},
        "attribution": {"basis": "device" if device else "cpu", "forward_ms": forward,
                        "categories": categories,
                        "per_layer": [{"layer": f"layers.{i}",
                                       "categories": {c: cat_ms[c] / model.num_layers
                                                      for c in ("attention.core", "mlp")}}
                                      for i in range(min(model.num_layers, 2))],
                        "launches_per_forward": 40 * model.num_layers if device else None,
                        "device_idle_ms": cat_ms["overhead"] if device else None},
        "ops": ops,
        "memory": {"peak_allocated_bytes": int(params * bytes_per + act * model.num_layers),
                   "peak_reserved_bytes": (int(params * bytes_per * 1.25 + act * model.num_layers)
                                           if device else None),
                   "attention_activation_bytes": {"analytic": act,
                                                  "measured": act if device else None},
                   "by_category_bytes": {"attention.core": act, "mlp": batch * seq
                                         * model.intermediate_size * bytes_per}},
        "flops": {"analytic": flops, "counted": {k: v for k, v in flops.items()
                                                 if k != "attention.core" or attn == "eager"},
                  "total_analytic": total_flops,
                  "total_counted": total_flops - (0 if attn == "eager" else flops["attention.core"]),
                  "achieved_flops_per_s": achieved, "peak_flops_per_s": hw.peak_flops_per_s,
                  "percent_of_peak": (100.0 * achieved / hw.peak_flops_per_s
                                      if hw.peak_flops_per_s else None),
                  "notes": ([] if attn == "eager" else
                            ["flop_counter has no formula for the fused attention kernel"])},
    })
    return base


def _trace_bytes(combo_id: str) -> bytes:
    trace = {"traceEvents": [
        {"ph": "X", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 1000, "cat": "user_annotation"},
        {"ph": "X", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 10, "dur": 500, "cat": "cpu_op"},
    ], "displayTimeUnit": "ms", "otherData": {"combination": combo_id}}
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as fh:
        fh.write(json.dumps(trace, sort_keys=True).encode())
    return buf.getvalue()


def _plan(n: int, hardware: Sequence[SyntheticHardware], models: Sequence[SyntheticModel],
          attns: Sequence[str], seqs: Sequence[int]) -> Iterator[tuple[SyntheticHardware,
                                                                      SyntheticModel, str, int]]:
    """N combinations spread over hardware and models first, so pages grow with N."""
    per_page = len(attns) * len(seqs)
    pages = [(hw, m) for m in models for hw in hardware]
    count = 0
    for page_index in range(math.ceil(n / per_page)):
        hw, model = pages[page_index % len(pages)]
        if page_index >= len(pages):  # more pages than presets: clone models under new names
            clone = page_index // len(pages)
            model = SyntheticModel(f"{model.name}-v{clone}", model.model_type, model.architecture,
                                   model.num_layers, model.hidden_size, model.num_heads,
                                   model.intermediate_size, model.vocab_size)
        for attn in attns:
            for seq in seqs:
                if count == n:
                    return
                count += 1
                yield hw, model, attn, seq


def _environment(hw: SyntheticHardware) -> dict[str, object]:
    torch: dict[str, object] = {"version": "2.6.0"}
    env: dict[str, object] = {
        "python": "3.11.2", "os": "Linux-6.1-x86_64", "torch": torch, "transformers": "5.0.0",
        "cpu": {"model": "AMD EPYC 7B13", "logical_cores": 2}, "ram_bytes": 8 * 2 ** 30,
        "threads": {"torch_num_threads": 2}, "torch_flags": {"allow_tf32": False},
        "git": {"commit": "0" * 40, "dirty": False}, "hostname_sha256": "synthetic",
    }
    if hw.device == "cuda":
        # the GPU's NVML reading and what torch says of CUDA, under the names env.collect writes
        torch.update({"cuda_runtime": "12.6", "cudnn_version": "9.5"})
        env["gpus"] = [{"name": hw.slug.split("-")[2].upper(), "driver_version": "560.35",
                        "power_limit_w": 700, "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}]
    return env


def generate(root: Path, combinations: int, *, models: Sequence[SyntheticModel] = MODELS,
             hardware: Sequence[SyntheticHardware] = HARDWARE,
             attns: Sequence[str] = ATTN_IMPLS[:3], seqs: Sequence[int] = SEQ_LENS[:4],
             skipped: int = 1, failed: int = 1, traces: bool = True) -> list[Path]:
    """Write a runs tree with ``combinations`` ok records (plus skipped/failed ones per run).

    Returns the run directories written. Deterministic: the same arguments give the same
    bytes.
    """
    by_hw: dict[str, list[tuple[SyntheticHardware, SyntheticModel, str, int]]] = {}
    for item in _plan(combinations, hardware, models, attns, seqs):
        by_hw.setdefault(item[0].slug, []).append(item)
    run_dirs: list[Path] = []
    for hw in hardware:
        items = by_hw.get(hw.slug, [])
        if not items:
            continue
        suite = "synthetic"
        suite_hash = hashlib.sha256(f"{suite}|{hw.slug}".encode()).hexdigest()
        run_id = f"{hw.slug}/{suite}-{suite_hash[:8]}"
        run_dir = root / run_id
        records = [combination_record(h, m, a, s, run_id) for h, m, a, s in items]
        first_model = items[0][1]
        for i in range(skipped):
            records.append(combination_record(
                hw, first_model, "flash_attention_2" if hw.device == "cpu" else "sdpa-cudnn",
                SEQ_LENS[i], run_id, status="skipped",
                reason=("flash_attention_2 needs a CUDA device" if hw.device == "cpu"
                        else "cuDNN attention backend is not available for bf16 on this GPU")))
        for i in range(failed):
            records.append(combination_record(
                hw, first_model, "eager", SEQ_LENS[-1 - i], run_id, status="failed",
                reason="RuntimeError: out of memory while allocating attention scores"))
        (run_dir / "combinations").mkdir(parents=True, exist_ok=True)
        if traces:
            (run_dir / "traces").mkdir(exist_ok=True)
        for rec in records:
            cid = str(rec["id"])
            if rec["status"] == "ok" and traces:
                data = _trace_bytes(cid)
                rec["profile"]["trace_bytes"] = len(data)  # type: ignore[index]
                (run_dir / "traces" / f"{cid}.trace.json.gz").write_bytes(data)
            elif rec["status"] == "ok":
                rec["profile"]["trace"] = None  # type: ignore[index]
            _write_json(run_dir / "combinations" / f"{cid}.json", rec)
        run = {"kind": "reportgen.run", "schema_version": SCHEMA_VERSION, "run_id": run_id,
               "hardware": hw.slug,
               "suite": {"name": suite, "hash": suite_hash, "source": "synthetic",
                         "spec": {"name": suite,
                                  "description": "synthetic numbers for tests and benchmarks",
                                  "settings": {"budget_s": 3.0, "profile_iterations": 3,
                                               "seed": 0, "scale": "reference",
                                               "device": hw.device},
                                  "matrix": [{"attn_implementation": list(attns),
                                              "seq_len": list(seqs)}],
                                  "combinations": [dict(r["combination"])  # type: ignore[call-overload]
                                                   for r in records]}},
               "command": f"reportgen profile --suite {suite} --device {hw.device}",
               "environment": _environment(hw), "started": _TIME, "updated": _TIME,
               "combinations": [str(r["id"]) for r in records]}
        _write_json(run_dir / "run.json", run)
        run_dirs.append(run_dir)
    return run_dirs


HOSTILE_MODEL = SyntheticModel("<script>alert(1)</script>", "bert", "encoder", 2, 64, 2, 128, 100)
"""A model name that must render as text (a script tag: the pages must escape it)."""


def fixture(root: Path) -> list[Path]:
    """The committed test fixture (tests/data/runs_fixture): 2 machines, 3 models (one
    with a hostile name), 2 attention implementations, 3 lengths, skipped and failed."""
    return generate(root, 36, models=(MODELS[0], MODELS[1], HOSTILE_MODEL),
                    hardware=HARDWARE[:2], attns=ATTN_IMPLS[:2], seqs=SEQ_LENS[:3])


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--combinations", type=int, default=50)
    parser.add_argument("--fixture", action="store_true",
                        help="write the committed test fixture instead")
    args = parser.parse_args(argv)
    if args.fixture:
        fixture(args.out)
    else:
        generate(args.out, args.combinations)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
