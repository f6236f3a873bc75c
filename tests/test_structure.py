"""Structural classification and hooks on tiny transformers models built in-process."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support.tiny_models import LAYERS, TINY, TinyStep, build, toy
from torch import nn

from reportgen.categories import CATEGORIES
from reportgen.profile.structure import (
    ModuleRole,
    classify,
    derive,
    install_hooks,
    label,
)


def roles_of(model: nn.Module) -> dict[str, str | None]:
    return {fqn: info.role for fqn, info in classify(model).items()}


def test_bert_roles_and_categories() -> None:
    model, step = build("bert")
    roles = roles_of(model)
    assert roles["embeddings"] == "embed"
    assert roles["embeddings.LayerNorm"] == "norm"
    assert roles["embeddings.word_embeddings"] is None          # inside the embed container
    assert [f for f, r in roles.items() if r == "block"] == ["encoder.layer.0", "encoder.layer.1"]
    assert roles["encoder.layer.0.attention"] == "attn"          # outermost *Attention*
    assert roles["encoder.layer.0.attention.self"] is None
    assert roles["encoder.layer.0.attention.self.query"] == "proj"
    assert roles["encoder.layer.0.intermediate"] == "mlp"
    assert roles["encoder.layer.0.intermediate.intermediate_act_fn"] == "act"
    assert roles["pooler"] == "head"
    cats = derive(model, step).categories
    assert step.resets == 1
    assert cats[""] == "other"
    assert cats["encoder.layer.0"] == "other"
    assert cats["encoder.layer.0.attention"] == "attention.core"
    assert cats["encoder.layer.0.attention.self"] == "attention.core"
    for p in ("query", "key", "value"):
        assert cats[f"encoder.layer.1.attention.self.{p}"] == "attention.qkv"
    assert cats["encoder.layer.1.attention.output.dense"] == "attention.out"
    assert cats["encoder.layer.1.attention.output.dropout"] == "other"
    assert cats["encoder.layer.1.attention.output.LayerNorm"] == "norm"
    assert cats["encoder.layer.1.output.dense"] == "mlp"
    assert cats["encoder.layer.1.output.dropout"] == "other"
    assert cats["pooler.dense"] == "head"
    assert cats["embeddings.word_embeddings"] == "embeddings"


def test_gpt2_conv1d_and_fused_qkv() -> None:
    model, step = build("gpt2")
    roles = roles_of(model)
    assert roles["transformer.h.0.attn.c_attn"] == "proj"        # transformers Conv1D
    assert roles["transformer.h.0.mlp.c_fc"] == "proj"
    assert roles["lm_head"] == "head"                            # get_output_embeddings()
    cats = derive(model, step).categories
    assert cats["transformer.h.0.attn.c_attn"] == "attention.qkv"
    assert cats["transformer.h.0.attn.c_proj"] == "attention.out"
    assert cats["transformer.h.0.mlp.c_proj"] == "mlp"
    assert cats["transformer.h.0.mlp.dropout"] == "other"
    assert cats["transformer.wte"] == "embeddings"
    assert cats["lm_head"] == "head"


def test_t5_nested_attention_and_position_bias() -> None:
    model, step = build("t5")
    roles = roles_of(model)
    blocks = [f for f, r in roles.items() if r == "block"]
    # Blocks are items of the outermost ModuleList, not of T5Block.layer.
    assert blocks == ["encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1"]
    assert roles["encoder.block.0.layer.0"] == "attn"            # T5LayerSelfAttention
    assert roles["encoder.block.0.layer.0.SelfAttention"] is None
    assert roles["decoder.block.0.layer.1"] == "attn"            # cross-attention
    assert roles["encoder.block.0.layer.0.SelfAttention.relative_attention_bias"] == "core"
    assert roles["encoder.block.0.layer.0.layer_norm"] == "norm"  # T5LayerNorm
    assert roles["encoder.block.0.layer.1"] == "mlp"             # T5LayerFF
    cats = derive(model, step).categories
    assert cats["encoder.block.0.layer.0.SelfAttention.relative_attention_bias"] == \
        "attention.core"
    assert cats["decoder.block.1.layer.1.EncDecAttention.k"] == "attention.qkv"
    assert cats["decoder.block.1.layer.1.EncDecAttention.o"] == "attention.out"
    assert cats["encoder.block.0.layer.0.dropout"] == "other"
    assert cats["encoder.final_layer_norm"] == "norm"


def test_llama_rotary_rmsnorm_gqa() -> None:
    model, step = build("llama")
    roles = roles_of(model)
    assert roles["model.rotary_emb"] == "embed"
    assert roles["model.norm"] == "norm"
    assert roles["model.layers.0.input_layernorm"] == "norm"
    cats = derive(model, step).categories
    for p in ("q_proj", "k_proj", "v_proj"):
        assert cats[f"model.layers.0.self_attn.{p}"] == "attention.qkv"
    assert cats["model.layers.0.self_attn.o_proj"] == "attention.out"
    for p in ("gate_proj", "up_proj", "down_proj", "act_fn"):
        assert cats[f"model.layers.0.mlp.{p}"] == "mlp"
    assert cats["model.rotary_emb"] == "embeddings"


@pytest.mark.parametrize("name", sorted(TINY))
def test_every_architecture_classifies(name: str) -> None:
    model, step = build(name)
    info = classify(model)
    blocks = [f for f, i in info.items() if i.role == "block"]
    assert len(blocks) in (LAYERS, 2 * LAYERS)
    cats = derive(model, step).categories
    assert set(cats) >= {fqn for fqn, _ in model.named_modules()}
    assert set(cats.values()) <= set(CATEGORIES)
    for block in blocks:
        inside = {cats[f] for f in cats if f.startswith(block + ".")}
        assert {"attention.qkv", "attention.out", "attention.core", "mlp", "norm"} <= inside, block
    assert any(i.role == "embed" for i in info.values())


def _wrapped(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if "forward" in vars(m)]


def test_hooks_are_removed_and_inert() -> None:
    model, step = build("bert")
    expected = step().last_hidden_state
    with install_hooks(model, classify(model)) as roles:
        assert len(_wrapped(model)) == sum(1 for i in roles.values() if i.role is not None)
        got = step().last_hidden_state
    assert torch.equal(expected, got)
    assert not _wrapped(model)
    # the module call keeps nn.Module's fast path: no hook of ours on any module
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_hooks_removed_after_error() -> None:
    model, _ = build("bert")
    with pytest.raises(RuntimeError, match="boom"):
        with install_hooks(model, classify(model)):
            raise RuntimeError("boom")
    assert not _wrapped(model)


class _Failing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def test_hooks_close_their_range_when_forward_raises() -> None:
    model = nn.ModuleDict({"a": _Failing(), "b": nn.Linear(4, 4)})
    roles = {fqn: ModuleRole(fqn, role, "norm", None, None, None)
             for fqn, role in (("", None), ("a", "norm"), ("b", "proj"))}
    x = torch.randn(2, 4)
    with install_hooks(model, roles), torch.profiler.profile() as prof:
        with pytest.raises(RuntimeError, match="boom"):
            model["a"](x)
        model["b"](x)
    spans = {e.name: e.time_range for e in prof.events() if e.name.startswith("rg|")}
    assert set(spans) == {label("norm", "a"), label("proj", "b")}
    assert spans[label("norm", "a")].end <= spans[label("proj", "b")].start


def test_hooks_restore_an_instance_forward_of_someone_else() -> None:
    model, step = build("bert")
    norm = model.encoder.layer[0].output.LayerNorm
    calls: list[int] = []
    original = norm.forward

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    vars(norm)["forward"] = counted
    with install_hooks(model, classify(model)):
        assert norm.forward is not counted
        step()
    assert vars(norm)["forward"] is counted and calls == [1]


def test_label_format() -> None:
    assert label("proj", "encoder.layer.3.attention.self.query") == \
        "rg|proj|encoder.layer.3.attention.self.query"


def test_unknown_architecture_uses_the_core_op() -> None:
    model, step = toy()
    roles = roles_of(model)
    assert roles["layers.0"] == "block" and roles["layers.0.attn"] == "attn"
    assert roles["layers.0.ff"] == "proj" and roles["layers.0.act"] == "act"
    cats = derive(model, step).categories
    assert cats["layers.0.attn.q"] == "attention.qkv"
    assert cats["layers.0.attn.o1"] == "attention.out"
    assert cats["layers.0.attn.o2"] == "attention.out"
    assert cats["layers.0.attn.drop"] == "other"
    assert cats["layers.1.ff"] == "mlp"
    assert cats["emb"] == "embeddings"


@pytest.mark.parametrize(("name", "mlp", "kept", "dropped"), [
    # gate and up projections and the activation run before down_proj ends
    ("llama", "model.layers.{}.mlp", ["down_proj"], ["gate_proj", "up_proj", "act_fn"]),
    # c_fc and the activation before c_proj
    ("gpt2", "transformer.h.{}.mlp", ["c_proj"], ["c_fc", "act"]),
    # the activation runs after the intermediate's only projection: its ops are not the
    # container's own time before that projection ends, so it keeps its label
    ("bert", "encoder.layer.{}.intermediate", ["dense", "intermediate_act_fn"], []),
])
def test_labels_are_the_category_boundaries(name: str, mlp: str, kept: list[str],
                                            dropped: list[str]) -> None:
    model, step = build(name)
    structure = derive(model, step)
    unlabelled = {fqn for fqn, info in structure.labels.items()
                  if info.role is None and structure.roles[fqn].role is not None}
    assert unlabelled == {f"{mlp.format(i)}.{child}" for i in range(LAYERS) for child in dropped}
    for i in range(LAYERS):
        assert all(structure.labels[f"{mlp.format(i)}.{child}"].role is not None for child in kept)
    # an unlabelled module keeps everything but its label
    for fqn in unlabelled:
        assert structure.labels[fqn] == replace(structure.roles[fqn], role=None)
        assert structure.categories[fqn] == "mlp"
    assert structure.labels.keys() == structure.roles.keys()


def test_install_hooks_wraps_the_labelled_modules_alone() -> None:
    model, step = build("llama")
    structure = derive(model, step)
    with install_hooks(model, structure.labels):
        wrapped = {fqn for fqn, m in model.named_modules() if "forward" in vars(m)}
    assert wrapped == {fqn for fqn, info in structure.labels.items() if info.role is not None}
    assert "model.layers.0.mlp" in wrapped and "model.layers.0.mlp.down_proj" in wrapped
    assert "model.layers.0.mlp.up_proj" not in wrapped


# --- what a module computes decides where its name could mislead -------------------------


class _Heads(nn.Module):
    """Query, key, value and output projections over 4 heads of width 2."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8) for _ in range(4))

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        return tuple(p(x).view(b, t, 4, 2).transpose(1, 2) for p in (self.q, self.k, self.v))  # type: ignore[return-value]

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        return self.o(y.transpose(1, 2).reshape(y.shape[0], y.shape[2], 8))


class LinearAttention(_Heads):
    """Named for attention, computes a linear attention: products over the sequence, no
    softmax anywhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(x)
        state = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=2)  # (b, h, t, d, d)
        return self.merge(torch.einsum("bhtd,bhtde->bhte", q, state))


class Selector(nn.Module):
    """A sparse attention's indexer: its own projections and scores, the top positions out."""

    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(self.wq(x), self.wk(x).transpose(-1, -2))
        return scores.topk(min(3, x.shape[1]), dim=-1).indices


class Latent(_Heads):
    """Softmax attention under a name that says nothing of attention, with an indexer whose
    top positions mask the scores."""

    def __init__(self) -> None:
        super().__init__()
        self.selector = Selector()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(x)
        keep = torch.zeros(x.shape[0], x.shape[1], x.shape[1], dtype=torch.bool)
        keep.scatter_(-1, self.selector(x), True)
        scores = torch.matmul(q, k.transpose(-1, -2)).masked_fill(~keep[:, None], -1e4)
        return self.merge(torch.matmul(torch.softmax(scores, dim=-1), v))


class Stacked(nn.Module):
    """Experts' weights stacked; handed the routing (routed) or not (shared: every token)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.up = nn.Parameter(torch.randn(n, 8, 16) * 0.1)
        self.down = nn.Parameter(torch.randn(n, 16, 8) * 0.1)

    def forward(self, x: torch.Tensor, index: torch.Tensor | None = None,
                weight: torch.Tensor | None = None) -> torch.Tensor:
        if index is None:  # every expert, every token
            return torch.einsum("tef,efd->td", torch.einsum("td,edf->tef", x, self.up).relu(), self.down)
        out = torch.zeros_like(x)
        for slot in range(index.shape[1]):
            e = index[:, slot]
            h = torch.bmm(x.unsqueeze(1), self.up[e]).relu()
            out = out + weight[:, slot, None] * torch.bmm(h, self.down[e]).squeeze(1)  # type: ignore[index]
        return out


class Mixture(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 4, bias=False)
        self.experts, self.shared = Stacked(4), Stacked(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, 8)
        weight, index = torch.softmax(self.gate(flat), dim=-1).topk(2, dim=-1)
        return (self.experts(flat, index, weight) + self.shared(flat)).view_as(x)


class ComputedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear_attn, self.attn, self.moe = LinearAttention(), Latent(), Mixture()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.linear_attn(x)
        x = x + self.attn(x)
        return x + self.moe(x)


def test_what_a_module_computes_decides_where_its_name_could_mislead() -> None:
    model, step = toy(ComputedBlock)
    names = {fqn: info.role for fqn, info in classify(model).items()}
    # read from names alone (no forward), the linear attention passes for attention, the
    # latent attention for an MLP and the shared experts for routed ones
    assert names["layers.0.linear_attn"] == "attn" and names["layers.0.attn"] == "mlp"
    assert names["layers.0.moe.shared"] == "experts"
    structure = derive(model, step)
    roles = {fqn: info.role for fqn, info in structure.roles.items()}
    assert roles["layers.0.linear_attn"] == "mixer"           # products, no softmax
    assert structure.categories["layers.0.linear_attn.q"] == "mixer"
    assert roles["layers.0.attn"] == "attn"                   # a softmax over scores
    assert roles["layers.0.attn.selector"] == "indexer"       # returns positions
    assert structure.categories["layers.0.attn.selector.wq"] == "attention.indexer"
    assert structure.categories["layers.0.attn.q"] == "attention.qkv"
    assert structure.categories["layers.0.attn.o"] == "attention.out"
    assert roles["layers.0.moe"] == "moe"
    assert roles["layers.0.moe.experts"] == "experts"         # handed the routing
    assert roles["layers.0.moe.shared"] == "shared"           # every token, no routing
    assert roles["layers.0.moe.gate"] is None                 # the router's own
    assert not any(info.category == "attention.core" for fqn, info in structure.roles.items()
                   if fqn.startswith("layers.0.linear_attn"))


def test_the_computed_categories_take_their_time() -> None:
    """Both attribution methods put the indexer's, the shared experts' and the linear
    attention's calls in their categories."""
    from reportgen.profile import regions

    model, step = toy(ComputedBlock)
    structure = derive(model, step)
    section = regions.hooks_method(model, step, structure, min_iterations=2, max_iterations=2, budget_s=0.0)
    categories = section["categories"]
    for category in ("attention.indexer", "mixer", "moe.experts", "moe.shared", "moe.router", "attention.core"):
        assert categories[category]["ms"] > 0, category
    assert set(categories) == set(CATEGORIES)


# --- several residual streams (hyper-connections) -----------------------------------------

STREAMS = 3


class StreamsPooler(nn.Module):
    """Named for a pooler, computes how the residual streams are weighted, from the
    streams themselves, and collapses them into the one stream a layer's parts read."""

    def __init__(self) -> None:
        super().__init__()
        self.fn = nn.Parameter(torch.randn(2 * STREAMS, STREAMS * 8) * 0.1)

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights = torch.sigmoid(streams.flatten(2) @ self.fn.T)  # (b, t, 2 * streams)
        pre, post = weights.split(STREAMS, dim=-1)
        return post, (pre.unsqueeze(-1) * streams).sum(dim=2)


class StreamsAttention(_Heads):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(x)
        return self.merge(torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1), v))


class StreamsBlock(nn.Module):
    """A layer that keeps several residual streams: collapses them for its attention,
    adds the output back to each stream by its weight (its own ops)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = StreamsPooler()
        self.norm = nn.LayerNorm(8)
        self.attn = StreamsAttention()

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        post, x = self.mix(streams)
        return streams + post.unsqueeze(-1) * self.attn(self.norm(x)).unsqueeze(-2)


class StreamsModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.layers = nn.ModuleList([StreamsBlock(), StreamsBlock()])
        self.collapse = StreamsPooler()
        self.norm = nn.LayerNorm(8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        streams = self.emb(input_ids).unsqueeze(2).expand(-1, -1, STREAMS, -1)
        for layer in self.layers:
            streams = layer(streams)
        return self.norm(self.collapse(streams)[1])


def test_several_residual_streams_are_found_by_their_shape() -> None:
    from reportgen.profile import regions

    torch.manual_seed(0)
    model = StreamsModel().eval()
    step = TinyStep(model, {"input_ids": torch.arange(6).unsqueeze(0)})
    # from names alone nothing says streams: the layer is a block, the mixing a head
    assert classify(model)["layers.0"].role == "block" and classify(model)["collapse"].role == "head"
    structure = derive(model, step)
    roles = {fqn: (info.role, structure.categories[fqn]) for fqn, info in structure.roles.items()}
    assert roles["layers.0"] == ("streams", "residual")       # its own ops mix the streams
    assert roles["layers.0.mix"] == ("residual", "residual")  # handed the streams
    assert roles["collapse"] == ("residual", "residual")      # the last collapse, named a pooler
    assert roles["layers.0.norm"] == ("norm", "norm") and roles["norm"] == ("norm", "norm")
    assert roles["layers.0.attn"] == ("attn", "attention.core")
    section = regions.hooks_method(model, step, structure, min_iterations=2, max_iterations=2, budget_s=0.0)
    assert section["categories"]["residual"]["ms"] > 0
    assert len(section["per_layer"]) == 2  # a layer of several streams is a layer


def test_one_stream_of_hidden_states_is_no_streams() -> None:
    from reportgen.profile.calls import Calls

    calls = Calls(in_shapes={"layer": (1, 6, 3, 8), "layer.norm": (1, 6, 8), "flat": (1, 6, 8, 3),
                             "one": (1, 6, 8), "one.norm": (1, 6, 8), "batch": (2, 6, 8), "expert": (6, 8)})
    assert calls.streams("layer", ["layer.norm"]) == (1, 6, 3, 8)
    # the width is never the streams' dimension, a size of 1 none, and three dimensions
    # are one stream's hidden states (an expert handed as many tokens as a sequence has)
    assert calls.streams("flat", ["layer.norm"]) is None
    assert calls.streams("one", ["one.norm"]) is None
    assert calls.streams("batch", ["expert"]) is None
    assert calls.streams("layer", []) is None and calls.streams("missing", ["layer.norm"]) is None
