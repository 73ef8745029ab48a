"""The sentinel pruning sweep of `interlayer results` (sentinel-smollm2, sentinel-gpt2) and the FLAP head score."""

import csv

import pytest
import torch
from batches import lm_batch, lm_labels
from stock_checkpoints import build_stock_gpt2
from transformers import LlamaConfig, LlamaForCausalLM

from interlayer import GPT2SentinelLMHeadModel, LlamaSentinelForCausalLM
from interlayer.results import COLUMNS, recipes, run_recipes
from interlayer.results.sentinel_sweep import METHODS, SETTINGS, parse_method
from interlayer.sentinel import head_fluctuation, head_scores

METHODS_RUN = ["none@0", "magnitude@20", "flap@40", "wanda-sp@40", "random@60", "controller", "wanda-sp@40+ft"]


def sweep(out, names=("sentinel-smollm2", "sentinel-gpt2"), methods=METHODS_RUN, seeds=(0,)):
    chosen = [recipes()[name] for name in names]
    return run_recipes(chosen, "quick", out, methods=list(methods), seeds=list(seeds), progress=False)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return out, sweep(out)


def test_the_sweep_is_registered_with_every_strategy_share_and_the_controller():
    for name in ("sentinel-smollm2", "sentinel-gpt2"):
        recipe = recipes()[name]
        assert recipe.mechanism == "sentinel"
        assert recipe.methods == METHODS
    assert {parse_method(m)[0] for m in METHODS} == {
        "none",
        "entropy",
        "magnitude",
        "importance",
        "random",
        "flap",
        "flap-heads",
        "wanda-sp",
        "controller",
    }
    with pytest.raises(ValueError, match="no method 'flap@50'"):
        parse_method("flap@50")
    assert parse_method("wanda-sp@40+ft") == ("wanda-sp", 0.4)


def test_quick_sweep_writes_a_row_per_method_seed_and_metric(records):
    out, runs = records
    assert len(runs) == 2 * len(METHODS_RUN)
    for name in ("sentinel-smollm2", "sentinel-gpt2"):
        with open(out / f"{name}.csv", newline="") as f:
            reader = csv.DictReader(f)
            assert tuple(reader.fieldnames) == COLUMNS
            rows = list(reader)
        metrics = {"perplexity", "eval_loss", "token_accuracy", "heads_pruned", "forward_time_ratio"}
        assert {(r["method"], r["metric"]) for r in rows} == {(m, k) for m in METHODS_RUN for k in metrics}
        assert {r["mechanism"] for r in rows} == {"sentinel"}
        assert all(float(r["value"]) == float(r["value"]) for r in rows)  # no NaN


def test_heads_pruned_is_the_requested_share_to_within_half_a_head(records):
    _, runs = records
    for run in runs:
        strategy, share = parse_method(run["method"])
        total = run["details"]["heads_total"]
        pruned = run["metrics"]["heads_pruned"]
        assert pruned * total == sum(run["details"]["pruned_heads_per_layer"].values())
        if strategy == "controller":
            assert pruned <= share  # what the controller chose, within its budget
        else:
            assert pruned * total == round(share * total)
            assert abs(pruned - share) <= 0.5 / total


def test_the_recovery_fine_tune_trains_the_pruned_model_and_nothing_else_changes(records):
    _, runs = records
    setting = SETTINGS["quick"]
    for name in ("sentinel-smollm2", "sentinel-gpt2"):
        mine = {r["method"]: r for r in runs if r["recipe"] == name}
        tuned, one_shot = mine["wanda-sp@40+ft"], mine["wanda-sp@40"]
        assert tuned["details"]["pruned_heads_per_layer"] == one_shot["details"]["pruned_heads_per_layer"]
        assert tuned["details"]["heldout_fingerprint"] == one_shot["details"]["heldout_fingerprint"]
        assert tuned["train_tokens"] == setting.recovery_steps * setting.recovery_batch * setting.block
        assert tuned["trainable_params"] > 0 and one_shot["trainable_params"] == 0
        assert tuned["metrics"]["perplexity"] != one_shot["metrics"]["perplexity"]


def test_every_method_of_a_seed_sees_the_same_data_and_a_rerun_gives_the_same_numbers(records, tmp_path):
    _, runs = records
    for name in ("sentinel-smollm2", "sentinel-gpt2"):
        mine = [r for r in runs if r["recipe"] == name]
        assert len({r["details"]["heldout_fingerprint"] for r in mine}) == 1
        assert len({r["details"]["scoring_fingerprint"] for r in mine}) == 1
    again = sweep(tmp_path, names=("sentinel-smollm2",), methods=["flap@40", "random@60", "controller"], seeds=(0, 1))
    first = {(r["method"], r["seed"]): r for r in runs if r["recipe"] == "sentinel-smollm2"}
    for run in again:
        if run["seed"] == 0:
            before = first[(run["method"], 0)]
            assert run["metrics"]["perplexity"] == before["metrics"]["perplexity"]
            assert run["details"]["pruned_heads_per_layer"] == before["details"]["pruned_heads_per_layer"]
    held_out = {r["seed"]: r["details"]["heldout_fingerprint"] for r in again}
    assert held_out[0] != held_out[1]


def fluctuation_by_loop(model, batches, out_modules):
    """FLAP's score by the definition: for each layer, head and feature of the head, the variance over the real
    tokens of the output projection's input times the squared norm of its weight column, summed one by one."""
    inputs = [[] for _ in out_modules]
    hooks = [
        m.register_forward_pre_hook(lambda module, args, i=i: inputs[i].append(args[0].detach()))
        for i, m in enumerate(out_modules)
    ]
    with torch.no_grad():
        for batch in batches:
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    for h in hooks:
        h.remove()
    scores = []
    for i, (attn, module) in enumerate(zip(model.gated_attentions, out_modules)):
        rows = torch.cat([x[b["attention_mask"].bool()] for x, b in zip(inputs[i], batches)]).double()
        weight = module.weight.double()  # Conv1D: (in, out); Linear: (out, in)
        layer = []
        for head in range(attn.num_heads):
            total = 0.0
            for j in range(head * attn.head_dim, (head + 1) * attn.head_dim):
                column = weight[:, j] if isinstance(module, torch.nn.Linear) else weight[j, :]
                total += rows[:, j].var(unbiased=False).item() * column.pow(2).sum().item()
            layer.append(total)
        scores.append(torch.tensor(layer))
    return scores


def padded_batches():
    out = []
    for seed in range(2):
        b = lm_batch(seed=seed)
        b["labels"] = lm_labels(b)
        out.append(b)
    return out


def test_flap_score_matches_a_direct_loop(tmp_path):
    build_stock_gpt2(str(tmp_path / "gpt2"))
    model = GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / "gpt2")).eval()
    model.prune_heads({1: [2]})  # a layer with fewer heads
    batches = padded_batches()  # right-padded: padding tokens are left out of the variance
    expected = fluctuation_by_loop(model, batches, [block.attn.c_proj for block in model.transformer.h])
    for got, want in zip(head_fluctuation(model, batches), expected):
        torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-9)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "llama")
    llama = LlamaSentinelForCausalLM.from_pretrained(str(tmp_path / "llama")).eval()
    batches = [{**b, "input_ids": b["input_ids"] % 64} for b in batches]
    expected = fluctuation_by_loop(llama, batches, [layer.self_attn.o_proj for layer in llama.model.layers])
    for got, want in zip(head_fluctuation(llama, batches), expected):
        torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-9)


def test_flap_prunes_the_head_the_output_projection_does_not_read(tmp_path):
    build_stock_gpt2(str(tmp_path / "gpt2"))
    model = GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / "gpt2")).eval()
    attn = model.transformer.h[2].attn
    with torch.no_grad():
        attn.c_proj.weight[attn.head_dim : 2 * attn.head_dim] = 0.0  # head 1's input rows of c_proj (Conv1D: in, out)
    raw = head_fluctuation(model, padded_batches())
    assert raw[2][1] == 0 and int(raw[2].argmin()) == 1
    scores = head_scores(model, "flap-heads", padded_batches())
    for layer, layer_scores in zip(raw, scores):  # the per-head sums standardised over each layer's heads
        torch.testing.assert_close(layer_scores, (layer - layer.mean()) / layer.std())
    assert int(scores[2].argmin()) == 1
    assert int(head_scores(model, "flap", padded_batches())[2].argmin()) == 1


def test_prune_cli_takes_flap_and_asks_for_text(tmp_path):
    from interlayer.cli import main

    build_stock_gpt2(str(tmp_path / "stock"))
    args = ["prune", str(tmp_path / "stock"), str(tmp_path / "x"), "--strategy", "flap", "--fraction", "0.5"]
    assert main(args) == 2


def test_the_report_says_where_the_controller_departs_from_the_seeds_values():
    for name in ("sentinel-smollm2", "sentinel-gpt2"):
        for note in recipes()[name].scale_notes.values():
            assert "not the seed's warm-up 500, an update every 100 steps and lr 0.01" in note
