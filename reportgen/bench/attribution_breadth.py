"""Figure 3a, attribution across architectures: many transformers text architectures at
tiny scale go through reportgen's profiled pass, by the same code and with no model names
anywhere; the shares must sum to 1 and ``attention.core`` must be found.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reportgen.bench.common import build, cpu_combo, profile_pass, stopwatch
from reportgen.bench.results import figure
from reportgen.records import fields
from reportgen.records.bench import FAIL

# Encoders, decoders, encoder-decoders; fused (gpt2, gpt_neox, falcon, bloom, phi's dense
# out only) and separate QKV; learned, rotary, relative-bias and ALiBi positions; and
# today's hybrids whose names could mislead: a gated-delta mixer beside attention
# (qwen3_next), a lightning attention named for attention (minimax), a sparse attention's
# indexer (deepseek_v32), a latent attention named MLA in a list (longcat_flash), several
# residual streams mixed by hyper-connections, one named a head (deepseek_v4).
ARCHITECTURES: tuple[str, ...] = (
    "bert", "roberta", "distilbert", "electra", "albert", "xlm-roberta", "deberta-v2",
    "gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "falcon",
    "gptj", "bloom", "gemma", "olmo", "stablelm", "starcoder2", "gpt_bigcode", "codegen",
    "t5", "mt5", "bart", "mbart", "pegasus", "qwen3_next", "minimax", "deepseek_v32", "longcat_flash",
    "deepseek_v4",
)
QUICK_ARCHITECTURES: tuple[str, ...] = ("bert", "gpt2", "llama", "t5")
MIN_ARCHITECTURES = 12

ARCH_QUESTION = (
    "Does attribution work on architectures it was never written for? Each transformers "
    "text model type below is built at tiny scale from its default config and profiled by "
    "the same code, with no model names anywhere: the category shares must sum to 1 and "
    "`attention.core` must be found."
)


def _traits(model: Any) -> dict[str, Any]:
    """Descriptive traits (for the table only; nothing is decided from them)."""
    cfg = model.config
    text = " ".join(sorted(vars(cfg)))
    if "rope" in text or "rotary" in text:
        positions = "rotary"
    elif getattr(cfg, "relative_attention_num_buckets", None):
        positions = "relative bias"
    elif type(cfg).__name__.startswith(("Bloom", "Mpt")):
        positions = "alibi"
    elif getattr(cfg, "position_buckets", None) or getattr(cfg, "relative_attention", False):
        positions = "relative (disentangled)"
    else:
        positions = "learned"
    projections = None
    for module in model.modules():
        if "Attention" in type(module).__name__:
            projections = sum(
                1 for m in module.modules()
                if m is not module and getattr(getattr(m, "weight", None), "ndim", 0) == 2
                and "Embedding" not in type(m).__name__)
            break
    return {"positions": positions,
            "qkv": ("fused" if projections is not None and projections <= 2 else "separate")
            if projections else None}


def check_architecture(model_type: str, trace_dir: Path, *, iterations: int = 2) -> dict[str, Any]:
    from reportgen.profile import building
    from reportgen.profile.structure import derive

    row: dict[str, Any] = {"model_type": model_type}
    built = None
    for attn in ("sdpa", "eager"):
        try:
            built = build(cpu_combo(model_type, scale="tiny", attn=attn))
            row["attn_implementation"] = attn
            break
        except Exception as exc:  # noqa: BLE001 - sdpa unsupported: try eager
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    if built is None:
        row.update(ok=False)
        return row
    row.pop("error", None)
    try:
        result = profile_pass(built, derive(built.model, built.step).labels, iterations, trace_dir, model_type)
        cats = fields.get(result, "attribution.categories")
        shares = {c: float(v["share"]) for c, v in cats.items()}
        total = sum(shares.values())
        row.update(
            architecture=built.info.get("architecture"), **{"class": built.info.get("class")},
            share_sum=total, attention_core_share=shares.get("attention.core", 0.0),
            residual_share=shares.get("residual", 0.0),
            other_share=shares.get("other", 0.0), overhead_share=shares.get("overhead", 0.0),
            shares=shares, **_traits(built.model),
        )
        row["ok"] = abs(total - 1.0) < 1e-6 and shares.get("attention.core", 0.0) > 0
    except Exception as exc:  # noqa: BLE001 - a failing architecture is a finding
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        building.free(built)
    return row


def architectures(model_types: Sequence[str] = ARCHITECTURES, *,
                  log: Callable[[str], None] = print,
                  stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-arch-") as tmp, stopwatch() as wall:
        for i, mt in enumerate(model_types, 1):
            if stop():
                skipped = list(model_types[i - 1:])
                break
            row = check_architecture(mt, Path(tmp))
            rows.append(row)
            log(f"  architecture {i}/{len(model_types)} {mt}: "
                + ("ok" if row.get("ok") else f"FAILED {row.get('error', '')}")
                + (f" core {row['attention_core_share']:.3f}" if "attention_core_share" in row else ""))
    passed = [r for r in rows if r.get("ok")]
    failed = [r for r in rows if not r.get("ok")]
    kinds = sorted({str(r.get("architecture")) for r in passed})
    notes = [
        f"{len(passed)} of {len(rows)} model types pass ({', '.join(kinds)}); "
        "tiny scale: 2 layers, width 64, sequence 32, sdpa where the model has it, else eager.",
        "Pass = shares sum to 1 within 1e-6 and attention.core share > 0.",
    ]
    notes += [f"{r['model_type']}: {r.get('error') or 'shares do not sum to 1 or no attention.core'}"
              for r in failed]
    if skipped:
        notes.append("time limit reached; not tried: " + ", ".join(skipped))
    status = None if not failed else FAIL
    return figure(
        "Attribution across architectures", ARCH_QUESTION,
        value=len(passed), unit="architectures",
        goal=f"at least {MIN_ARCHITECTURES} architectures, every one tested passing",
        goal_spec={"kind": "at_least", "target": MIN_ARCHITECTURES},
        status=status, notes=notes, rows=rows, duration_s=wall[0],
    )
