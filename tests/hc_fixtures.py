"""Tiny stock Qwen3 and Llama checkpoints for the hyper-connection tests (batches come from `gpt2_fixtures`)."""

import json

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


def save_tiny_llama_with_tokenizer(folder, text: str, layers: int = 2):
    """A tiny stock Llama whose vocabulary is a byte-level BPE tokenizer trained on `text`, both saved in `folder`."""
    from interlayer.training import train_byte_bpe

    tokenizer = train_byte_bpe(text, vocab_size=300)
    torch.manual_seed(0)
    shape = {"num_hidden_layers": layers, "vocab_size": len(tokenizer), "max_position_embeddings": 512}
    config = LlamaConfig(**{**TINY_DECODER, **shape})
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


def write_qa_pairs(path, n: int) -> str:
    """`n` GSM8K-shaped JSONL rows (`question`, `answer` ending in `#### N`) in `path`; returns them as plain text."""
    rows, words = [], ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    for i in range(n):
        a, b = i % 9, (i * 4) % 9
        rows.append(
            {"question": f"What is {words[a]} plus {words[b]}?", "answer": f"It is {a + b + 2}. #### {a + b + 2}"}
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return "\n".join(r["question"] + " " + r["answer"] for r in rows)
