"""The decoder families beyond the conformance suite: the zoo's registry converts each (base and causal LM) with every
stock weight loaded, cached generation past a short sliding window gives the stock tokens and logits at identity
and agrees with recomputation with the mechanism active, and a family setting the stack does not reproduce is
refused by name."""

import pytest
import torch
from batches import lm_batch
from conformance_cases import examples
from stock_checkpoints import (
    build_stock_gemma2,
    build_stock_gemma3,
    build_stock_gpt2_decoder,
    build_stock_mistral,
    build_stock_olmo2,
    build_stock_phi3,
    build_stock_qwen2,
)
from transformers import Phi3ForCausalLM

from interlayer import ZOO, Gemma2MHCForCausalLM, Gemma3TextLatentForCausalLM, Phi3MHCForCausalLM, convert
from interlayer.mechanisms import MECHANISMS as RECORDS
from interlayer.mechanisms import DecoderClasses

FAMILIES = {
    "qwen2": build_stock_qwen2,
    "mistral": build_stock_mistral,
    "phi3": build_stock_phi3,
    "olmo2": build_stock_olmo2,
    "gemma2": build_stock_gemma2,
    "gemma3_text": build_stock_gemma3,
    "gpt2": build_stock_gpt2_decoder,
}
# the mechanisms whose classes are generated on every decoder family (their records' spec), each acting as on its
# record's distributed example
MECHANISMS = [
    record.name
    for record in RECORDS.values()
    if isinstance(record.classes, DecoderClasses) and record.classes.families is None
]
ACTIVE = {tiny.record.name: tiny.options for tiny in examples(distributed=True).values()}


@pytest.fixture(scope="module")
def stock_folders(tmp_path_factory):
    folders = {}
    for family, build in FAMILIES.items():
        folder = str(tmp_path_factory.mktemp(family))
        folders[family] = (folder, build(folder).eval())
    return folders


def entry(mechanism, family, task):
    (found,) = [e for e in ZOO if (e.mechanism, e.stock_model_type, e.task) == (mechanism, family, task)]
    return found


@pytest.mark.parametrize("task", ["base", "causal-lm"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("family", FAMILIES)
def test_registry_converts_every_stock_weight(stock_folders, family, mechanism, task):
    folder, stock = stock_folders[family]
    model, report = convert(folder, mechanism, task=task)
    assert isinstance(model, entry(mechanism, family, task).model_class)
    assert not report.unexpected_keys and report.missing_keys == report.new_mechanism_keys
    state = model.state_dict()
    prefix = "" if task == "causal-lm" else "model."
    for name, tensor in stock.state_dict().items():
        if name.startswith(prefix):
            torch.testing.assert_close(state[name[len(prefix) :]], tensor, rtol=0, atol=0)


def test_printed_conversion_report_is_a_summary(stock_folders):
    """`print(report)` gives counts and the first names (a real model adds hundreds of tensors); the report's
    lists keep every key."""
    model, report = convert(stock_folders["qwen2"][0], "hyper-connections", task="causal-lm")
    keys = report.new_mechanism_keys
    assert len(keys) > 3 and keys == report.missing_keys
    text = repr(report)
    assert f"new mechanism tensors: {len(keys)} ({keys[0]}, " in text and f"... {len(keys) - 3} more)" in text
    assert keys[3] not in text and len(text.splitlines()) <= 6 and len(text) < 800
    assert type(model).__name__ in text and f"{report.parameters['mechanism']:,}" in text


def left_padded_prompts():
    batch = lm_batch(lengths=(7, 4))
    ids, mask = torch.zeros_like(batch["input_ids"]), torch.zeros_like(batch["attention_mask"])
    for i, n in enumerate((7, 4)):
        ids[i, -n:], mask[i, -n:] = batch["input_ids"][i, :n], 1
    return {"input_ids": ids[:, -7:], "attention_mask": mask[:, -7:]}


GREEDY = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)


def generate(model, **kwargs):
    out = model.generate(**left_padded_prompts(), output_logits=True, return_dict_in_generate=True, **GREEDY, **kwargs)
    return out.sequences, torch.stack(out.logits, dim=1)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("family", FAMILIES)
def test_identity_cached_generation_is_stock(stock_folders, family, mechanism):
    """Left-padded greedy generation with the cache, to 15 tokens (past the sliding window of 8 where the family has
    one): the stock tokens and logits."""
    folder, stock = stock_folders[family]
    model = entry(mechanism, family, "causal-lm").model_class.from_pretrained(folder).eval()
    tokens, logits = generate(model)
    expected_tokens, expected_logits = generate(stock)
    assert torch.equal(tokens, expected_tokens)
    torch.testing.assert_close(logits, expected_logits)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("family", FAMILIES)
def test_active_cached_generation_matches_recomputation(stock_folders, family, mechanism):
    folder, stock = stock_folders[family]
    torch.manual_seed(0)
    model = entry(mechanism, family, "causal-lm").model_class.from_pretrained(folder, **ACTIVE[mechanism]).eval()
    tokens, logits = generate(model, use_cache=True)
    recomputed_tokens, recomputed_logits = generate(model, use_cache=False)
    assert torch.equal(tokens, recomputed_tokens)
    torch.testing.assert_close(logits, recomputed_logits)
    assert not torch.allclose(logits, generate(stock)[1], atol=1e-4)


@pytest.mark.parametrize(
    ("model_class", "family"), [(Gemma2MHCForCausalLM, "gemma2"), (Gemma3TextLatentForCausalLM, "gemma3_text")]
)
def test_bidirectional_gemma_is_refused_by_family(stock_folders, model_class, family):
    with pytest.raises(ValueError, match=f"{family} family.*use_bidirectional_attention=True.*causal masks only"):
        model_class.from_pretrained(stock_folders[family][0], use_bidirectional_attention=True)


def test_phi3_residual_dropout_is_inside_the_branches(stock_folders):
    """In training, Phi-3's residual dropout is part of `F_attn` / `F_mlp`: at identity, with the same seed, the
    hyper-connection model draws the stock dropout masks and gives the stock logits (another seed does not)."""
    folder, _ = stock_folders["phi3"]
    stock = Phi3ForCausalLM.from_pretrained(folder).train()
    model = Phi3MHCForCausalLM.from_pretrained(folder).train()
    batch = lm_batch()
    with torch.no_grad():
        torch.manual_seed(0)
        expected = stock(**batch).logits
        torch.manual_seed(0)
        torch.testing.assert_close(model(**batch).logits, expected)
        torch.manual_seed(1)
        assert not torch.allclose(model(**batch).logits, expected, atol=1e-4)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_gpt2_token_types_are_embedded_as_stock_and_cross_attention_inputs_refused(stock_folders, mechanism):
    """GPT-2's stack adds the token embedding of `token_type_ids` to its input, as stock GPT-2 does (at identity: the
    stock logits with and without them); the cross-attention inputs it has no layers for are refused by name, and a
    cross-attention config by the family."""
    folder, stock = stock_folders["gpt2"]
    model = entry(mechanism, "gpt2", "causal-lm").model_class.from_pretrained(folder).eval()
    batch = lm_batch()
    types = (torch.arange(batch["input_ids"].shape[1]) % 2).expand_as(batch["input_ids"])
    with torch.no_grad():
        for token_types in (None, types):
            expected = stock(**batch, token_type_ids=token_types).logits
            torch.testing.assert_close(model(**batch, token_type_ids=token_types).logits, expected)
        with pytest.raises(ValueError, match="encoder_hidden_states.*not supported by the zoo's gpt2 models"):
            model(**batch, encoder_hidden_states=torch.zeros(3, 2, 32))
    with pytest.raises(ValueError, match="gpt2 family.*add_cross_attention=True.*no cross-attention"):
        entry(mechanism, "gpt2", "causal-lm").model_class.from_pretrained(folder, add_cross_attention=True)
