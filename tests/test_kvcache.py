"""The cache by layer kind (reportgen/kvcache.py) against the caches transformers really
keeps: tiny models of each kind run one forward with the cache on, and every tensor the
cache holds is counted. CPU only, a few seconds."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from reportgen import kvcache

TOKENS = 12
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 128}


def _config(model_type: str, **fields: Any) -> Any:
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**{**SMALL, **fields})


def _held(obj: Any, seen: dict[int, torch.Tensor]) -> None:
    """Every tensor reachable from a cache object (its layers, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        seen.setdefault(id(obj), obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _held(item, seen)
    elif isinstance(obj, dict):
        for item in obj.values():
            _held(item, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
        for item in vars(obj).values():
            _held(item, seen)


def real_cache_elements(config: Any, tokens: int = TOKENS) -> int:
    """Elements of the cache a forward over ``tokens`` tokens leaves (counters and other
    scalars left out: they are not per-sequence state)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, tokens))
    with torch.no_grad():
        output = model(ids, use_cache=True)
    cache = getattr(output, "past_key_values", None)
    seen: dict[int, torch.Tensor] = {}
    _held(cache, seen)
    return sum(t.numel() for t in seen.values() if t.dim() >= 2)


def estimated(config: Any, tokens: int = TOKENS) -> int:
    return sum(layer.elements(tokens) for layer in kvcache.layer_memory(config))


def test_full_attention_keeps_keys_and_values_of_every_token() -> None:
    config = _config("llama", num_hidden_layers=2)
    layers = kvcache.layer_memory(config)
    assert [layer.kind for layer in layers] == [kvcache.ATTENTION] * 2
    assert layers[0].per_token == 2 * 2 * 16  # K and V x kv heads x head width
    assert estimated(config) == real_cache_elements(config) == 2 * 2 * 2 * 16 * TOKENS
    assert kvcache.cache_bytes(config, TOKENS, batch=3, bytes_per_element=4) == 3 * 4 * estimated(config)


def test_sliding_attention_is_capped_at_its_window() -> None:
    config = _config("gpt_oss", num_hidden_layers=2, sliding_window=8, num_local_experts=4, num_experts_per_tok=2,
                     head_dim=16)
    sliding, full = kvcache.layer_memory(config)
    assert (sliding.kind, sliding.window, full.kind, full.window) == (kvcache.SLIDING, 8, kvcache.ATTENTION, None)
    assert sliding.elements(100) == sliding.elements(8) == 8 * sliding.per_token
    assert full.elements(100) == 100 * full.per_token
    # transformers keeps the window less the newest token between steps; the figure is the window
    assert estimated(config) == real_cache_elements(config) + sliding.per_token
    mistral = _config("mistral", num_hidden_layers=2, sliding_window=8)
    assert {layer.kind for layer in kvcache.layer_memory(mistral)} == {kvcache.SLIDING}
    assert estimated(mistral) == real_cache_elements(mistral) + 2 * kvcache.layer_memory(mistral)[0].per_token


def test_latent_attention_keeps_the_latent_and_the_rotary_key() -> None:
    config = _config("deepseek_v3", num_hidden_layers=2, kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8,
                     qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                     topk_group=1, moe_intermediate_size=32, first_k_dense_replace=1)
    layers = kvcache.layer_memory(config)
    assert [(layer.kind, layer.per_token) for layer in layers] == [(kvcache.LATENT, 32 + 8)] * 2
    assert estimated(config) == real_cache_elements(config)


def test_sparse_attention_adds_the_indexer_keys() -> None:
    config = _config("deepseek_v32", num_hidden_layers=2, kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8,
                     qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                     topk_group=1, moe_intermediate_size=32, first_k_dense_replace=1, index_head_dim=16,
                     index_n_heads=2, index_topk=4)
    assert [(layer.kind, layer.per_token) for layer in kvcache.layer_memory(config)] == [(kvcache.INDEXED, 56)] * 2


def test_a_state_space_layer_keeps_a_constant_state() -> None:
    config = _config("mamba", num_hidden_layers=2, state_size=8)
    layers = kvcache.layer_memory(config)
    inner = 2 * 64  # expand x hidden
    assert [(layer.kind, layer.per_token, layer.fixed) for layer in layers] == \
        [(kvcache.STATE_SPACE, 0, inner * 4 + inner * 8)] * 2  # conv window + SSM state
    assert estimated(config, 1000) == estimated(config, 5) == real_cache_elements(config)


@pytest.mark.parametrize(("model_type", "fields", "kinds"), [
    ("qwen3_next", {"num_hidden_layers": 4, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
     [kvcache.LINEAR] * 3 + [kvcache.ATTENTION]),
    ("jamba", {"num_hidden_layers": 8, "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 8,
               "mamba_dt_rank": 8},
     [kvcache.STATE_SPACE] * 4 + [kvcache.ATTENTION] + [kvcache.STATE_SPACE] * 3),
    ("nemotron_h", {"num_hidden_layers": 4, "layers_block_type": ["mamba", "moe", "attention", "mlp"],
                    "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2,
                    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                    "moe_shared_expert_intermediate_size": 32},
     [kvcache.STATE_SPACE, kvcache.NONE, kvcache.ATTENTION, kvcache.NONE]),
    ("falcon_h1", {"num_hidden_layers": 2, "head_dim": 16, "mamba_d_ssm": 128, "mamba_n_heads": 8,
                   "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1},
     [f"{kvcache.ATTENTION} + {kvcache.STATE_SPACE}"] * 2),
])
def test_hybrids_keep_each_layer_kind_s_cache(model_type: str, fields: dict[str, Any], kinds: list[str]) -> None:
    config = _config(model_type, **fields)
    assert [layer.kind for layer in kvcache.layer_memory(config)] == kinds
    assert estimated(config) == real_cache_elements(config)


def test_a_plain_mapping_answers_like_the_config_object() -> None:
    """The render side reads config.json fields without transformers: a hybrid pattern, the
    periods that place attention and an interval read from the raw fields."""
    nemotron = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "M*-E",
                **SMALL, "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 8,
                "n_groups": 2, "conv_kernel": 4}
    assert [layer.kind for layer in kvcache.layer_memory(nemotron)] == \
        [kvcache.STATE_SPACE, kvcache.ATTENTION, kvcache.NONE, kvcache.NONE]
    jamba = {"model_type": "jamba", "num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 1, **SMALL}
    assert [layer.kind for layer in kvcache.layer_memory(jamba)][:2] == [kvcache.STATE_SPACE, kvcache.ATTENTION]
    summary = kvcache.summary({"model_type": "llama", "num_hidden_layers": 2, **SMALL}, bytes_per_element=2)
    assert summary == {"per_token_bytes": 2 * 2 * 2 * 16 * 2, "bounded_bytes": 0, "kinds": {kvcache.ATTENTION: 2}}


def test_preflight_counts_a_state_space_model_s_constant_state() -> None:
    """The pre-flight's cache for decode: a Mamba's does not grow with the sequence."""
    from types import SimpleNamespace

    from reportgen.profile import preflight

    def kv(model: str, seq_len: int) -> int:
        combo = SimpleNamespace(model=model, scale="tiny", mode="decode", dtype="fp32", attn_implementation="eager",
                                batch_size=1, seq_len=seq_len, device="cpu")
        return int(preflight.estimate(combo)["parts"]["kv_cache"])

    assert kv("mamba", 16) == kv("mamba", 64) > 0
    assert kv("llama", 64) > kv("llama", 16)


def test_a_model_too_big_for_the_host_is_measured_with_the_layers_that_fit(tmp_path: Any) -> None:
    """A model too big whole is measured with the most layers (`--layers`) whose estimate fits."""
    from types import SimpleNamespace

    from reportgen.profile import preflight

    combo = SimpleNamespace(model="qwen3-8b", scale="reference", mode="forward", dtype="bf16",
                            attn_implementation="sdpa", batch_size=1, seq_len=16, device="cpu")

    def needed(layers: int | None) -> int:
        return int(preflight.estimate(SimpleNamespace(**{**vars(combo), "layers": layers}))["estimate_bytes"])

    ten, eleven = needed(10), needed(11)
    available = (ten + eleven) // 2  # between ten and eleven layers' estimate, at the margin
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemAvailable: {int(available / preflight.SAFETY_MARGIN) // 1024 + 1} kB\n")
    section = preflight.check(combo, meminfo_path=meminfo, cgroup_root=tmp_path / "none",
                              self_cgroup_path=tmp_path / "none")
    assert section["fits"] is True and section["reduced"]["layers"] == 10 and section["reduced"]["experts"] is None
    assert section["reduced"]["reason"].startswith("measured 10 of 36 layers: the whole model needs ~")
    assert section["estimate_bytes"] == ten and section["requested_estimate_bytes"] == needed(None)
    assert preflight.layers_that_fit(combo, needed(1) - 1) is None
    assert preflight.layers_that_fit(SimpleNamespace(**{**vars(combo), "layers": 4}), ten) is None
