"""The decoder families (`families.DecoderFamily`): Llama, Qwen3, Qwen2, Mistral, Phi-3, OLMo 2, Gemma 2, Gemma 3 text,
GPT-2, each declared once by the roles its stock modules play. A new decoder family is one declaration here (and a run
of `python -m interlayer.generate_classes --fix`); `DECODER_FAMILIES` lists them in order.

It imports the decoder families' stock modules only, and sits beside the modeling files that import it, so that
`save_pretrained` ships it with the remote code of a decoder checkpoint.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gemma3 import modeling_gemma3 as gemma3
from transformers.models.gpt2 import modeling_gpt2 as gpt2
from transformers.models.llama import modeling_llama as llama
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2 import modeling_qwen2 as qwen2
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from .families import Branch, DecoderFamily, Heads, StackNames, attention_heads, rms_norm, scaled_embedding

# pre-norm blocks: F_attn(x) = attn(norm_1(x)), F_mlp(x) = mlp(norm_2(x))
PRE_NORM_ATTENTION = Branch("self_attn", before=("input_layernorm",))
PRE_NORM_MLP = Branch("mlp", before=("post_attention_layernorm",))
# the Llama family's attention: `self_attn.q_proj/k_proj/v_proj` (grouped-query: fewer key/value heads) and `o_proj`
LLAMA_HEADS = attention_heads(
    "self_attn", "q_proj", "k_proj", "v_proj", "self_attn.o_proj", "config.num_attention_heads", "head_dim"
)


def _family(module, prefix: str, model_type: str, **roles) -> DecoderFamily:
    """A family whose stock classes follow transformers' naming (`{prefix}DecoderLayer`, ...), named `prefix` in the
    zoo's class names; pre-norm unless `roles` say otherwise."""
    names = {"layer": "DecoderLayer", "model": "Model", "causal_lm": "ForCausalLM", "attention": "Attention"}
    classes = {role: getattr(module, prefix + name) for role, name in names.items() if role not in roles}
    classes |= {"final_norm": rms_norm(getattr(module, prefix + "RMSNorm"))}
    classes |= {"rotary": getattr(module, prefix + "RotaryEmbedding")}
    branches = {"attention_branch": PRE_NORM_ATTENTION, "mlp_branch": PRE_NORM_MLP, "heads": LLAMA_HEADS}
    return DecoderFamily(model_type=model_type, **{"name": prefix, **classes, **branches, **roles})


LLAMA = _family(llama, "Llama", "llama", checkpoints="SmolLM2, Llama 2/3, ...")
QWEN3 = _family(qwen3, "Qwen3", "qwen3")
QWEN2 = _family(qwen2, "Qwen2", "qwen2", checkpoints="Qwen2, Qwen2.5")
MISTRAL = _family(mistral, "Mistral", "mistral")
# Phi-3: fused qkv / gate_up projections (inside the stock modules) and a residual dropout after each branch
PHI3 = _family(
    phi3,
    "Phi3",
    "phi3",
    checkpoints="Phi-3, Phi-3.5, Phi-4 mini",
    heads=Heads("self_attn", ("self_attn.qkv_proj",), "self_attn.o_proj", "config.num_attention_heads", "head_dim"),
    attention_branch=Branch("self_attn", before=("input_layernorm",), after=("resid_attn_dropout",)),
    mlp_branch=Branch("mlp", before=("post_attention_layernorm",), after=("resid_mlp_dropout",)),
)
# OLMo 2: no input norms; each branch ends in its own norm
OLMO2 = _family(
    olmo2,
    "Olmo2",
    "olmo2",
    attention_branch=Branch("self_attn", after=("post_attention_layernorm",)),
    mlp_branch=Branch("mlp", after=("post_feedforward_layernorm",)),
)
# Gemma 2 / 3: a norm before and after each branch, the embedding scaled by sqrt(hidden_size)
GEMMA_ATTENTION = Branch("self_attn", before=("input_layernorm",), after=("post_attention_layernorm",))
GEMMA_MLP = Branch("mlp", before=("pre_feedforward_layernorm",), after=("post_feedforward_layernorm",))
BIDIRECTIONAL = "it builds causal masks only"
GEMMA2 = _family(
    gemma2,
    "Gemma2",
    "gemma2",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma2.Gemma2TextScaledWordEmbedding),
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)
GEMMA3_TEXT = _family(
    gemma3,
    "Gemma3",
    "gemma3_text",
    name="Gemma3Text",
    checkpoints="text-only Gemma 3, such as gemma-3-1b",
    attention_branch=GEMMA_ATTENTION,
    mlp_branch=GEMMA_MLP,
    embedding=scaled_embedding(gemma3.Gemma3TextScaledWordEmbedding),
    model=gemma3.Gemma3TextModel,
    rotary_per_layer_type=True,
    refused={"use_bidirectional_attention": BIDIRECTIONAL},
)

# GPT-2: pre-norm LayerNorms (ln_1, ln_2), absolute position embeddings and an embedding dropout, `transformer.h`
GPT2 = DecoderFamily(
    model_type="gpt2",
    name="GPT2",
    checkpoints="GPT-2, DistilGPT-2",
    layer=gpt2.GPT2Block,
    model=gpt2.GPT2Model,
    causal_lm=gpt2.GPT2LMHeadModel,
    attention=gpt2.GPT2Attention,
    final_norm=lambda config: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon),
    rotary=None,
    heads=Heads("attn", ("attn.c_attn",), "attn.c_proj", "num_heads", "head_dim"),
    attention_branch=Branch("attn", before=("ln_1",)),
    mlp_branch=Branch("mlp", before=("ln_2",)),
    embedding=lambda config, padding_idx: nn.Embedding(config.vocab_size, config.hidden_size),
    names=StackNames(embed="wte", layers="h", norm="ln_f", positions="wpe", dropout="drop"),
    refused={"add_cross_attention": "it has no cross-attention"},
    embeds_token_types=True,
    extra_inputs=("encoder_hidden_states", "encoder_attention_mask"),
    output_class=BaseModelOutputWithPastAndCrossAttentions,
)

DECODER_FAMILIES = tuple(value for value in tuple(globals().values()) if isinstance(value, DecoderFamily))
