"""One parameter prefix per mechanism: every tensor a conversion adds has a name component starting with its record's
prefix (`has_parameter_prefix`, the one test every caller uses); and checkpoints saved under the older names (the
sentinel's `unet_fuse`, the attention bridges' `encoder.bridge` and `language_decoders`) load bit for bit and are
re-saved under the new ones."""

import os

import pytest
import torch
from batches import lm_batch, source_batch
from conformance_cases import TINY_BRIDGE, examples
from safetensors.torch import load_file, save_file
from stock_checkpoints import build_stock_gpt2, build_stock_marian
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

from interlayer.zoo import convert

# -- one parameter prefix per mechanism ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(examples()))
def test_every_tensor_a_conversion_adds_is_named_under_its_mechanism_prefix(tmp_path, name):
    """What a conversion adds to a stock checkpoint is the mechanism's, each of its names has a component starting
    with the prefix of the mechanism's record, and no stock weight is taken for the mechanism's: for every example of
    every record."""
    tiny = examples()[name]
    stock = tiny.build_stock(str(tmp_path / "stock"))
    model, report = convert(str(tmp_path / "stock"), tiny.record.name, task=tiny.task, **tiny.options)
    record = tiny.record
    assert report.new_mechanism_keys and report.new_mechanism_keys == report.missing_keys
    assert all(record.is_parameter(k) for k in report.new_mechanism_keys)
    assert not [k for k in stock.state_dict() if record.is_parameter(k)]
    assert set(model.mechanism_parameter_names()) <= set(report.new_mechanism_keys)


def test_a_prefix_names_a_component_not_a_substring():
    from interlayer import LlamaMHCModel

    assert LlamaMHCModel.is_mechanism_parameter("layers.0.hc_attn.res")
    assert LlamaMHCModel.is_mechanism_parameter("hc_read_out")
    assert not LlamaMHCModel.is_mechanism_parameter("layers.0.mlp.shc_gate.weight")  # "hc_" inside a stock name


# conversions with the renamed parameters
RENAMED = {
    "sentinel": (build_stock_gpt2, dict(unet_skips=True)),
    "attention-bridge": (build_stock_marian, dict(bridge_layers=["simple", "lin"], decoder_languages=["de", "fr"])),
}


def _renamed_on_disk(folder, old_names: dict[str, str]):
    """Rewrite the folder's weights as a checkpoint saved before the renames `{new: old}` (name components)."""
    [path] = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors")]
    tensors = load_file(path)
    renamed = {}
    for key, tensor in tensors.items():
        for new, old in old_names.items():
            key = key.replace(new, old)
        renamed[key] = tensor
    assert renamed.keys() != tensors.keys()
    save_file(renamed, path, metadata={"format": "pt"})
    return renamed.keys()


def _perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name in model.mechanism_parameter_names():
            model.get_parameter(name).add_(0.05 * torch.randn_like(model.get_parameter(name)))
    return model.eval()


@pytest.mark.parametrize(
    "name, auto_class, old_names",
    [
        ("sentinel", AutoModelForCausalLM, {"sentinel_unet_fuse": "unet_fuse"}),
        (
            "attention-bridge",
            AutoModelForSeq2SeqLM,
            {"encoder.attention_bridge": "encoder.bridge", "attention_bridge_decoders": "language_decoders"},
        ),
    ],
)
def test_a_checkpoint_saved_under_the_old_parameter_names_loads_bit_for_bit(tmp_path, name, auto_class, old_names):
    """The sentinel's U-Net fusions were `unet_fuse`, the attention bridge `encoder.bridge` and its further decoders
    `language_decoders`: a folder saved then loads in-process (the Auto class, the mechanism's class) with every
    tensor in place and the same outputs, and a re-save writes the names a new model is saved with."""
    build, options = RENAMED[name]
    build(tmp_path / "stock")
    extra = TINY_BRIDGE if name == "attention-bridge" else {}
    model = _perturbed(convert(str(tmp_path / "stock"), name, **options, **extra)[0])
    batch = source_batch() if name == "attention-bridge" else lm_batch()
    language = {"tgt_lang": "fr"} if name == "attention-bridge" else {}
    with torch.no_grad():
        expected = model(**batch, **language).logits
    model.save_pretrained(tmp_path / "new")
    model.save_pretrained(tmp_path / "old")
    keys = _renamed_on_disk(tmp_path / "old", old_names)
    assert any(old in k for k in keys for old in old_names.values())
    for loader in (auto_class, type(model)):
        loaded, info = loader.from_pretrained(tmp_path / "old", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        for key, tensor in model.state_dict().items():
            torch.testing.assert_close(loaded.state_dict()[key], tensor, rtol=0, atol=0, msg=key)
        with torch.no_grad():
            torch.testing.assert_close(loaded.eval()(**batch, **language).logits, expected, rtol=0, atol=0)
    loaded.save_pretrained(tmp_path / "resaved")
    assert _saved_names(tmp_path / "resaved") == _saved_names(tmp_path / "new")


def _saved_names(folder) -> set[str]:
    [path] = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors")]
    return set(load_file(path))
