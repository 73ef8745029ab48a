"""Train tiny zoo models through the stock `Trainer` in one or several processes and save what each rank ends with.

    python tests/tooling/multiprocess_train.py OUT CASE...  # one process, batch 8
    python -m torch.distributed.run --nproc_per_node 2 tests/tooling/multiprocess_train.py OUT CASE...  # 4 + 4, gloo

Every case trains on the same 8 examples, one optimizer step per epoch, 4 epochs: the global batch is always the 8
examples, split as `per_device_train_batch_size = 8 // WORLD_SIZE`. The order is fixed: `train_sampling_strategy=
"sequential"` gives a `SequentialSampler`, which accelerate shards by whole batches (rank 0 gets examples 0-3, rank
1 examples 4-7), so one process and two processes see the same 8 examples in every step. Dropout is off (each rank
would draw its own masks). Each rank writes `OUT/CASE/rank{RANK}.pt`: the loss logs, the model's state dict
(parameters and buffers: gates, head masks) and the state of every stateful callback; and, after every case,
`OUT/mean_over_ranks_rank{RANK}.pt`, what `mean_tensor_over_ranks` made of `[RANK + 1, 2]` weighted by `RANK + 1`.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn
from transformers import Trainer, TrainingArguments, default_data_collator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the fixtures in tests/

from batches import lm_batch, lm_labels, pair_batch, source_batch, target_labels  # noqa: E402
from conformance_cases import examples, kind, no_dropout  # noqa: E402
from stock_checkpoints import build_stock_gpt2  # noqa: E402

import interlayer  # noqa: E402
from interlayer.callbacks import MechanismStatsCallback, mean_tensor_over_ranks  # noqa: E402
from interlayer.sentinel import ProgressiveGrowthCallback, SentinelControllerCallback  # noqa: E402

EXAMPLES = 8
EPOCHS = 4
LM_LENGTHS = (12, 9, 5, 12, 7, 12, 3, 10)
PAIR_LENGTHS = ((6, 5), (4, 3), (2, 2), (5, 6), (3, 3), (6, 4), (2, 5), (4, 4))


def lm_rows():
    batch = lm_batch(LM_LENGTHS)
    batch["labels"] = lm_labels(batch)
    return batch


def pair_rows(family):
    def rows():
        batch = pair_batch(family, PAIR_LENGTHS)
        batch["labels"] = torch.arange(EXAMPLES) % 3
        return batch

    return rows


def seq2seq_rows():
    batch = source_batch((12, 9, 5, 12, 7, 11, 3, 10))
    batch["labels"] = target_labels(batch)
    return batch


def rows_for(family: str):
    """The 8 training examples of a family's tiny model."""
    family_kind = kind(family)
    return lm_rows if family_kind == "decoder" else seq2seq_rows if family_kind == "seq2seq" else pair_rows(family)


def sentinel_controller():
    # entropies and gate gradients are read and acted on at every step from step 1
    return SentinelControllerCallback(warmup_steps=1, update_frequency=1, entropy_threshold=1.0, grad_threshold=1.0)


def progressive_growth():
    return ProgressiveGrowthCallback(start_active=0.25, grow_per_epoch=0.25, target_active=1.0, warmup_steps=2)


def registry_case(tiny) -> tuple:
    return (
        tiny.build_stock,
        tiny.model_class,
        {**tiny.options, **no_dropout(tiny.model_class)},
        rows_for(tiny.example.family),
        (),
    )


GPT2_SENTINEL = interlayer.GPT2SentinelLMHeadModel
GATED = dict(identity_init=False, unet_skips=True, **no_dropout(GPT2_SENTINEL))


def cases() -> dict[str, tuple]:
    """`{name: (stock builder, zoo class, options, rows, callbacks)}`: the distributed example of every mechanism's
    record (`conformance_cases.examples(distributed=True)`), two more examples (the BERT bridges, Qwen3's compiled mHC
    coefficients in each process), and the sentinel's training tools (the gates' L1 term, the controller, growth)."""
    return {
        **{name: registry_case(tiny) for name, tiny in examples(distributed=True).items()},
        **{name: registry_case(examples()[name]) for name in ("BertBridge", "Qwen3MHC")},
        "sentinel_gpt2_l1": (build_stock_gpt2, GPT2_SENTINEL, {**GATED, "gate_l1": 1e-4}, lm_rows, ()),
        "sentinel_gpt2_controller": (build_stock_gpt2, GPT2_SENTINEL, GATED, lm_rows, (sentinel_controller,)),
        "sentinel_gpt2_growth": (build_stock_gpt2, GPT2_SENTINEL, GATED, lm_rows, (progressive_growth,)),
    }


CASES = cases()


class Rows(torch.utils.data.Dataset):
    """The examples of a padded batch, one dict per row, so that `default_data_collator` stacks them back."""

    def __init__(self, batch):
        self.batch = batch

    def __len__(self):
        return EXAMPLES

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.batch.items()}


def callback_state(callback) -> dict:
    state = callback.state() if hasattr(callback, "state") else {}
    return {**state, "last_report": dict(getattr(callback, "last_report", {}))}


def stock_folder(out: str, name: str, rank: int) -> str:
    return os.path.join(out, name, f"stock_rank{rank}")


def train(name: str, out: str, rank: int, world_size: int) -> None:
    _, model_class, options, rows, callback_makers = CASES[name]
    stock = stock_folder(out, name, rank)
    torch.manual_seed(0)
    model = model_class.from_pretrained(stock, **options)
    active = [n for n, m in model.named_modules() if isinstance(m, nn.Dropout) and m.p > 0]
    if active:
        raise RuntimeError(f"{name}: dropout still active in {active[:3]}")
    args = TrainingArguments(
        output_dir=os.path.join(out, name, "trainer"),
        per_device_train_batch_size=EXAMPLES // world_size,
        num_train_epochs=EPOCHS,
        learning_rate=1e-3,
        logging_steps=1,
        logging_nan_inf_filter=False,
        save_strategy="no",
        report_to=[],
        seed=0,
        train_sampling_strategy="sequential",
        dataloader_drop_last=True,
        use_cpu=True,
        ddp_backend="gloo" if world_size > 1 else None,
        # every parameter gets a gradient but stock Marian's sinusoidal position tables (docs/multiprocess.md)
        ddp_find_unused_parameters=model.config.is_encoder_decoder,
        disable_tqdm=True,
    )
    callbacks = [make() for make in callback_makers]
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Rows(rows()),
        data_collator=default_data_collator,
        callbacks=callbacks,
    )
    MechanismStatsCallback.attach(trainer)
    trainer.train()
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    torch.save(
        {
            "world_size": world_size,
            "log_history": trainer.state.log_history,
            "state_dict": {k: v.detach().clone() for k, v in unwrapped.state_dict().items()},
            "callbacks": {type(c).__name__: callback_state(c) for c in callbacks},
        },
        os.path.join(out, name, f"rank{rank}.pt"),
    )


def main(out: str, names: list[str]) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    # before the first Trainer starts the process group: from then on `save_pretrained` writes only on rank 0
    for name in names:
        CASES[name][0](stock_folder(out, name, rank))
    for name in names:
        train(name, out, rank, world_size)
    check = mean_tensor_over_ranks(torch.tensor([rank + 1.0, 2.0]), weight=rank + 1)
    torch.save(check, os.path.join(out, f"mean_over_ranks_rank{rank}.pt"))
    if torch.distributed.is_initialized():
        # the Trainer leaves its gloo process group open; a process exiting with it open can abort in gloo's threads
        # ("terminate called without an active exception", seen once in CI)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
