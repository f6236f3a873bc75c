"""Presets, name resolution, --scale tiny, building with random weights, seeded inputs and
the Step objects of each mode. Everything is built in-process from configs: no downloads."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reportgen.errors import Skip, UserError
from reportgen.profile import autoclass, building, flops, layers, modelspec, modes, shrink
from reportgen.profile.structure import classify
from reportgen.vocabulary import MODES, TRAIN_MODES


def combo(model: str = "llama", mode: str = "forward", **kw: Any) -> SimpleNamespace:
    fields = {"model": model, "scale": "tiny", "mode": mode, "dtype": "fp32", "attn_implementation": "sdpa",
              "batch_size": 2, "seq_len": 12, "device": "cpu"}
    fields.update(kw)
    return SimpleNamespace(**fields)


def _params_on_meta(name: str) -> int:
    config = modelspec.resolve(name).make_config()
    with torch.device("meta"):
        model = autoclass.auto_class(config, autoclass.architecture(config)).from_config(config)
    return sum(p.numel() for p in model.parameters())


# --- presets and names ---------------------------------------------------------------


def test_presets_listed_and_resolve() -> None:
    names = modelspec.model_choices()
    for name in ("bert-base", "bert-large", "gpt2", "gpt2-medium", "t5-small", "t5-base", "llama-small",
                 "llama-1b", "llama-3-8b", "mistral-7b"):
        assert name in names
        spec = modelspec.resolve(name)
        assert spec.source == "preset" and spec.name == name


@pytest.mark.parametrize(("name", "params"), [
    ("bert-base", 109_482_240),  # BertModel with pooler, as bert-base-uncased
    ("gpt2", 124_439_808),
    ("t5-small", 60_506_624),
    ("llama-1b", 1_235_814_400),  # Llama-3.2-1B
    ("llama-3-8b", 8_030_261_248),  # Meta-Llama-3-8B
    ("mistral-7b", 7_241_732_096),  # Mistral-7B-v0.1
])
def test_reference_presets_have_checkpoint_parameter_counts(name: str, params: int) -> None:
    assert _params_on_meta(name) == params


def test_llama_small_shape() -> None:
    config = modelspec.resolve("llama-small").make_config()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.vocab_size) == (768, 12, 12, 4, 2048, 32000)
    assert 100e6 <= _params_on_meta("llama-small") <= 150e6


def test_llama3_preset_details() -> None:
    config = modelspec.resolve("llama-3-8b").make_config()
    assert config.rope_parameters["rope_theta"] == 500000.0
    assert modelspec.resolve("llama-1b").make_config().tie_word_embeddings is True


def test_unknown_name_lists_choices() -> None:
    with pytest.raises(UserError) as err:
        modelspec.resolve("no-such-model")
    message = str(err.value)
    assert "no-such-model" in message
    for name in modelspec.model_choices():
        assert name in message


def test_model_type_and_config_file(tmp_path: Path) -> None:
    spec = modelspec.resolve("opt")
    assert spec.source == "model_type" and spec.model_type == "opt"
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 96, "n_layer": 3, "n_head": 6, "vocab_size": 500}))
    spec = modelspec.resolve(str(path))
    config = spec.make_config()
    assert (config.n_embd, config.n_layer, config.vocab_size) == (96, 3, 500)
    assert modelspec.resolve(str(tmp_path)).make_config().n_head == 6  # a directory finds config.json
    built = building.build(combo(str(path), scale="reference", seq_len=8))
    assert built.info["hidden_size"] == 96 and built.info["num_layers"] == 3


def test_bad_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "not-a-type"}))
    with pytest.raises(UserError):
        modelspec.resolve(str(path))
    with pytest.raises(UserError):
        modelspec.resolve(str(tmp_path / "missing.json"))


def test_unknown_scale_dtype_impl_mode() -> None:
    with pytest.raises(UserError):
        modelspec.resolve("gpt2").make_config("huge")
    with pytest.raises(UserError):
        building.build(combo(dtype="fp8"))
    with pytest.raises(UserError):
        building.build(combo(attn_implementation="magic"))
    with pytest.raises(UserError):
        building.build(combo(mode="training"))


# --- tiny ------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["bert", "gpt2", "t5", "llama", "opt", "bart", "mistral", "qwen3",
                                        "gpt_neox", "roberta"])
def test_tiny_shrinks_any_config(model_type: str) -> None:
    reference = modelspec.resolve(model_type).make_config()
    config = modelspec.resolve(model_type).make_config("tiny", min_positions=3000)
    assert config.hidden_size == shrink.TINY_HIDDEN
    assert config.num_hidden_layers == layers.TINY_LAYERS
    assert config.num_attention_heads == shrink.TINY_HEADS
    assert config.vocab_size == shrink.TINY_VOCAB
    kv = getattr(config, "num_key_value_heads", None)
    ref_kv = getattr(reference, "num_key_value_heads", None)
    if ref_kv is not None:
        assert kv == (2 if ref_kv < reference.num_attention_heads else 4)
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None:
        assert positions >= 3000
    for name in ("layer_types",):
        if isinstance(getattr(config, name, None), list):
            assert len(getattr(config, name)) == layers.TINY_LAYERS


def test_tiny_keeps_gqa_and_token_ids_in_range() -> None:
    config = modelspec.resolve("llama-3-8b").make_config("tiny")
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 16)
    assert config.bos_token_id < shrink.TINY_VOCAB and config.eos_token_id < shrink.TINY_VOCAB


# Parts whose widths the standard names alone do not tie: per-layer overrides (dots3_note),
# per-layer widths (gemma3n_text), the width a decoder's cross-attention reads (t5gemma),
# the width one part names of another (blt). Each shrinks in width, not in depth alone.
@pytest.mark.parametrize("model_type", ["dots3_note", "gemma3n_text", "t5gemma", "blt"])
def test_tiny_shrinks_the_widths_that_parts_tie_to_each_other(model_type: str) -> None:
    built = building.build(combo(model_type, attn_implementation="eager"))
    try:
        assert "tiny" not in built.info, built.info["tiny"]  # not the depth-only fallback
        assert built.info["parameters"] < 2_000_000
    finally:
        building.free(built)


def test_tiny_shrinks_each_layers_own_config() -> None:
    """A heterogeneous config's layers (transformers' ``per_layer_config``) shrink by the
    same rules as the global values, renumbered to the layers kept."""
    reference = modelspec.resolve("dots3_note").make_config().text_config
    assert reference.per_layer_config["sliding_attention"].num_attention_heads == 64
    config = modelspec.resolve("dots3_note").make_config("tiny").text_config
    for layer in config.per_layer_config:
        assert (layer.hidden_size, layer.num_attention_heads, layer.kv_lora_rank) == (
            shrink.TINY_HIDDEN, shrink.TINY_HEADS, 32)
    assert "sliding_attention" in config.layer_types


def test_tiny_gives_a_part_the_width_another_names() -> None:
    blt = modelspec.resolve("blt").make_config("tiny")
    assert blt.encoder_config.hidden_size_global == blt.global_config.hidden_size == 2 * shrink.TINY_HIDDEN
    t5gemma = modelspec.resolve("t5gemma").make_config("tiny")
    assert t5gemma.decoder.cross_attention_hidden_size == t5gemma.encoder.hidden_size == shrink.TINY_HIDDEN
    gemma3n = modelspec.resolve("gemma3n_text").make_config("tiny")
    assert gemma3n.intermediate_size == [shrink.TINY_FF] * len(gemma3n.intermediate_size)


# --- building each mode ----------------------------------------------------------------

CASES = [
    ("bert", "encoder", "BertModel"),
    ("gpt2", "decoder", "GPT2LMHeadModel"),
    ("t5", "encoder-decoder", "T5ForConditionalGeneration"),
    ("llama", "decoder", "LlamaForCausalLM"),
    ("opt", "decoder", "OPTForCausalLM"),
    ("bart", "encoder-decoder", "BartForConditionalGeneration"),
]


@pytest.mark.parametrize(("name", "arch", "cls"), CASES)
@pytest.mark.parametrize("mode", MODES)
def test_tiny_build_every_mode(name: str, arch: str, cls: str, mode: str) -> None:
    c = combo(name, mode)
    if mode in TRAIN_MODES:
        # every architecture trains; an encoder with its masked-LM head, on labels
        built = building.build(c)
        expected = "BertForMaskedLM" if name == "bert" else cls
        assert (built.info["architecture"], built.info["class"]) == (arch, expected)
        assert built.model.training and "labels" in built.step.kwargs
        assert (built.step.optimizer is not None) == (mode == "train")
        loss = built.step()
        built.step.reset()
        assert torch.isfinite(loss) and loss.dim() == 0
        assert built.step.inputs_info["tokens"] == c.batch_size * c.seq_len
        return
    if mode != "forward" and arch != "decoder":
        with pytest.raises(Skip, match=f"{mode} applies to causal LMs; {name} is an {arch}"):
            building.build(c)
        return
    built = building.build(c)
    info = built.info
    assert (info["architecture"], info["class"], info["model_type"]) == (arch, cls, name)
    assert (info["hidden_size"], info["num_layers"], info["num_heads"], info["head_dim"]) == (64, 2, 4, 16)
    assert info["parameters"] == sum(p.numel() for p in built.model.parameters())
    json.dumps(info)  # JSON-safe
    assert not built.model.training
    out = built.step()
    built.step.sync()
    tensor = out.logits if hasattr(out, "logits") else out.last_hidden_state
    assert torch.isfinite(tensor).all()
    expected_positions = {"forward": c.seq_len, "prefill": 1, "decode": 1, "decode-nocache": 1}[mode]
    assert tensor.shape[:2] == (c.batch_size, expected_positions)
    # decode-nocache reads the prefix and the new token, without a cache
    shape = {"decode": [c.batch_size, 1],
             "decode-nocache": [c.batch_size, c.seq_len + 1]}.get(mode, [c.batch_size, c.seq_len])
    assert built.step.inputs_info == {"seed": 0, "input_shape": shape, "tokens": shape[0] * shape[1],
                                      "kv_len": c.seq_len if mode == "decode" else None}


def test_bert_has_pooler_and_llama_keeps_gqa() -> None:
    bert = building.build(combo("bert"))
    assert bert.step().pooler_output.shape == (2, 64)
    llama = building.build(combo("llama-3-8b"))
    assert (llama.info["num_heads"], llama.info["num_kv_heads"]) == (4, 2)
    hints = flops.analytic_hints(llama.model, classify(llama.model))
    assert hints["mlp_projections"] == 3 and hints["mlp_weight_elements"] == 3 * 64 * 128
    assert flops.analytic_hints(bert.model, classify(bert.model))["mlp_projections"] == 2
    assert flops.analytic_hints(bert.model, classify(bert.model))["pooler"] is True


def test_encoder_decoder_runs_both_stacks() -> None:
    built = building.build(combo("t5"))
    assert built.step.kwargs["decoder_input_ids"].shape == (2, 12)
    assert built.step.kwargs["use_cache"] is False
    out = built.step()
    assert out.encoder_last_hidden_state.shape == (2, 12, 64)


# --- inputs ------------------------------------------------------------------------------


def test_inputs_are_seeded_and_not_zero() -> None:
    a = building.build(combo("gpt2"), seed=3).step.kwargs
    b = building.build(combo("gpt2"), seed=3).step.kwargs
    c = building.build(combo("gpt2"), seed=4).step.kwargs
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["input_ids"], c["input_ids"])
    assert (a["input_ids"] != 0).all()
    assert int(a["input_ids"].max()) < shrink.TINY_VOCAB
    assert torch.equal(a["attention_mask"], torch.ones(2, 12, dtype=torch.long))
    assert building.build(combo("gpt2"), seed=3).step.inputs_info["seed"] == 3


# --- decode ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "gpt2", "opt"])
def test_decode_reset_keeps_cache_length(name: str) -> None:
    built = building.build(combo(name, "decode", seq_len=10))
    step = built.step
    assert isinstance(step, modes.DecodeStep)
    assert step.cache_len() == 10
    for _ in range(3):
        out = step()
        assert step.cache_len() == 11
        assert out.logits.shape[:2] == (2, 1)
        step.reset()
        assert step.cache_len() == 10
    first = step().logits
    step.reset()
    again = step().logits
    step.reset()
    assert torch.equal(first, again)  # every iteration sees the same state


def test_prefill_builds_a_cache_and_keeps_last_logits() -> None:
    built = building.build(combo("llama", "prefill"))
    out = built.step()
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    assert cache.get_seq_length() == 12
    assert out.logits.shape[1] == 1


# --- attention implementations, dtypes -----------------------------------------------


@pytest.mark.parametrize("impl", ["eager", "sdpa", "sdpa-math", "sdpa-flash"])
def test_cpu_attention_implementations(impl: str) -> None:
    built = building.build(combo("llama", attn_implementation=impl))
    expected = "eager" if impl == "eager" else "sdpa"
    assert built.model.config._attn_implementation == expected
    if impl.startswith("sdpa-"):
        from torch.nn.attention import SDPBackend

        assert built.step.backend == {"sdpa-math": SDPBackend.MATH,
                                      "sdpa-flash": SDPBackend.FLASH_ATTENTION}[impl]
    assert torch.isfinite(built.step().logits).all()


def test_weights_are_seeded_and_backends_agree() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = building.build(combo("llama", attn_implementation="eager"), seed=5)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's RNG is untouched
    b = building.build(combo("llama", attn_implementation="sdpa-math"), seed=5)
    c = building.build(combo("llama", attn_implementation="eager"), seed=6)
    wa, wb, wc = (next(x.model.parameters()) for x in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    torch.testing.assert_close(a.step().logits, b.step().logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("numel", "offset"), [(10, 3), (16, 0), (16, 15), (37, 5), (48, 16), (7, 12)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weights_are_the_rolled_block_repeated(numel: int, offset: int, dtype: torch.dtype) -> None:
    """A weight holds the seeded block rotated by its offset and repeated, as
    ``torch.roll`` defines the rotation, in the weight's own dtype."""
    block = torch.arange(16, dtype=torch.float32) / 7
    flat = torch.full((numel,), float("nan"), dtype=dtype)
    building._lay(flat, block.to(dtype), offset)
    expected = torch.roll(block, offset).repeat(numel // 16 + 1)[:numel].to(dtype)
    assert torch.equal(flat, expected)


@pytest.mark.parametrize(("impl", "reason"), [
    ("sdpa-efficient", "needs a CUDA device"),
    ("sdpa-cudnn", "needs a CUDA device"),
    ("flash_attention_2", "needs a CUDA device"),
    ("naive", "applies only to attention-micro"),
    ("naive-inplace", "applies only to attention-micro"),
])
def test_unsupported_implementations_skip(impl: str, reason: str) -> None:
    with pytest.raises(Skip, match=reason):
        building.build(combo("llama", attn_implementation=impl))


def test_model_without_sdpa_skips_with_transformers_message() -> None:
    with pytest.raises(Skip, match="does not support attn_implementation=sdpa"):
        building.build(combo("bloom"))


def test_speech_model_reads_spectrogram_frames() -> None:
    built = building.build(combo("whisper", seq_len=24))
    features = built.step.kwargs["input_features"]
    # the encoder's stride-2 convolution turns 2 x 24 spectrogram frames into 24 positions
    assert features.shape[-1] == 48 and features.shape[1] == built.model.config.num_mel_bins
    assert built.step.inputs_info["input"] == "input_features"
    assert built.step.inputs_info["sequence"] == "frames"
    out = built.step()
    assert out.encoder_last_hidden_state.shape[1] == 24
    building.free(built)


def test_vision_model_reads_a_square_grid_of_patches() -> None:
    built = building.build(combo("vit", seq_len=16))
    pixels = built.step.kwargs["pixel_values"]
    patch = built.model.config.patch_size
    assert pixels.shape[-2:] == (4 * patch, 4 * patch)
    assert built.step.inputs_info["sequence"] == "patches"
    assert built.step().last_hidden_state.shape[1] == 16 + 1  # the patches and [CLS]
    building.free(built)
    with pytest.raises(Skip, match="not a square"):
        building.build(combo("vit", seq_len=20))
    with pytest.raises(Skip, match="causal LMs"):
        building.build(combo("vit", seq_len=16, mode="decode"))


def test_bf16_on_cpu() -> None:
    built = building.build(combo("llama", dtype="bf16"))
    assert next(built.model.parameters()).dtype == torch.bfloat16
    assert built.step().logits.dtype == torch.bfloat16


def test_learned_positions_too_short_skip() -> None:
    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.position_embeddings = torch.nn.Embedding(16, 4)

    building.check_positions(Tiny(), 16, "tiny")
    with pytest.raises(Skip, match="16 learned positions"):
        building.check_positions(Tiny(), 17, "tiny")


def test_attention_micro_dispatches() -> None:
    built = building.build(combo(modelspec.MICRO, attn_implementation="naive", seq_len=16))
    assert built.info["name"] == modelspec.MICRO
    assert built.step.inputs_info["tokens"] == 32
    with pytest.raises(Skip):
        building.build(combo(modelspec.MICRO, "decode", attn_implementation="naive"))


def test_free_drops_model() -> None:
    built = building.build(combo("llama", "decode"))
    building.free(built)
    assert built.model is None and built.step is None
