"""The CPU probe recorded in a CPU run's environment, and the schema of what the roofline
adds to records: the probe and the analytic bytes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from reportgen import traffic
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, json_schema

GOLDEN = Path(__file__).parent / "data" / "schema" / "v1" / "combination-ok.json"


def test_probe_gives_positive_figures_in_plausible_units_quickly() -> None:
    import torch

    from reportgen.profile.probe import cpu_probe

    p = cpu_probe()
    # bytes/s: above a slow disk, below any memory system a CPU has (a few TB/s)
    assert 1e8 < p["copy_bandwidth_bytes_per_s"] < 5e12
    # FLOP/s: above 0.1 GFLOP/s, below 100 TFLOP/s fp32 on 2..256 cores
    assert 1e8 < p["matmul_flops_per_s"] < 1e14
    assert p["threads"] == torch.get_num_threads()
    assert p["duration_s"] < 3.0
    assert p["copy_samples_s"] and p["matmul_samples_s"]
    assert p["copy_bandwidth_bytes_per_s"] == pytest.approx(p["copy_bytes"] / min(p["copy_samples_s"]))
    assert p["matmul_flop"] == 2 * p["matmul_n"] ** 3
    assert "best of" in p["method"]


def test_probe_stops_at_its_budget() -> None:
    from reportgen.profile.probe import cpu_probe

    p = cpu_probe(copy_mib=8, matmul_n=256, repeats=1000, budget_s=0.2)
    assert len(p["copy_samples_s"]) < 1000 and len(p["matmul_samples_s"]) < 1000
    assert p["duration_s"] < 1.0


def test_cpu_environment_carries_the_probe_and_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.profile import env, probe

    monkeypatch.setattr(probe, "cpu_probe", lambda: {
        "method": "m", "threads": 2, "copy_bandwidth_bytes_per_s": 1e10,
        "matmul_flops_per_s": 1e11})
    record = env.collect("cpu", nvml_raw={"error": "no NVML in this test"})
    assert record["cpu_probe"]["copy_bandwidth_bytes_per_s"] == 1e10
    assert "cpu_probe" not in env.collect("cpu", nvml_raw={"error": "x"}, probe=False)
    # a committed run record, its environment replaced by this one
    committed = sorted(Path(__file__).resolve().parents[1].glob("runs/*/cpu-default-*/run.json"))[-1]
    run = json.loads(committed.read_text())
    run["environment"] = json.loads(json.dumps(record))
    jsonschema.Draft202012Validator(json_schema(RUN_KIND)).validate(run)
    run["environment"]["cpu_probe"]["matmul_flops_per_s"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(json_schema(RUN_KIND)).validate(run)


def test_record_with_analytic_bytes_validates_and_a_bad_part_does_not() -> None:
    record: dict[str, Any] = json.loads(GOLDEN.read_text())
    c = SimpleNamespace(**record["combination"])
    moved = traffic.analytic_bytes(record["model"], c)
    record["flops"] = {**record["flops"], **{k: v for k, v in moved.items() if k != "notes"}}
    validator = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))
    validator.validate(record)
    assert record["flops"]["total_analytic_bytes"] > 0
    record["flops"]["analytic_bytes_parts"]["mlp"]["cache_hits"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(record)
