"""The claims registry, its validation, the verdicts, `reportgen check` and the Findings pages."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from support.records import record, write_run

from reportgen.claims import (
    INCONCLUSIVE,
    MIXED,
    NOT_TESTED,
    NOT_TESTED_HARDWARE,
    REFUTED,
    SUPPORTED,
    check,
    load_claim,
    load_claims,
)
from reportgen.cli import main
from reportgen.records.schema import iter_runs
from reportgen.render.findings import claims_for_combination, combination_section, pages

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "claims").glob("*.yaml"))
BAD = ROOT / "tests" / "data" / "claims" / "bad"

# -- hand-built runs -----------------------------------------------------------------------


def write_claim(directory: Path, claim_id: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{claim_id}.yaml"
    path.write_text(f"id: {claim_id}\n" + body)
    return path


SOURCE = ('source: {title: A post, url: "https://example.org/post", date: 2026-07-10, '
          'quote_in_primary: found}\n')


def share_claim(directory: Path, value: float = 0.6, extra: str = ", hardware: any") -> Path:
    return write_claim(directory, "share-claim", f"""title: Attention share
quote: Attention is most of the time.
{SOURCE}conditions: {{model: bert-base, mode: forward, setting: inference{extra}}}
predicate: {{metric: "share(attention.*)", op: ">", value: {value}}}
""")


MICRO = ("naive", "naive-inplace", "sdpa-math", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn")
# The post's numbers (ms) and kernel counts.
POST_MS = {"naive": 2.4, "naive-inplace": 1.955, "sdpa-math": 7.239, "sdpa-efficient": 0.2779,
           "sdpa-flash": 0.1468, "sdpa-cudnn": 0.1863}
POST_KERNELS = {"naive": 6, "naive-inplace": 5, "sdpa-math": 20, "sdpa-efficient": 1,
                "sdpa-flash": 1, "sdpa-cudnn": 1}


def gpu_micro(ms: dict[str, float] | None = None, kernels: dict[str, int] | None = None,
              dtype: str = "bf16", rel: float = 0.01) -> list[dict[str, Any]]:
    ms = ms or POST_MS
    kernels = kernels or POST_KERNELS
    return [record("attention-micro", v, seq=1024, dtype=dtype, device="cuda", median=ms[v],
                   ci=(ms[v] * (1 - rel), ms[v] * (1 + rel)),
                   shares={"attention.qkv": 0.2, "attention.core": 0.6, "attention.out": 0.2},
                   launches={"attention.qkv": 1, "attention.core": kernels[v], "attention.out": 1})
            for v in MICRO]


def cpu_micro() -> list[dict[str, Any]]:
    out = []
    for v in MICRO:
        if v in ("sdpa-efficient", "sdpa-cudnn"):
            out.append(record("attention-micro", v, seq=1024, status="skipped",
                              reason=f"{v} cannot run on cpu: No viable backend"))
        else:
            out.append(record("attention-micro", v, seq=1024, median=100.0))
    return out


@pytest.fixture()
def cpu_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    write_run(runs, "cpu-test-2c", "cpu-default", [
        record("bert-base", "sdpa", seq=128, shares={"attention.core": 0.25, "attention.qkv": 0.1, "mlp": 0.65}),
        record("bert-base", "sdpa", seq=2048, shares={"attention.core": 0.6, "attention.qkv": 0.1, "mlp": 0.3}),
    ])
    write_run(runs, "cpu-test-2c", "attention-micro", cpu_micro())
    return runs


# -- the shipped registry ------------------------------------------------------------------


ANY_HARDWARE = {"nongemm-share-of-inference-latency"}  # CPU-only and GPU platforms alike
# a model's structure, decided from the catalog on any host
STRUCTURAL = {"mixtral-47b-total-13b-active", "gpt-oss-active-parameters", "deepseek-v2-kv-cache-93-percent"}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_claim_loads(path: Path) -> None:
    claim = load_claim(path)
    assert claim.id == path.stem
    assert claim.quote and claim.source.url.startswith("https://")
    if claim.predicate.from_catalog:  # a model's structure holds on any hardware, in no setting
        assert claim.id in STRUCTURAL and claim.hardware.kind == "any" and "setting" not in claim.conditions
        assert claim.notes and claim.source.provenance  # how the figure is read, and the source's words
        return
    # a published claim was made on some hardware; "any" only where its source spans both
    assert claim.hardware.kind in ("cpu", "gpu") or claim.id in ANY_HARDWARE
    assert claim.conditions["setting"] in (["inference"], ["training"])
    if claim.source.quote_in_primary != "found":
        assert claim.source.via and claim.source.via["title"]


def test_registry_has_the_issue_claims() -> None:
    ids = {c.id for c in load_claims(ROOT / "claims")}
    assert len(ids) >= 9
    assert {"bert-base-attention-over-60-percent", "sdpa-math-vs-naive-inplace",
            "sdpa-flash-fastest-backend", "attention-kernels-per-forward"} <= ids
    bert = load_claim(ROOT / "claims" / "bert-base-attention-over-60-percent.yaml")
    assert bert.source.provenance and "isolated" in bert.source.provenance
    assert bert.source.via is not None and bert.source.via["title"]
    assert bert.source.quote_in_primary == "not found"
    # its quote speaks of GPU memory bandwidth: made on a GPU, no device named
    assert (bert.hardware.kind, bert.hardware.device) == ("gpu", None)
    for claim_id in ("sdpa-math-vs-naive-inplace", "sdpa-flash-fastest-backend", "attention-kernels-per-forward"):
        claim = load_claim(ROOT / "claims" / f"{claim_id}.yaml")
        assert (claim.hardware.kind, claim.hardware.device) == ("gpu", "A100")


def test_shipped_claims_are_not_tested_on_their_hardware_from_cpu_runs(cpu_runs: Path) -> None:
    report = check(cpu_runs, ROOT / "claims")
    verdicts = {r.claim.id: r for r in report.claims}
    for claim_id in ("sdpa-math-vs-naive-inplace", "sdpa-flash-fastest-backend", "attention-kernels-per-forward",
                     "bert-base-attention-over-60-percent"):
        result = verdicts[claim_id]
        assert result.verdict == NOT_TESTED_HARDWARE
        assert result.reason and "no run on the claim's hardware" in result.reason
        assert result.evidence and not any(r["within_conditions"] for r in result.evidence)
        assert all(r["role"] == "context" for r in result.evidence)
        assert set(result.counts.values()) == {0}
    bert = verdicts["bert-base-attention-over-60-percent"]
    (context,) = bert.context
    # 35% and 70%: both CPU rows, the range of what was measured there
    assert context["text"] == "on CPU · TEST · 2 cores: 35.0\u201370.0% over 2 combinations; not the claim's hardware"
    assert [r["outcome"] for r in bert.evidence] == ["does not hold here", "holds here"]


def test_bert_claim_on_the_committed_cpu_runs_reads_not_tested_with_context() -> None:
    report = check(ROOT / "runs", ROOT / "claims")
    bert = next(r for r in report.claims if r.claim.id == "bert-base-attention-over-60-percent")
    assert bert.verdict == NOT_TESTED_HARDWARE
    assert bert.evidence and all(r["device"] == "cpu" and not r["within_conditions"] for r in bert.evidence)
    # one context line per CPU host with runs, together covering every evidence row
    hosts = {r.record["hardware"] for r in iter_runs(ROOT / "runs") if str(r.record["hardware"]).startswith("cpu-")}
    assert len(bert.context) == len(hosts) >= 1
    assert sum(c["n"] for c in bert.context) == len(bert.evidence)
    for context in bert.context:
        assert context["label"].startswith("CPU · ")
        assert context["text"].endswith("; not the claim's hardware") and "%" in context["text"]
        assert 0.2 < context["low"] <= context["high"] < 0.6  # from the records, not typed here
    page = pages(ROOT / "runs", ROOT / "claims", report=report)["findings/bert-base-attention-over-60-percent.md"]
    head = page.split("## Evidence")[0]
    assert 'class="verdict verdict-not-tested-on-its-hardware">not tested on its hardware<' in head
    assert "refuted" not in page.split("## Cite this")[0].split("## How it is checked")[0]
    assert "verdict-refuted" not in page
    assert context["text"].replace("'", "&#39;") in head
    assert "Quoted through a secondary source: A published critique of the post" in head
    assert "not found in the source itself" in head


def test_shipped_gpu_claims_on_an_a100_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "nvidia-a100-sxm4-80gb-1x", "attention-micro", gpu_micro(), gpu_name="NVIDIA A100-SXM4-80GB")
    report = check(runs, ROOT / "claims")
    verdicts = {r.claim.id: r for r in report.claims}
    assert verdicts["sdpa-math-vs-naive-inplace"].verdict == SUPPORTED
    assert verdicts["sdpa-flash-fastest-backend"].verdict == SUPPORTED
    assert verdicts["attention-kernels-per-forward"].verdict == SUPPORTED
    assert verdicts["bert-base-attention-over-60-percent"].verdict == NOT_TESTED_HARDWARE
    row = verdicts["sdpa-math-vs-naive-inplace"].evidence[0]
    assert row["on_claim_hardware"] and row["within_conditions"] and row["role"] == "decides"


def test_training_claim_is_decided_by_training_steps_on_an_a100(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    records = []
    for mode, ratio in (("forward", 1.5), ("train", 3.0)):
        for attn, ms in (("eager", 10.0 * ratio), ("flash_attention_2", 10.0)):
            rec = record("gpt2", attn, seq=1024, dtype="bf16", device="cuda", median=ms)
            rec["combination"]["mode"] = mode
            rec["id"] = rec["id"].replace("--forward--", f"--{mode}--")
            records.append(rec)
    write_run(runs, "nvidia-a100-1x", "gpt2", records, gpu_name="NVIDIA A100-SXM4-80GB")
    report = check(runs, ROOT / "claims")
    result = next(r for r in report.claims if r.claim.id == "flashattention-gpt2-training-3x")
    assert result.claim.conditions["setting"] == ["training"]
    assert result.claim.conditions["mode"] == ["train"]
    # the training steps decide; the forwards (inference) are not the claim's evidence
    assert result.verdict == SUPPORTED
    (row,) = result.evidence
    assert row["on_claim_hardware"] and row["within_conditions"] and row["role"] == "decides"
    assert row["value"] == pytest.approx(3.0)


def test_training_claim_on_an_a100_inference_run_stays_not_tested(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    records = [record("gpt2", attn, seq=1024, dtype="bf16", device="cuda", median=ms)
               for attn, ms in (("eager", 30.0), ("flash_attention_2", 10.0))]
    write_run(runs, "nvidia-a100-1x", "gpt2", records, gpu_name="NVIDIA A100-SXM4-80GB")
    report = check(runs, ROOT / "claims")
    result = next(r for r in report.claims if r.claim.id == "flashattention-gpt2-training-3x")
    # its hardware, but no training step: never decided by a forward
    assert result.verdict in (NOT_TESTED, NOT_TESTED_HARDWARE)
    assert not [row for row in result.evidence if row["within_conditions"]]


def test_nongemm_share_from_the_op_table(tmp_path: Path) -> None:
    from reportgen.claims.metrics import parse_metric, read_term

    term = parse_metric("nongemm_share").numerator
    cpu = {"attribution": {"basis": "cpu"}, "ops": [
        {"name": "aten::linear", "total_ms": 6.0}, {"name": "aten::matmul", "total_ms": 1.0},
        {"name": "aten::addmm", "total_ms": 1.0}, {"name": "aten::softmax", "total_ms": 1.0},
        {"name": "aten::layer_norm", "total_ms": 0.5}, {"name": "aten::add", "total_ms": 0.5}]}
    got = read_term(term, cpu)
    assert not isinstance(got, str) and got.value == pytest.approx(0.2)
    gpu = {"attribution": {"basis": "device"}, "ops": [
        {"name": "ampere_sgemm_128x64_tn", "total_ms": 3.0},
        {"name": "sm90_xmma_gemm_bf16bf16_bf16f32", "total_ms": 3.0},
        {"name": "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "total_ms": 2.0},
        {"name": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "total_ms": 2.0}]}
    got = read_term(term, gpu)
    assert not isinstance(got, str) and got.value == pytest.approx(0.4)
    fused = {"attribution": {"basis": "cpu"}, "ops": cpu["ops"] + [
        {"name": "aten::scaled_dot_product_attention", "total_ms": 1.0}]}
    assert read_term(term, fused) == "a fused attention op is both GEMM and not (aten::scaled_dot_product_attention)"
    assert read_term(term, {"ops": []}) == "no op table recorded"


def test_attention_condition_holds_for_per_combination_claims(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", "cpu-x", "s", [
        record("bert-base", "eager", shares={"attention.core": 0.7, "mlp": 0.3}),
        record("bert-base", "sdpa", shares={"attention.core": 0.7, "mlp": 0.3})])
    claims = share_claim(tmp_path / "claims", extra=", hardware: any, attn_implementation: eager").parent
    result = evaluate(tmp_path / "runs", claims)
    assert [r["combination"]["attn_implementation"] for r in result.evidence if r["within_conditions"]] == ["eager"]
    (other,) = [r for r in result.evidence if not r["within_conditions"]]
    assert other["outside"] == ["attn_implementation sdpa (claim: eager)"]


def test_nongemm_claim_on_the_committed_cpu_runs() -> None:
    report = check(ROOT / "runs", ROOT / "claims")
    result = next(r for r in report.claims if r.claim.id == "nongemm-share-of-inference-latency")
    within = [r for r in result.evidence if r["within_conditions"]]
    assert within and all(r["combination"]["attn_implementation"] == "eager" for r in within)
    # a CPU decides a claim its source made on CPU-only platforms too
    assert all(r["device"] == "cpu" and r["role"] == "decides" for r in within)
    assert result.verdict in (SUPPORTED, REFUTED, MIXED)
    assert sum(result.counts.values()) == len(within)


def utilization_run(root: Path, hardware: str, gpu: str, core_ms: float, peak: float) -> None:
    records = []
    for dtype in ("bf16",):
        rec = record("attention-micro", "sdpa-flash", seq=2048, dtype=dtype, device="cuda", median=1.0,
                     ci=(1.0, 1.0), shares={"attention.qkv": 0.2, "attention.core": 0.6, "attention.out": 0.2})
        rec["attribution"]["categories"]["attention.core"]["device_ms"] = core_ms
        rec["model"] = {"name": "attention-micro", "architecture": "attention"}
        rec["flops"] = {"analytic": {"attention.core": 2e12}, "peak_flops_per_s": peak}
        records.append(rec)
    write_run(root, hardware, "attention-micro", records, gpu_name=gpu)


def test_utilization_claims_on_a100_and_h100_runs(tmp_path: Path) -> None:
    from reportgen.claims.metrics import parse_metric, read_term

    runs = tmp_path / "runs"
    # causal: half of 2e12 FLOPs in 5 ms = 200 TFLOP/s, 64.1% of an A100's 312
    utilization_run(runs, "nvidia-a100-1x", "NVIDIA A100-SXM4-80GB", core_ms=5.0, peak=312e12)
    # 1e12 FLOPs in 4 ms = 250 TFLOP/s, 25.3% of an H100's 989.5
    utilization_run(runs, "nvidia-h100-1x", "NVIDIA H100 80GB HBM3", core_ms=4.0, peak=989.5e12)
    report = check(runs, ROOT / "claims")
    by_id = {r.claim.id: r for r in report.claims}
    a100 = by_id["flashattention2-a100-utilization"]
    assert a100.verdict == SUPPORTED
    (row,) = [r for r in a100.evidence if r["within_conditions"]]
    assert row["gpu_name"] == "NVIDIA A100-SXM4-80GB"
    assert row["value"] == pytest.approx(100 * 1e12 / 0.005 / 312e12)
    assert [c["text"] for c in a100.context] == [
        ("on GPU · NVIDIA H100 80GB HBM3 · 1 GPU: 25.3% of peak over 1 combination; "
         "not the claim's hardware")]
    h100 = by_id["flashattention2-h100-utilization"]
    assert h100.verdict == SUPPORTED and h100.counts[SUPPORTED] == 1
    term = parse_metric("utilization(attention.core)").numerator
    cpu = record("attention-micro", "sdpa-flash")
    assert read_term(term, cpu) == "no device time on a CPU run"


def test_a_category_field_of_memory_or_flops_keeps_its_dot() -> None:
    from reportgen.claims.metrics import parse_metric, read_term

    rec = record("bert-base", "sdpa")
    rec["flops"] = {"analytic": {"attention.core": 2e9, "mlp": 4e9}}
    rec["memory"] = {"by_category_bytes": {"attention.core": 4096}}
    got = read_term(parse_metric("flops.analytic.attention.core").numerator, rec)
    assert not isinstance(got, str) and got.value == 2e9
    got = read_term(parse_metric("memory.by_category_bytes.attention.core").numerator, rec)
    assert not isinstance(got, str) and got.value == 4096
    assert read_term(parse_metric("flops.counted.attention.core").numerator, rec) == \
        "no flops.counted.attention.core recorded"


# -- bad claims ----------------------------------------------------------------------------

BAD_CASES = {
    "unknown-field": "verdict: unknown field",
    "unknown-condition": "conditions.gpu: unknown field",
    "bad-op": "predicate.op: unknown op '=>'",
    "unknown-metric": "predicate.metric: unknown metric 'shares(attention)'; valid: share(",
    "unknown-category": "predicate.metric: 'share(attn.core)': no category matches",
    "missing-predicate": "predicate: missing",
    "bad-yaml": "line 4: invalid YAML",
    "approx-without-tolerance": "predicate.tolerance: missing",
    "javascript-url": "source.url: expected an http(s) URL",
    "one-variant-order": "predicate.variants: at least two",
    "mixed-all": "predicate.all: mixes per-combination metrics",
    "wrong-id": "id: 'another-name' differs from the file name",
    "bad-seq-len": "conditions.seq_len: expected an integer",
    "bad-memory-field": "predicate.metric: unknown metric 'memory.peak_bytes'; memory fields:",
    "hardware-glob": "conditions.hardware: 'A100*': expected cpu, gpu, any, or {class: gpu, device: A100}",
    "device-pattern": "conditions.hardware.device: 'A100*': a device name",
    "missing-hardware": "conditions.hardware: missing",
    "bad-hardware-class": "conditions.hardware.class: 'tpu': expected cpu or gpu",
    "bad-setting": "conditions.setting: 'pretraining': expected inference or training",
    "missing-quote-status": "source.quote_in_primary: missing",
    "bad-quote-status": "source.quote_in_primary: True: expected found, not found, not checked",
    "not-found-without-via": "source.via: missing: a quote not found in its source names where it was found",
    "via-without-title": "source.via.title: missing",
    "catalog-unknown-model": "predicate.metric: 'catalog.params_total(mixtral-9x9b)': 'mixtral-9x9b' is not a "
                             "catalog model; the catalog has: ",
    "catalog-mixed": "predicate: mixes a model's structure (catalog.*) with measured metrics",
    "catalog-on-a-gpu": "conditions.hardware: a claim about a model's structure (catalog.*) holds on any hardware",
    "catalog-bad-option": "predicate.metric: 'catalog.kv_bytes_per_token(mixtral-8x7b, counts=all)': unknown "
                          "argument 'counts=all'; catalog.kv_bytes_per_token takes bits=",
    "rounding-without-figure": "predicate.tolerance: rounding needs the value as stated (47B, 6.7%), not a number",
    "bad-figure": "predicate.value: expected a number or a stated figure (47B, 5.1B, 6.7%), got 'about 47B'",
}


def test_every_bad_fixture_has_a_case() -> None:
    assert {p.stem for p in BAD.glob("*.yaml")} == set(BAD_CASES)


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_claim_is_one_line_naming_file_and_field(name: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    shutil.copy(BAD / f"{name}.yaml", claims / f"{name}.yaml")
    (tmp_path / "runs").mkdir()
    code = main(["check", "--claims", str(claims), "--runs", str(tmp_path / "runs")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"reportgen: error: {claims / name}.yaml: ")
    assert BAD_CASES[name] in lines[0]


def test_duplicate_ids_and_missing_directory(tmp_path: Path) -> None:
    from reportgen.errors import UserError

    with pytest.raises(UserError, match="no claims directory"):
        load_claims(tmp_path / "nowhere")
    share_claim(tmp_path / "c")
    (tmp_path / "c" / "share-claim.yml").write_text((tmp_path / "c" / "share-claim.yaml").read_text())
    with pytest.raises(UserError, match="is also the id of"):
        load_claims(tmp_path / "c")


# -- verdicts ------------------------------------------------------------------------------


def evaluate(runs: Path, claims: Path) -> Any:
    (report_claim,) = check(runs, claims).claims
    return report_claim


def test_share_supported_refuted_and_inconclusive(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "cpu-x", "cpu-default", [
        record("bert-base", "sdpa", seq=512, shares={"attention.core": 0.5, "attention.out": 0.2, "mlp": 0.3}),
        record("bert-base", "sdpa", seq=128, shares={"attention.core": 0.3, "attention.qkv": 0.1, "mlp": 0.6}),
        # 0.61 with a latency CI of +-5%: the propagated share interval straddles 0.60.
        record("bert-base", "eager", seq=128, ci=(9.5, 10.5),
               shares={"attention.core": 0.61, "mlp": 0.39}),
    ])
    result = evaluate(runs, share_claim(tmp_path / "claims").parent)
    by_key = {(r["combination"]["attn_implementation"], r["combination"]["seq_len"]): r for r in result.evidence}
    supported = by_key[("sdpa", 512)]
    assert supported["verdict"] == SUPPORTED
    assert supported["value"] == pytest.approx(0.7)
    assert supported["ci_low"] > 0.6
    assert by_key[("sdpa", 128)]["verdict"] == REFUTED
    straddle = by_key[("eager", 128)]
    assert straddle["verdict"] == INCONCLUSIVE
    assert straddle["ci_low"] < 0.6 < straddle["ci_high"]
    assert straddle["checks"][0]["interval"] == "latency 95% CI propagated"
    # The category time over the forward time anywhere in its CI: [share*m/high, share*m/low].
    assert (straddle["ci_low"], straddle["ci_high"]) == (pytest.approx(0.61 * 10 / 10.5),
                                                         pytest.approx(0.61 * 10 / 9.5))
    assert result.verdict == MIXED
    assert result.counts == {SUPPORTED: 1, REFUTED: 1, INCONCLUSIVE: 1, NOT_TESTED: 0}


def test_share_interval_from_profiled_iterations(tmp_path: Path) -> None:
    rec = record("bert-base", "sdpa", ci=(5.0, 20.0), shares={"attention.core": 0.7, "mlp": 0.3})
    rec["attribution"]["headline_method"] = "profiler"
    rec["attribution"]["methods"] = {"profiler": {
        "iteration_ms": [10.0, 10.0, 10.0],
        "categories": {"attention.core": {"per_iteration_ms": [6.8, 7.0, 7.2]},
                       "mlp": {"per_iteration_ms": [3.2, 3.0, 2.8]}}}}
    write_run(tmp_path / "runs", "cpu-x", "s", [rec])
    result = evaluate(tmp_path / "runs", share_claim(tmp_path / "claims").parent)
    row = result.evidence[0]
    assert row["checks"][0]["interval"] == "95% bootstrap over 3 iterations of the profiler method"
    assert 0.68 - 1e-9 <= row["ci_low"] <= 0.7 <= row["ci_high"] <= 0.72 + 1e-9
    assert row["verdict"] == SUPPORTED  # the wide latency CI would have made it inconclusive


def test_not_tested_without_runs_and_for_skipped_combinations(tmp_path: Path) -> None:
    claims = share_claim(tmp_path / "claims").parent
    result = evaluate(tmp_path / "no-runs", claims)
    assert result.verdict == NOT_TESTED and result.evidence == []
    assert "no combination of bert-base" in (result.reason or "")
    write_run(tmp_path / "runs", "cpu-x", "s", [record("bert-base", "flash_attention_2", status="skipped",
                                                       reason="flash_attention_2 needs a GPU")])
    result = evaluate(tmp_path / "runs", claims)
    assert result.verdict == NOT_TESTED
    assert "flash_attention_2 needs a GPU" in result.evidence[0]["reason"]


A100_RATIO = f"""title: Math slower
quote: Math is 3.7x slower.
{SOURCE}conditions: {{model: attention-micro, dtype: bf16, hardware: {{class: gpu, device: A100}}, setting: inference}}
predicate: {{metric: "latency(attn=sdpa-math) / latency(attn=naive-inplace)", op: approx, value: 3.7, tolerance: 10%}}
"""


@pytest.mark.parametrize(("device", "name", "matches"), [
    ("A100", "NVIDIA A100-SXM4-80GB", True),
    ("A100", "NVIDIA A100 80GB PCIe", True),
    ("A100", "nvidia-a100-sxm4-80gb-1x", True),  # a hardware slug when the run names no GPU
    ("a100", "A100", True),
    ("A100", "NVIDIA A10", False),
    ("A10", "NVIDIA A100-SXM4-80GB", False),  # word for word: A10 is not a prefix of A100
    ("A100", "NVIDIA A1000", False),
    ("A100", "NVIDIA H100 80GB HBM3", False),
    ("H100", "NVIDIA H100 80GB HBM3", True),
    ("H100", "NVIDIA H200", False),
    ("H100 SXM", "NVIDIA H100 SXM5 80GB", False),  # SXM is not SXM5: name the variant exactly
    ("H100-SXM5", "NVIDIA H100 SXM5 80GB", True),
    ("V100", "Tesla V100-SXM2-16GB", True),
])
def test_device_matching_is_word_for_word(device: str, name: str, matches: bool) -> None:
    from reportgen.claims.registry import Hardware

    assert Hardware("gpu", device).matches("gpu", [name]) is matches
    assert Hardware("gpu", device).matches("cpu", [name]) is False
    assert Hardware("gpu").matches("gpu", [name]) is True
    assert Hardware("cpu").matches("gpu", [name]) is False
    assert Hardware("any").matches("cpu", []) is True


def test_a100_claim_is_decided_by_a100_runs_only(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "ratio", A100_RATIO).parent
    runs = tmp_path / "runs"
    write_run(runs, "cpu-x", "attention-micro", cpu_micro())
    result = evaluate(runs, claims)
    assert result.verdict == NOT_TESTED_HARDWARE
    assert [r["within_conditions"] for r in result.evidence] == [False]
    assert result.evidence[0]["outside"][0] == "hardware: not the claim's (a GPU: A100)"
    # an H100 and an H200 are GPUs, not A100s: context, whatever they measure
    write_run(runs, "nvidia-h100-1x", "attention-micro",
              gpu_micro(ms=dict(POST_MS, **{"sdpa-math": 1.955})), gpu_name="NVIDIA H100 80GB HBM3")
    write_run(runs, "nvidia-h200-1x", "attention-micro", gpu_micro(), gpu_name="NVIDIA H200")
    result = evaluate(runs, claims)
    assert result.verdict == NOT_TESTED_HARDWARE
    assert result.counts == {SUPPORTED: 0, REFUTED: 0, INCONCLUSIVE: 0, NOT_TESTED: 0}
    labels = [c["label"] for c in result.context]
    assert labels == ["CPU · X", "GPU · NVIDIA H100 80GB HBM3 · 1 GPU", "GPU · NVIDIA H200 · 1 GPU"]
    assert result.context[1]["text"] == ("on GPU · NVIDIA H100 80GB HBM3 · 1 GPU: 1x over 1 "
                                         "combination; not the claim's hardware")
    h100 = next(r for r in result.evidence if r["hardware"] == "nvidia-h100-1x")
    assert h100["verdict"] == REFUTED and h100["outcome"] == "does not hold here"
    # an A100 decides it; the others stay context beside it
    write_run(runs, "nvidia-a100-sxm4-80gb-1x", "attention-micro", gpu_micro(), gpu_name="NVIDIA A100-SXM4-80GB")
    result = evaluate(runs, claims)
    assert result.verdict == SUPPORTED
    assert result.counts[SUPPORTED] == 1 and result.counts[REFUTED] == 0
    (row,) = [r for r in result.evidence if r["within_conditions"]]
    assert row["gpu_name"] == "NVIDIA A100-SXM4-80GB" and row["role"] == "decides"
    assert result.evidence[0] is row  # deciding rows first
    assert len(result.context) == 3  # cpu, H100, H200
    assert row["value"] == pytest.approx(7.239 / 1.955)
    # The ratio's interval is [low_a / high_b, high_a / low_b].
    assert row["ci_low"] == pytest.approx(7.239 * 0.99 / (1.955 * 1.01))
    assert row["ci_high"] == pytest.approx(7.239 * 1.01 / (1.955 * 0.99))
    assert sorted(row["combinations"]) == sorted(
        f"attention-micro--forward--bf16--{v}--b1--s1024" for v in ("sdpa-math", "naive-inplace"))


def test_worker_gpu_name_decides_over_the_run_environment(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "ratio", A100_RATIO).parent
    records = gpu_micro()
    for rec in records:  # a node with several kinds of GPU: the worker's GPU is the one that measured
        rec["device"] = {"slot": "0", "index": 0, "name": "NVIDIA H100 PCIe"}
    write_run(tmp_path / "runs", "mixed-node", "attention-micro", records, gpu_name="NVIDIA A100-SXM4-40GB")
    assert evaluate(tmp_path / "runs", claims).verdict == NOT_TESTED_HARDWARE


def test_training_claim_is_not_tested_by_inference_runs(tmp_path: Path) -> None:
    claims = share_claim(tmp_path / "claims", extra=", hardware: cpu").parent
    path = claims / "share-claim.yaml"
    path.write_text(path.read_text().replace("setting: inference", "setting: training"))
    write_run(tmp_path / "runs", "cpu-x", "s", [record("bert-base", "sdpa")])
    result = evaluate(tmp_path / "runs", claims)
    assert result.verdict == NOT_TESTED  # on its hardware, but no run in its setting
    assert result.evidence[0]["outside"] == ["setting inference (claim: training)"]
    assert result.context == []


def test_ratio_refuted_and_inconclusive(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "ratio", f"""title: Math slower
quote: Math is 3.7x slower.
{SOURCE}conditions: {{model: attention-micro, hardware: gpu, setting: inference}}
predicate: {{metric: "latency(attn=sdpa-math) / latency(attn=naive-inplace)", op: approx, value: 3.7, tolerance: 10%}}
""").parent
    ms = dict(POST_MS, **{"sdpa-math": 2.0})
    write_run(tmp_path / "a", "gpu-a", "m", gpu_micro(ms=ms), gpu_name="NVIDIA H200")
    assert evaluate(tmp_path / "a", claims).verdict == REFUTED
    # 3.3 is just inside the band (3.33 is the edge) but a +-10% CI reaches both sides.
    ms = dict(POST_MS, **{"sdpa-math": 1.955 * 3.4})
    write_run(tmp_path / "b", "gpu-a", "m", gpu_micro(ms=ms, rel=0.1), gpu_name="NVIDIA H200")
    assert evaluate(tmp_path / "b", claims).verdict == INCONCLUSIVE


def ordering_claim(directory: Path) -> Path:
    return write_claim(directory, "order", f"""title: Flash fastest
quote: Flash is the fastest backend.
{SOURCE}conditions: {{model: attention-micro, hardware: gpu, setting: inference}}
predicate: {{metric: latency, order: fastest, variants: [sdpa-flash, sdpa-cudnn, sdpa-efficient]}}
""").parent


def test_ordering_supported_inconclusive_refuted(tmp_path: Path) -> None:
    claims = ordering_claim(tmp_path / "claims")
    write_run(tmp_path / "ok", "gpu", "m", gpu_micro(), gpu_name="G")
    result = evaluate(tmp_path / "ok", claims)
    assert result.verdict == SUPPORTED
    assert [v["attn"] for v in result.evidence[0]["checks"][0]["variants"]] == [
        "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    overlap = dict(POST_MS, **{"sdpa-cudnn": 0.150})
    write_run(tmp_path / "overlap", "gpu", "m", gpu_micro(ms=overlap, rel=0.05), gpu_name="G")
    assert evaluate(tmp_path / "overlap", claims).verdict == INCONCLUSIVE
    reversed_ = dict(POST_MS, **{"sdpa-efficient": 0.1})
    write_run(tmp_path / "rev", "gpu", "m", gpu_micro(ms=reversed_), gpu_name="G")
    result = evaluate(tmp_path / "rev", claims)
    assert result.verdict == REFUTED
    assert result.evidence[0]["checks"][0]["lowest"] == "sdpa-efficient"


def test_ordering_with_a_skipped_variant_is_not_tested(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "order", f"""title: Flash fastest
quote: Flash is the fastest backend.
{SOURCE}conditions: {{model: attention-micro, hardware: any, setting: inference}}
predicate: {{metric: latency, order: fastest, variants: [sdpa-flash, sdpa-efficient]}}
""").parent
    write_run(tmp_path / "runs", "cpu-x", "m", cpu_micro())
    result = evaluate(tmp_path / "runs", claims)
    assert result.verdict == NOT_TESTED
    assert "attn=sdpa-efficient" in result.evidence[0]["reason"]
    assert "No viable backend" in result.evidence[0]["reason"]


def test_kernel_counts_exact_and_missing_on_cpu(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "kernels", f"""title: Kernels
quote: naive 6, in-place 5.
{SOURCE}conditions: {{model: attention-micro, hardware: any, setting: inference}}
predicate:
  all:
    - {{metric: "kernels_per_forward(attention.core, attn=naive)", op: "==", value: 6}}
    - {{metric: "kernels_per_forward(attention.core, attn=naive-inplace)", op: "==", value: 5}}
""").parent
    write_run(tmp_path / "gpu", "gpu", "m", gpu_micro(), gpu_name="G")
    assert evaluate(tmp_path / "gpu", claims).verdict == SUPPORTED
    write_run(tmp_path / "gpu7", "gpu", "m", gpu_micro(kernels=dict(POST_KERNELS, naive=7)), gpu_name="G")
    result = evaluate(tmp_path / "gpu7", claims)
    assert result.verdict == REFUTED
    assert [c["verdict"] for c in result.evidence[0]["checks"]] == [REFUTED, SUPPORTED]
    write_run(tmp_path / "cpu", "cpu-x", "m", cpu_micro())
    result = evaluate(tmp_path / "cpu", claims)
    assert result.verdict == NOT_TESTED
    assert "no kernel launch counts on a CPU run" in result.evidence[0]["reason"]


def test_seq_len_range_and_scale_conditions(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", "cpu-x", "s", [
        record("bert-base", "sdpa", seq=128, shares={"attention.core": 0.3, "mlp": 0.7}),
        record("bert-base", "sdpa", seq=4096, shares={"attention.core": 0.8, "mlp": 0.2}),
        record("bert-base", "sdpa", seq=8192, scale="tiny", shares={"attention.core": 0.1, "mlp": 0.9}),
    ])
    claims = share_claim(tmp_path / "claims", extra=", hardware: any, scale: reference, seq_len: {min: 1024}").parent
    result = evaluate(tmp_path / "runs", claims)
    assert result.verdict == SUPPORTED
    assert [r["combination"]["seq_len"] for r in result.evidence] == [4096, 128]  # tiny is excluded
    assert result.evidence[1]["outside"] == ["seq_len 128 (claim: 1024..)"]


# -- the command and its JSON --------------------------------------------------------------


def test_check_json_shape(cpu_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--runs", str(cpu_runs), "--claims", str(ROOT / "claims"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "reportgen.check" and data["schema_version"] == 1
    assert data["combinations_read"] == 8
    assert len(data["claims"]) == len(SHIPPED)
    for claim in data["claims"]:
        assert {"id", "title", "file", "quote", "source", "conditions", "predicate", "verdict",
                "counts", "reason", "evidence"} <= set(claim)
        assert claim["verdict"] in (SUPPORTED, REFUTED, INCONCLUSIVE, NOT_TESTED, MIXED, NOT_TESTED_HARDWARE)
        assert claim["hardware"]["class"] in ("cpu", "gpu", "any")
        assert claim["source"]["quote_in_primary"] in ("found", "not found", "not checked")
        assert isinstance(claim["context"], list)
        for row in claim["evidence"]:
            assert {"run_id", "hardware", "device", "within_conditions", "combination", "combinations",
                    "verdict", "value", "ci_low", "ci_high", "checks", "reason", "role", "outcome",
                    "on_claim_hardware"} <= set(row)
    # The runs here are CPU runs: every GPU claim waits for its hardware (the CPU figures
    # appear as context only); the non-GEMM claim (any hardware) finds no op table to read.
    verdicts = {c["id"]: (c["verdict"], c["counts"][SUPPORTED], c["counts"][REFUTED])
                for c in data["claims"]}
    gpu_claims = set(verdicts) - {"nongemm-share-of-inference-latency"} - STRUCTURAL
    assert {k: verdicts[k] for k in gpu_claims} == {k: (NOT_TESTED_HARDWARE, 0, 0) for k in gpu_claims}
    assert verdicts["nongemm-share-of-inference-latency"] == (NOT_TESTED, 0, 0)
    # a model's structure needs no run: decided here as anywhere
    assert {k: verdicts[k] for k in STRUCTURAL} == {k: (SUPPORTED, 1, 0) for k in STRUCTURAL}
    assert "bert-base-attention-over-60-percent" in gpu_claims and len(verdicts) == 14


def test_check_text_exits_zero_whatever_the_verdicts(cpu_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--runs", str(cpu_runs), "--claims", str(ROOT / "claims")]) == 0
    out = capsys.readouterr().out
    assert "bert-base-attention-over-60-percent: NOT TESTED ON ITS HARDWARE" in out
    assert "sdpa-flash-fastest-backend: NOT TESTED ON ITS HARDWARE" in out
    assert "  context: on CPU · TEST · 2 cores: 35.0\u201370.0% over 2 combinations; not the claim's hardware" in out
    # context rows say whether the predicate holds there, never "refuted"
    assert "does not hold here" in out and "holds here" in out and "refuted" not in out


def test_check_as_a_subprocess(cpu_runs: Path) -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "reportgen", "check", "--runs", str(cpu_runs),
                           "--claims", str(ROOT / "claims"), "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in proc.stderr
    json.loads(proc.stdout)


def test_check_side_does_not_import_torch(cpu_runs: Path) -> None:
    import subprocess

    code = ("import sys; from reportgen.claims import check; from reportgen.render.findings import pages; "
            f"r = check({str(cpu_runs)!r}, {str(ROOT / 'claims')!r}); "
            f"pages({str(cpu_runs)!r}, {str(ROOT / 'claims')!r}, report=r); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- pages ---------------------------------------------------------------------------------


def test_pages_have_every_claim_a_chart_and_links(cpu_runs: Path) -> None:
    report = check(cpu_runs, ROOT / "claims")
    out = pages(cpu_runs, ROOT / "claims", report=report,
                combination_page=lambda run_id, combo_id: f"runs/{run_id}/{combo_id}.md")
    assert set(out) == {"findings/index.md"} | {f"findings/{p.stem}.md" for p in SHIPPED}
    bert = out["findings/bert-base-attention-over-60-percent.md"]
    assert 'class="verdict verdict-not-tested-on-its-hardware"' in bert
    assert "huggingface.co/blog/torch-attention-profile" in bert
    assert "## Provenance" in bert and "isolated causal attention module" in bert
    assert '<script type="application/json" class="rg-spec">' in bert
    assert "(../runs/cpu-test-2c/cpu-default-12345678/bert-base--forward--fp32--sdpa--b1--s128.md)" in bert
    flash = out["findings/sdpa-flash-fastest-backend.md"]
    assert "verdict-not-tested-on-its-hardware" in flash and "### Context: other hardware" in flash
    assert "Made on: a GPU: A100." in flash and "found in the source itself" in flash
    assert "It is the fastest backend, yet the profiler reports it" in flash  # the post's words
    bert = out["findings/bert-base-attention-over-60-percent.md"]
    assert "Quoted through a secondary source: " in bert
    index = out["findings/index.md"]
    assert "(sdpa-flash-fastest-backend.md)" in index


def test_evidence_tables_have_five_columns(cpu_runs: Path) -> None:
    out = pages(cpu_runs, ROOT / "claims", combination_page=lambda r, c: f"runs/{r}/{c}.md")
    structural = {f"findings/{c}.md" for c in STRUCTURAL}  # no runs: check, computed, verdict
    for path, page in out.items():
        for line in page.splitlines():
            if line.startswith("|") and path != "findings/index.md" and path not in structural:
                cells = line.strip().strip("|").replace("|---", " | ").split(" | ")
                assert len(cells) == 5, (path, line)
    flash = out["findings/sdpa-flash-fastest-backend.md"]
    # a group of variants links each variant by name
    assert ("[sdpa-math](../runs/cpu-test-2c/attention-micro-12345678/"
            "attention-micro--forward--fp32--sdpa-math--b1--s1024.md)") in flash


def test_cite_block_names_runs_date_and_commit(tmp_path: Path) -> None:
    from reportgen.render.findings import cite

    runs = tmp_path / "runs"
    records = gpu_micro()
    for rec in records:
        rec["finished"] = "2026-11-30T10:00:00Z"
        rec["git"] = {"commit": "0123456789abcdef0123", "dirty": False}
    records[1]["finished"] = "2026-12-01T09:00:00Z"  # naive-inplace, one of the ratio's two
    records[0]["finished"] = "2026-12-24T09:00:00Z"  # naive: not in the ratio, not its date
    write_run(runs, "nvidia-a100-1x", "attention-micro", records, gpu_name="NVIDIA A100-SXM4-80GB")
    write_run(runs, "cpu-x", "attention-micro", cpu_micro())
    claims = write_claim(tmp_path / "claims", "ratio", A100_RATIO.replace("Math slower", "Math 50% slower_ish")).parent
    result = evaluate(runs, claims)
    citation = cite(result, "findings/ratio")
    assert citation.key == "reportgen-ratio"
    assert citation.bibtex.startswith("@misc{reportgen-ratio,\n")
    assert "Math 50\\% slower\\_ish" in citation.bibtex  # BibTeX specials escaped
    assert "year   = {2026}" in citation.bibtex and "month  = dec" in citation.bibtex
    assert "author = {{reportgen developers}}" in citation.bibtex  # as on every page
    # the deciding run only (the CPU run is context), its commit, the latest finish date
    assert "runs nvidia-a100-1x/attention-micro-12345678;" in citation.text
    assert "cpu-x" not in citation.text
    assert citation.text.startswith(
        "reportgen developers (2026-12-01). Claim check: Math 50% slower_ish. Verdict: supported.")
    assert "project commit 0123456789ab." in citation.text
    # no site address given: the citation says so; with one, it is the page's address
    assert "url " not in citation.bibtex and "no public site address" in citation.text
    with_url = cite(result, "findings/ratio", "https://example.org/site/")
    assert "url    = {https://example.org/site/findings/ratio/}" in with_url.bibtex
    page = pages(runs, claims)["findings/ratio.md"]
    assert "## Cite this\n\n```bibtex\n@misc{reportgen-ratio," in page
    assert citation.text in page


def test_chart_spec_is_readable_labelled_and_marks_context(cpu_runs: Path) -> None:
    from reportgen.render.findings import ROLE_DECIDES, ROLE_OTHER_HARDWARE, chart_spec

    report = check(cpu_runs, ROOT / "claims")
    bert = next(r for r in report.claims if r.claim.id == "bert-base-attention-over-60-percent")
    spec = chart_spec(bert)
    assert spec is not None and "vega-lite" in spec["$schema"]
    assert spec["facet"]["field"] == "hardware" and spec["columns"] == 2
    assert spec["spec"]["width"] >= 300 and spec["spec"]["height"] >= 200
    values = spec["data"]["values"]
    assert sorted(v["seq_len"] for v in values) == [128, 2048]
    assert {v["role"] for v in values} == {ROLE_OTHER_HARDWARE}
    assert {v["hardware"] for v in values} == {"CPU · TEST · 2 cores (context)"}  # the panel says so
    assert spec["facet"]["sort"] == {"field": "panel", "op": "min"}  # the claim's hardware first
    layers = spec["spec"]["layer"]
    texts = [layer for layer in layers if layer["mark"]["type"] == "text"]
    assert [t["encoding"]["text"]["datum"] for t in texts] == ["claim: > 60.0%"]
    rules = [layer for layer in layers if layer["encoding"].get("y", {}).get("datum") is not None
             and layer["mark"]["type"] == "rule"]
    assert [r["encoding"]["y"]["datum"] for r in rules] == [0.6]
    points = next(layer for layer in layers if layer["mark"]["type"] == "point")
    shape = points["encoding"]["shape"]
    assert shape["field"] == "role" and shape["title"] == "marks"
    assert shape["legend"]["values"] == [ROLE_OTHER_HARDWARE]  # only what is drawn is listed
    assert not any(e.get("field") == "verdict" for e in points["encoding"].values() if isinstance(e, dict))
    assert points["encoding"]["color"]["title"] == "attention, dtype, batch"
    assert points["encoding"]["opacity"]["condition"]["value"] == 1.0
    assert ROLE_DECIDES in shape["scale"]["domain"]
    ratio = next(r for r in report.claims if r.claim.id == "sdpa-math-vs-naive-inplace")
    ratio_spec = chart_spec(ratio)
    assert ratio_spec is not None
    labels = [layer["encoding"]["text"]["datum"] for layer in ratio_spec["spec"]["layer"]
              if layer["mark"]["type"] == "text"]
    assert labels == ["claim: 3.7x \u00b1 15%"]
    kernels = next(r for r in report.claims if r.claim.id == "attention-kernels-per-forward")
    assert chart_spec(kernels) is None  # no kernel counts on a CPU


def test_claim_text_is_escaped(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "evil", """title: "<script>alert('t')</script> | [x](javascript:alert(1))"
quote: "Attention <script>alert(1)</script> is *most* [of](javascript:alert(2)) the time | really"
source: {title: "<b>post</b>", url: "https://example.org/a(b)c", quote_in_primary: found}
conditions: {model: bert-base, hardware: any, setting: inference}
predicate: {metric: "share(attention.*)", op: ">", value: 0.5}
""").parent
    runs = tmp_path / "runs"
    write_run(runs, "cpu-<img src=x onerror=alert(3)>", "s", [record("bert-base", "sdpa")])
    page = pages(runs, claims)["findings/evil.md"]
    text, fence = page.split('<div class="rg-chart"', 1)  # the chart's JSON is data, not Markdown
    spec = fence.split('class="rg-spec">', 1)[1].split("</script>", 1)[0]
    assert "<" not in spec and "javascript:alert(1)" in spec
    page = text
    assert "<script>" not in page and "<b>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
    assert "](javascript" not in page and "&#91;of&#93;(javascript" in page
    assert "|" not in page.split("> ", 1)[1].split("\n", 1)[0]  # no table pipe from data in the quote
    assert "(https://example.org/a%28b%29c)" in page


def test_combination_section_lists_claims(cpu_runs: Path) -> None:
    report = check(cpu_runs, ROOT / "claims")
    run_id = "cpu-test-2c/attention-micro-12345678"
    found = claims_for_combination(report, run_id, "attention-micro--forward--fp32--sdpa-math--b1--s1024")
    assert {f["claim_id"] for f in found} >= {"sdpa-math-vs-naive-inplace", "sdpa-flash-fastest-backend",
                                               "attention-kernels-per-forward"}
    assert all(not f["within_conditions"] for f in found)
    text = combination_section(report, run_id, "attention-micro--forward--fp32--sdpa-math--b1--s1024",
                               "combinations/cpu/sdpa-math.md")
    assert "(../../findings/sdpa-flash-fastest-backend.md)" in text
    assert "context only: not measured (not the claim's hardware or conditions)" in text
    assert "verdict-not-tested-on-its-hardware" in text and "verdict-refuted" not in text
    assert combination_section(report, run_id, "no-such-combination", "x.md") == ""


def test_a_combination_two_runs_measured_counts_once_from_the_latest(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    old = record("bert-base", "eager", shares={"attention.core": 0.7, "mlp": 0.3})
    new = record("bert-base", "eager", shares={"attention.core": 0.4, "mlp": 0.6})
    old["finished"], new["finished"] = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
    first = write_run(runs, "cpu-x", "cpu-default", [old])
    second = write_run(runs, "cpu-x", "cpu-payoff", [new])
    result = evaluate(runs, share_claim(tmp_path / "claims").parent)
    (row,) = result.evidence
    assert row["run_id"] == second and row["also_measured_in"] == [first]
    assert row["verdict"] == REFUTED and sum(result.counts.values()) == 1


def test_a_range_claim_shows_its_value_once_and_names_each_bound(tmp_path: Path) -> None:
    from reportgen.render.findings import page_model

    runs = tmp_path / "runs"
    write_run(runs, "cpu-x", "s", [record("bert-base", "eager", shares={"attention.core": 0.1, "mlp": 0.9})])
    claims = write_claim(tmp_path / "claims", "range-claim", f"""title: Attention share in a range
quote: Attention takes 20% to 50%.
{SOURCE}conditions: {{model: bert-base, mode: forward, setting: inference, hardware: any}}
predicate:
  all:
    - {{metric: "share(attention.*)", op: ">=", value: 0.2}}
    - {{metric: "share(attention.*)", op: "<=", value: 0.5}}
""").parent
    model = page_model(evaluate(runs, claims))
    (row,) = model["within"]
    assert row["measured"][0].startswith("share(attention.*): 10.0%")
    assert row["measured"][1] == "bounds: \u2265 20.0% refuted, \u2264 50.0% supported"
    assert row["setting"].startswith("bert-base, forward, fp32")


def test_the_findings_index_counts_as_the_home_page_and_names_a_secondary_source() -> None:
    from reportgen.records.load import load_runs
    from reportgen.records.schema import current_runs
    from reportgen.render import analysis
    from reportgen.render.findings import FINDINGS_INDEX, pages

    report = check(ROOT / "runs", ROOT / "claims")
    shown = analysis.combinations_frame(current_runs(load_runs(ROOT / "runs")))
    assert report.observations == len(shown)
    index = pages(ROOT / "runs", ROOT / "claims", report=report)[FINDINGS_INDEX]
    # the combinations shown, and of them those measured, as the home page counts them per host
    measured = int((shown["status"] == "ok").sum())
    assert 0 < measured < len(shown) and report.measured == measured
    assert f"({len(shown)} combinations, {measured} of them measured)" in index
    row = next(line for line in index.splitlines() if "bert-base-attention-over-60-percent" in line)
    assert "attributed to [Profiling in PyTorch (Part 3)" in row and "not found in it" in row
