"""The zoo's conformance suite on latent back-projection, on every decoder family, with the `latent_source` and the
layer pairs varied across families."""

from conformance_cases import decoder_case
from stock_checkpoints import (
    build_stock_gemma2,
    build_stock_gemma3,
    build_stock_gpt2_decoder,
    build_stock_llama,
    build_stock_mistral,
    build_stock_olmo2,
    build_stock_phi3,
    build_stock_qwen2,
    build_stock_qwen3,
)

from interlayer import (
    Gemma2LatentForCausalLM,
    Gemma3TextLatentForCausalLM,
    GPT2LatentForCausalLM,
    LlamaLatentForCausalLM,
    MistralLatentForCausalLM,
    Olmo2LatentForCausalLM,
    Phi3LatentForCausalLM,
    Qwen2LatentForCausalLM,
    Qwen3LatentForCausalLM,
)
from interlayer.testing import ConformanceSuite

LATENT_CONFIG_ERRORS = [
    (dict(latent_dim=0), r"latent_dim.*>= 1.*got 0"),
    (dict(latent_source="next_position"), r"latent_source.*previous_position.*next_position"),
    (dict(latent_source_layers=[1, 5]), r"latent_source_layers.*\[0, 2\].*got \[1, 5\]"),
    (dict(latent_source_layers=[2, 2], latent_target_layers=[0, 1]), r"latent_source_layers.*must not repeat"),
    (dict(latent_source_layers=[1, 2], latent_target_layers=[0]), r"same length"),
    (dict(latent_offset=3), r"latent_offset.*<= 2.*got 3"),
    (dict(latent_offset=2, latent_target_layers=[1]), r"latent_offset.*outside \[0, 2\]"),
    (dict(latent_up_init_gain=-1.0), r"latent_up_init_gain.*>= 0"),
    (dict(latent_down_init_gain=-1.0), r"latent_down_init_gain.*>= 0"),
    (dict(latent_source_layers=[], latent_target_layers=[]), r"at least one \(source, target\) pair"),
    (dict(freeze_base="no"), r"freeze_base"),
]


def latent_case(model_class, build_stock, active_options, **kwargs):
    return decoder_case(model_class, build_stock, active_options, LATENT_CONFIG_ERRORS, **kwargs)


class TestQwen3PreviousPositionConformance(ConformanceSuite):
    def make_case(self):
        return latent_case(Qwen3LatentForCausalLM, build_stock_qwen3, dict(identity_init=False))


class TestLlamaSamePositionConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source="same_position", latent_source_layers=[1, 2])
        return latent_case(LlamaLatentForCausalLM, build_stock_llama, options)


class TestLlamaRecurrentConformance(ConformanceSuite):
    def make_case(self):
        return latent_case(
            LlamaLatentForCausalLM, build_stock_llama, dict(identity_init=False, latent_source="recurrent")
        )


class TestQwen2PreviousPositionConformance(ConformanceSuite):
    def make_case(self):
        return latent_case(Qwen2LatentForCausalLM, build_stock_qwen2, dict(identity_init=False))


class TestMistralSamePositionConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source="same_position")
        return latent_case(MistralLatentForCausalLM, build_stock_mistral, options)


class TestPhi3RecurrentConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source="recurrent")
        return latent_case(Phi3LatentForCausalLM, build_stock_phi3, options, lora_targets=["qkv_proj"])


class TestOlmo2TwoPairsConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source_layers=[1, 2], latent_target_layers=[0, 1])
        return latent_case(Olmo2LatentForCausalLM, build_stock_olmo2, options)


class TestGemma2SamePositionConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source="same_position", latent_offset=2)
        return latent_case(Gemma2LatentForCausalLM, build_stock_gemma2, options)


class TestGemma3TextPreviousPositionConformance(ConformanceSuite):
    def make_case(self):
        return latent_case(Gemma3TextLatentForCausalLM, build_stock_gemma3, dict(identity_init=False))


class TestGPT2RecurrentConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source="recurrent", latent_dim=8)
        return latent_case(GPT2LatentForCausalLM, build_stock_gpt2_decoder, options, lora_targets=["c_attn"])


# first targets above L0: the layers below them run once for both passes, and the cache keeps them once
class TestQwen2SharedLayersConformance(ConformanceSuite):
    def make_case(self):
        options = dict(identity_init=False, latent_source_layers=[2], latent_target_layers=[1])
        return latent_case(Qwen2LatentForCausalLM, build_stock_qwen2, options)


class TestGemma3TextSharedLayersSamePositionConformance(ConformanceSuite):
    def make_case(self):
        options = dict(
            identity_init=False, latent_source="same_position", latent_source_layers=[0, 2], latent_target_layers=[2, 1]
        )
        return latent_case(Gemma3TextLatentForCausalLM, build_stock_gemma3, options)


class TestGPT2TargetAboveTheSourceRecurrentConformance(ConformanceSuite):
    def make_case(self):
        options = dict(
            identity_init=False,
            latent_source="recurrent",
            latent_dim=8,
            latent_source_layers=[0],
            latent_target_layers=[2],
        )
        return latent_case(GPT2LatentForCausalLM, build_stock_gpt2_decoder, options, lora_targets=["c_attn"])
