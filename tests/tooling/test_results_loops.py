"""The training loop and evaluation every results recipe shares, checked on CPU stand-ins for what the seed scale
does on a GPU: bf16 autocast over float32 weights."""

import pytest
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


def reference_loss(model, batches):
    """The held-out loss from each batch's whole logits in float64: the definition the chunks must add up to."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
            labels = batch["labels"][:, 1:]
            total += torch.nn.functional.cross_entropy(
                logits.double().reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum"
            ).item()
            tokens += labels.numel()
    return total / tokens


def test_the_evaluation_holds_a_bounded_share_of_a_large_vocabularys_logits():
    """A stand-in for the seed scale's Qwen3 vocabulary (151,936): 50,000 tokens, so that one batch's float32 logits
    are 102 MB. With a budget of 4 MB the evaluation's peak memory stays under a quarter of the batch's logits (the
    unchunked evaluation held them, and the cross-entropy's workspace, at once: over twice them), and the loss is the
    same."""
    from interlayer.bench import proc_status_bytes, reset_peak_rss

    vocab, rows, length = 50_000, 32, 16
    model = tiny_llama(vocab=vocab).eval()
    batches = lm_batches(vocab=vocab, rows=rows, length=length, count=2)
    logits_bytes = rows * length * vocab * 4
    lm_eval_loss(model, batches, logits_budget=4 * 2**20)  # allocator warm-up
    reset_peak_rss()
    before = proc_status_bytes("VmRSS")
    measured = lm_eval_loss(model, batches, logits_budget=4 * 2**20)
    peak = proc_status_bytes("VmHWM") - before
    assert peak < logits_bytes / 4, f"peak {peak / 2**20:.0f} MB against logits of {logits_bytes / 2**20:.0f} MB"
    assert measured["eval_loss"] == pytest.approx(reference_loss(model, batches), rel=1e-6)


def test_label_smoothing_trains_on_the_smoothed_cross_entropy():
    """The bridges' seed method trains with the seed's label smoothing (0.05): the loss of a step is the smoothed
    cross-entropy of the classifier's logits, computed here independently from its definition."""
    from transformers import BertConfig, BertForSequenceClassification

    from interlayer.results.classification import METHODS

    assert METHODS["seed"].label_smoothing == 0.05 and METHODS["full"].label_smoothing == 0.0
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_labels=3, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)  # fmt: skip
    model = BertForSequenceClassification(config)
    ids = torch.randint(0, 50, (6, 8), generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 2, 0, 1, 2])}
    with torch.no_grad():
        log_p = torch.log_softmax(model(input_ids=ids, attention_mask=batch["attention_mask"]).logits.double(), -1)
    picked = log_p.gather(1, batch["labels"][:, None]).squeeze(1)
    smoothed = (-(1 - 0.05) * picked - 0.05 * log_p.mean(-1)).mean().item()
    groups = param_groups(model, {"all": 1e-3}, lambda name: "all", weight_decay=0.0)
    assert train(model, groups, [batch], label_smoothing=0.05)["train_loss"] == pytest.approx(smoothed, rel=1e-5)
