"""Claims about a model's structure (``catalog.*`` metrics): decided from the catalog on any
host, with no run and no torch, each figure with its working and its config's address."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reportgen.claims import SUPPORTED, check, evaluate_claim, load_claim
from reportgen.claims.metrics import parse_metric
from reportgen.claims.registry import Comparison
from reportgen.claims.structure import at_default_precision, compute
from reportgen.render.findings import FINDINGS_INDEX, pages

pytestmark = pytest.mark.torchfree

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "claims"


def _result(claim_id: str):  # type: ignore[no-untyped-def]
    return evaluate_claim(load_claim(CLAIMS / f"{claim_id}.yaml"), [])


def _values(claim_id: str) -> list[float]:
    (row, *_) = _result(claim_id).evidence
    return [c["value"] for c in row["checks"]]


def test_mixtral_47b_and_13b_are_its_counts_within_their_rounding() -> None:
    result = _result("mixtral-47b-total-13b-active")
    assert result.verdict == SUPPORTED and result.counts[SUPPORTED] == 1
    assert _values("mixtral-47b-total-13b-active") == [46_702_792_704, 12_879_925_248]
    (row,) = result.evidence
    assert [c["band"] for c in row["checks"]] == [[46.5e9, 47.5e9], [12.5e9, 13.5e9]]
    assert [c["text"] for c in row["checks"]] == ["46.7B", "12.88B"]
    assert row["hardware_label"] == "the catalog (any hardware)" and row["run_id"] is None


def test_gpt_oss_active_counts_in_openai_s_convention() -> None:
    result = _result("gpt-oss-active-parameters")
    assert result.verdict == SUPPORTED
    # the parameters one token runs, less the input embedding table (201,088 x 2,880)
    assert _values("gpt-oss-active-parameters") == [5_711_982_912 - 579_133_440, 4_187_440_704 - 579_133_440]
    (row,) = result.evidence
    assert "less its input embedding table (579.1M)" in row["checks"][0]["terms"][0]["how"]


def test_counting_every_parameter_does_not_give_openai_s_figures(tmp_path: Path) -> None:
    """The convention decides: all parameters, gpt-oss-120b runs 5.712B a token, not 5.1B."""
    text = (CLAIMS / "gpt-oss-active-parameters.yaml").read_text()
    path = tmp_path / "gpt-oss-active-parameters.yaml"
    path.write_text(text.replace(", counts=without_input_embeddings", ""))
    result = evaluate_claim(load_claim(path), [])
    assert result.verdict == "refuted"
    assert [c["text"] for c in result.evidence[0]["checks"]] == ["5.712B", "4.187B"]


def test_deepseek_v2_cache_at_6_bits_against_67b_at_16_and_both_at_bf16() -> None:
    result = _result("deepseek-v2-kv-cache-93-percent")
    assert result.verdict == SUPPORTED
    decides, context = result.evidence
    # 60 layers x (512 + 64) at 6 bits against 95 layers x 2 x 8 x 128 at 16 bits
    assert decides["value"] == pytest.approx(60 * 576 * 6 / (95 * 2048 * 16))
    assert 1 - decides["value"] == pytest.approx(0.9334, abs=1e-4)
    assert decides["checks"][0]["text"] == "6.66%" and decides["within_conditions"]
    # the same comparison at one precision: 82.2% less, shown as context, never counted
    assert context["value"] == pytest.approx(60 * 576 / (95 * 2048))
    assert 1 - context["value"] == pytest.approx(0.8224, abs=1e-4)
    assert context["role"] == "context" and context["outcome"] == "does not hold here"
    assert context["checks"][0]["text"] == "17.76%"
    assert "bits=6" not in context["checks"][0]["check"]
    assert sum(result.counts.values()) == 1


def test_a_cache_is_read_layer_by_layer_from_the_config() -> None:
    (value, parts) = compute(parse_metric("catalog.kv_bytes_per_token(deepseek-v2)"))
    assert not isinstance(value, str) and value.value == 60 * 576 * 2
    assert "60 layers of latent attention x 576 elements" in parts[0].how
    assert parts[0].config_source == "https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json"
    # gpt-oss: only its full-attention layers grow; the sliding ones stop at their window
    (value, parts) = compute(parse_metric("catalog.kv_bytes_per_token(gpt-oss-20b)"))
    assert not isinstance(value, str) and value.value == 12 * 2 * 8 * 64 * 2
    assert at_default_precision(parse_metric("catalog.kv_bytes_per_token(gpt-oss-20b)")) is None


def test_a_stated_figure_is_checked_within_its_own_rounding(tmp_path: Path) -> None:
    body = """id: {id}
title: t
quote: q
source: {{title: A post, url: "https://example.org/post", quote_in_primary: found}}
predicate: {{metric: "catalog.params_total(mixtral-8x7b)", op: approx, value: {value}, tolerance: rounding}}
"""
    verdicts = {}
    for value in ("47B", "46.7B", "46.70B", "46B", "47.5B"):
        claim_id = "c-" + value.replace(".", "-").lower()
        path = tmp_path / f"{claim_id}.yaml"
        path.write_text(body.format(id=claim_id, value=value))
        claim = load_claim(path)
        check_ = claim.predicate.checks[0]
        assert isinstance(check_, Comparison) and check_.written == value
        verdicts[value] = evaluate_claim(claim, []).verdict
    # 46,702,792,704: within the rounding of 47B, 46.7B and 46.70B (46.695B to 46.705B); not 46B nor 47.5B
    assert verdicts == {"47B": "supported", "46.7B": "supported", "46.70B": "supported", "46B": "refuted",
                        "47.5B": "refuted"}


def test_structural_claims_need_no_runs_and_no_torch(tmp_path: Path) -> None:
    code = ("import sys; from reportgen.claims import check; from reportgen.render.findings import pages; "
            f"r = check({str(tmp_path / 'none')!r}, {str(CLAIMS)!r}); "
            "v = {c.claim.id: c.verdict for c in r.claims}; "
            "assert v['deepseek-v2-kv-cache-93-percent'] == 'supported', v; "
            f"pages({str(tmp_path / 'none')!r}, {str(CLAIMS)!r}, report=r); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_pages_show_the_verdict_the_figures_their_working_and_the_quote(tmp_path: Path) -> None:
    report = check(tmp_path / "none", CLAIMS)
    out = pages(tmp_path / "none", CLAIMS, report=report)
    page = out["findings/deepseek-v2-kv-cache-93-percent.md"]
    assert 'class="verdict verdict-supported"' in page
    assert "reduces the KV cache by 93.3%" in page and "https://arxiv.org/abs/2405.04434" in page
    assert "| 6.66% | supported |" in page and "| 17.76% | does not hold here |" in page
    assert "### Context: every cache at bf16 (the same precision on both sides)" in page
    assert "60 layers of latent attention x 576 elements = 34,560 elements a token, at 6 bits an element" in page
    assert "95 layers of attention x 2,048 elements = 194,560 elements a token, at bf16 = 389,120 bytes" in page
    assert "into 6 bits on average" in page  # the paper's words on its quantised cache
    assert "(https://huggingface.co/deepseek-ai/deepseek-llm-67b-base/blob/main/config.json)" in page
    assert "## Chart" not in page and "Across releases" not in page
    assert "Computed from the models' published configs, on any host: no run decides it." in page
    assert "Computed from the models' published configs, with no run." in page  # the citation
    mixtral = out["findings/mixtral-47b-total-13b-active.md"]
    assert "| 46.7B | supported |" in mixtral and "| 12.88B | supported |" in mixtral
    assert "46.5B to 47.5B" in mixtral and "each token has access to 47B parameters" in mixtral
    index = out[FINDINGS_INDEX]
    assert "3 claims about a model's structure" in index
    row = next(line for line in index.splitlines() if "(gpt-oss-active-parameters.md)" in line)
    assert "verdict-supported" in row and "any hardware (from the models' configs)" in row
    assert "computed from the catalog" in row


def test_a_model_without_a_recorded_census_is_not_tested_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "qwen3-8b-size.yaml"
    path.write_text("""id: qwen3-8b-size
title: t
quote: q
source: {title: A post, url: "https://example.org/post", quote_in_primary: found}
conditions: {hardware: any}
predicate: {metric: "catalog.params_total(qwen3-8b)", op: approx, value: 8.2B, tolerance: rounding}
""")
    result = evaluate_claim(load_claim(path), [])
    assert result.verdict == "not tested"
    assert result.reason == "qwen3-8b: the catalog records no census (reportgen models counts it; add it to the entry)"
