"""The zoo's conformance suite on the sentinel-gated GPT-2."""

from gpt2_fixtures import TINY_GPT2, build_bert, build_stock_gpt2, lm_batch, lm_labels

from interlayer import GPT2SentinelLMHeadModel
from interlayer.testing import ConformanceCase, ConformanceSuite

SENTINEL_CONFIG_ERRORS = [
    (dict(gate_l1=-1.0), r"gate_l1.*>= 0"),
    (dict(unet_skip_scale=-0.1), r"unet_skip_scale"),
    (dict(pruned_heads={9: [0]}), r"pruned_heads layer.*<= 3.*got 9"),
    (dict(pruned_heads={0: [7]}), r"pruned_heads\[0\] head.*<= 3.*got 7"),
    (dict(identity_init="yes"), r"identity_init"),
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
