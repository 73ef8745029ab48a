"""Head-selection strategies, the gate controller, progressive growth and the heat-map."""

import json

import pytest
import torch
from batches import lm_batch, lm_labels
from stock_checkpoints import build_stock_gpt2
from transformers import Trainer, TrainerCallback, TrainerState, TrainingArguments

from interlayer import GPT2SentinelLMHeadModel
from interlayer.callbacks import MechanismStatsCallback
from interlayer.sentinel import (
    ProgressiveGrowthCallback,
    SentinelControllerCallback,
    head_entropy,
    mask_gradient,
    prune_by_strategy,
    select_heads_to_prune,
)


@pytest.fixture
def model(tmp_path):
    build_stock_gpt2(str(tmp_path / "gpt2"))
    return GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / "gpt2")).eval()


def batches(n=2):
    out = []
    for seed in range(n):
        b = lm_batch(seed=seed)
        b["labels"] = lm_labels(b)
        out.append(b)
    return out


def test_magnitude_prunes_the_smallest_heads(model):
    with torch.no_grad():
        attn = model.transformer.h[2].attn
        w = attn.c_attn.weight.view(32, 3, 4, 8)
        w[:, :, 1] *= 0.01
        attn.c_proj.weight.view(4, 8, 32)[1] *= 0.01
    assert select_heads_to_prune(model, 1 / 16, "magnitude") == {2: [1]}


def test_entropy_prunes_the_most_diffuse_heads(model):
    with torch.no_grad():
        model.transformer.h[1].attn.c_attn.weight.view(32, 3, 4, 8)[:, 0, 3] = 0.0  # zero query: uniform attention
        model.transformer.h[1].attn.c_attn.bias.view(3, 4, 8)[0, 3] = 0.0
    entropy = head_entropy(model, batches())
    assert entropy[1][3] == max(float(e.max()) for e in entropy)
    assert select_heads_to_prune(model, 1 / 16, "entropy", batches()) == {1: [3]}


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_entropy_ignores_padding(tmp_path, side, attn_implementation):
    """An example's head entropies (the entropy strategy's and the controller's) are the same alone and padded:
    padded keys get no attention and padded query positions are not averaged in."""
    build_stock_gpt2(str(tmp_path / "gpt2"))
    model = GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / "gpt2"), attn_implementation=attn_implementation)
    model.eval()
    ids = lm_batch(lengths=(7,))["input_ids"]
    alone = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    pad = torch.zeros(1, 5, dtype=torch.long)
    real = torch.ones_like(ids)
    if side == "right":
        padded = {"input_ids": torch.cat([ids, pad], 1), "attention_mask": torch.cat([real, pad], 1)}
    else:
        mask = torch.cat([pad, real], 1)
        padded = {"input_ids": torch.cat([pad, ids], 1), "attention_mask": mask, "position_ids": mask.cumsum(1) - 1}
        padded["position_ids"] = padded["position_ids"].clamp(min=0)
    expected = head_entropy(model, [alone])
    for got, want in zip(head_entropy(model, [padded]), expected):
        torch.testing.assert_close(got, want)
    attn = model.gated_attentions[2]
    attn.measure_entropy = True  # what the controller reads after a training step
    with torch.no_grad():
        model(**padded)
    torch.testing.assert_close(attn.last_entropy, expected[2])


def test_importance_prunes_heads_the_loss_does_not_need(model):
    with torch.no_grad():
        model.transformer.h[0].attn.c_proj.weight.view(4, 8, 32)[2] = 0.0  # head 0.2 contributes nothing
    assert select_heads_to_prune(model, 1 / 16, "importance", batches()) == {0: [2]}


def test_random_is_seeded_and_fractions_count_pruned_heads(model):
    first = select_heads_to_prune(model, 0.25, "random", seed=3)
    assert first == select_heads_to_prune(model, 0.25, "random", seed=3)
    assert sum(len(v) for v in first.values()) == 4
    prune_by_strategy(model, 0.25, "random", seed=3)
    more = select_heads_to_prune(model, 0.5, "random", seed=3)
    assert sum(len(v) for v in more.values()) == 4  # 8 of 16 in total, 4 already gone
    with pytest.raises(ValueError, match="strategy"):
        select_heads_to_prune(model, 0.5, "loudest")
    with pytest.raises(ValueError, match="fraction"):
        select_heads_to_prune(model, 1.5, "random")


def test_controller_update_follows_the_seed_rules(model):
    controller = SentinelControllerCallback(mask_threshold=0.0)
    attns = model.gated_attentions
    attns[0].sentinel_head_mask[3] = 0.0  # masked: never moved
    before = [a.sentinel_gate_logits.detach().clone() for a in attns]
    entropies = [torch.tensor([2.0, 1.0, 2.0, 2.0])] + [torch.zeros(4)] * 3
    grads = [torch.tensor([1.0, 1e-5, 1e-5, 1e-5])] + [torch.ones(4)] * 3
    controller.update(model, entropies, grads, lr=0.01)
    delta = attns[0].sentinel_gate_logits.detach() - before[0]
    torch.testing.assert_close(delta, torch.tensor([-0.001, -0.0005, -0.0015, 0.0]))
    for a, b in zip(attns[1:], before[1:]):
        assert torch.equal(a.sentinel_gate_logits.detach(), b)


def test_controller_masks_low_gates_within_the_budget(model):
    controller = SentinelControllerCallback(max_pruned_fraction=2 / 16)
    with torch.no_grad():
        for h in range(3):
            model.gated_attentions[1].sentinel_gate_logits[h] = -10.0 - h
    controller.update(model, [None] * 4, None, lr=0.01)
    assert model.gated_attentions[1].sentinel_head_mask.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert controller.last_report["sentinel/masked_heads"] == 2


def test_controller_drives_firing_heads_to_the_mask_and_they_get_pruned(model):
    """Heads whose rules keep firing fall below the mask threshold, are masked, and `prune_masked_heads()` removes
    them; heads whose rules do not fire keep their gates. (The seed's controller stopped moving gates at 0.2.)"""
    controller = SentinelControllerCallback(learning_rate=5.0)  # 0.5 logits per update for high entropy
    firing = {0: [1], 2: [0, 3]}
    entropies = [torch.tensor([2.0 if h in firing.get(layer, []) else 1.0 for h in range(4)]) for layer in range(4)]
    grads = [torch.ones(4)] * 4
    for _ in range(20):
        controller.update(model, entropies, grads, lr=controller.learning_rate)
    for layer, attn in enumerate(model.gated_attentions):
        masked = [h for h in range(4) if attn.sentinel_head_mask[h] == 0]
        assert masked == firing.get(layer, [])
        for h in range(4):
            if h not in masked:
                assert attn.learned_gates()[h] == 1.0
    batch = lm_batch()
    with torch.no_grad():
        before = model(**batch).logits
        assert model.prune_masked_heads() == firing
        torch.testing.assert_close(model(**batch).logits, before)
    assert [a.num_heads for a in model.gated_attentions] == [3, 4, 2, 4]
    assert controller.last_report["sentinel/controller_budget_left"] == 1  # floor(0.3 * 16) = 4, 3 used


def test_controller_in_the_trainer_masks_and_prunes_no_more_than_its_budget(model, tmp_path):
    """Every rule fires for every head: the controller lowers and masks exactly its budget (30% of 16 heads,
    rounded down: 4) and leaves the other gates alone; after `prune_masked_heads()` the pruned heads use up the
    budget and nothing more is masked."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=8,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )

    def controller():
        return SentinelControllerCallback(
            warmup_steps=0, update_frequency=1, entropy_threshold=0.0, grad_threshold=1e9, learning_rate=10.0
        )

    Trainer(model=model, args=args, train_dataset=rows(), callbacks=[controller()]).train()
    masks = torch.stack([a.sentinel_head_mask for a in model.gated_attentions])
    assert int((masks == 0).sum()) == 4
    rest = torch.cat([a.learned_gates()[a.sentinel_head_mask > 0] for a in model.gated_attentions])
    assert rest.min() > 0.9  # only the optimizer moved them
    pruned = model.prune_masked_heads()
    assert sum(len(v) for v in pruned.values()) == 4
    assert sum(a.num_heads for a in model.gated_attentions) == 12
    Trainer(model=model, args=args, train_dataset=rows(), callbacks=[controller()]).train()
    assert all(int((a.sentinel_head_mask == 0).sum()) == 0 for a in model.gated_attentions)
    assert sum(len(v) for v in model.config.pruned_heads.values()) == 4


def test_controller_decay_schedule():
    controller = SentinelControllerCallback(learning_rate=0.01, lr_decay=0.5, lr_decay_every=10, lr_floor=0.002)
    assert [controller.current_lr(s) for s in (0, 9, 10, 25, 100)] == [0.01, 0.01, 0.005, 0.0025, 0.002]


def rows(n=8):
    b = lm_batch(lengths=(10,) * n)
    b["labels"] = lm_labels(b)
    return [{k: v[i] for k, v in b.items()} for i in range(n)]


@pytest.mark.parametrize("restore_flag", [True, False], ids=["trainer_restores", "transformers_default"])
def test_controller_runs_in_the_trainer_and_survives_resume(model, tmp_path, restore_flag):
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=2,
        max_steps=4,
        save_steps=2,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        seed=0,
        restore_callback_states_from_checkpoint=restore_flag,
    )
    controller = SentinelControllerCallback(warmup_steps=0, update_frequency=1, entropy_threshold=0.0)
    trainer = Trainer(model=model, args=args, train_dataset=rows(), callbacks=[controller])
    MechanismStatsCallback.attach(trainer)
    trainer.train()
    assert controller.updates == 4
    logged = [r for r in trainer.state.log_history if "sentinel/controller_lr" in r]
    assert logged and "sentinel/L2/entropy" in logged[0] and "sentinel/L2/gate_grad" in logged[0]
    assert "sentinel/L3/gate_h1" in logged[0] and logged[0]["sentinel/heads_active"] == 16
    saved = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    assert saved["stateful_callbacks"]["SentinelControllerCallback"]["attributes"]["updates"] == 2
    fresh = SentinelControllerCallback(warmup_steps=0, update_frequency=1, entropy_threshold=0.0)
    resumed = Trainer(model=model, args=args, train_dataset=rows(), callbacks=[fresh])
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    restored = [c for c in resumed.callback_handler.callbacks if isinstance(c, SentinelControllerCallback)][0]
    assert restored.updates == 4  # 2 restored from the checkpoint + 2 more steps


def test_progressive_growth_regrows_by_importance(model, tmp_path):
    args = TrainingArguments(
        output_dir=str(tmp_path / "grow"),
        per_device_train_batch_size=4,
        num_train_epochs=3,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    growth = ProgressiveGrowthCallback(start_active=0.25, grow_per_epoch=0.25, target_active=0.75, warmup_steps=1)
    active_per_epoch = []

    class Spy(TrainerCallback):
        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            active_per_epoch.append(sum(int((a.sentinel_head_mask > 0).sum()) for a in model.gated_attentions))

    trainer = Trainer(model=model, args=args, train_dataset=rows(), callbacks=[growth, Spy()])
    trainer.train()
    # 4 at start; each epoch grows at most 4 (only heads expected to lower the loss), capped at 12 of 16
    grown = [after - before for before, after in zip([4] + active_per_epoch, active_per_epoch)]
    assert grown[0] > 0 and all(0 <= n <= 4 for n in grown) and active_per_epoch[-1] <= 12
    masks = torch.cat([a.sentinel_head_mask for a in model.gated_attentions])
    assert set(masks.tolist()) <= {0.0, 1.0}  # grown heads finished their warm-up


def test_progressive_growth_grows_the_head_whose_revival_lowers_the_loss(model):
    """Two inactive heads of layer 1: B computes -2x what A computes, so |dL/d mask| is twice as large for B, but
    switching A on lowers the loss and switching B on raises it. Growth picks A, and never grows B."""
    attns = model.gated_attentions
    data = batches()
    a, b = 1, 2  # heads of layer 1
    attn = attns[1]
    attn.sentinel_head_mask[[a, b]] = 0.0
    g = mask_gradient(model, data, absolute=False)[1][a]
    with torch.no_grad():
        qkv = attn.c_attn.weight.view(32, 3, 4, 8)
        qkv[:, :, b] = qkv[:, :, a]
        attn.c_attn.bias.view(3, 4, 8)[:, b] = attn.c_attn.bias.view(3, 4, 8)[:, a]
        proj = attn.c_proj.weight.view(4, 8, 32)
        if g > 0:  # make A the helpful one
            proj[a] *= -1
        proj[b] = -2 * proj[a]

    def loss_with(head):
        with torch.no_grad():
            attn.sentinel_head_mask[head] = 1.0
            out = sum(model(**batch).lm_loss.item() for batch in data)
            attn.sentinel_head_mask[head] = 0.0
            return out

    base = sum(model(**batch).lm_loss.item() for batch in data)
    assert loss_with(a) < base < loss_with(b)
    growth = ProgressiveGrowthCallback(grow_per_epoch=1 / 16, target_active=1.0, score_batches=2)
    state = TrainerState()
    growth.on_epoch_end(None, state, None, model=model, train_dataloader=data)
    torch.testing.assert_close(attn.sentinel_head_mask, torch.tensor([1.0, 0.01, 0.0, 1.0]))
    growth.on_epoch_end(None, state, None, model=model, train_dataloader=data)
    assert attn.sentinel_head_mask[b] == 0.0  # its revival would raise the loss: not grown


def test_gate_heatmap_png(model, tmp_path):
    import matplotlib.image

    from interlayer.pictures import draw_sentinel_gates

    model.prune_heads({1: [2]})
    path = draw_sentinel_gates(model, str(tmp_path / "gates.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1]).tolist()}) > 10


def test_cli_prune_scores_on_text_and_saves_a_smaller_model(tmp_path):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from interlayer.cli import main
    from interlayer.training import train_byte_bpe

    text = "\n".join(f"To be, or not to be, that is question number {i}." for i in range(200))
    tokenizer = train_byte_bpe(text, vocab_size=300)
    torch.manual_seed(0)
    stock = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=4, n_head=4, vocab_size=len(tokenizer), n_positions=64))
    stock.save_pretrained(tmp_path / "stock")
    tokenizer.save_pretrained(tmp_path / "stock")
    (tmp_path / "text.txt").write_text(text)
    code = main(
        [
            "prune",
            str(tmp_path / "stock"),
            str(tmp_path / "pruned"),
            "--strategy",
            "entropy",
            "--fraction",
            "0.25",
            "--text-file",
            str(tmp_path / "text.txt"),
            "--seq-len",
            "16",
            "--batches",
            "2",
        ]
    )
    assert code == 0
    pruned = GPT2SentinelLMHeadModel.from_pretrained(tmp_path / "pruned")
    assert sum(len(v) for v in pruned.config.pruned_heads.values()) == 4
    assert sum(a.num_heads for a in pruned.gated_attentions) == 12
    assert AutoTokenizer.from_pretrained(tmp_path / "pruned")("To be")["input_ids"] == tokenizer("To be")["input_ids"]
    assert (
        main(["prune", str(tmp_path / "stock"), str(tmp_path / "x"), "--strategy", "entropy", "--fraction", "0.5"]) == 2
    )


def test_resume_without_the_callbacks_state_is_refused(tmp_path):
    from transformers import TrainerControl, TrainerState

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    callback = SentinelControllerCallback()
    with pytest.raises(ValueError, match="holds no state of SentinelControllerCallback"):
        callback.on_train_begin(args, TrainerState(global_step=2, stateful_callbacks={}), TrainerControl())
    several = {"SentinelControllerCallback": [callback.state(), callback.state()]}
    with pytest.raises(ValueError, match="several SentinelControllerCallback.*restore_callback_states_from_checkpoint"):
        callback.on_train_begin(args, TrainerState(global_step=2, stateful_callbacks=several), TrainerControl())
