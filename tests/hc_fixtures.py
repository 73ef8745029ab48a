"""Tiny stock checkpoints of every decoder family the decoder mechanisms convert (hyper-connections, latent
back-projection; batches come from `gpt2_fixtures`), and their conformance cases."""

import json

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

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


def stock_builder(config_class, model_class, **family_options):
    """`build(folder, **overrides)`: a tiny stock causal LM of one family (fixed seed), saved in `folder`."""

    def build(folder, **overrides):
        torch.manual_seed(0)
        model = model_class(config_class(**{**TINY_DECODER, **family_options, **overrides}))
        model.save_pretrained(folder)
        return model

    return build


# the family options exercise what each family adds: a sliding window shorter than the test batches (so padding,
# the cache and generation meet it), a bias on q/k/v, Phi-3's residual dropout (in training), Gemma's logit
# soft-capping (stock defaults) and Gemma 3's local/global rotary bases
SHORT_WINDOW = 8  # below the generation tests' 15 tokens; above the conformance batches' longest padding run (7)
build_stock_qwen3 = stock_builder(Qwen3Config, Qwen3ForCausalLM)
build_stock_llama = stock_builder(LlamaConfig, LlamaForCausalLM)
build_stock_qwen2 = stock_builder(
    Qwen2Config, Qwen2ForCausalLM, use_sliding_window=True, sliding_window=SHORT_WINDOW, max_window_layers=1
)
build_stock_mistral = stock_builder(MistralConfig, MistralForCausalLM, sliding_window=SHORT_WINDOW)
build_stock_phi3 = stock_builder(
    Phi3Config, Phi3ForCausalLM, resid_pdrop=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0
)
build_stock_olmo2 = stock_builder(Olmo2Config, Olmo2ForCausalLM, eos_token_id=2)
build_stock_gemma2 = stock_builder(Gemma2Config, Gemma2ForCausalLM, sliding_window=SHORT_WINDOW)
build_stock_gemma3 = stock_builder(
    Gemma3TextConfig,
    Gemma3ForCausalLM,
    sliding_window=SHORT_WINDOW,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
)
# TINY_DECODER's names map to GPT-2's n_embd, n_layer, n_head, n_positions
build_stock_gpt2_decoder = stock_builder(GPT2Config, GPT2LMHeadModel, bos_token_id=1, eos_token_id=2)


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


def decoder_case(
    model_class, build_stock, active_options, config_errors, lora_targets=("q_proj", "v_proj"), identity_options=None
):
    """The conformance case of a zoo causal LM converted from a tiny stock decoder (`config_errors`: options added to
    `TINY_DECODER` and the error each must raise; `lora_targets`: the family's attention projections;
    `identity_options`: options under which `identity_init=True` gives the stock function, when not the defaults)."""
    from gpt2_fixtures import build_bert, lm_batch, lm_labels

    from interlayer.testing import ConformanceCase

    return ConformanceCase(
        build_stock=build_stock,
        model_class=model_class,
        auto_class_name="AutoModelForCausalLM",
        active_options=active_options,
        make_batch=lm_batch,
        labels=lm_labels,
        wrong_architecture=build_bert,
        config_errors=[({**TINY_DECODER, **o}, p) for o, p in config_errors],
        lora_targets=list(lora_targets),
        identity_options=identity_options or {},
    )
