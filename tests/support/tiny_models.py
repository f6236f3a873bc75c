"""Tiny transformers models built in-process with random weights (a few layers of width
64), with a Step that runs their forward; and a toy architecture reportgen was never
written for. Built in milliseconds, so the structure and profiling tests need no preset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers as tf
from torch import nn

H, FF, HEADS, LAYERS, VOCAB = 64, 128, 4, 2, 1000

# name -> (config factory, model class, encoder-decoder)
TINY: dict[str, tuple[Callable[[], Any], Any, bool]] = {
    "bert": (lambda: tf.BertConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, intermediate_size=FF,
                                   vocab_size=VOCAB), tf.BertModel, False),
    "gpt2": (lambda: tf.GPT2Config(n_embd=H, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB,
                                   n_positions=128, bos_token_id=0, eos_token_id=0),
             tf.GPT2LMHeadModel, False),
    "t5": (lambda: tf.T5Config(d_model=H, d_kv=16, d_ff=FF, num_layers=LAYERS,
                               num_decoder_layers=LAYERS, num_heads=HEADS, vocab_size=VOCAB),
           tf.T5ForConditionalGeneration, True),
    "llama": (lambda: tf.LlamaConfig(hidden_size=H, intermediate_size=FF,
                                     num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                     num_key_value_heads=2, vocab_size=VOCAB),
              tf.LlamaForCausalLM, False),
    "opt": (lambda: tf.OPTConfig(hidden_size=H, ffn_dim=FF, num_hidden_layers=LAYERS,
                                 num_attention_heads=HEADS, vocab_size=VOCAB,
                                 word_embed_proj_dim=H), tf.OPTForCausalLM, False),
    "bart": (lambda: tf.BartConfig(d_model=H, encoder_layers=LAYERS, decoder_layers=LAYERS,
                                   encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                                   encoder_ffn_dim=FF, decoder_ffn_dim=FF, vocab_size=VOCAB),
             tf.BartModel, True),
    "gpt_neox": (lambda: tf.GPTNeoXConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                          num_attention_heads=HEADS, intermediate_size=FF,
                                          vocab_size=VOCAB), tf.GPTNeoXForCausalLM, False),
    "mistral": (lambda: tf.MistralConfig(hidden_size=H, intermediate_size=FF,
                                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                         num_key_value_heads=2, vocab_size=VOCAB),
                tf.MistralForCausalLM, False),
    "qwen2": (lambda: tf.Qwen2Config(hidden_size=H, intermediate_size=FF,
                                     num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                     num_key_value_heads=2, vocab_size=VOCAB),
              tf.Qwen2ForCausalLM, False),
    "roberta": (lambda: tf.RobertaConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                         num_attention_heads=HEADS, intermediate_size=FF,
                                         vocab_size=VOCAB), tf.RobertaModel, False),
    "distilbert": (lambda: tf.DistilBertConfig(dim=H, n_layers=LAYERS, n_heads=HEADS,
                                               hidden_dim=FF, vocab_size=VOCAB),
                   tf.DistilBertModel, False),
    "falcon": (lambda: tf.FalconConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                       num_attention_heads=HEADS, vocab_size=VOCAB),
               tf.FalconForCausalLM, False),
    "phi": (lambda: tf.PhiConfig(hidden_size=H, intermediate_size=FF, num_hidden_layers=LAYERS,
                                 num_attention_heads=HEADS, vocab_size=VOCAB),
            tf.PhiForCausalLM, False),
    "electra": (lambda: tf.ElectraConfig(hidden_size=H, embedding_size=32,
                                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                         intermediate_size=FF, vocab_size=VOCAB),
                tf.ElectraModel, False),
    "gptj": (lambda: tf.GPTJConfig(n_embd=H, n_layer=LAYERS, n_head=HEADS, rotary_dim=8,
                                   vocab_size=VOCAB, n_positions=128, bos_token_id=0,
                                   eos_token_id=0), tf.GPTJForCausalLM, False),
    "mt5": (lambda: tf.MT5Config(d_model=H, d_kv=16, d_ff=FF, num_layers=LAYERS,
                                 num_decoder_layers=LAYERS, num_heads=HEADS, vocab_size=VOCAB),
            tf.MT5ForConditionalGeneration, True),
}


class TinyStep:
    """The Step contract: one forward per call, no sync inside; reset between calls."""

    def __init__(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> None:
        self.model, self.inputs = model, inputs
        self.device = torch.device("cpu")
        self.calls = 0
        self.resets = 0

    def __call__(self) -> Any:
        self.calls += 1
        with torch.inference_mode():
            return self.model(**self.inputs)

    def reset(self) -> None:
        self.resets += 1

    def sync(self) -> None:
        pass


def build(name: str, attn_implementation: str | None = None) -> tuple[nn.Module, TinyStep]:
    factory, cls, enc_dec = TINY[name]
    config = factory()
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    model = cls(config).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(0, VOCAB, (1, 16), generator=generator)}
    if enc_dec:
        inputs["decoder_input_ids"] = torch.randint(0, VOCAB, (1, 8), generator=generator)
    return model, TinyStep(model, inputs)


class ToyAttention(nn.Module):
    """Two projections after the core: only the core op tells qkv from out here."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.o1 = nn.Linear(8, 8)
        self.o2 = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.softmax(self.q(x), dim=-1)
        return self.drop(self.o2(self.o1(h))) + x


class ToyBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.attn = ToyAttention()
        self.ff = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.norm(x))
        return self.act(self.ff(x)) + x


class Toy(nn.Module):
    """An architecture reportgen was never written for: two blocks of ``block`` (width 8)."""

    def __init__(self, block: Callable[[], nn.Module] = ToyBlock) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.layers = nn.ModuleList([block(), block()])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x


def toy(block: Callable[[], nn.Module] = ToyBlock) -> tuple[nn.Module, TinyStep]:
    torch.manual_seed(0)
    model = Toy(block).eval()
    return model, TinyStep(model, {"input_ids": torch.arange(6).unsqueeze(0)})
