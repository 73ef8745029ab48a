"""The zoo's conformance suite on hyper-connections: mHC on Qwen3, static and dynamic HC on Llama."""

from hc_fixtures import build_stock_llama, build_stock_qwen3, decoder_case

from interlayer import LlamaMHCForCausalLM, Qwen3MHCForCausalLM
from interlayer.testing import ConformanceSuite

HC_CONFIG_ERRORS = [
    (dict(hc_streams=0), r"hc_streams.*>= 1.*got 0"),
    (dict(hc_mode="residual"), r"hc_mode"),
    (dict(sinkhorn_iters=0), r"sinkhorn_iters.*>= 1.*got 0"),
    (dict(hc_read_in_focus=1.5), r"hc_read_in_focus.*<= 1.*got 1.5"),
    (dict(hc_mode="mhc", hc_streams=1), r"identity_init=True.*hc_mode='mhc'.*hc_streams. >= 2"),
    (dict(hc_mode="mhc", hc_read_in_focus=1.0), r"hc_read_in_focus.*< 1.*mhc"),
    (dict(hc_init_noise=-0.1), r"hc_init_noise.*>= 0"),
    (dict(freeze_base="no"), r"freeze_base"),
]


def hc_case(model_class, build_stock, active_options):
    return decoder_case(model_class, build_stock, active_options, HC_CONFIG_ERRORS)


class TestQwen3MHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(Qwen3MHCForCausalLM, build_stock_qwen3, dict(identity_init=False))


class TestLlamaStaticHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(LlamaMHCForCausalLM, build_stock_llama, dict(hc_mode="static", hc_init_noise=0.1))


class TestLlamaDynamicHCConformance(ConformanceSuite):
    def make_case(self):
        return hc_case(LlamaMHCForCausalLM, build_stock_llama, dict(hc_mode="dynamic", hc_init_noise=0.1))
