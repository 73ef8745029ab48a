"""The zoo's conformance suite on the sentinel-gated models: GPT-2, the Llama family (Llama, Qwen2, Qwen3) and the
BERT family (BERT, RoBERTa)."""

from batches import labels_for, lm_batch, lm_labels, pair_batch
from conformance_cases import decoder_case
from stock_checkpoints import (
    TINY_ENCODER,
    TINY_GPT2,
    build_bert,
    build_gpt2,
    build_stock_bert_wide,
    build_stock_gpt2,
    build_stock_llama,
    build_stock_qwen2_full_attention,
    build_stock_qwen3,
    build_stock_roberta_wide,
)

from interlayer import (
    BertSentinelForSequenceClassification,
    GPT2SentinelLMHeadModel,
    LlamaSentinelForCausalLM,
    Qwen2SentinelForCausalLM,
    Qwen3SentinelForCausalLM,
    RobertaSentinelForSequenceClassification,
)
from interlayer.testing import ConformanceCase, ConformanceSuite

SENTINEL_CONFIG_ERRORS = [
    (dict(gate_l1=-1.0), r"gate_l1.*>= 0"),
    (dict(unet_skip_scale=-0.1), r"unet_skip_scale"),
    (dict(pruned_heads={9: [0]}), r"pruned_heads layer.*<= 3.*got 9"),
    (dict(pruned_heads={0: [7]}), r"pruned_heads\[0\] head.*<= 3.*got 7"),
    (dict(pruned_heads={0: "a"}), r"`pruned_heads` maps layer indices to lists of head indices.*got \{0: 'a'\}"),
    (dict(pruned_heads={"first": [0]}), r"`pruned_heads` maps layer indices.*got \{'first': \[0\]\}"),
    (dict(identity_init="yes"), r"identity_init"),
    (dict(sentinel_gate_init=-1e5), r"`sentinel_gate_init` must be >= -65504.0 and <= 65504.0, got -100000.0"),
]


class TestGPT2SentinelConformance(ConformanceSuite):
    def make_case(self):
        return ConformanceCase(
            build_stock=build_stock_gpt2,
            model_class=GPT2SentinelLMHeadModel,
            auto_class_name="AutoModelForCausalLM",
            active_options=dict(identity_init=False, unet_skips=True),
            more_identity_options=[dict(unet_skips=True)],
            make_batch=lm_batch,
            labels=lm_labels,
            wrong_architecture=build_bert,
            config_errors=[({**TINY_GPT2, **o}, p) for o, p in SENTINEL_CONFIG_ERRORS],
            lora_targets=["c_attn"],
        )


ACTIVE = dict(identity_init=False, unet_skips=True)
DECODER_CONFIG_ERRORS = [
    (dict(gate_l1=-1.0), r"gate_l1.*>= 0"),
    (dict(pruned_heads={5: [0]}), r"pruned_heads layer.*<= 2.*got 5"),
    (dict(sentinel_gate_init=1e5), r"`sentinel_gate_init` must be >= -65504.0 and <= 65504.0, got 100000.0"),
    (dict(pruned_heads={0: [4]}), r"pruned_heads\[0\] head.*<= 3.*got 4"),
]


class TestLlamaSentinelConformance(ConformanceSuite):
    def make_case(self):
        case = decoder_case(LlamaSentinelForCausalLM, build_stock_llama, ACTIVE, DECODER_CONFIG_ERRORS)
        case.more_identity_options = [dict(unet_skips=True)]
        return case


class TestQwen2SentinelConformance(ConformanceSuite):
    def make_case(self):
        case = decoder_case(Qwen2SentinelForCausalLM, build_stock_qwen2_full_attention, ACTIVE, DECODER_CONFIG_ERRORS)
        case.more_identity_options = [dict(unet_skips=True)]
        return case


class TestQwen3SentinelConformance(ConformanceSuite):
    def make_case(self):
        case = decoder_case(Qwen3SentinelForCausalLM, build_stock_qwen3, ACTIVE, DECODER_CONFIG_ERRORS)
        case.more_identity_options = [dict(unet_skips=True)]
        return case


ENCODER_CONFIG_ERRORS = [
    (dict(gate_l1=-1.0), r"gate_l1.*>= 0"),
    (dict(unet_skips=True), r"unet_skips=True does not apply to the (bert|roberta) family"),
    (dict(is_decoder=True), r"encoder-only.*is_decoder=True"),
    (dict(pruned_heads={0: [4]}), r"pruned_heads\[0\] head.*<= 3.*got 4"),
]


def encoder_case(model_class, build_stock, family):
    return ConformanceCase(
        build_stock=build_stock,
        model_class=model_class,
        auto_class_name="AutoModelForSequenceClassification",
        active_options=dict(identity_init=False),
        make_batch=lambda: pair_batch(family),
        labels=labels_for,
        wrong_architecture=build_gpt2,
        config_errors=[({**TINY_ENCODER, **o}, p) for o, p in ENCODER_CONFIG_ERRORS],
        lora_targets=["query", "value"],
    )


class TestBertSentinelConformance(ConformanceSuite):
    def make_case(self):
        return encoder_case(BertSentinelForSequenceClassification, build_stock_bert_wide, "bert")


class TestRobertaSentinelConformance(ConformanceSuite):
    def make_case(self):
        return encoder_case(RobertaSentinelForSequenceClassification, build_stock_roberta_wide, "roberta")
