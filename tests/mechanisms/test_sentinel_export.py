"""Pruned models leave as stock checkpoints: uniform pruning (the same heads count in every layer; whole key/value
groups under grouped-query attention), `interlayer.zoo.to_stock` / `export_stock` (the gates folded into the output
projections, the head counts in the stock config), `interlayer prune --uniform --stock` for every sentinel family,
the refusals that say why, and untrained identity conversions of the other mechanisms leaving as their stock
weights."""

import json
import os
import subprocess
import sys

import pytest
import torch
from batches import lm_batch, pair_batch
from stock_checkpoints import (
    build_stock_bert_wide,
    build_stock_gpt2,
    build_stock_llama,
    build_stock_marian,
    build_stock_qwen2_full_attention,
    build_stock_qwen3,
    build_stock_roberta_wide,
)
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, GPT2LMHeadModel

from interlayer import convert
from interlayer.cli import main
from interlayer.sentinel import prune_by_strategy, select_heads_to_prune
from interlayer.zoo import export_stock, to_stock

DECODERS = {"llama": build_stock_llama, "qwen2": build_stock_qwen2_full_attention, "qwen3": build_stock_qwen3}

FRESH_LOAD = """
import sys, torch, transformers
folder, class_name, inputs, outputs = sys.argv[1:]
model = getattr(transformers, class_name).from_pretrained(folder).eval()
assert not any(name.startswith("interlayer") for name in sys.modules), "interlayer was imported"
with torch.no_grad():
    torch.save(model(**torch.load(inputs)).logits, outputs)
"""


def fresh_process_logits(folder, class_name: str, batch: dict, tmp_path) -> torch.Tensor:
    """The logits of the stock class `class_name` loaded from `folder` in a new Python process that never imports
    interlayer (and passes no trust_remote_code)."""
    torch.save(batch, tmp_path / "inputs.pt")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            FRESH_LOAD,
            str(folder),
            class_name,
            str(tmp_path / "inputs.pt"),
            str(tmp_path / "o.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(tmp_path / "o.pt")


def assert_stock_folder(folder, model_type: str) -> dict:
    """Config and weights only: no code files, no auto_map, the stock model type."""
    files = os.listdir(folder)
    assert not [f for f in files if f.endswith(".py")], files
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type and "auto_map" not in config
    assert not any(k in config for k in ("sentinel_gate_init", "pruned_heads", "gate_l1", "unet_skips"))
    return config


def trained_gates(model, seed: int = 0) -> None:
    """Gates away from 1 (as after training), and one head masked, so that folding them matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for attn in model.gated_attentions:
            attn.sentinel_gate_logits.copy_(torch.randn(attn.num_heads, generator=generator))
        model.gated_attentions[0].sentinel_head_mask[-1] = 0.0


def converted(tmp_path, family: str):
    build = {**DECODERS, "gpt2": build_stock_gpt2}[family]
    build(str(tmp_path / family))
    model, _ = convert(str(tmp_path / family), "sentinel")
    return model.eval()


def pruned_gpt2(tmp_path):
    """A converted GPT-2 with trained gates and heads pruned in a pattern no stock config has: two of layer 0's four
    heads, every head of layer 1."""
    model = converted(tmp_path, "gpt2")
    trained_gates(model)
    model.prune_heads({0: [1, 3], 1: [0, 1, 2, 3]})
    return model


def test_uniform_pruning_removes_whole_key_value_groups(tmp_path):
    """4 query heads in 2 groups of 2: `uniform=True` removes one whole group in every layer (round(0.3 * 2) = 1), the
    group of lower summed score; the non-uniform selection at the same fraction may not."""
    model = converted(tmp_path, "llama")
    scores = [
        torch.tensor([0.9, 0.8, 0.1, 0.2]),
        torch.tensor([0.1, 0.5, 0.4, 0.4]),
        torch.tensor([1.0, 0.0, 0.7, 0.2]),
    ]
    model.head_weight_norms = lambda: scores
    chosen = select_heads_to_prune(model, 0.3, "magnitude", uniform=True)
    assert chosen == {0: [2, 3], 1: [0, 1], 2: [2, 3]}
    assert select_heads_to_prune(model, 0.3, "magnitude") != chosen
    assert select_heads_to_prune(model, 0.0, "magnitude", uniform=True) == {}
    prune_by_strategy(model, 0.3, "magnitude", uniform=True)
    assert {(a.num_heads, a.num_kv_heads) for a in model.gated_attentions} == {(2, 1)}
    # a model pruned non-uniformly before (a partial group) is refused, naming the group, before any head is scored
    # (entropy without batches would fail on the data)
    other = converted(tmp_path / "b", "llama")
    other.prune_heads({0: [1]})
    with pytest.raises(ValueError, match="layer 0 has a partly pruned group .key/value head 0"):
        select_heads_to_prune(other, 0.5, "entropy", uniform=True)
    with pytest.raises(ValueError, match="keeps 2 key/value groups per layer, but layer 0 has only 1 left"):
        select_heads_to_prune(model, 0.0, "entropy", uniform=True)


@pytest.mark.parametrize("family", sorted(DECODERS))
def test_uniformly_pruned_decoder_exports_as_stock(tmp_path, family):
    """Trained gates, a masked head, half the key/value groups pruned uniformly: the stock checkpoint (fewer heads
    of the same head_dim in the config, gates folded into o_proj) loads in the stock class and computes the pruned
    zoo model's logits."""
    model = converted(tmp_path, family)
    trained_gates(model)
    prune_by_strategy(model, 0.5, "magnitude", uniform=True)
    batch = lm_batch()
    with torch.no_grad():
        expected = model(**batch).logits
    export_stock(model, str(tmp_path / "stock-out"))
    config = assert_stock_folder(tmp_path / "stock-out", family)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (2, 1, 8)
    stock = AutoModelForCausalLM.from_pretrained(str(tmp_path / "stock-out")).eval()
    assert type(stock).__module__.startswith("transformers.models.")
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, expected)


def test_prune_uniform_stock_from_the_shell_llama(tmp_path, capsys):
    """`interlayer prune STOCK DST --uniform --stock` on a stock Llama: a stock checkpoint that a fresh process loads
    with `LlamaForCausalLM` (no interlayer, no remote code) and whose logits equal the pruned zoo model's (the same
    command without --stock)."""
    build_stock_llama(str(tmp_path / "llama"))
    common = ["--strategy", "magnitude", "--fraction", "0.5", "--uniform"]
    assert main(["prune", str(tmp_path / "llama"), str(tmp_path / "zoo"), *common]) == 0
    assert main(["prune", str(tmp_path / "llama"), str(tmp_path / "stock"), *common, "--stock"]) == 0
    assert "stock llama checkpoint" in capsys.readouterr().out
    assert_stock_folder(tmp_path / "stock", "llama")
    batch = lm_batch()
    zoo = AutoModelForCausalLM.from_pretrained(str(tmp_path / "zoo")).eval()
    assert zoo.config.pruned_heads and type(zoo).__name__ == "LlamaSentinelForCausalLM"
    with torch.no_grad():
        expected = zoo(**batch).logits
    torch.testing.assert_close(fresh_process_logits(tmp_path / "stock", "LlamaForCausalLM", batch, tmp_path), expected)


def test_prune_from_the_shell_takes_a_saved_sentinel_folder_of_any_family(tmp_path):
    """A saved Qwen3 sentinel folder (trained gates) is pruned and exported from the shell."""
    model = converted(tmp_path, "qwen3")
    trained_gates(model)
    model.save_pretrained(str(tmp_path / "saved"))
    args = ["--strategy", "random", "--fraction", "0.5", "--uniform", "--stock"]
    assert main(["prune", str(tmp_path / "saved"), str(tmp_path / "stock"), *args]) == 0
    prune_by_strategy(model, 0.5, "random", uniform=True)
    batch = lm_batch()
    stock = AutoModelForCausalLM.from_pretrained(str(tmp_path / "stock")).eval()
    assert type(stock).__name__ == "Qwen3ForCausalLM"
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits)


def test_pruned_gpt2_exports_as_stock_with_its_pruned_heads_zero(tmp_path, capsys):
    """Stock GPT-2 derives its head size as n_embd / n_head, so fewer heads of the same size have no stock config:
    a pruned GPT-2 (any pattern, a layer with no head left included) leaves with every pruned head put back as a zero
    head, loaded by `GPT2LMHeadModel` in a fresh process with the stock head count, logits equal the pruned zoo
    model's; from the shell, which says what the folder is."""
    model = pruned_gpt2(tmp_path)
    batch = lm_batch()
    with torch.no_grad():
        expected = model(**batch).logits
    export_stock(model, str(tmp_path / "stock"))
    config = assert_stock_folder(tmp_path / "stock", "gpt2")
    assert config["n_head"] == 4
    torch.testing.assert_close(fresh_process_logits(tmp_path / "stock", "GPT2LMHeadModel", batch, tmp_path), expected)
    stock = GPT2LMHeadModel.from_pretrained(str(tmp_path / "stock"))
    head = stock.config.n_embd // 4
    c_proj = stock.transformer.h[0].attn.c_proj.weight  # Conv1D: (in, out), input rows grouped by head
    assert not c_proj[head : 2 * head].any() and not c_proj[3 * head :].any() and c_proj[:head].any()
    assert not stock.transformer.h[1].attn.c_proj.weight.any()

    args = ["--strategy", "magnitude", "--fraction", "0.5", "--uniform", "--stock"]
    assert main(["prune", str(tmp_path / "gpt2"), str(tmp_path / "out"), *args]) == 0
    assert "pruned heads are zero heads in it" in capsys.readouterr().out
    assert_stock_folder(tmp_path / "out", "gpt2")


def test_pruned_bf16_gpt2_exports_bf16_stock_weights_as_close_as_the_zoo_model(tmp_path):
    """A pruned GPT-2 in bf16 leaves as bf16 stock weights (the zero heads put back, the gates folded in float32 and
    rounded once) that load as `GPT2LMHeadModel` in bf16 and compute the pruned float32 function at least as closely
    as the bf16 zoo model itself does."""
    model = pruned_gpt2(tmp_path)
    batch = lm_batch()
    with torch.no_grad():
        reference = model(**batch).logits
        zoo_error = (model.to(torch.bfloat16)(**batch).logits.float() - reference).abs().max()
    export_stock(model, str(tmp_path / "stock"))
    stock = GPT2LMHeadModel.from_pretrained(str(tmp_path / "stock"))
    assert {p.dtype for p in stock.parameters()} == {torch.bfloat16}
    assert stock.config.n_head == 4
    with torch.no_grad():
        stock_error = (stock(**batch).logits.float() - reference).abs().max()
    assert stock_error <= 1.5 * zoo_error, (stock_error, zoo_error)


def test_unpruned_gpt2_with_trained_gates_exports_as_stock(tmp_path):
    """With every head kept, GPT-2 leaves as a stock checkpoint: the gates folded into c_proj (a Conv1D: its input
    rows), loaded by `GPT2LMHeadModel` in a fresh process, logits equal."""
    model = converted(tmp_path, "gpt2")
    trained_gates(model)
    batch = lm_batch()
    with torch.no_grad():
        expected = model(**batch).logits
    export_stock(model, str(tmp_path / "stock"))
    assert_stock_folder(tmp_path / "stock", "gpt2")
    torch.testing.assert_close(fresh_process_logits(tmp_path / "stock", "GPT2LMHeadModel", batch, tmp_path), expected)


def test_non_uniform_pruning_refuses_stock(tmp_path, capsys):
    """Layers with different head counts, or groups of different sizes, have no stock config: refused, pointing to
    uniform pruning; from the shell (no --uniform) too, writing nothing."""
    model = converted(tmp_path, "llama")
    model.prune_heads({0: [0, 1]})
    with pytest.raises(ValueError, match=r"layers keep different numbers of .* heads \[\(2, 1\), \(4, 2\), \(4, 2\)\]"):
        to_stock(model)
    partial = converted(tmp_path / "b", "llama")
    partial.prune_heads({0: [0], 1: [0], 2: [0]})
    with pytest.raises(ValueError, match="groups of different sizes.*uniform=True"):
        to_stock(partial)
    args = ["--strategy", "magnitude", "--fraction", "0.25", "--stock"]
    assert main(["prune", str(tmp_path / "llama"), str(tmp_path / "out"), *args]) == 2
    assert "uniform=True" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_trained_unet_skips_refuse_stock(tmp_path):
    """U-Net skips at zero are the identity and leave; once trained no stock class has them: refused."""
    build_stock_llama(str(tmp_path / "llama"))
    model, _ = convert(str(tmp_path / "llama"), "sentinel", unet_skips=True)
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(to_stock(model.eval())(**batch).logits, model(**batch).logits)
        model.model.layers[-1].sentinel_unet_fuse.weight.fill_(0.01)
    with pytest.raises(ValueError, match="U-Net skips .* trained away from zero"):
        to_stock(model)


def test_identity_conversions_export_back_to_stock(tmp_path):
    """An untrained conversion whose mechanism is the identity leaves as its stock weights: the sentinel gates (bit
    for bit), bridges, latent back-projection and hyper-connections (within their stated rounding); a model whose
    history is unknown (loaded from a saved folder) is refused with the reason."""
    build_stock_gpt2(str(tmp_path / "gpt2"))
    model, _ = convert(str(tmp_path / "gpt2"), "sentinel")
    stock = to_stock(model)
    original = GPT2LMHeadModel.from_pretrained(str(tmp_path / "gpt2"))
    for name, tensor in original.state_dict().items():
        assert torch.equal(stock.state_dict()[name], tensor), name
    build_stock_llama(str(tmp_path / "llama"))
    build_stock_roberta_wide(str(tmp_path / "roberta"))
    for mechanism, source, batch in [
        ("hyper-connections", "llama", lm_batch()),
        ("latent", "llama", lm_batch()),
        ("bridge", "roberta", pair_batch("roberta")),
    ]:
        model, _ = convert(str(tmp_path / source), mechanism)
        stock = to_stock(model.eval())
        auto = AutoModelForCausalLM if source == "llama" else AutoModelForSequenceClassification
        assert type(stock) is type(auto.from_config(stock.config))
        with torch.no_grad():
            torch.testing.assert_close(stock(**batch).logits, model(**batch).logits)
        model.save_pretrained(str(tmp_path / mechanism))
        reloaded = type(model).from_pretrained(str(tmp_path / mechanism))
        with pytest.raises(ValueError, match="only an untrained conversion made in this process"):
            to_stock(reloaded)


def test_attention_bridges_leave_only_as_the_identity(tmp_path):
    """An attention bridge of transformer layers under identity_init leaves as the stock MarianMTModel; the default
    bridge (a 'lin' layer, identity_init=False) is not the stock function even untrained and is refused."""
    build_stock_marian(str(tmp_path / "marian"))
    options = dict(identity_init=True, bridge_layers=["transformer"], bridge_heads=2, bridge_hidden_size=16)
    model, _ = convert(str(tmp_path / "marian"), "attention-bridge", **options)
    stock = to_stock(model.eval())
    assert type(stock).__name__ == "MarianMTModel"
    batch = {"input_ids": torch.randint(3, 50, (2, 7)), "decoder_input_ids": torch.randint(3, 50, (2, 5))}
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits)
    default, _ = convert(str(tmp_path / "marian"), "attention-bridge")
    with pytest.raises(ValueError, match="identity_init=False.*does not compute the stock function"):
        to_stock(default)


@pytest.mark.parametrize("family, build", [("bert", build_stock_bert_wide), ("roberta", build_stock_roberta_wide)])
def test_encoders_leave_as_stock_pruned_or_not(tmp_path, family, build, capsys):
    """A BERT or RoBERTa classifier with trained gates leaves as its stock class (gates folded into
    attention.output.dense), logits equal; pruned (the stock head size is hidden_size / num_attention_heads), with
    its pruned heads zero at the stock head count, logits equal, from the shell too."""
    build(str(tmp_path / family))
    model, _ = convert(str(tmp_path / family), "sentinel")
    model.eval()
    trained_gates(model)
    batch = pair_batch(family)
    stock = to_stock(model)
    assert type(stock).__name__ == f"{type(stock.base_model).__name__[:-5]}ForSequenceClassification"
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits)
    model.prune_heads({0: [0, 2], 1: [1]})
    stock = to_stock(model)
    assert stock.config.num_attention_heads == model.config.num_attention_heads
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits, model(**batch).logits)
    args = ["--strategy", "magnitude", "--fraction", "0.5", "--uniform", "--stock"]
    assert main(["prune", str(tmp_path / family), str(tmp_path / "out"), *args]) == 0
    assert "hidden_size / num_attention_heads" in capsys.readouterr().out
    assert AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "out")).config.model_type == family
    assert main(["prune", str(tmp_path / family), str(tmp_path / "zoo"), *args[:-1]]) == 0
    pruned = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "zoo"))
    assert {a.num_heads for a in pruned.gated_attentions} == {2}


def test_prune_from_the_shell_takes_a_folder_saved_before_the_rename(tmp_path):
    """A GPT-2 sentinel folder saved as model_type `gated_gpt2` (before the mechanism's rename), which the previous
    GPT-2-only command loaded, is still pruned from the shell."""
    model = converted(tmp_path, "gpt2")
    model.save_pretrained(str(tmp_path / "old"))
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    config.update(model_type="gated_gpt2", architectures=["GatedGPT2LMHeadModel"])
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    args = ["--strategy", "magnitude", "--fraction", "0.5", "--uniform"]
    assert main(["prune", str(tmp_path / "old"), str(tmp_path / "out"), *args]) == 0
    pruned = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    assert {a.num_heads for a in pruned.gated_attentions} == {2}
