"""Whatever enumerates mechanisms reads their records: a mechanism registered by a test alone (`toy_mechanism`,
LayerScale on Llama: its record and its classes, nothing else edited) gets the conformance suite, the DDP, FSDP and
DeepSpeed cases, and the parameter-name check."""

import importlib.util

import fsdp_train
import multiprocess_train
import pytest
import toy_mechanism
from conformance_cases import conformance_suites, examples
from stock_checkpoints import build_stock_llama

from interlayer.mechanisms import MECHANISMS, check_record


@pytest.fixture
def toy():
    saved = dict(MECHANISMS)
    yield toy_mechanism.register()
    MECHANISMS.clear()
    MECHANISMS.update(saved)


def test_a_mechanism_registered_in_a_test_is_covered_with_no_other_edit(toy, tmp_path):
    check_record(toy)
    label = toy.examples[0].label
    assert label in examples() and label in examples(distributed=True)
    assert label in multiprocess_train.cases() and label in fsdp_train.cases()
    if importlib.util.find_spec("deepspeed") is not None:
        import deepspeed_train

        assert label in deepspeed_train.cases()
    suite = conformance_suites()[f"Test{label}Conformance"]()
    suite.setup_method(None)
    assert suite.case.model_class is toy_mechanism.LlamaLayerScaleForCausalLM
    suite.test_documented_config_errors()
    for name in (
        "stock_weights_load_exactly",
        "identity_init_matches_stock",
        "trainer_step_lowers_loss_and_moves_mechanism",
    ):
        folder = tmp_path / name
        folder.mkdir()
        getattr(suite, f"test_{name}")(folder)


def test_the_toy_is_not_registered_outside_its_test():
    assert "layer-scale" not in MECHANISMS and "LlamaLayerScale" not in examples()


def test_a_mechanism_tensor_no_init_reaches_is_refused_at_conversion(tmp_path, monkeypatch):
    """A conversion whose `_init_weights` misses a tensor of the mechanism (one in a container transformers' init
    skips, say) is refused, naming the tensors, instead of handing over whatever memory they held."""
    build_stock_llama(str(tmp_path / "stock"))
    mixin = toy_mechanism.LayerScalePreTrainedMixin
    monkeypatch.setattr(mixin, "_init_weights", lambda self, module: super(mixin, self)._init_weights(module))
    with pytest.raises(RuntimeError, match=r"no initialisation reached \['model.layers.0.layerscale_attn"):
        toy_mechanism.LlamaLayerScaleForCausalLM.from_pretrained(str(tmp_path / "stock"))
