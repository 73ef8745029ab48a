"""Sentinel gates beyond GPT-2 (their conformance suites are in test_sentinel_conformance.py): the Llama family
(Llama, Qwen2, Qwen3: grouped-query attention) and the BERT family (BERT, RoBERTa: encoders); the base cells,
structural pruning of query heads and of key/value heads whose whole group is pruned, the controller and growth."""

import pytest
import torch
from batches import labels_for, lm_batch, pair_batch
from generation_reference import greedy_without_cache
from stock_checkpoints import (
    TINY_DECODER,
    build_stock_bert_wide,
    build_stock_encoder_wide,
    build_stock_llama,
    build_stock_qwen2_full_attention,
    build_stock_qwen3,
    build_stock_roberta_wide,
)
from transformers import (
    BertConfig,
    BertModel,
    RobertaConfig,
    RobertaModel,
)

from interlayer import (
    BertSentinelForSequenceClassification,
    LlamaSentinelForCausalLM,
    RobertaSentinelForSequenceClassification,
)


@pytest.fixture
def llama_dir(tmp_path):
    build_stock_llama(str(tmp_path / "llama"))
    return str(tmp_path / "llama")


@pytest.mark.parametrize(
    "family, build_stock, make_batch",
    [
        ("llama", build_stock_llama, lm_batch),
        ("qwen2", build_stock_qwen2_full_attention, lm_batch),
        ("qwen3", build_stock_qwen3, lm_batch),
        ("bert", lambda f: build_stock_encoder_wide(f, BertModel, BertConfig), lambda: pair_batch("bert")),
        ("roberta", lambda f: build_stock_encoder_wide(f, RobertaModel, RobertaConfig), lambda: pair_batch("roberta")),
    ],
)
def test_base_models_convert_and_equal_stock(tmp_path, family, build_stock, make_batch):
    """The `base` cell of each family: `convert` loads every stock weight of the base model (none missing, none
    unused but a causal LM's head; the encoders from a stock base checkpoint, pooler included) and, at identity
    init, the hidden states equal the stock base model's."""
    from transformers import AutoModel

    from interlayer import convert

    build_stock(str(tmp_path / "stock"))
    model, report = convert(str(tmp_path / "stock"), "sentinel", task="base")
    assert report.entry.stock_model_type == family and type(model) is report.entry.model_class
    assert all("sentinel_" in k for k in report.missing_keys), report.missing_keys
    assert all(k.startswith(("lm_head.", "classifier.", "score.")) for k in report.unexpected_keys)
    stock = AutoModel.from_pretrained(str(tmp_path / "stock")).eval()
    batch = make_batch()
    with torch.no_grad():
        expected, got = stock(**batch).last_hidden_state, model.eval()(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], expected[real])


# 4 query heads in 2 groups of 2 (key/value heads 0 and 1): layer 0 keeps a partial group (groups of 1 and 2 query
# heads), layer 1 loses key/value head 1 (its group is empty), layer 2 keeps one query head of group 1
GQA_PRUNE = {0: [1], 1: [2, 3], 2: [0, 1, 2]}
KEPT = {0: ([0, 2, 3], [0, 1]), 1: ([0, 1], [0]), 2: ([3], [1])}


def test_gqa_pruning_removes_query_heads_and_emptied_kv_groups(llama_dir, tmp_path):
    torch.manual_seed(0)
    model = LlamaSentinelForCausalLM.from_pretrained(llama_dir, identity_init=False).eval()
    with torch.no_grad():
        for attn in model.gated_attentions:
            attn.sentinel_gate_logits.normal_()
    before = [
        {name: getattr(layer.self_attn, name).weight.clone() for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
        for layer in model.model.layers
    ]
    batch = lm_batch()
    with torch.no_grad():
        for layer, heads in GQA_PRUNE.items():
            model.model.layers[layer].self_attn.sentinel_head_mask[heads] = 0.0
        masked = model(**batch).logits
        model.prune_heads(GQA_PRUNE)
        pruned = model(**batch).logits
    torch.testing.assert_close(pruned, masked)
    d = TINY_DECODER["head_dim"]

    def rows(heads):
        return torch.cat([torch.arange(h * d, (h + 1) * d) for h in heads])

    for layer, (heads, kv_heads) in KEPT.items():
        attn, old = model.model.layers[layer].self_attn, before[layer]
        assert attn.head_ids.tolist() == heads and attn.kv_head_ids.tolist() == kv_heads
        torch.testing.assert_close(attn.q_proj.weight, old["q_proj"][rows(heads)])
        torch.testing.assert_close(attn.k_proj.weight, old["k_proj"][rows(kv_heads)])
        torch.testing.assert_close(attn.v_proj.weight, old["v_proj"][rows(kv_heads)])
        torch.testing.assert_close(attn.o_proj.weight, old["o_proj"][:, rows(heads)])
    assert model.model.layers[0].self_attn.uniform_groups is False
    assert model.model.layers[1].self_attn.num_key_value_groups == 2
    # the saved model reloads with the smaller shapes and computes the same
    model.save_pretrained(tmp_path / "pruned")
    reloaded = LlamaSentinelForCausalLM.from_pretrained(tmp_path / "pruned").eval()
    assert reloaded.model.layers[0].self_attn.k_proj.weight.shape == (2 * d, TINY_DECODER["hidden_size"])
    assert reloaded.model.layers[1].self_attn.k_proj.weight.shape == (d, TINY_DECODER["hidden_size"])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, pruned)


def test_pruned_gqa_checkpoint_built_without_weight_init_computes_the_same(llama_dir, tmp_path):
    """A saved pruned grouped-query model whose groups have unequal sizes, built under `no_init_weights` (as
    `from_pretrained` builds it under DeepSpeed ZeRO-3) and given its weights, computes the logits of the model loaded
    normally: the query heads' key/value index (`kv_for_head`) comes from the config at construction."""
    from transformers.initialization import no_init_weights

    torch.manual_seed(0)
    model = LlamaSentinelForCausalLM.from_pretrained(llama_dir, identity_init=False)
    model.prune_heads(GQA_PRUNE)
    model.save_pretrained(tmp_path / "pruned")
    loaded = LlamaSentinelForCausalLM.from_pretrained(tmp_path / "pruned").eval()
    assert not loaded.model.layers[0].self_attn.uniform_groups
    with no_init_weights():
        bare = LlamaSentinelForCausalLM(loaded.config)
    bare.load_state_dict(loaded.state_dict())
    for got, expected in zip(bare.gated_attentions, loaded.gated_attentions):
        assert got.kv_for_head.tolist() == expected.kv_for_head.tolist()
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(bare.eval()(**batch).logits, loaded(**batch).logits)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_gqa_generate_with_cache_after_pruning(llama_dir, attn_implementation):
    torch.manual_seed(0)
    model = LlamaSentinelForCausalLM.from_pretrained(
        llama_dir, identity_init=False, unet_skips=True, attn_implementation=attn_implementation
    ).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.sentinel_unet_fuse is not None:
                layer.sentinel_unet_fuse.weight.normal_(std=0.1)
    model.prune_heads({0: [1], 1: [2, 3], 2: [0, 1, 2, 3]})
    prompt = lm_batch(lengths=(5,))["input_ids"]
    cached = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(cached, greedy_without_cache(model, prompt, 8))
    assert model.model.layers[1].self_attn.k_proj.weight.shape[0] == TINY_DECODER["head_dim"]


@pytest.mark.parametrize(
    "model_class, build_stock, family",
    [
        (BertSentinelForSequenceClassification, build_stock_bert_wide, "bert"),
        (RobertaSentinelForSequenceClassification, build_stock_roberta_wide, "roberta"),
    ],
)
def test_encoder_pruning_equals_masking_and_reloads(tmp_path, model_class, build_stock, family):
    """Pruned encoder heads (a whole layer too) compute what their gates at zero let through, with padding, and the
    pruned classifier reloads with the smaller shapes; the controller's tools run on it."""
    from interlayer.sentinel import head_scores

    build_stock(str(tmp_path / "stock"))
    torch.manual_seed(0)
    model = model_class.from_pretrained(str(tmp_path / "stock"), identity_init=False).eval()
    batch = pair_batch(family)
    heads = {0: [1, 2], 3: [0, 1, 2, 3]}
    with torch.no_grad():
        for layer, hs in heads.items():
            model.base_model.encoder.layer[layer].attention.self.sentinel_head_mask[hs] = 0.0
        masked = model(**batch).logits
        model.prune_heads(heads)
        pruned = model(**batch).logits
    torch.testing.assert_close(pruned, masked)
    layer0 = model.base_model.encoder.layer[0].attention
    assert layer0.self.query.weight.shape == (16, 32) and layer0.output.dense.weight.shape == (32, 16)
    model.save_pretrained(tmp_path / "pruned")
    reloaded = model_class.from_pretrained(tmp_path / "pruned").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, pruned)
    batch["labels"] = labels_for(batch)
    for strategy in ("entropy", "magnitude", "importance"):
        scores = head_scores(reloaded, strategy, [batch])
        assert [len(s) for s in scores] == [2, 4, 4, 0]


def _family_model_and_rows(tmp_path, family):
    """A converted tiny model of the family and 8 training rows (labels included)."""
    if family == "llama":
        build_stock_llama(str(tmp_path / "stock"))
        model = LlamaSentinelForCausalLM.from_pretrained(str(tmp_path / "stock"))
        batch = lm_batch(lengths=(12, 9, 5, 7, 12, 3, 8, 10))
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    else:
        build_stock_bert_wide(str(tmp_path / "stock"))
        model = BertSentinelForSequenceClassification.from_pretrained(str(tmp_path / "stock"))
        batch = pair_batch("bert", lengths=((6, 5), (4, 3), (2, 2), (5, 1)) * 2)
        batch["labels"] = labels_for(batch)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(8)]
    return model, rows


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_controller_and_growth_run_on_the_family(tmp_path, family):
    """The controller masks exactly its budget in a Trainer run (30% of the heads, rounded down), the masked heads
    are then pruned (in grouped-query attention, a key/value head only with its whole group) and the pruned model
    computes what the masked one did; progressive growth starts from its share of the heads."""
    from transformers import Trainer, TrainingArguments

    from interlayer.sentinel import ProgressiveGrowthCallback, SentinelControllerCallback

    model, rows = _family_model_and_rows(tmp_path, family)
    total = model.config.num_hidden_layers * model.config.num_attention_heads
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=6,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    controller = SentinelControllerCallback(
        warmup_steps=0, update_frequency=1, entropy_threshold=0.0, grad_threshold=1e9, learning_rate=10.0
    )
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[controller]).train()
    assert sum(int((a.sentinel_head_mask == 0).sum()) for a in model.gated_attentions) == int(0.3 * total)
    model.eval()
    batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0] if k != "labels"}
    with torch.no_grad():
        masked = model(**batch).logits
        pruned = model.prune_masked_heads()
        torch.testing.assert_close(model(**batch).logits, masked)
    assert sum(len(v) for v in pruned.values()) == int(0.3 * total)
    for attn in model.gated_attentions:
        assert attn.kv_head_ids.tolist() == model.config.kv_heads_in_layer(attn.layer_idx)

    growth = ProgressiveGrowthCallback(start_active=0.25, grow_per_epoch=0.25, target_active=0.75, score_batches=1)
    args.max_steps, args.num_train_epochs = -1, 1
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[growth]).train()
    remaining = total - int(0.3 * total)
    active = sum(int((a.sentinel_head_mask > 0).sum()) for a in model.gated_attentions)
    assert round(0.25 * remaining) <= active <= round(0.25 * remaining) + round(0.25 * remaining)


def test_gqa_entropy_matches_manual_softmax(llama_dir):
    """The controller's per-head attention entropy on grouped-query attention: each query head against its own
    group's keys (after the rotary embedding), checked against a manual softmax, on a layer with ragged groups."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = LlamaSentinelForCausalLM.from_pretrained(llama_dir).eval()
    model.prune_heads({1: [1]})  # layer 1: query heads 0 | 2, 3 on key/value heads 0 | 1
    layer = model.model.layers[1]
    attn = layer.self_attn
    attn.measure_entropy = True
    ids = lm_batch(lengths=(8,))["input_ids"]
    d = TINY_DECODER["head_dim"]
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        x = layer.input_layernorm(hidden)
        q = attn.q_proj(x).view(1, 8, 3, d).transpose(1, 2)
        k = attn.k_proj(x).view(1, 8, 2, d).transpose(1, 2)
        cos, sin = model.model.rotary_emb(x, torch.arange(8)[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        expected = []
        for head, kv in zip(range(3), (0, 1, 1)):
            scores = (q[0, head] @ k[0, kv].T / d**0.5).masked_fill(~torch.ones(8, 8, dtype=torch.bool).tril(), -1e9)
            p = scores.softmax(-1)
            expected.append(-(p * p.clamp(min=1e-12).log()).sum(-1).mean())
    torch.testing.assert_close(attn.last_entropy, torch.stack(expected))
