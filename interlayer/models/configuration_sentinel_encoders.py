"""Configuration of the sentinel gates (seed 001) on the encoder families BERT and RoBERTa: every stock field plus
the sentinel options of [`SentinelFields`] (configuration_sentinel.py)."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

from transformers import BertConfig, RobertaConfig

from .configuration_sentinel import SentinelConfigMixin, SentinelFields
from .zoo_common import ZooConfigMixin, zoo_config


@zoo_config
class BertSentinelConfig(SentinelConfigMixin, ZooConfigMixin, BertConfig, SentinelFields):
    r"""Configuration of [`BertSentinelModel`]: every [`BertConfig`] field plus the sentinel options of
    [`SentinelFields`] (no U-Net skips: an encoder). Converts checkpoints of model_type `bert`."""

    model_type = "bert_sentinel"
    stock_model_types = ("bert",)
    sentinel_family = "bert"
    sentinel_is_encoder = True


@zoo_config
class RobertaSentinelConfig(SentinelConfigMixin, ZooConfigMixin, RobertaConfig, SentinelFields):
    r"""Configuration of [`RobertaSentinelModel`]: every [`RobertaConfig`] field plus the sentinel options of
    [`SentinelFields`] (no U-Net skips: an encoder). Converts checkpoints of model_type `roberta`."""

    model_type = "roberta_sentinel"
    stock_model_types = ("roberta",)
    sentinel_family = "roberta"
    sentinel_is_encoder = True


__all__ = ["BertSentinelConfig", "RobertaSentinelConfig"]
