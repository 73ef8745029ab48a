"""Train tiny zoo models sharded with FSDP2 (`torch.distributed.fsdp.fully_shard`) and save what each rank ends with.

    python tests/tooling/fsdp_train.py OUT CASE...  # one process, no sharding
    python -m torch.distributed.run --nproc_per_node 2 tests/tooling/fsdp_train.py OUT CASE...  # 2 ranks, gloo, sharded

In several processes every module whose class is named in the model's `_no_split_modules` is sharded with
`fully_shard`, then the root (the recipe of the PyTorch FSDP2 tutorial, and what accelerate's FSDP plugin does with
`fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP`). Each case trains 3 AdamW steps on the same 8 examples: batch 8 in
one process, 4 + 4 in two (rank r takes examples 4r..4r+3). FSDP2 averages the gradients over the ranks, so the
per-rank losses must be means over equally many items: the language-model batches are unpadded (every rank has the
same token count) and the classification and translation losses are means over equally many examples or target
tokens. Dropout is off. Each rank writes `OUT/CASE/rank{RANK}.pt`: the losses (averaged over the ranks), the full
state dict (gathered from the shards) and which modules were sharded.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the fixtures in tests/

from batches import lm_batch, pair_batch, source_batch, target_labels  # noqa: E402
from conformance_cases import examples, kind, no_dropout  # noqa: E402
from stock_checkpoints import encoder_builder  # noqa: E402

import interlayer  # noqa: E402

EXAMPLES = 8
STEPS = 3
LR = 1e-3
# Adam's eps: at the default 1e-8 an element whose gradient is at rounding level takes a step of about lr / 10 whose
# size is set by that rounding (measured: layer 1's gate_proj in Qwen2AttentionResidual, gradient -1.07e-9, ended
# 5.4e-6 apart in one and two processes); at 1e-6 such an element moves by lr / 1000 at most, every gradient of
# the cases (median |g| ~ 3e-4) still well above it
ADAM_EPS = 1e-6
CASE_LR = {"modernbert_qkv_bridge": 3e-4}  # at 1e-3 the tiny ModernBERT's loss overshoots and ends above its start
# each row padded by at most 2 tokens where the family has a sliding window that short (`batches.PAIR_LENGTHS`)
PAIR_LENGTHS = {
    "modernbert": ((6, 5), (6, 4), (5, 4), (5, 5), (6, 3), (4, 5), (6, 5), (5, 4)),
}


def lm_rows():
    batch = lm_batch((12,) * EXAMPLES)
    batch["labels"] = batch["input_ids"].clone()
    return batch


def pair_rows(family):
    def rows():
        lengths = PAIR_LENGTHS.get(family, ((6, 5), (4, 3), (2, 2), (5, 6), (3, 3), (6, 4), (2, 5), (4, 4)))
        batch = pair_batch(family, lengths)
        batch["labels"] = torch.arange(EXAMPLES) % 3
        return batch

    return rows


def seq2seq_rows():
    batch = source_batch((12, 9, 5, 12, 7, 11, 3, 10))
    batch["labels"] = target_labels(batch)
    return batch


def rows_for(family: str):
    family_kind = kind(family)
    return lm_rows if family_kind == "decoder" else seq2seq_rows if family_kind == "seq2seq" else pair_rows(family)


MODERNBERT = interlayer.ModernBertBridgeForSequenceClassification


def cases() -> dict[str, tuple]:
    """`{name: (stock builder, zoo class, options, rows)}`: the distributed example of every mechanism's record, and the
    bridges on ModernBERT's pre-norm layers, where the bridge reads a layer's output through the next layer's attention
    norm."""
    registry = {
        name: (
            tiny.build_stock,
            tiny.model_class,
            {**tiny.options, **no_dropout(tiny.model_class)},
            rows_for(tiny.example.family),
        )
        for name, tiny in examples(distributed=True).items()
    }
    modernbert = {**examples()["ModernBertBridge"].options, "bridge_mode": "qkv", **no_dropout(MODERNBERT)}
    return {
        **registry,
        "modernbert_qkv_bridge": (encoder_builder("modernbert"), MODERNBERT, modernbert, pair_rows("modernbert")),
    }


CASES = cases()


def shard(model, mesh) -> list[str]:
    """The plain recipe: `fully_shard` every module whose class `_no_split_modules` names (innermost first), then the
    root; nothing specific to the model."""
    from torch.distributed.fsdp import fully_shard

    names = set(model._no_split_modules)
    units = [name for name, module in model.named_modules() if type(module).__name__ in names]
    for name in reversed(units):
        fully_shard(model.get_submodule(name), mesh=mesh)
    fully_shard(model, mesh=mesh)
    return units


def full_state_dict(model) -> dict[str, torch.Tensor]:
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in model.state_dict().items()
    }


def train(name: str, out: str, rank: int, world_size: int, mesh) -> None:
    _, model_class, options, rows = CASES[name]
    torch.manual_seed(0)
    model = model_class.from_pretrained(os.path.join(out, name, "stock"), **options)
    units = shard(model, mesh) if world_size > 1 else []
    model.train()
    batch = rows()
    share = EXAMPLES // world_size
    batch = {k: v[rank * share : (rank + 1) * share] for k, v in batch.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=CASE_LR.get(name, LR), eps=ADAM_EPS)
    losses = []
    for _ in range(STEPS):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        logged = loss.detach().clone()
        if world_size > 1:
            dist.all_reduce(logged)
            logged /= world_size
        losses.append(logged.item())
    state = full_state_dict(model)
    torch.save(
        {"world_size": world_size, "losses": losses, "state_dict": state, "sharded": units},
        os.path.join(out, name, f"rank{rank}.pt"),
    )


def main(out: str, names: list[str]) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    for name in names:
        if rank == 0:
            CASES[name][0](os.path.join(out, name, "stock"))
    mesh = None
    if world_size > 1:
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        dist.barrier()  # rank 0 has written the stock checkpoints
        mesh = init_device_mesh("cpu", (world_size,))
    for name in names:
        train(name, out, rank, world_size, mesh)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
