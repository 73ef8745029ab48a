"""The zoo's conformance suite on latent back-projection: each `latent_source` on Qwen3 or Llama."""

from hc_fixtures import build_stock_llama, build_stock_qwen3, decoder_case

from interlayer import LlamaLatentForCausalLM, Qwen3LatentForCausalLM
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


def latent_case(model_class, build_stock, active_options):
    return decoder_case(model_class, build_stock, active_options, LATENT_CONFIG_ERRORS)


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
