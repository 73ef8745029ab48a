"""Tiny stock checkpoints of every bridged family and paired-sentence batches for the bridge tests."""

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    GPT2Config,
    GPT2LMHeadModel,
)

TINY = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    num_labels=3,
)

# each family's tiny stock config: its own layout at its most demanding (ELECTRA's smaller embeddings and their
# projection; DeBERTa-v3's bucketed relative attention both ways, no absolute positions, plus v2's convolution;
# ModernBERT's alternating full / sliding-window attention with a window narrower than the batch)
FAMILY_CONFIG = {
    "bert": dict(model_type="bert"),
    "roberta": dict(model_type="roberta"),
    "xlm-roberta": dict(model_type="xlm-roberta"),
    "electra": dict(model_type="electra", embedding_size=16),
    "deberta-v2": dict(
        model_type="deberta-v2",
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_buckets=8,
        max_relative_positions=16,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
        conv_kernel_size=3,
    ),
    "modernbert": dict(
        model_type="modernbert",
        local_attention=4,
        global_attn_every_n_layers=2,
        pad_token_id=0,
        cls_token_id=1,
        sep_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
    ),
}
# the tokens each family's tokenizer lays a pair out with: first token, separator, padding, `A sep sep B`, token types
TOKENS = {
    "bert": (101, 102, 0, False, True),
    "electra": (101, 102, 0, False, True),
    "roberta": (0, 2, 1, True, False),
    "xlm-roberta": (0, 2, 1, True, False),
    "deberta-v2": (1, 2, 0, False, False),
    "modernbert": (1, 2, 0, False, False),
}
STOCK_AUTO = {
    "base": AutoModel,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}


def tiny_stock_config(family: str):
    options = dict(FAMILY_CONFIG[family])
    return AutoConfig.for_model(options.pop("model_type"), **TINY, **options)


def stock_builder(family: str, task: str = "sequence-classification"):
    """`build(folder) -> stock model`: the family's tiny stock model for `task` (seed 0), saved into folder."""

    def build(folder):
        torch.manual_seed(0)
        model = STOCK_AUTO[task].from_config(tiny_stock_config(family))
        model.save_pretrained(folder)
        return model

    build.__name__ = f"build_stock_{family}_{task}"
    return build


build_stock_roberta = stock_builder("roberta")
build_stock_bert = stock_builder("bert")


def build_gpt2(folder):
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=128, n_positions=64)).save_pretrained(folder)


# ModernBERT's sliding-window layers (window 2 each side here) leave a padded row with no visible token when the padding
# is longer than the window, and on such rows the stock model's eager and SDPA attention differ (the outputs there
# are undefined); its batch pads each example by at most 2 tokens, so every row sees at least one token
PAIR_LENGTHS = {"modernbert": ((6, 5), (6, 4), (5, 4))}


def pair_batch(family: str, lengths=None, seed=0):
    """Sentence pairs as the family's tokenizer lays them out, right-padded.

    roberta: <s> A </s></s> B </s> (cls 0, sep 2, pad 1); bert: [CLS] A [SEP] B [SEP] with token types; the other
    families per `TOKENS`.
    """
    lengths = lengths or PAIR_LENGTHS.get(family, ((6, 5), (4, 3), (2, 2)))
    g = torch.Generator().manual_seed(seed)
    cls, sep, pad, double_sep, with_types = TOKENS[family]
    rows, types = [], []
    for la, lb in lengths:
        a = torch.randint(5, 100, (la,), generator=g).tolist()
        b = torch.randint(5, 100, (lb,), generator=g).tolist()
        ids = [cls] + a + [sep] * (2 if double_sep else 1) + b + [sep]
        rows.append(ids)
        types.append([0] * (len(ids) - lb - 1) + [1] * (lb + 1))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, types)):
        input_ids[i, : len(r)] = torch.tensor(r)
        attention_mask[i, : len(r)] = 1
        token_type_ids[i, : len(t)] = torch.tensor(t)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if with_types:
        batch["token_type_ids"] = token_type_ids
    return batch


def labels_for(batch):
    return torch.arange(batch["input_ids"].shape[0]) % TINY["num_labels"]


def token_labels_for(batch):
    """A label per token (-100 on padding, which the loss ignores)."""
    ids = batch["input_ids"]
    labels = (ids + torch.arange(ids.shape[1])) % TINY["num_labels"]
    return labels.masked_fill(batch["attention_mask"] == 0, -100)


# options with which each family's conformance case (and the multi-process run) makes the bridge act
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


def active_bridge(folder, family: str, **options):
    """A tiny stock RoBERTa or BERT classifier saved in `folder` and converted with `identity_init=False` (seed 0),
    its bridge projections enlarged (std 0.3) so that the injection is a large enough share of the logits."""
    from interlayer import BertBridgeForSequenceClassification, RobertaBridgeForSequenceClassification

    build, cls = (
        (build_stock_roberta, RobertaBridgeForSequenceClassification)
        if family == "roberta"
        else (build_stock_bert, BertBridgeForSequenceClassification)
    )
    build(str(folder))
    torch.manual_seed(0)
    model = cls.from_pretrained(str(folder), identity_init=False, **options)
    with torch.no_grad():
        for layer in model.base_model.encoder.layer:
            if layer.bridge is not None:
                layer.bridge.proj.weight.normal_(std=0.3)
    return model


# options with which the conformance cases of the other families make the bridge act
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
# the stock projections a LoRA adapter wraps in each family
LORA_TARGETS = {
    "deberta-v2": ["query_proj", "value_proj"],
    "modernbert": ["Wqkv"],
}
