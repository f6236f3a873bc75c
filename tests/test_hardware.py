"""The hardware label, the one name of a host (``records.hardware``): what it says from a
run's environment or its slug alone, and that every page names a host with it, the
claims' evidence as the hardware pages."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support.records import record, write_run

from reportgen.records.hardware import hardware_label, host_labels
from reportgen.records.schema import iter_runs
from reportgen.render import render

pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
BERT_CLAIM = "bert-base-attention-over-60-percent"  # made on a GPU: a CPU run is its context


def test_hardware_labels() -> None:
    env = {"host": {"cpu_model": "AMD EPYC 7B13", "physical_cores": 2, "usable_cores": 2}}
    assert hardware_label("cpu-amd-epyc-2c", env) == "CPU · AMD EPYC 7B13 · 2 cores"
    gpu = {"gpus": [{"name": "NVIDIA H200"}]}
    assert hardware_label("nvidia-h200-1x", gpu) == "GPU · NVIDIA H200 · 1 GPU"
    assert hardware_label("cpu-amd-epyc-2c", None) == "CPU · AMD EPYC · 2 cores"
    assert hardware_label("nvidia-h100-8x", {}) == "GPU · NVIDIA H100 · 8 GPUs"
    assert hardware_label("my-box", {}) == "my-box"


def _set_environment(runs: Path, hardware: str, suite: str, env: dict[str, object], updated: str) -> None:
    path = runs / hardware / f"{suite}-12345678" / "run.json"
    run = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**run, "environment": env, "updated": updated}), encoding="utf-8")


def _hosts_tree(runs: Path) -> None:
    """One CPU host measured by two suites whose runs describe it differently (the older
    run says less), and a GPU host named by its GPU."""
    write_run(runs, "cpu-test-2c", "cpu-default", [
        record("bert-base", "sdpa", seq=128, shares={"attention.core": 0.25, "mlp": 0.75}),
        record("bert-base", "sdpa", seq=512, shares={"attention.core": 0.4, "mlp": 0.6})])
    write_run(runs, "cpu-test-2c", "cpu-long", [
        record("bert-base", "sdpa", seq=1024, shares={"attention.core": 0.5, "mlp": 0.5})])
    _set_environment(runs, "cpu-test-2c", "cpu-default", {"host": {"cpu_model": "Test CPU 9000"}},
                     "2026-12-01T10:00:00Z")
    _set_environment(runs, "cpu-test-2c", "cpu-long",
                     {"host": {"cpu_model": "Test CPU 9000", "usable_cores": 2}}, "2026-12-02T10:00:00Z")
    write_run(runs, "nvidia-t4-1x", "gpu-default", [
        record("bert-base", "sdpa", seq=128, device="cuda", shares={"attention.core": 0.2, "mlp": 0.8})],
        gpu_name="Tesla T4")


def test_one_label_per_host_whatever_run_describes_it(tmp_path: Path) -> None:
    _hosts_tree(tmp_path / "runs")
    labels = host_labels(iter_runs(tmp_path / "runs"))
    # the latest run's environment names the host, for its every run
    assert labels == {"cpu-test-2c": "CPU · Test CPU 9000 · 2 cores", "nvidia-t4-1x": "GPU · Tesla T4 · 1 GPU"}


def test_a_claim_page_names_each_host_as_its_hardware_page_does(tmp_path: Path) -> None:
    runs, claims, docs = tmp_path / "runs", tmp_path / "claims", tmp_path / "docs"
    _hosts_tree(runs)
    claims.mkdir()
    shutil.copy(ROOT / "claims" / f"{BERT_CLAIM}.yaml", claims)
    render(runs, docs, svg=False, claims=claims)
    titles = {}
    for index in sorted((docs / "hardware").glob("*/index.md")):
        match = re.search(r"^# (.+): all models$", index.read_text(encoding="utf-8"), re.MULTILINE)
        assert match, index
        titles[index.parent.name] = match.group(1)
    assert set(titles.values()) == {"CPU · Test CPU 9000 · 2 cores", "GPU · Tesla T4 · 1 GPU"}
    page = (docs / "findings" / f"{BERT_CLAIM}.md").read_text(encoding="utf-8")
    # the CPU host is context: its line and every evidence row name it as its page does
    cpu = titles[next(slug for slug in titles if "cpu" in slug)]
    assert f"- on {cpu}: " in page
    evidence = page.split("## Evidence")[1]
    rows = [line for line in evidence.splitlines() if line.startswith("| ") and "<small>" in line]
    assert rows and all(line.split("<br>")[0].removeprefix("| ") in titles.values() for line in rows)
    assert any(line.startswith(f"| {cpu}<br>") for line in rows)
