"""Attention bridges beyond the conformance suite: the layers' equations, padding, fixed-length memory, language
decoders, generation, statistics and the attention image."""

import os

import numpy as np
import pytest
import torch
from batches import source_batch
from conformance_cases import TINY_BRIDGE
from stock_checkpoints import PAD, build_stock_marian
from torch.nn import functional as F

from interlayer import MarianAttentionBridgeForConditionalGeneration
from interlayer.models.configuration_attention_bridge import BRIDGE_LAYER_TYPES
from interlayer.pictures import draw_slot_attention


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("stock_marian"))
    return folder, build_stock_marian(folder).eval()


def bridged(folder, **options):
    torch.manual_seed(0)
    return MarianAttentionBridgeForConditionalGeneration.from_pretrained(folder, **{**TINY_BRIDGE, **options}).eval()


def encoder_output(model, batch):
    """The stock encoder's output (the bridge's input), computed by the stock layers of the bridged model."""
    from transformers.models.marian.modeling_marian import MarianEncoder

    with torch.no_grad():
        out = MarianEncoder.forward(
            model.model.encoder, input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_dict=True
        )
    return out.last_hidden_state


def test_lin_and_simple_layers_follow_their_equations(stock):
    batch = source_batch()
    keep = batch["attention_mask"].bool()
    for layer_type in ("lin", "simple"):
        model = bridged(stock[0], bridge_layers=[layer_type])
        layer = model.model.encoder.attention_bridge.layers[0]
        h = encoder_output(model, batch)
        with torch.no_grad():
            memory = model.model.encoder(**{k: batch[k] for k in ("input_ids", "attention_mask")}).last_hidden_state
            for b in range(h.shape[0]):
                x = h[b, keep[b]]  # the real tokens only
                if layer_type == "lin":
                    a = (layer.w2(torch.relu(layer.w1(x)))).softmax(0).T  # [slots, tokens]
                    expected = layer.norm(a @ x)
                else:
                    a = (layer.queries @ layer.k_proj(x).T / layer.queries.shape[1] ** 0.5).softmax(-1)
                    expected = layer.norm(a @ layer.v_proj(x))
                torch.testing.assert_close(memory[b], expected)
        assert memory.shape == (3, TINY_BRIDGE["bridge_fixed_length"], 32)


def test_perceiver_refines_its_own_output_and_attends_to_the_encoder(stock):
    model = bridged(stock[0], bridge_layers=["perceiver", "perceiver"], bridge_norm="none")
    first, second = model.model.encoder.attention_bridge.layers
    assert first.latents is not None and second.latents is None
    batch = source_batch()
    h = encoder_output(model, batch)
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        memory = model.model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        x = first.latents.expand(3, -1, -1)
        for layer in (first, second):
            heads, dim = 4, 8

            def split(t):
                return t.unflatten(-1, (heads, dim)).transpose(1, 2)

            q, k, v = (
                split(layer.cross_attn.q_proj(x)),
                split(layer.cross_attn.k_proj(h)),
                split(layer.cross_attn.v_proj(h)),
            )
            scores = (q @ k.transpose(-1, -2) / dim**0.5).masked_fill(~keep[:, None, None, :], float("-inf"))
            attended = layer.cross_attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).flatten(2))
            x = x + attended
            x = x + layer.cross_ff(x)
            s = F.scaled_dot_product_attention(
                split(layer.self_attn.q_proj(x)), split(layer.self_attn.k_proj(x)), split(layer.self_attn.v_proj(x))
            )
            x = x + layer.self_attn.out_proj(s.transpose(1, 2).flatten(2))
            x = x + layer.self_ff(x)
    torch.testing.assert_close(memory.last_hidden_state, x)


@pytest.mark.parametrize("layers", [[t] for t in BRIDGE_LAYER_TYPES] + [["transformer", "lin", "perceiver"]])
def test_appending_padding_to_a_source_changes_nothing(stock, layers):
    model = bridged(stock[0], bridge_layers=layers)
    batch = source_batch(lengths=(9,))
    padded = {
        "input_ids": F.pad(batch["input_ids"], (0, 6), value=PAD),
        "attention_mask": F.pad(batch["attention_mask"], (0, 6), value=0),
        "decoder_input_ids": batch["decoder_input_ids"],
    }
    padded["input_ids"][:, 9:] = torch.arange(2, 8)  # padding positions hold other tokens: still nothing may leak
    with torch.no_grad():
        torch.testing.assert_close(model(**padded).logits, model(**batch).logits)


def test_fixed_length_memory_takes_no_source_mask(stock):
    model = bridged(stock[0], bridge_layers=["transformer", "simple"], attn_implementation="eager")
    batch = source_batch()
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    assert out.encoder_last_hidden_state.shape[1] == TINY_BRIDGE["bridge_fixed_length"]
    assert out.cross_attentions[0].shape[-1] == TINY_BRIDGE["bridge_fixed_length"]
    variable = bridged(stock[0], bridge_layers=["transformer"], attn_implementation="eager")
    with torch.no_grad():
        out = variable(**batch, output_attentions=True)
    assert out.cross_attentions[0].shape[-1] == batch["input_ids"].shape[1]
    assert torch.all(out.cross_attentions[0][2, :, :, 5:] == 0)  # example 2 has 5 real tokens


def test_language_decoders_start_as_the_stock_decoder_and_are_chosen_per_batch(stock, tmp_path):
    model = bridged(stock[0], bridge_layers=["lin"], decoder_languages=["de", "fr", "es"])
    decoders = model.model.attention_bridge_decoders
    assert set(decoders) == {"fr", "es"}
    for name, tensor in model.model.decoder.state_dict().items():
        torch.testing.assert_close(decoders["fr"].state_dict()[name], tensor, rtol=0, atol=0)
    assert decoders["fr"].embed_tokens.weight.data_ptr() == model.model.shared.weight.data_ptr()
    batch = source_batch()
    with torch.no_grad():
        de = model(**batch, tgt_lang="de").logits
        torch.testing.assert_close(model(**batch, tgt_lang="fr").logits, de)
        decoders["fr"].layers[0].fc2.weight.mul_(3.0)
        fr = model(**batch, tgt_lang="fr").logits
        assert not torch.allclose(fr, de)
        torch.testing.assert_close(model(**batch, tgt_lang=torch.tensor([1, 1, 1])).logits, fr)
    model.save_pretrained(tmp_path / "saved")  # a trained language decoder is kept, not copied again from the first
    loaded = MarianAttentionBridgeForConditionalGeneration.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch, tgt_lang="fr").logits, fr)
    with pytest.raises(ValueError, match=r"tgt_lang.*one of \['de', 'fr', 'es'\].*'it'"):
        model(**batch, tgt_lang="it")
    with pytest.raises(ValueError, match="one language index.*got \\[0, 1\\]"):
        model(**batch, tgt_lang=torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="tgt_lang.*one of"):
        model(**batch)
    single = bridged(stock[0], bridge_layers=["lin"])
    with pytest.raises(ValueError, match="one decoder.*tgt_lang='de'"):
        single(**batch, tgt_lang="de")


def test_without_tgt_lang_several_decoders_raise_naming_the_languages_before_encoding(stock):
    """No silent default language: `generate()` and `forward()` without `tgt_lang` on a model with several decoders
    raise, naming the languages and the argument (`generate` before the encoder runs); a model with one decoder
    (one language or none) needs no `tgt_lang`."""
    model = bridged(stock[0], bridge_layers=["lin"], decoder_languages=["de", "fr"])
    batch = source_batch()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    encoded = []
    model.model.encoder.register_forward_hook(lambda *args: encoded.append(True))
    message = r"one decoder per target language, \['de', 'fr'\]: pass `tgt_lang=`.*tgt_lang='de'"
    with pytest.raises(ValueError, match=message):
        model.generate(**inputs, max_new_tokens=3)
    assert encoded == []
    with pytest.raises(ValueError, match=message):
        model(**batch)
    assert model.generate(**inputs, max_new_tokens=3, tgt_lang="fr").shape[0] == 3
    for languages in (["de"], None):
        single = bridged(stock[0], bridge_layers=["lin"], decoder_languages=languages)
        kwargs = dict(max_new_tokens=4, do_sample=False)
        expected = single.generate(**inputs, **kwargs, **({"tgt_lang": "de"} if languages else {}))
        assert torch.equal(single.generate(**inputs, **kwargs), expected)


@pytest.mark.parametrize("layers", [["lin"], ["transformer"], ["perceiver", "feedforward"]], ids=str)
def test_generation_with_the_cached_bridge_memory_matches_recomputation(stock, layers):
    model = bridged(stock[0], bridge_layers=layers, decoder_languages=["de", "fr"])
    with torch.no_grad():
        model.model.attention_bridge_decoders["fr"].layers[0].fc1.weight.mul_(4.0)
    batch = source_batch()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    kwargs = dict(max_new_tokens=8, do_sample=False, tgt_lang="fr")
    for extra in ({}, {"num_beams": 3}):
        cached = model.generate(**inputs, **kwargs, **extra)
        assert torch.equal(cached, model.generate(**inputs, **kwargs, **extra, use_cache=False))
    french = model.generate(**inputs, **kwargs)
    assert not torch.equal(model.generate(**inputs, **dict(kwargs, tgt_lang="de")), french)


def test_identity_bridge_generates_the_stock_translation(stock):
    model = bridged(stock[0], bridge_layers=["transformer", "transformer"], identity_init=True)
    batch = source_batch()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    for extra in ({}, {"num_beams": 2}):
        kwargs = dict(max_new_tokens=8, do_sample=False, **extra)
        assert torch.equal(model.generate(**inputs, **kwargs), stock[1].generate(**inputs, **kwargs))


def test_slot_statistics_and_attention_image(stock, tmp_path):
    from matplotlib.image import imread

    model = bridged(stock[0], bridge_layers=["transformer", "lin"])
    with torch.no_grad():
        layer = model.model.encoder.attention_bridge.layers[1]
        for weight in (layer.w1.weight, layer.w2.weight):
            weight.mul_(40.0)  # peaked slots
    batch = source_batch()
    with torch.no_grad():
        model(**batch)
    stats = model.mechanism_stats()
    assert (
        0 < stats["eval/attention_bridge/L1/lin/slot_entropy"] < 0.9
        and 0 < stats["eval/attention_bridge/L1/lin/coverage"] <= 1
    )
    attention = model.bridge_attention(batch["input_ids"], batch["attention_mask"])
    assert attention.shape == (3, 5, 12)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 5))
    assert torch.all(attention[2, :, 5:] == 0)
    shown = draw_slot_attention(model, tmp_path / "a.png", batch["input_ids"], batch["attention_mask"], example=1)
    torch.testing.assert_close(shown, attention[1, :, :9])
    image = imread(tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and len(np.unique(image)) > 1
    with pytest.raises(ValueError, match="index of a fixed-length bridge layer.*\\[1\\].*got 0"):
        model.bridge_attention(batch["input_ids"], batch["attention_mask"], layer=0)
    variable = bridged(stock[0], bridge_layers=["transformer"])
    with pytest.raises(ValueError, match=r"this bridge \(\['transformer'\]\) has no fixed-length layer to show"):
        variable.bridge_attention(batch["input_ids"], batch["attention_mask"])


def test_convert_infers_the_translation_task_and_reports_new_tensors(stock):
    from interlayer.zoo import convert

    model, report = convert(
        stock[0], "attention-bridge", bridge_layers=["simple"], decoder_languages=["de", "fr"], **TINY_BRIDGE
    )
    assert report.entry.task == "translation" and isinstance(model, MarianAttentionBridgeForConditionalGeneration)
    assert report.new_mechanism_keys and not report.unexpected_keys
    new = report.new_mechanism_keys
    assert all("encoder.attention_bridge." in k or "attention_bridge_decoders.fr." in k for k in new)
    torch.testing.assert_close(
        model.model.attention_bridge_decoders["fr"].layers[1].fc1.weight, stock[1].model.decoder.layers[1].fc1.weight
    )


def stock_families():
    """Per family: the stock checkpoint builder, the stock base class and the zoo base and LM classes."""
    from stock_checkpoints import build_stock_bart, build_stock_m2m100, build_stock_mbart, build_stock_t5
    from transformers import BartModel, M2M100Model, MBartModel, T5Model

    import interlayer as il

    return {
        "bart": (
            build_stock_bart,
            BartModel,
            il.BartAttentionBridgeModel,
            il.BartAttentionBridgeForConditionalGeneration,
        ),
        "mbart": (
            build_stock_mbart,
            MBartModel,
            il.MBartAttentionBridgeModel,
            il.MBartAttentionBridgeForConditionalGeneration,
        ),
        "m2m_100": (
            build_stock_m2m100,
            M2M100Model,
            il.M2M100AttentionBridgeModel,
            il.M2M100AttentionBridgeForConditionalGeneration,
        ),
        "t5": (build_stock_t5, T5Model, il.T5AttentionBridgeModel, il.T5AttentionBridgeForConditionalGeneration),
    }


@pytest.mark.parametrize("family", ["mbart", "m2m_100", "t5"])
def test_base_model_loads_every_stock_weight_and_starts_as_the_stock_model(family, tmp_path):
    """The base-model cell of each new family: a stock base checkpoint converts with every weight loaded and none
    unused, and an identity bridge computes the stock encoder-decoder's output, padded and unpadded."""
    build_stock, stock_base_class, base_class, _ = stock_families()[family]
    lm = build_stock(str(tmp_path / "lm"))
    stock = stock_base_class(lm.config).eval()
    stock.load_state_dict(lm.state_dict(), strict=False)  # the LM's body (T5's top-level names, BART's `model.`)
    if family != "t5":
        stock.load_state_dict(lm.model.state_dict())
    stock.save_pretrained(tmp_path / "base")
    options = dict(TINY_BRIDGE, bridge_layers=["transformer", "transformer"], identity_init=True)
    model, info = base_class.from_pretrained(tmp_path / "base", output_loading_info=True, **options)
    model.eval()
    assert not info["unexpected_keys"], info["unexpected_keys"]
    missing = info["missing_keys"]
    assert missing and all("encoder.attention_bridge." in k for k in missing), missing
    for name, tensor in stock.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    batch = source_batch()
    with torch.no_grad():
        for inputs in (batch, {k: v for k, v in batch.items() if k != "attention_mask"}):
            torch.testing.assert_close(model(**inputs).last_hidden_state, stock(**inputs).last_hidden_state)
        active = base_class.from_pretrained(tmp_path / "base", **dict(options, identity_init=False)).eval()
        diff = active(**batch).last_hidden_state - stock(**batch).last_hidden_state
        assert diff.abs().max() > 1e-6  # the identity check above can fail


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_the_bridge_initialises_with_the_family_std(family, tmp_path):
    """The bridge's own init in every family: T5's stock init knows no plain Linear (it would leave them as built, or
    give them std `initializer_factor` = 1), so the bridge's tensors get `bridge_init_std`: BART's `init_std`, T5's
    `initializer_factor * d_model ** -0.5`."""
    build_stock, _, _, lm_class = stock_families()[family]
    build_stock(str(tmp_path / "stock"))
    torch.manual_seed(0)
    options = dict(TINY_BRIDGE, bridge_layers=["perceiver", "lin"], bridge_hidden_size=256, bridge_fixed_length=64)
    bridge = lm_class.from_pretrained(tmp_path / "stock", **options).seq2seq.encoder.attention_bridge
    expected = 0.02 if family == "bart" else 32**-0.5
    perceiver, lin = bridge.layers
    for weight in (lin.w1.weight, lin.w2.weight, perceiver.latents, perceiver.cross_attn.q_proj.weight):
        assert abs(weight.std().item() / expected - 1) < 0.1, (family, weight.std().item(), expected)
    assert torch.all(lin.w1.bias == 0) and torch.all(lin.norm.weight == 1) and torch.all(lin.norm.bias == 0)


@pytest.mark.parametrize("family", ["bart", "mbart", "m2m_100", "t5"])
def test_language_decoders_of_each_family_generate_with_the_cached_bridge(family, tmp_path):
    build_stock, _, _, lm_class = stock_families()[family]
    stock = build_stock(str(tmp_path / "stock")).eval()
    model = lm_class.from_pretrained(
        tmp_path / "stock", bridge_layers=["perceiver"], decoder_languages=["de", "fr"], **TINY_BRIDGE
    ).eval()
    owner = model.seq2seq
    decoders = owner.attention_bridge_decoders
    stock_decoder = (stock if family == "t5" else stock.model).decoder
    for name, tensor in stock_decoder.state_dict().items():
        torch.testing.assert_close(decoders["fr"].state_dict()[name], tensor, rtol=0, atol=0)
    assert decoders["fr"].embed_tokens.weight.data_ptr() == owner.shared.weight.data_ptr()
    batch = source_batch()
    with torch.no_grad():
        de = model(**batch, tgt_lang="de").logits
        torch.testing.assert_close(model(**batch, tgt_lang="fr").logits, de)
        torch.manual_seed(1)
        for name, p in decoders["fr"].named_parameters():  # another decoder: new random matrices
            if p.dim() == 2 and "embed_tokens" not in name:
                p.normal_(std=0.5)
        assert not torch.allclose(model(**batch, tgt_lang="fr").logits, de)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    kwargs = dict(max_new_tokens=8, do_sample=False, tgt_lang="fr", num_beams=2)
    assert torch.equal(model.generate(**inputs, **kwargs), model.generate(**inputs, **kwargs, use_cache=False))
    assert not torch.equal(model.generate(**inputs, **kwargs), model.generate(**inputs, **dict(kwargs, tgt_lang="de")))
    with pytest.raises(ValueError, match=r"one decoder per target language, \['de', 'fr'\]: pass `tgt_lang=`"):
        model.generate(**inputs, max_new_tokens=2)  # no default language, in every family


OLD_AUTO_MAP = {  # what `save_pretrained` wrote before the attention bridges were renamed
    "marian": {
        "AutoConfig": "configuration_attention_bridge.MarianBridgeConfig",
        "AutoModel": "modeling_attention_bridge.MarianBridgeModel",
        "AutoModelForSeq2SeqLM": "modeling_attention_bridge.MarianBridgeForConditionalGeneration",
    },
    "bart": {
        "AutoConfig": "configuration_attention_bridge.BartBridgeConfig",
        "AutoModel": "modeling_attention_bridge.BartBridgeModel",
        "AutoModelForSeq2SeqLM": "modeling_attention_bridge.BartBridgeForConditionalGeneration",
    },
}


def save_as_before_the_rename(model, folder, family: str, architecture: str) -> None:
    """A folder as the code before the rename saved it: model_type `<family>_bridge`, the old class names in
    `architectures` and `auto_map`, and the weights' names before 2026-11-24 (`encoder.bridge`, `language_decoders`)."""
    import json

    from safetensors.torch import load_file, save_file

    model.save_pretrained(folder)
    weights = folder / "model.safetensors"
    old_names = {"encoder.attention_bridge.": "encoder.bridge.", "attention_bridge_decoders.": "language_decoders."}
    tensors = {}
    for key, tensor in load_file(weights).items():
        for new, old in old_names.items():
            key = key.replace(new, old)
        tensors[key] = tensor
    save_file(tensors, weights, metadata={"format": "pt"})
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(model_type=f"{family}_bridge", architectures=[architecture], auto_map=OLD_AUTO_MAP[family])
    path.write_text(json.dumps(config))


def test_a_model_saved_before_the_rename_loads_in_process_and_as_remote_code(stock, tmp_path):
    import json
    import subprocess
    import sys

    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    from interlayer import (
        BartAttentionBridgeConfig,
        BartAttentionBridgeModel,
        MarianAttentionBridgeConfig,
        MarianAttentionBridgeModel,
        MarianBridgeConfig,
        MarianBridgeForConditionalGeneration,
    )

    assert MarianBridgeForConditionalGeneration is MarianAttentionBridgeForConditionalGeneration  # the old name
    assert MarianBridgeConfig is MarianAttentionBridgeConfig
    model = bridged(stock[0], bridge_layers=["lin"], decoder_languages=["de", "fr"])
    with torch.no_grad():
        model.model.attention_bridge_decoders["fr"].layers[0].fc1.weight.mul_(3.0)
    folder = tmp_path / "old"
    save_as_before_the_rename(model, folder, "marian", "MarianBridgeForConditionalGeneration")
    batch = source_batch()
    with torch.no_grad():
        expected = model(**batch, tgt_lang="fr").logits

    config = AutoConfig.from_pretrained(folder)
    assert type(config) is MarianAttentionBridgeConfig and config.model_type == "marian_attention_bridge"
    for load in (AutoModelForSeq2SeqLM.from_pretrained, MarianBridgeForConditionalGeneration.from_pretrained):
        loaded = load(folder).eval()
        assert type(loaded) is MarianAttentionBridgeForConditionalGeneration
        with torch.no_grad():
            torch.testing.assert_close(loaded(**batch, tgt_lang="fr").logits, expected)
    assert type(AutoModel.from_pretrained(folder)) is MarianAttentionBridgeModel
    loaded.save_pretrained(tmp_path / "again")  # a re-save writes the new names
    saved = json.loads((tmp_path / "again" / "config.json").read_text())
    assert saved["model_type"] == "marian_attention_bridge"
    assert saved["auto_map"]["AutoModelForSeq2SeqLM"].endswith(".MarianAttentionBridgeForConditionalGeneration")

    torch.save(batch, tmp_path / "batch.pt")
    script = f"""
import sys
sys.modules["interlayer"] = None  # the package must not be needed
import torch, transformers
model = transformers.AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
with torch.no_grad():
    torch.save(model(**torch.load({str(tmp_path / "batch.pt")!r}), tgt_lang="fr").logits, {str(tmp_path / "out.pt")!r})
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected)

    from stock_checkpoints import build_stock_bart

    build_stock_bart(str(tmp_path / "bart"))
    base = BartAttentionBridgeModel.from_pretrained(tmp_path / "bart", bridge_layers=["simple"], **TINY_BRIDGE).eval()
    save_as_before_the_rename(base, tmp_path / "old_bart", "bart", "BartBridgeModel")
    assert type(AutoConfig.from_pretrained(tmp_path / "old_bart")) is BartAttentionBridgeConfig
    reloaded = AutoModel.from_pretrained(tmp_path / "old_bart").eval()
    assert type(reloaded) is BartAttentionBridgeModel
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).last_hidden_state, base(**batch).last_hidden_state)


def test_a_language_named_like_a_module_dict_attribute_is_refused_at_config_creation(stock):
    """`"to"` (Tongan) is also `nn.ModuleDict.to`: a further decoder cannot be registered under it, so the config
    refuses it, naming the language and the way out; as the first language (the stock decoder) it works."""
    from interlayer import MarianAttentionBridgeConfig

    with pytest.raises(ValueError, match=r"'to' cannot name a further decoder.*nn\.ModuleDict.*'to_'"):
        MarianAttentionBridgeConfig(decoder_languages=["de", "to"])
    with pytest.raises(ValueError, match=r"'to' cannot name a further decoder"):
        bridged(stock[0], decoder_languages=["de", "to"])
    model = bridged(stock[0], decoder_languages=["to", "de"])
    batch = source_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch, tgt_lang="to").logits, model(**batch, tgt_lang="de").logits)
