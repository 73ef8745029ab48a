"""PEFT adapters act on the bridge too: LoRA logits before and after `merge_and_unload()` agree."""

import pytest
import torch
from batches import pair_batch
from converted_models import active_bridge

peft = pytest.importorskip("peft", reason="peft is not installed (pip install peft); these tests need it")

CASES = [
    # the QKV bridge with each source layer's own key/value modules (the default), and with the target's
    ("roberta", dict(bridge_mode="qkv"), ["query", "key", "value"]),
    ("bert", dict(bridge_mode="hybrid", route_topk=2), ["query", "key", "value"]),
    ("roberta", dict(bridge_mode="qkv", qkv_kv_weights="target"), ["query", "key", "value"]),
    # adapters on the bridge's own HDIM scorers (4-term MLP and bilinear)
    ("roberta", dict(bridge_mode="hdim", hdim_chunk_size=4), ["scorer.0", "scorer.2"]),
    ("bert", dict(bridge_mode="hdim", hdim_scorer="bilinear"), ["scorer"]),
]


@pytest.mark.parametrize("family,options,targets", CASES)
def test_lora_unmerged_logits_equal_merged_logits(tmp_path, family, options, targets):
    model = active_bridge(tmp_path, family, **options)
    # init_lora_weights=False: LoRA B is not zero, so the adapters change the function before any training
    lora = peft.LoraConfig(target_modules=targets, r=4, lora_alpha=64, init_lora_weights=False)
    wrapped = peft.get_peft_model(model, lora).eval()
    batch = pair_batch(family)
    with torch.no_grad():
        unmerged = wrapped(**batch).logits
        with wrapped.disable_adapter():
            base = wrapped(**batch).logits
        merged = wrapped.merge_and_unload()(**batch).logits
    assert (unmerged - base).abs().max() > 1e-3, "the adapters must change the logits for the test to mean anything"
    torch.testing.assert_close(unmerged, merged)


def test_modules_to_save_trains_the_bridge_beside_the_adapters(tmp_path):
    """docs/bridges.md: `get_peft_model` freezes every bridge parameter unless `modules_to_save` names the bridge
    modules; with `["bridge", "bridge_router"]` each of them trains and gets a gradient, and the new head trains."""
    batch = pair_batch("roberta")
    labels = torch.arange(batch["input_ids"].shape[0]) % 2
    for modules, trained in ((None, False), (["bridge", "bridge_router"], True)):
        model = active_bridge(tmp_path / str(trained), "roberta", bridge_mode="hybrid")
        mechanism = len(model.mechanism_parameter_names())
        lora = peft.LoraConfig(task_type="SEQ_CLS", target_modules=["query", "key", "value"], modules_to_save=modules)
        wrapped = peft.get_peft_model(model, lora)
        wrapped(**batch, labels=labels).loss.backward()
        bridge = {n: p for n, p in wrapped.named_parameters() if p.requires_grad and "bridge" in n}
        assert len(bridge) == (mechanism if trained else 0)
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in bridge.values())
        assert any(p.requires_grad for n, p in wrapped.named_parameters() if "classifier" in n)
