"""The catalog of today's models: every entry parses and names its sources, builds on the
meta device and agrees with the publisher's stated counts within the rule (or says why
not, and really does not); catalog names resolve as models; ``reportgen models``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reportgen import catalog
from reportgen.catalog import Stated, parse_figure
from reportgen.cli import main
from reportgen.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = catalog.catalog()


# --- the data (no torch) -----------------------------------------------------------------


def test_the_catalog_spans_today_s_architectures() -> None:
    assert len(ENTRIES) >= 26
    families = {e.family for e in ENTRIES.values()}
    assert families >= {"dense", "moe", "hybrid", "state-space", "encoder", "encoder-decoder"}
    model_types = {e.model_type for e in ENTRIES.values()}
    # latent (MLA) and sparse attention, state spaces and linear attention
    assert model_types >= {"deepseek_v3", "deepseek_v32", "mamba", "nemotron_h", "jamba", "qwen3_next",
                           "kimi_linear", "falcon_h1", "whisper", "vit", "modernbert"}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_entry_names_its_sources(name: str) -> None:
    entry = ENTRIES[name]
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    assert entry.model_type in CONFIG_MAPPING_NAMES
    assert "/" in entry.hub_id
    assert "huggingface.co" in entry.config_source or "transformers" in entry.config_source
    stated = [s for s in (entry.total, entry.active) if s is not None]
    assert stated or entry.stated_missing, "a stated total, or why there is none"
    for figure in stated:
        assert figure.source.startswith("https://") and figure.quote.strip()
        assert figure.figure.rstrip("KMBT").replace(".", "") in figure.quote.replace(",", "").replace(".", "") \
            or figure.figure in figure.quote
    if entry.family == "moe":
        assert entry.active is not None or entry.stated_missing


def test_the_rule_follows_the_figure_s_own_rounding() -> None:
    assert parse_figure("8.2B") == (8.2e9, 1e8)
    assert parse_figure("149M") == (149e6, 1e6)
    assert parse_figure("0.5B") == (0.5e9, 1e8)
    exact = Stated("30.5B", "q", "https://x")
    assert exact.tolerance == pytest.approx(0.305e9) and exact.rule() == "within 1%"
    rounded = Stated("24B", "q", "https://x")
    assert rounded.tolerance == 0.5e9 and rounded.rule() == "within the rounding of 24B"
    assert rounded.agrees(23_572_403_200) and not rounded.agrees(23_400_000_000)
    assert Stated("14B", "q", "https://x").agrees(14_500_000_000) and not Stated("14B", "q", "https://x").agrees(
        14_659_507_200)
    with pytest.raises(ValueError, match="not a parameter figure"):
        parse_figure("about 8 billion")


def test_a_bad_entry_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    good = json.loads((catalog.DATA_DIR / "qwen3-8b.json").read_text())
    cases = {
        "name": ({**good, "name": "other"}, "differs from the file name"),
        "family": ({**good, "family": "big"}, "family 'big'"),
        "figure": ({**good, "stated": {"total": {**good["stated"]["total"], "figure": "eight"}}}, "stated.total"),
        "counts": ({**good, "stated": {"total": {**good["stated"]["total"], "counts": "some"}}}, "counts 'some'"),
        "missing": ({**good, "stated": {}}, "no stated total"),
    }
    for label, (data, words) in cases.items():
        path = tmp_path / f"{data['name'] if label != 'name' else 'qwen3-8b'}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(UserError, match=words) as caught:
            catalog.load_entry(path)
        assert path.name in str(caught.value) and "\n" not in str(caught.value)
        path.unlink()


def test_a_verified_quote_says_where_it_was_found(tmp_path: Path) -> None:
    good = json.loads((catalog.DATA_DIR / "qwen3-8b.json").read_text())
    total = {k: v for k, v in good["stated"]["total"].items() if k not in ("verified", "checked")}
    cases = [
        ({**total, "verified": "yes", "checked": "card"}, "verified must be true or false"),
        ({**total, "verified": True}, "says in checked where"),
        ({**total, "verified": False, "checked": " "}, "non-empty text"),
    ]
    path = tmp_path / "qwen3-8b.json"
    for stated, words in cases:
        path.write_text(json.dumps({**good, "stated": {"total": stated}}))
        with pytest.raises(UserError, match=words):
            catalog.load_entry(path)
    path.write_text(json.dumps({**good, "stated": {"total": total}}))
    assert catalog.load_entry(path).total.verified is False  # an unmarked quote is not presented as verified
    path.write_text(json.dumps({**good, "stated": {"total": {**total, "checked": "no copy of the card found"}}}))
    assert catalog.load_entry(path).total.checked == "no copy of the card found"


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_stated_figure_says_how_its_words_were_checked(name: str) -> None:
    entry = ENTRIES[name]
    for figure in (entry.total, entry.active):
        if figure is not None:
            assert figure.checked, f"{name}: {figure.figure} says whether its words were found at {figure.source}"


def test_reading_the_catalog_imports_no_torch() -> None:
    code = ("import sys, reportgen.catalog as c, reportgen.kvcache as k; c.catalog(); "
            "k.summary(c.entry('qwen3-8b').config); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- names as models ----------------------------------------------------------------------


def test_catalog_names_resolve_as_models_and_in_suites() -> None:
    from reportgen import suite
    from reportgen.profile import modelspec as models

    spec = models.resolve("mixtral-8x7b")
    assert (spec.source, spec.model_type) == ("catalog", "mixtral")
    config = spec.make_config()
    assert (config.num_local_experts, config.num_experts_per_tok, config.hidden_size) == (8, 2, 4096)
    assert suite.check_model("qwen3.5-35b-a3b", "suite.toml") == "qwen3.5-35b-a3b"
    with pytest.raises(UserError, match="did you mean.*qwen3-8b"):
        suite.check_model("qwen3-8c", "suite.toml")


def test_a_catalog_model_cut_to_two_layers_keeps_its_widths() -> None:
    from reportgen.profile import modelspec as models

    config, plan = models.resolve("qwen3-30b-a3b").depth_config(layers=2)
    assert plan is not None and config.num_hidden_layers == 2
    assert (config.hidden_size, config.num_experts, config.moe_intermediate_size) == (2048, 128, 768)


# --- the census -----------------------------------------------------------------------------


def test_mixtral_counts_by_hand() -> None:
    """The census against Mixtral-8x7B counted from its config by hand."""
    from reportgen.profile.census import census

    hidden, ff, layers, vocab, kv = 4096, 14336, 32, 32000, 1024
    attention = 2 * hidden * hidden + 2 * hidden * kv
    expert = 3 * hidden * ff
    per_layer = attention + hidden * 8 + 8 * expert + 2 * hidden  # router, experts, two norms
    total = 2 * vocab * hidden + layers * per_layer + hidden
    counted = census(ENTRIES["mixtral-8x7b"])
    assert counted.total == total == 46_702_792_704
    assert counted.active == total - layers * 6 * expert
    assert (counted.experts, counted.top_k, counted.input_embeddings, counted.head) == (8, 2, vocab * hidden,
                                                                                        vocab * hidden)
    assert counted.kinds == ("attention + moe",) * layers


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_entry_builds_and_agrees_with_its_stated_counts(name: str) -> None:
    """Built on meta, each stated figure agrees within the rule, or the entry says why it
    does not and it really does not (a fixed config makes this fail until the reason goes)."""
    from reportgen.profile.census import census

    entry = ENTRIES[name]
    counted = census(entry)
    assert counted.kinds and 0 < counted.active <= counted.total
    if entry.family == "moe" or entry.active is not None:  # routed experts, k of n per token
        assert counted.experts and counted.top_k and counted.active < counted.total
    if entry.family in ("dense", "encoder", "encoder-decoder", "state-space"):
        assert counted.experts is None and counted.active == counted.total
    for stated, count in ((entry.total, counted.total), (entry.active, counted.active)):
        if stated is None:
            continue
        computed = counted.in_convention(count, stated.counts)
        if stated.disagreement:
            assert not stated.agrees(computed), f"{name}: {stated.figure} now agrees; drop its disagreement"
        else:
            assert stated.agrees(computed), (f"{name}: computed {computed:,} against {stated.figure} "
                                            f"({stated.rule()})")


RECORDED = sorted(name for name, e in ENTRIES.items() if e.census is not None)


@pytest.mark.slow
@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_census_is_the_census(name: str) -> None:
    """The figures an entry records (which the structural claims read without torch) are
    the meta-device census's, parameter for parameter."""
    from reportgen.profile.census import census

    counted = census(ENTRIES[name])
    recorded = ENTRIES[name].census
    assert recorded == {"total": counted.total, "active": counted.active,
                        "input_embeddings": counted.input_embeddings, "head": counted.head}


def test_the_claims_models_record_their_census() -> None:
    assert {"mixtral-8x7b", "gpt-oss-120b", "gpt-oss-20b", "deepseek-v2", "deepseek-llm-67b"} <= set(RECORDED)


def test_a_bad_census_names_its_field(tmp_path: Path) -> None:
    good = json.loads((catalog.DATA_DIR / "mixtral-8x7b.json").read_text())
    for census, words in (({"total": 1}, "a census has exactly total, active, input_embeddings, head"),
                          ({**good["census"], "active": -3}, "census.active: expected a whole number")):
        path = tmp_path / "mixtral-8x7b.json"
        path.write_text(json.dumps({**good, "census": census}))
        with pytest.raises(UserError, match=words):
            catalog.load_entry(path)


# --- the command ----------------------------------------------------------------------------


def test_models_json_lists_the_figures_with_their_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--format", "json", "--only", "mixtral-8x7b", "--only", "mamba-2.8b"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in listed["models"]}
    assert list(rows) == ["mixtral-8x7b", "mamba-2.8b"]
    mixtral = rows["mixtral-8x7b"]
    assert mixtral["total"] == 46_702_792_704 and mixtral["experts"] == 8
    assert mixtral["stated_total"]["agrees"] and mixtral["stated_active"]["agrees"]
    assert mixtral["stated_total"]["source"] == "https://arxiv.org/abs/2401.04088"
    assert mixtral["layers_by_kind"] == {"attention + moe": 32}
    assert mixtral["cache"]["per_token_bytes"] == 32 * 2 * 8 * 128 * 2  # layers x K,V x kv heads x width x bf16
    mamba = rows["mamba-2.8b"]
    assert mamba["cache"]["per_token_bytes"] == 0 and mamba["cache"]["bounded_bytes"] > 0
    assert listed["agreement"] == {"agree": 3, "stated": 3, "verified": 3}
    assert mixtral["stated_active"]["verified"] and "abstract" in mixtral["stated_active"]["checked"]


def test_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--only", "phi-4", "--only", "vit-base"]) == 0
    out = capsys.readouterr().out
    assert "phi-4" in out and "microsoft/phi-4" in out and "none (encoder)" in out
    assert "14B differs" in out and "86M agrees" in out
    assert "1 of 2 stated figures agree" in out
    assert "phi-4 total: 14B stated" in out  # the disagreement with its reason
    assert "2 of 2 stated figures' words verified at their source" in out


def test_models_table_lists_unverified_quotes(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    phi = ENTRIES["phi-4"]
    assert phi.total is not None
    unverified = replace(phi, total=replace(phi.total, verified=False, checked="no copy of the card found"))
    monkeypatch.setattr(catalog, "entry", lambda name: unverified)
    assert main(["models", "--only", "phi-4"]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 stated figures' words verified at their source" in out
    assert "phi-4 total: 14B unverified: no copy of the card found" in out


def test_models_unknown_only_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--only", "llama-5"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "--only: unknown catalog model 'llama-5'" in captured.err


@pytest.mark.slow
def test_the_readme_states_the_catalog_s_agreement() -> None:
    """The README's agreement figure is the one `reportgen models` computes."""
    from reportgen.commands.models import agreement, rows, verification

    listed = rows(catalog.names())
    agree, stated = agreement(listed)
    verified, _ = verification(listed)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"{agree} of {stated} stated figures agree." in readme
    assert f"{verified} of {stated} stated figures' words were found at their source" in readme
    assert f"{len(ENTRIES)} models people run today" in readme
