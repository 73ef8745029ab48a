"""What the conformance cases share: the options with which each mechanism acts on the tiny stock checkpoints of
`stock_checkpoints` (also the multi-process runs'), the projections a LoRA adapter wraps, and the case of a zoo causal
LM converted from a tiny stock decoder."""

from batches import lm_batch, lm_labels
from stock_checkpoints import TINY_DECODER, build_bert

# options with which each encoder family's conformance case (and the multi-process run) makes the bridge act
ROBERTA_ACTIVE = dict(
    identity_init=False, route_topk=2, hdim_chunk_size=4, hdim_pair_mask="cross_segment", qkv_value_proj=True
)
BERT_ACTIVE = dict(
    identity_init=False,
    gate_activation="softplus",
    gate_placement="post_norm",
    hdim_token_temp=1.0,
    hdim_entropy_reg=1e-3,
    hdim_mask_special_tokens=True,
)
XLM_ROBERTA_ACTIVE = ROBERTA_ACTIVE
ELECTRA_ACTIVE = BERT_ACTIVE
DEBERTA_V2_ACTIVE = dict(
    identity_init=False, route_topk=2, qkv_kv_weights="target", hdim_share_proj=True, hdim_mask_special_tokens=True
)
MODERNBERT_ACTIVE = dict(
    identity_init=False, route_topk=2, hdim_chunk_size=4, hdim_pair_mask="cross_segment", qkv_value_proj=True
)
FAMILY_ACTIVE = {
    "bert": BERT_ACTIVE,
    "roberta": ROBERTA_ACTIVE,
    "xlm-roberta": XLM_ROBERTA_ACTIVE,
    "electra": ELECTRA_ACTIVE,
    "deberta-v2": DEBERTA_V2_ACTIVE,
    "modernbert": MODERNBERT_ACTIVE,
}
# the stock projections a LoRA adapter wraps in each encoder family (the others: query, value)
LORA_TARGETS = {
    "deberta-v2": ["query_proj", "value_proj"],
    "modernbert": ["Wqkv"],
}
# the attention bridge's size on the tiny seq2seq checkpoints
TINY_BRIDGE = dict(bridge_fixed_length=5, bridge_hidden_size=48, bridge_heads=4)


def decoder_case(
    model_class, build_stock, active_options, config_errors, lora_targets=("q_proj", "v_proj"), identity_options=None
):
    """The conformance case of a zoo causal LM converted from a tiny stock decoder (`config_errors`: options added to
    `TINY_DECODER` and the error each must raise; `lora_targets`: the family's attention projections;
    `identity_options`: options under which `identity_init=True` gives the stock function, when not the defaults)."""
    from interlayer.testing import ConformanceCase

    return ConformanceCase(
        build_stock=build_stock,
        model_class=model_class,
        auto_class_name="AutoModelForCausalLM",
        active_options=active_options,
        make_batch=lm_batch,
        labels=lm_labels,
        wrong_architecture=build_bert,
        config_errors=[({**TINY_DECODER, **o}, p) for o, p in config_errors],
        lora_targets=list(lora_targets),
        identity_options=identity_options or {},
    )
