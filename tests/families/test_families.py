"""Every family (`decoder_families.py`, `encoder_families.py`, `seq2seq_families.py`) names modules its stock model has:
an encoder's stock base model, embeddings, encoder, pooler and self-attention classes, the stock weight names its
`build_stack` gives a base model, the layers where it says, of the stock layer class, and in each layer the attention,
the query/key/value and output projections its heads are laid out in, the head count and size it reads, and a pre-norm
encoder's attention norm; a seq2seq family's encoder, decoder and the class owning them. The sentinel and the bridges
read their roles from these declarations (each mechanism's conformance suite runs them on every family)."""

import pytest
from stock_checkpoints import TINY_BART, TINY_DECODER, TINY_T5, tiny_stock_config
from torch import nn
from transformers import AutoModel

from interlayer.models.decoder_families import DECODER_FAMILIES
from interlayer.models.encoder_families import ENCODER_FAMILIES, EncoderFamily
from interlayer.models.sentinel_common import _feature_dims
from interlayer.models.seq2seq_families import SEQ2SEQ_FAMILIES

FAMILIES = [*DECODER_FAMILIES, *ENCODER_FAMILIES]


def _stock_base_model(family):
    if isinstance(family, EncoderFamily):
        return AutoModel.from_config(tiny_stock_config(family.model_type))
    return family.model(family.model.config_class(**TINY_DECODER, pad_token_id=0))  # Phi-3's default is 32000


def _features(module, side: str) -> int:
    out_dim, in_dim = _feature_dims(module)
    return module.weight.shape[out_dim if side == "out" else in_dim]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_the_family_names_its_stock_modules(family):
    model = _stock_base_model(family)
    config, heads = model.config, family.heads
    layers = model.get_submodule(family.layer_path)
    if isinstance(family, EncoderFamily):
        assert type(model) is family.model and isinstance(model, family.pretrained)
        assert type(model.embeddings) is family.embeddings
        assert family.encoder is None or type(model.encoder) is family.encoder
        assert type(getattr(model, "pooler", None)) is (family.pooler or type(None))
        assert all(type(layer.get_submodule(heads.attention)) is family.attention for layer in layers)
        # `build_stack` gives a base model the stock modules under their stock names, around the layers it is given
        built = nn.Module()
        family.build_stack(built, config, layers, add_pooling_layer=True)
        assert set(built.state_dict()) == set(model.state_dict())
    assert len(layers) == config.num_hidden_layers
    for layer in layers:
        assert isinstance(layer, family.layer)
        attention = layer.get_submodule(heads.attention)
        count, size = heads.count_of(attention), heads.size_of(attention)
        assert count == config.num_attention_heads
        kv = count // getattr(attention, "num_key_value_groups", 1)  # grouped-query attention's key/value heads
        widths = [_features(layer.get_submodule(path), "out") for path in heads.qkv]
        assert widths == ([(count + 2 * kv) * size] if len(widths) == 1 else [count * size, kv * size, kv * size])
        assert _features(layer.get_submodule(heads.out), "in") == count * size
        if isinstance(family, EncoderFamily) and family.attention_norm is not None:
            layer.get_submodule(family.attention_norm)


@pytest.mark.parametrize("family", SEQ2SEQ_FAMILIES, ids=lambda f: f.model_type)
def test_the_seq2seq_family_names_its_stock_modules(family):
    """The stock LM's encoder and decoder are the declared classes, held by the base model, or (`lm_owns_stack`, T5)
    by the LM itself."""
    config = family.lm.config_class(**(TINY_T5 if family.lm_owns_stack else TINY_BART))
    lm = family.lm(config)
    owner = lm if family.lm_owns_stack else lm.model
    assert family.lm_owns_stack or type(lm.model) is family.model
    assert type(owner.encoder) is family.encoder and type(owner.decoder) is family.decoder
    assert family.model.config_class is family.lm.config_class
