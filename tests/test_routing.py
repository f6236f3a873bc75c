"""The routing every mixture-of-experts step runs (``reportgen.profile.routing``): the
experts of a model built for measurement run an even draw of their indices (each token to
k distinct experts, every expert the same tokens to one, fixed per layer and shape), the
router still computing its own; the record's ``moe`` section says so; a list of expert
modules keeps the router's choices."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from reportgen.profile import building, routing
from reportgen.profile.structure import derive

DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 16,
            "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 16,
            "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_group": 1,
            "topk_group": 1, "vocab_size": 128, "max_position_embeddings": 256}


def combo(tmp_path: Any, **kw: Any) -> SimpleNamespace:
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK))
    return SimpleNamespace(model=str(path), mode=kw.get("mode", "prefill"), seq_len=kw.get("seq_len", 32),
                           batch_size=1, dtype="fp32", attn_implementation="sdpa", device="cpu", scale="reference",
                           layers=None, experts=None, compile="none", backend=None)


def indices_seen(model: nn.Module, step: Any) -> dict[str, list[torch.Tensor]]:
    """The expert indices each experts module was called with in one step, after the
    step's own routing hook."""
    seen: dict[str, list[torch.Tensor]] = {}
    handles = []
    for name, module in model.named_modules():
        if name.endswith("mlp.experts"):
            def hook(_m: nn.Module, args: tuple[Any, ...], name: str = name) -> None:
                seen.setdefault(name, []).append(next(a for a in args if isinstance(a, torch.Tensor)
                                                      and not a.is_floating_point()).clone())
            handles.append(module.register_forward_pre_hook(hook))
    routing.run_hooked(step, handles)
    return seen


def test_the_experts_run_an_even_draw_fixed_per_layer_and_shape(tmp_path: Any) -> None:
    built = building.build(combo(tmp_path), "cpu")
    try:
        first, second = indices_seen(built.model, built.step), indices_seen(built.model, built.step)
        assert sorted(first) == ["model.layers.1.mlp.experts", "model.layers.2.mlp.experts"]
        for name, (index,) in first.items():
            assert index.shape == (32, 2)
            assert all(len(set(row.tolist())) == 2 for row in index)  # k distinct experts a token
            assert int(index.min()) >= 0 and int(index.max()) < 16
            assert torch.equal(index, second[name][0])  # the same draw every step
        a, b = first.values()
        assert not torch.equal(a[0], b[0])  # each layer its own
        # 64 picks over 16 experts: 4 each, not the random router's few busy ones
        counts = torch.bincount(a[0].reshape(-1), minlength=16)
        assert int((counts > 0).sum()) >= 12
        assert counts.tolist() == [4] * 16
        load = routing.expert_load(built.model, built.step, derive(built.model, built.step))
        assert load is not None and load["routing"] == routing.EVEN and load["top_k"] == 2
    finally:
        building.free(built)


def test_the_draw_is_each_token_to_k_distinct_experts() -> None:
    index = routing.draw(1000, 8, 3, torch.Generator().manual_seed(0))
    assert index.shape == (1000, 3) and all(len(set(r)) == 3 for r in index.tolist())
    counts = torch.bincount(index.reshape(-1), minlength=8).float()
    assert float(counts.max() / counts.mean()) < 1.15  # even: 375 each
    # not a multiple of the experts: 3003 picks over 8, each expert 375 or 376
    odd = torch.bincount(routing.draw(1001, 8, 3, torch.Generator().manual_seed(1)).reshape(-1), minlength=8)
    assert int(odd.max() - odd.min()) <= 1 and int(odd.sum()) == 3003


def test_a_module_called_without_an_expert_index_or_a_list_of_experts_keeps_its_routing() -> None:
    class Stacked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4, 3, 3))

        def forward(self, x: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
            self.got = index
            return x

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = Stacked()
            self.listed = nn.ModuleList([nn.Sequential(nn.Linear(3, 3)) for _ in range(4)])

    layer = Layer()
    assert routing.even_routing(layer, seed=0) == 1  # the stacked module, not the list
    assert routing.even_routing(layer, seed=0) == 0  # wired once
    layer.experts(torch.zeros(2, 3))  # no index among its arguments: nothing to draw
    assert layer.experts.got is None
    picked = torch.tensor([[0, 1], [2, 3]])
    layer.experts(torch.zeros(2, 3), picked)  # a later call's index is not looked for again
    assert torch.equal(layer.experts.got, picked)
    fresh = Layer()
    routing.even_routing(fresh, seed=0)
    fresh.experts(torch.zeros(2, 3), index=picked)
    drawn = fresh.experts.got
    assert drawn is not None and drawn.shape == (2, 2) and drawn is not picked


@pytest.mark.parametrize("mode", ["decode"])
def test_a_decode_step_routes_its_one_token_to_k_experts(tmp_path: Any, mode: str) -> None:
    built = building.build(combo(tmp_path, mode=mode), "cpu")
    try:
        seen = indices_seen(built.model, built.step)
        for (index,) in seen.values():
            assert index.shape == (1, 2) and len(set(index[0].tolist())) == 2
    finally:
        building.free(built)
