"""Zoo models converted from the tiny stock checkpoints of `stock_checkpoints` with their mechanism made to act."""

import torch
from stock_checkpoints import build_stock_bert, build_stock_roberta


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


def stream_spread(model, batch) -> float:
    """How far a hyper-connection decoder's K streams are from copies of each other after its last layer: the largest
    difference between any stream and stream 0, relative to the streams' largest magnitude."""
    captured = {}
    handle = model.base_model.stack_layers[-1].register_forward_hook(lambda m, a, out: captured.update(streams=out))
    with torch.no_grad():
        model(**batch)
    handle.remove()
    streams = captured["streams"]
    return ((streams - streams[..., :1, :]).abs().max() / streams.abs().max()).item()
