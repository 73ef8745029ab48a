"""The zoo's conformance suite on attention bridges: fixed-length (lin; perceiver over a transformer layer with
RMSNorm) and variable-length (transformer and feed-forward) bridges on Marian, a simple bridge with two language
decoders on BART, and one bridge on each of mBART, M2M100 (NLLB's architecture) and T5."""

from batches import source_batch, target_labels
from conformance_cases import TINY_BRIDGE
from stock_checkpoints import (
    TINY_BART,
    TINY_MARIAN,
    TINY_T5,
    build_bert,
    build_stock_bart,
    build_stock_m2m100,
    build_stock_marian,
    build_stock_mbart,
    build_stock_t5,
)

from interlayer import (
    BartAttentionBridgeForConditionalGeneration,
    M2M100AttentionBridgeForConditionalGeneration,
    MarianAttentionBridgeForConditionalGeneration,
    MBartAttentionBridgeForConditionalGeneration,
    T5AttentionBridgeForConditionalGeneration,
)
from interlayer.testing import ConformanceCase, ConformanceSuite

BRIDGE_CONFIG_ERRORS = [
    (dict(bridge_layers=["lin", "mlp"]), r"bridge_layers\[1\].*one of.*'transformer'.*got 'mlp'"),
    (dict(bridge_fixed_length=0), r"bridge_fixed_length.*>= 1.*got 0"),
    (dict(bridge_hidden_size=0), r"bridge_hidden_size.*>= 1"),
    (dict(bridge_norm="batchnorm"), r"bridge_norm.*batchnorm"),
    (dict(bridge_layers=["perceiver"], bridge_heads=5), r"bridge_heads.*divide d_model=32.*got 5"),
    (dict(decoder_languages=["de", "de"]), r"decoder_languages.*must not repeat"),
    (dict(decoder_languages=[]), r"decoder_languages.*non-empty"),
    (dict(decoder_languages=["de", ""]), r"decoder_languages.*non-empty list of language names"),
    (dict(bridge_norm_eps=0.0), r"bridge_norm_eps.*> 0.*got 0.0"),
    (dict(bridge_heads=0), r"bridge_heads.*>= 1"),
    (dict(bridge_layers=["transformer", "lin"], identity_init=True), r"identity_init=True.*'lin' bridge layer cannot"),
    (dict(bridge_layers=["feedforward"], identity_init=True), r"'feedforward' bridge layer cannot"),
]


def bridge_case(
    active_options,
    model_class=MarianAttentionBridgeForConditionalGeneration,
    build_stock=build_stock_marian,
    tiny=TINY_MARIAN,
    lora_targets=("q_proj", "v_proj"),
):
    return ConformanceCase(
        build_stock=build_stock,
        model_class=model_class,
        auto_class_name="AutoModelForSeq2SeqLM",
        active_options={**TINY_BRIDGE, **active_options},
        identity_options={**TINY_BRIDGE, "bridge_layers": ["transformer", "transformer"]},
        make_batch=source_batch,
        labels=target_labels,
        wrong_architecture=build_bert,
        config_errors=[({**tiny, **TINY_BRIDGE, **o}, p) for o, p in BRIDGE_CONFIG_ERRORS],
        lora_targets=list(lora_targets),
    )


class TestLinBridgeConformance(ConformanceSuite):
    def make_case(self):
        return bridge_case(dict(bridge_layers=["lin"]))


class TestPerceiverBridgeConformance(ConformanceSuite):
    def make_case(self):
        return bridge_case(dict(bridge_layers=["transformer", "perceiver", "perceiver"], bridge_norm="rmsnorm"))


class TestVariableLengthBridgeConformance(ConformanceSuite):
    def make_case(self):
        return bridge_case(dict(bridge_layers=["transformer", "feedforward"], decoder_languages=["de"]))


class TestBartSimpleBridgeConformance(ConformanceSuite):
    def make_case(self):
        options = dict(bridge_layers=["simple"], decoder_languages=["de"])
        return bridge_case(options, BartAttentionBridgeForConditionalGeneration, build_stock_bart, TINY_BART)


class TestMBartLinBridgeConformance(ConformanceSuite):
    def make_case(self):
        options = dict(bridge_layers=["lin"], decoder_languages=["de"])
        return bridge_case(options, MBartAttentionBridgeForConditionalGeneration, build_stock_mbart, TINY_BART)


class TestM2M100PerceiverBridgeConformance(ConformanceSuite):
    def make_case(self):
        options = dict(bridge_layers=["transformer", "perceiver"], decoder_languages=["de"])
        return bridge_case(options, M2M100AttentionBridgeForConditionalGeneration, build_stock_m2m100, TINY_BART)


class TestT5BridgeConformance(ConformanceSuite):
    def make_case(self):
        options = dict(bridge_layers=["transformer", "simple"], bridge_norm="rmsnorm", decoder_languages=["de"])
        return bridge_case(
            options, T5AttentionBridgeForConditionalGeneration, build_stock_t5, TINY_T5, lora_targets=("q", "v")
        )
