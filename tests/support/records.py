"""Hand-built records and runs trees: combination records written field by field (the
claims and training pages' tests), and the synthetic tree edited into newer or
other-architecture records (the architecture categories' and routing's pages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reportgen.categories import ARCHITECTURE_CATEGORIES
from support import synthetic


def record(model: str, attn: str, *, seq: int = 128, dtype: str = "fp32", device: str = "cpu",
           status: str = "ok", reason: str | None = None, median: float = 10.0,
           ci: tuple[float, float] | None = None, shares: dict[str, float] | None = None,
           launches: dict[str, int] | None = None, scale: str = "reference") -> dict[str, Any]:
    combo = {"model": model, "scale": scale, "mode": "forward", "dtype": dtype,
             "attn_implementation": attn, "batch_size": 1, "seq_len": seq, "device": device}
    combo_id = f"{model}--forward--{dtype}--{attn}--b1--s{seq}"
    rec: dict[str, Any] = {"kind": "reportgen.combination", "schema_version": 1, "id": combo_id,
                           "combination": combo, "status": status, "reason": reason}
    if status != "ok":
        rec.update(timing=None, attribution=None, memory=None, flops=None)
        return rec
    low, high = ci or (median * 0.99, median * 1.01)
    shares = shares or {"attention.core": 0.3, "mlp": 0.7}
    rec["timing"] = {"unit": "ms", "median": median, "ci_low": low, "ci_high": high,
                     "confidence": 0.95, "ci_method": "order-statistic"}
    rec["attribution"] = {
        "basis": "device" if device.startswith("cuda") else "cpu",
        "forward_ms": median,
        "categories": {c: {"ms": s * median, "share": s,
                           "launches": (launches or {}).get(c) if launches is not None else None}
                       for c, s in shares.items()},
        "launches_per_forward": sum(launches.values()) if launches else None,
    }
    rec["memory"] = {"peak_allocated_bytes": 1024}
    rec["flops"] = {"total_analytic": 1e9}
    return rec


def write_run(root: Path, hardware: str, suite: str, records: list[dict[str, Any]],
              gpu_name: str | None = None) -> str:
    run_dir = root / hardware / f"{suite}-12345678"
    (run_dir / "combinations").mkdir(parents=True)
    run_id = f"{hardware}/{suite}-12345678"
    env: dict[str, Any] = {"gpus": [{"name": gpu_name}]} if gpu_name else {}
    (run_dir / "run.json").write_text(json.dumps({
        "kind": "reportgen.run", "schema_version": 1, "run_id": run_id, "hardware": hardware,
        "suite": {"name": suite}, "environment": env, "combinations": [r["id"] for r in records]}))
    for rec in records:
        rec["run_id"] = run_id
        (run_dir / "combinations" / f"{rec['id']}.json").write_text(json.dumps(rec))
    return run_id


def edit_records(root: Path, model: str, edit: Any) -> None:
    for path in root.rglob("combinations/*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["status"] == "ok" and record["combination"]["model"] == model:
            edit(record)
            path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def dense_zeros(record: dict[str, Any]) -> None:
    """A dense model measured after the architecture categories existed: all at 0."""
    cats = record["attribution"]["categories"]
    for c in ARCHITECTURE_CATEGORIES:
        cats[c] = {**cats["mlp"], "ms": 0.0, "share": 0.0, "share_low": 0.0, "share_high": 0.0}


def split_mlp(into: dict[str, float]) -> Any:
    """The MLP's time (and FLOPs) moved into ``into`` (category -> fraction)."""
    def edit(record: dict[str, Any]) -> None:
        cats = record["attribution"]["categories"]
        flops = record["flops"]["analytic"]
        for c in ARCHITECTURE_CATEGORIES:
            part = into.get(c, 0.0)
            mlp = cats["mlp"]
            cats[c] = {**mlp, "ms": mlp["ms"] * part, "share": mlp["share"] * part,
                       **{k: mlp[k] * part for k in ("share_low", "share_high") if mlp.get(k) is not None}}
            flops[c] = flops["mlp"] * part
        cats["mlp"] = {**cats["mlp"], "ms": 0.0, "share": 0.0, "share_low": 0.0, "share_high": 0.0}
        flops["mlp"] = 0.0
    return edit


HW = "cpu-synthetic-epyc-2c"  # the hardware of synthetic_tree's runs
MOE = split_mlp({"moe.router": 0.1, "moe.experts": 0.9})
MIXER = split_mlp({"mixer": 1.0})


def synthetic_tree(root: Path, edits: dict[str, Any]) -> Path:
    """bert-base (older records), gpt2 and llama-tiny on one CPU, two lengths each;
    ``edits`` (model -> record edit) make newer or other-architecture records of them."""
    synthetic.generate(root, 6, models=synthetic.MODELS[:3], hardware=synthetic.HARDWARE[:1],
                       attns=("sdpa",), seqs=(128, 256), skipped=0, failed=0, traces=False)
    for model, edit in edits.items():
        edit_records(root, model, edit)
    return root
