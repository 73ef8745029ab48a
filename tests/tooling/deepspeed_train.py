"""Train tiny zoo models through the stock `Trainer` with DeepSpeed ZeRO on CPU and save what each rank ends with.

    python tests/tooling/deepspeed_train.py OUT 0 CASE...  # one plain process
    python -m torch.distributed.run --nproc_per_node 2 tests/tooling/deepspeed_train.py OUT STAGE CASE...  # ZeRO, gloo

The cases, examples, batches and order are those of `multiprocess_train.py` (8 examples, 4 epochs of one step,
`per_device_train_batch_size = 8 // WORLD_SIZE`, sequential sampling, dropout off), trained with plain SGD (lr 0.1):
Adam would turn rounding-level gradient differences into full-size steps. STAGE 0 is the plain `Trainer` without
DeepSpeed; 2 and 3 pass the Trainer `deepspeed=zero_config(STAGE)`. Each rank writes `OUT/CASE/rank{RANK}.pt`: the
loss logs and the full state dict (gathered from the ZeRO-3 partitions).

With `zero3_init_load` among the cases, each rank also builds the checkpoints of `LOADS` (a Llama sentinel model
pruned to uneven key/value groups, a latent and a hyper-connection model), loads each with `from_pretrained` before
anything else (no DeepSpeed config alive: a plain load) and, under ZeRO-3, again while the Trainer's stage-3 config is
alive, which makes transformers build it under `deepspeed.zero.Init`; it writes `OUT/zero3_init_load/rank{RANK}.pt`:
both loads' logits and state dicts (the ZeRO-3 one gathered) and how many parameter elements the rank held before
gathering.
"""

from __future__ import annotations

import os
import sys

import deepspeed
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator
from transformers.integrations import is_deepspeed_zero3_enabled

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the fixtures in tests/

from batches import lm_batch  # noqa: E402
from conformance_cases import examples  # noqa: E402
from multiprocess_train import EPOCHS, EXAMPLES, Rows, registry_case, stock_folder  # noqa: E402
from multiprocess_train import cases as multiprocess_cases  # noqa: E402
from stock_checkpoints import build_stock_llama  # noqa: E402

import interlayer  # noqa: E402


def cases() -> dict[str, tuple]:
    """The multi-process cases (`multiprocess_train.cases()`) of the distributed example of every mechanism's record
    (`conformance_cases.examples(distributed=True)`), and the first static HC example: its coefficients are a function
    of its parameters alone, which evaluation after ZeRO's in-place weight writes must not take stale."""
    every = multiprocess_cases()
    static = next(
        tiny
        for tiny in examples().values()
        if tiny.record.name == "hyper-connections" and tiny.example.options.get("hc_mode") == "static"
    )
    return {name: every[name] for name in examples(distributed=True)} | {static.name: registry_case(static)}


CASES = cases()
LOAD_CASE = "zero3_init_load"


def zero_config(stage: int) -> dict:
    """The DeepSpeed config the Trainer gets: ZeRO `stage`, the Trainer's own optimizer (`zero_allow_untested_
    optimizer`: DeepSpeed has tested only its own), the sizes filled in by the Trainer ("auto")."""
    return {
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
    }


def arguments(out: str, name: str, world_size: int, stage: int) -> TrainingArguments:
    return TrainingArguments(
        output_dir=os.path.join(out, name, "trainer"),
        per_device_train_batch_size=EXAMPLES // world_size,
        num_train_epochs=EPOCHS,
        optim="sgd",
        learning_rate=0.1,
        logging_steps=1,
        logging_nan_inf_filter=False,
        save_strategy="no",
        report_to=[],
        seed=0,
        train_sampling_strategy="sequential",
        dataloader_drop_last=True,
        use_cpu=True,
        ddp_backend="gloo" if world_size > 1 else None,
        disable_tqdm=True,
        deepspeed=zero_config(stage) if stage else None,
    )


def full_state_dict(model) -> dict[str, torch.Tensor]:
    """The parameters and buffers, gathered on every rank from ZeRO-3's partitions (a no-op for other stages)."""
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}


def evaluation_logits(model, batch: dict) -> torch.Tensor:
    """The model's logits on `batch` in eval mode without gradient, as the Trainer evaluates (its parameters gathered
    from ZeRO-3's partitions, as the engine's hooks gather them; a no-op for other stages); its mode is kept."""
    training = model.training
    model.eval()
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None), torch.no_grad():
        logits = model(**batch).logits.detach().clone()
    model.train(training)
    return logits


class EvaluateAfterTheFirstStep(TrainerCallback):
    """Evaluates the model without gradient after the first optimizer step, as an evaluation during training does: by
    then ZeRO holds the weights (in its flat buffers), and the later steps write them in place."""

    def __init__(self, batch: dict):
        self.batch, self.logits = batch, None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.logits = evaluation_logits(model, self.batch)


def train(name: str, out: str, rank: int, world_size: int, stage: int) -> None:
    _, model_class, options, rows, _ = CASES[name]
    args = arguments(out, name, world_size, stage)
    torch.manual_seed(0)
    model = model_class.from_pretrained(stock_folder(out, name, rank), **options)
    during = EvaluateAfterTheFirstStep(rows())
    trainer = Trainer(
        model=model, args=args, train_dataset=Rows(rows()), data_collator=default_data_collator, callbacks=[during]
    )
    trainer.train()
    evaluated = evaluation_logits(trainer.model, rows())
    assert not torch.equal(evaluated, during.logits), "the steps after the first changed no logit"
    torch.save(
        {
            "world_size": world_size,
            "deepspeed": trainer.is_deepspeed_enabled,
            "log_history": trainer.state.log_history,
            "state_dict": full_state_dict(trainer.model),
            "evaluated": evaluated,
        },
        os.path.join(out, name, f"rank{rank}.pt"),
    )


def build_pruned_sentinel(folder: str) -> None:
    """A tiny Llama (4 query heads over 2 key/value heads) as a sentinel model with trained-looking gates, pruned:
    layer 0 keeps heads 1, 2, 3 (groups of 1 and 2 heads), layer 1 heads 0, 1 (its second key/value head goes)."""
    build_stock_llama(os.path.join(folder, "stock"))
    torch.manual_seed(0)
    model = interlayer.LlamaSentinelForCausalLM.from_pretrained(os.path.join(folder, "stock"), identity_init=False)
    with torch.no_grad():
        for attn in model.gated_attentions:
            attn.sentinel_gate_logits.normal_()
    model.prune_heads({0: [0], 1: [2, 3]})
    model.save_pretrained(os.path.join(folder, "zoo"))


def converted(model_class, **options):
    def build(folder: str) -> None:
        build_stock_llama(os.path.join(folder, "stock"))
        torch.manual_seed(0)
        model = model_class.from_pretrained(os.path.join(folder, "stock"), **options)
        model.save_pretrained(os.path.join(folder, "zoo"))

    return build


# what the ZeRO-3 run also loads under zero.Init: name: (zoo class, builder of its checkpoint `folder/zoo`); the classes
# whose mechanism adds parameters of its own to a stock module (gates, read-outs)
LOADS = {
    "sentinel_pruned_gqa": (interlayer.LlamaSentinelForCausalLM, build_pruned_sentinel),
    "llama_latent": (
        interlayer.LlamaLatentForCausalLM,
        converted(interlayer.LlamaLatentForCausalLM, identity_init=False, latent_source_layers=[1, 2]),
    ),
    "llama_mhc": (
        interlayer.LlamaMHCForCausalLM,
        converted(interlayer.LlamaMHCForCausalLM, identity_init=False, hc_mode="dynamic", hc_init_noise=0.1),
    ),
}


def load(model_class, folder: str) -> dict:
    """`from_pretrained` of the checkpoint: its logits on a fixed batch, its state dict, how many parameter elements
    the model has and how many this rank held right after loading (all, or none: ZeRO-3 keeps a rank's partition
    apart, in `ds_tensor`)."""
    model = model_class.from_pretrained(os.path.join(folder, "zoo"))
    held = sum(p.numel() for p in model.parameters())
    elements = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())  # ZeRO-3 keeps the full size there
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None), torch.no_grad():
        logits = model(**lm_batch((12, 9, 5))).logits
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    unpartitioned = [n for n, p in model.named_parameters() if not hasattr(p, "ds_id")]
    return {
        "logits": logits,
        "state_dict": state,
        "held": held,
        "elements": elements,
        "unpartitioned": unpartitioned,
        "zero3": is_deepspeed_zero3_enabled(),
    }


def main(out: str, stage: int, names: list[str]) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    # every checkpoint is built (per rank) before the first TrainingArguments starts the process group: from then on
    # `save_pretrained` writes only on rank 0
    training = [name for name in names if name != LOAD_CASE]
    for name in training:
        CASES[name][0](stock_folder(out, name, rank))
    if LOAD_CASE in names:
        folders = {name: os.path.join(out, LOAD_CASE, name, f"rank{rank}") for name in LOADS}
        for name, (_, build) in LOADS.items():
            build(folders[name])
        loads = {name: {"plain": load(model_class, folders[name])} for name, (model_class, _) in LOADS.items()}
        if stage == 3:
            args = arguments(out, LOAD_CASE, world_size, stage)  # alive: from_pretrained builds under zero.Init
            # with `use_cpu=True` the arguments start torch's process group but not DeepSpeed's, which the Trainer
            # starts later; zero.Init before any Trainer needs it (else it partitions for a world of 1)
            deepspeed.init_distributed(dist_backend="gloo")
            for name, (model_class, _) in LOADS.items():
                loads[name]["zero3"] = load(model_class, folders[name])
            del args
        torch.save(loads, os.path.join(out, LOAD_CASE, f"rank{rank}.pt"))
    for name in training:
        train(name, out, rank, world_size, stage)
    if torch.distributed.is_initialized():
        # as in multiprocess_train.py: a process exiting with the Trainer's gloo group open can abort in gloo's threads
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
