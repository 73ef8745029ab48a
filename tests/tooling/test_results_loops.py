"""The training loop and evaluation every results recipe shares, checked on CPU stand-ins for what the seed scale
does on a GPU: bf16 autocast over float32 weights."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from interlayer.results.loops import lm_eval_loss, mixed_precision, param_groups, train


def tiny_llama(vocab=64, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)  # fmt: skip
    return LlamaForCausalLM(config)


def lm_batches(vocab=64, rows=4, length=16, count=4, seed=1):
    ids = torch.randint(0, vocab, (count, rows, length), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x.clone()} for x in ids]


def test_training_and_evaluating_in_one_autocast_context_uses_the_trained_weights():
    """Autocast caches the bf16 copy of each trainable weight while its context is open: with the cache on, every
    step after the first, and the evaluation after training, ran on the weights as the first step cast them."""
    model, batches = tiny_llama(), lm_batches()
    groups = param_groups(model, {"all": 3e-2}, lambda name: "all", weight_decay=0.0)
    with mixed_precision("cpu", "bfloat16"):
        train(model, groups, batches * 3)
        inside = lm_eval_loss(model, batches)["eval_loss"]
    with mixed_precision("cpu", "bfloat16"):
        fresh = lm_eval_loss(model, batches)["eval_loss"]
    assert inside == fresh
