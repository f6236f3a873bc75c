"""The claims registry, its validation, the verdicts, `reportgen check` and the Findings pages."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from reportgen.claims import (
    INCONCLUSIVE,
    MIXED,
    NOT_TESTED,
    REFUTED,
    SUPPORTED,
    check,
    claims_for_combination,
    combination_section,
    load_claim,
    load_claims,
    pages,
)
from reportgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "claims").glob("*.yaml"))
BAD = ROOT / "tests" / "data" / "claims" / "bad"

# -- hand-built runs -----------------------------------------------------------------------


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


def write_claim(directory: Path, claim_id: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{claim_id}.yaml"
    path.write_text(f"id: {claim_id}\n" + body)
    return path


SOURCE = 'source: {title: A post, url: "https://example.org/post", date: 2026-07-10}\n'


def share_claim(directory: Path, value: float = 0.6, extra: str = "") -> Path:
    return write_claim(directory, "share-claim", f"""title: Attention share
quote: Attention is most of the time.
{SOURCE}conditions: {{model: bert-base, mode: forward{extra}}}
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


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_claim_loads(path: Path) -> None:
    claim = load_claim(path)
    assert claim.id == path.stem
    assert claim.quote and claim.source.url.startswith("https://huggingface.co/blog/torch-attention-profile")
    assert claim.source.date == "2026-07-10"


def test_registry_has_the_issue_claims() -> None:
    ids = {c.id for c in load_claims(ROOT / "claims")}
    assert ids == {"bert-base-attention-over-60-percent", "sdpa-math-vs-naive-inplace",
                   "sdpa-flash-fastest-backend", "attention-kernels-per-forward"}
    bert = load_claim(ROOT / "claims" / "bert-base-attention-over-60-percent.yaml")
    assert bert.source.provenance and "isolated" in bert.source.provenance
    assert bert.source.via is not None


def test_shipped_gpu_claims_are_not_tested_on_cpu_runs(cpu_runs: Path) -> None:
    report = check(cpu_runs, ROOT / "claims")
    verdicts = {r.claim.id: r for r in report.claims}
    for claim_id in ("sdpa-math-vs-naive-inplace", "sdpa-flash-fastest-backend", "attention-kernels-per-forward"):
        result = verdicts[claim_id]
        assert result.verdict == NOT_TESTED
        assert result.reason and "hardware" in result.reason
        assert result.evidence and not any(r["within_conditions"] for r in result.evidence)
    # The BERT claim is stated for any hardware: CPU runs decide it.
    bert = verdicts["bert-base-attention-over-60-percent"]
    assert bert.verdict == MIXED
    assert bert.counts[SUPPORTED] == 1 and bert.counts[REFUTED] == 1


def test_shipped_gpu_claims_on_a_gpu_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "nvidia-a100-sxm4-80gb-1x", "attention-micro", gpu_micro(), gpu_name="NVIDIA A100-SXM4-80GB")
    report = check(runs, ROOT / "claims")
    verdicts = {r.claim.id: r for r in report.claims}
    assert verdicts["sdpa-math-vs-naive-inplace"].verdict == SUPPORTED
    assert verdicts["sdpa-flash-fastest-backend"].verdict == SUPPORTED
    assert verdicts["attention-kernels-per-forward"].verdict == SUPPORTED
    assert verdicts["bert-base-attention-over-60-percent"].verdict == NOT_TESTED
    row = verdicts["sdpa-math-vs-naive-inplace"].evidence[0]
    assert row["hardware_note"] is None and row["within_conditions"]


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
    assert straddle["checks"][0]["interval"] == "latency CI propagated"
    # The category time over the forward time anywhere in its CI: [share*m/high, share*m/low].
    assert (straddle["ci_low"], straddle["ci_high"]) == (pytest.approx(0.61 * 10 / 10.5),
                                                         pytest.approx(0.61 * 10 / 9.5))
    assert result.verdict == MIXED
    assert result.counts == {SUPPORTED: 1, REFUTED: 1, INCONCLUSIVE: 1, NOT_TESTED: 0}


def test_share_interval_from_profiled_iterations(tmp_path: Path) -> None:
    rec = record("bert-base", "sdpa", ci=(5.0, 20.0), shares={"attention.core": 0.7, "mlp": 0.3})
    rec["profile"] = {"per_iteration_ms": [10.0, 10.0, 10.0]}
    rec["attribution"]["categories"]["attention.core"]["per_iteration_ms"] = [6.8, 7.0, 7.2]
    write_run(tmp_path / "runs", "cpu-x", "s", [rec])
    result = evaluate(tmp_path / "runs", share_claim(tmp_path / "claims").parent)
    row = result.evidence[0]
    assert row["checks"][0]["interval"] == "range over profiled iterations"
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(0.68), pytest.approx(0.72))
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


def test_gpu_claim_is_not_tested_on_cpu_and_flags_other_gpus(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "ratio", f"""title: Math slower
quote: Math is 3.7x slower.
{SOURCE}conditions: {{model: attention-micro, dtype: bf16, hardware: "A100*"}}
predicate: {{metric: "latency(attn=sdpa-math) / latency(attn=naive-inplace)", op: approx, value: 3.7, tolerance: 10%}}
""").parent
    runs = tmp_path / "runs"
    write_run(runs, "cpu-x", "attention-micro", cpu_micro())
    result = evaluate(runs, claims)
    assert result.verdict == NOT_TESTED
    assert [r["within_conditions"] for r in result.evidence] == [False]
    assert result.evidence[0]["outside"][0].startswith("hardware cpu")
    # An H200 is a GPU: evaluated, and flagged as not the stated A100.
    write_run(runs, "nvidia-h200-1x", "attention-micro", gpu_micro(), gpu_name="NVIDIA H200")
    result = evaluate(runs, claims)
    assert result.verdict == SUPPORTED
    row = next(r for r in result.evidence if r["within_conditions"])
    assert "NVIDIA H200 differs from the stated A100*" in row["hardware_note"]
    assert row["value"] == pytest.approx(7.239 / 1.955)
    # The ratio's interval is [low_a / high_b, high_a / low_b].
    assert row["ci_low"] == pytest.approx(7.239 * 0.99 / (1.955 * 1.01))
    assert row["ci_high"] == pytest.approx(7.239 * 1.01 / (1.955 * 0.99))
    assert sorted(row["combinations"]) == sorted(
        f"attention-micro--forward--bf16--{v}--b1--s1024" for v in ("sdpa-math", "naive-inplace"))


def test_ratio_refuted_and_inconclusive(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "ratio", f"""title: Math slower
quote: Math is 3.7x slower.
{SOURCE}conditions: {{model: attention-micro, hardware: gpu}}
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
{SOURCE}conditions: {{model: attention-micro, hardware: gpu}}
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
{SOURCE}conditions: {{model: attention-micro}}
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
{SOURCE}conditions: {{model: attention-micro}}
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
    claims = share_claim(tmp_path / "claims", extra=", scale: reference, seq_len: {min: 1024}").parent
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
        for row in claim["evidence"]:
            assert {"run_id", "hardware", "device", "within_conditions", "combination", "combinations",
                    "verdict", "value", "ci_low", "ci_high", "checks", "reason"} <= set(row)
    # The GPU claims have no run within their conditions here; the bert-base share claim
    # holds at 2048 tokens (core 0.6 + qkv 0.1) and not at 128 (0.25 + 0.1).
    verdicts = {c["id"]: (c["verdict"], c["counts"][SUPPORTED], c["counts"][REFUTED])
                for c in data["claims"]}
    assert verdicts == {"attention-kernels-per-forward": (NOT_TESTED, 0, 0),
                        "bert-base-attention-over-60-percent": (MIXED, 1, 1),
                        "sdpa-flash-fastest-backend": (NOT_TESTED, 0, 0),
                        "sdpa-math-vs-naive-inplace": (NOT_TESTED, 0, 0)}


def test_check_text_exits_zero_whatever_the_verdicts(cpu_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--runs", str(cpu_runs), "--claims", str(ROOT / "claims")]) == 0
    out = capsys.readouterr().out
    assert "bert-base-attention-over-60-percent: MIXED" in out
    assert "sdpa-flash-fastest-backend: NOT TESTED" in out
    assert "refuted" in out and "supported" in out


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

    code = ("import sys; from reportgen.claims import check, pages; "
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
    assert 'class="verdict verdict-mixed"' in bert
    assert "huggingface.co/blog/torch-attention-profile" in bert
    assert "## Provenance" in bert and "isolated causal attention module" in bert
    assert '<script type="application/json" class="rg-spec">' in bert
    assert "(../runs/cpu-test-2c/cpu-default-12345678/bert-base--forward--fp32--sdpa--b1--s128.md)" in bert
    flash = out["findings/sdpa-flash-fastest-backend.md"]
    assert "verdict-not-tested" in flash and "Outside the stated conditions" in flash
    index = out["findings/index.md"]
    assert "(sdpa-flash-fastest-backend.md)" in index


def test_chart_spec_is_vega_lite_across_hardware(cpu_runs: Path) -> None:
    from reportgen.claims import chart_spec

    report = check(cpu_runs, ROOT / "claims")
    bert = next(r for r in report.claims if r.claim.id == "bert-base-attention-over-60-percent")
    spec = chart_spec(bert)
    assert spec is not None and "vega-lite" in spec["$schema"]
    assert spec["facet"]["column"]["field"] == "hardware"
    values = spec["data"]["values"]
    assert sorted(v["seq_len"] for v in values) == [128, 2048]
    kernels = next(r for r in report.claims if r.claim.id == "attention-kernels-per-forward")
    assert chart_spec(kernels) is None  # no kernel counts on a CPU


def test_claim_text_is_escaped(tmp_path: Path) -> None:
    claims = write_claim(tmp_path / "claims", "evil", """title: "<script>alert('t')</script> | [x](javascript:alert(1))"
quote: "Attention <script>alert(1)</script> is *most* [of](javascript:alert(2)) the time | really"
source: {title: "<b>post</b>", url: "https://example.org/a(b)c"}
conditions: {model: bert-base}
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
    assert {f["claim_id"] for f in found} == {"sdpa-math-vs-naive-inplace", "sdpa-flash-fastest-backend",
                                               "attention-kernels-per-forward"}
    assert all(not f["within_conditions"] for f in found)
    text = combination_section(report, run_id, "attention-micro--forward--fp32--sdpa-math--b1--s1024",
                               "combinations/cpu/sdpa-math.md")
    assert "(../../findings/sdpa-flash-fastest-backend.md)" in text
    assert "outside the stated conditions" in text
    assert combination_section(report, run_id, "no-such-combination", "x.md") == ""
