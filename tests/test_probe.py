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


def test_probe_gives_positive_figures_from_its_samples() -> None:
    import torch

    from reportgen.profile.probe import COPY_MIB, MATMUL_N, REPEATS, cpu_probe

    p = cpu_probe()
    assert p["threads"] == torch.get_num_threads()
    assert 1 <= len(p["copy_samples_s"]) <= REPEATS and 1 <= len(p["matmul_samples_s"]) <= REPEATS
    assert all(s > 0 for s in p["copy_samples_s"] + p["matmul_samples_s"])
    # bytes/s and FLOP/s: the work over the best sample, in seconds; every sample inside the
    # probe's own duration
    assert p["copy_bytes"] == 2 * COPY_MIB * 2**20 and p["matmul_n"] == MATMUL_N  # read once, written once
    assert p["copy_bandwidth_bytes_per_s"] == pytest.approx(p["copy_bytes"] / min(p["copy_samples_s"]))
    assert p["matmul_flop"] == 2 * p["matmul_n"] ** 3
    assert p["matmul_flops_per_s"] == pytest.approx(p["matmul_flop"] / min(p["matmul_samples_s"]))
    assert sum(p["copy_samples_s"]) + sum(p["matmul_samples_s"]) < p["duration_s"]
    assert "best of" in p["method"]


def test_probe_stops_at_its_budget() -> None:
    from reportgen.profile.probe import cpu_probe

    # a budget spent before the first sample: one timed repeat of each, not a thousand
    p = cpu_probe(copy_mib=8, matmul_n=256, repeats=1000, budget_s=0.0)
    assert len(p["copy_samples_s"]) == 1 and len(p["matmul_samples_s"]) == 1
    assert p["copy_bytes"] == 2 * 8 * 2**20 and p["matmul_flop"] == 2 * 256**3


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
