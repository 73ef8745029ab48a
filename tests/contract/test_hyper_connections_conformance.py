"""The zoo's conformance suite on hyper-connections, on every decoder family, with the modes varied across families:
mHC (seed init, static, DeepSeek-V4's formula), static and dynamic HC (with and without tanh, two streams), and the
eager equation (`hc_implementation="eager"`) beside the fast implementation every other class runs."""

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
    Gemma2MHCForCausalLM,
    Gemma3TextMHCForCausalLM,
    GPT2MHCForCausalLM,
    LlamaMHCForCausalLM,
    MistralMHCForCausalLM,
    Olmo2MHCForCausalLM,
    Phi3MHCForCausalLM,
    Qwen2MHCForCausalLM,
    Qwen3MHCForCausalLM,
)
from interlayer.testing import ConformanceSuite

HC_CONFIG_ERRORS = [
    (dict(hc_streams=0), r"hc_streams.*>= 1.*got 0"),
    (dict(hc_mode="residual"), r"hc_mode"),
    (dict(mhc_variant="deepseek"), r"mhc_variant.*'seed', 'deepseek_v4'.*got deepseek"),
    (dict(sinkhorn_iters=0), r"sinkhorn_iters.*>= 1.*got 0"),
    (dict(hc_read_in_focus=1.5), r"hc_read_in_focus.*<= 1.*got 1.5"),
    (dict(hc_mode="mhc", hc_streams=1), r"identity_init=True.*hc_mode='mhc'.*hc_streams. >= 2"),
    (dict(hc_mode="mhc", hc_read_in_focus=1.0), r"hc_read_in_focus.*< 1.*mhc"),
    (dict(hc_init_noise=-0.1), r"hc_init_noise.*>= 0"),
    (dict(freeze_base="no"), r"freeze_base"),
    (dict(hc_implementation="kernel"), r"hc_implementation.*'fast', 'eager'.*got kernel"),
]


def hc_case(model_class, build_stock, active_options, **kwargs):
    return decoder_case(model_class, build_stock, active_options, HC_CONFIG_ERRORS, **kwargs)


class TestQwen3MHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(Qwen3MHCForCausalLM, build_stock_qwen3, dict(identity_init=False))


class TestQwen3DeepSeekMHCConformance(ConformanceSuite):
    """DeepSeek-V4's mHC formula; identity at init holds to its eps (about 1e-6 per sublayer)."""

    def make_case(self):
        variant = dict(mhc_variant="deepseek_v4")
        active = dict(variant, hc_init_noise=0.1)
        return hc_case(Qwen3MHCForCausalLM, build_stock_qwen3, active, identity_options=variant)


class TestLlamaStaticHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(LlamaMHCForCausalLM, build_stock_llama, dict(hc_mode="static", hc_init_noise=0.1))


class TestLlamaDynamicHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(LlamaMHCForCausalLM, build_stock_llama, dict(hc_mode="dynamic", hc_init_noise=0.1))


class TestLlamaEagerMHCConformance(ConformanceSuite):
    """The equation as written (`hc_implementation="eager"`, the specification the fast implementation is tested
    against) on every path the suite takes: input-dependent mHC."""

    def make_case(self):
        eager = dict(hc_implementation="eager")
        return hc_case(LlamaMHCForCausalLM, build_stock_llama, dict(eager, hc_init_noise=0.1), identity_options=eager)


class TestQwen2MHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(Qwen2MHCForCausalLM, build_stock_qwen2, dict(identity_init=False))


class TestMistralStaticHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(MistralMHCForCausalLM, build_stock_mistral, dict(hc_mode="static", hc_init_noise=0.1))


class TestPhi3DynamicHCConformance(ConformanceSuite):
    def make_case(self):
        options = dict(hc_mode="dynamic", hc_init_noise=0.1)
        return hc_case(Phi3MHCForCausalLM, build_stock_phi3, options, lora_targets=["qkv_proj"])


class TestOlmo2StaticMHCConformance(ConformanceSuite):
    def make_case(self):
        options = dict(hc_mode="mhc", mhc_dynamic=False, hc_init_noise=0.1)
        return hc_case(Olmo2MHCForCausalLM, build_stock_olmo2, options)


class TestGemma2DynamicNoTanhHCConformance(ConformanceSuite):
    def make_case(self):
        options = dict(hc_mode="dynamic", hc_dynamic_tanh=False, hc_init_noise=0.1)
        return hc_case(Gemma2MHCForCausalLM, build_stock_gemma2, options)


class TestGemma3TextTwoStreamDynamicHCConformance(ConformanceSuite):
    def make_case(self):
        options = dict(hc_mode="dynamic", hc_streams=2, hc_init_noise=0.1)
        return hc_case(Gemma3TextMHCForCausalLM, build_stock_gemma3, options)


class TestGPT2MHCConformance(ConformanceSuite):
    def make_case(self):
        options = dict(hc_init_noise=0.1, hc_read_in_focus=0.25)
        return hc_case(GPT2MHCForCausalLM, build_stock_gpt2_decoder, options, lora_targets=["c_attn"])
