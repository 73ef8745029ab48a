"""Tiny stock Qwen3 and Llama checkpoints for the hyper-connection tests (batches come from `gpt2_fixtures`)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

TINY_DECODER = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=128,
    max_position_embeddings=64,
    tie_word_embeddings=True,
)


def build_stock_qwen3(folder):
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY_DECODER))
    model.save_pretrained(folder)
    return model


def build_stock_llama(folder):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_DECODER))
    model.save_pretrained(folder)
    return model
