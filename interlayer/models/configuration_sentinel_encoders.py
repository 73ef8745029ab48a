"""Configuration of the sentinel gates (seed 001) on the encoder families BERT and RoBERTa: every stock field plus
the sentinel options of [`SentinelFields`] (configuration_sentinel.py). The classes are written by
`python -m interlayer.generate_classes --fix` from the mechanism's record (its `EncoderClasses`)."""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

from .configuration_sentinel import SentinelConfigMixin, SentinelFields
from .zoo_common import ZooConfigMixin, zoo_config

# isort: split
# --- begin generated imports (python -m interlayer.generate_classes --fix): do not edit ---
from transformers import BertConfig, RobertaConfig

# --- end generated imports ---


__all__ = []  # the file's own exports; the generated ones follow


# --- begin generated classes (python -m interlayer.generate_classes --fix): do not edit ---
@zoo_config
class BertSentinelConfig(SentinelConfigMixin, ZooConfigMixin, BertConfig, SentinelFields):
    r"""Configuration of [`BertSentinelModel`]: every [`BertConfig`] field plus the sentinel options of
    [`SentinelFields`] (no U-Net skips: an encoder). Converts checkpoints of model_type `bert`."""

    model_type = "bert_sentinel"
    stock_model_types = ("bert",)
    sentinel_is_encoder = True
    sentinel_family = "bert"


@zoo_config
class RobertaSentinelConfig(SentinelConfigMixin, ZooConfigMixin, RobertaConfig, SentinelFields):
    r"""Configuration of [`RobertaSentinelModel`]: every [`RobertaConfig`] field plus the sentinel options of
    [`SentinelFields`] (no U-Net skips: an encoder). Converts checkpoints of model_type `roberta`."""

    model_type = "roberta_sentinel"
    stock_model_types = ("roberta",)
    sentinel_is_encoder = True
    sentinel_family = "roberta"


__all__ += ["BertSentinelConfig", "RobertaSentinelConfig"]
# --- end generated classes ---
