"""Sentinel gates: gating equations, L1 pressure, structural pruning, generation with the KV cache, U-Net skips."""

import pytest
import torch
from batches import lm_batch, lm_labels
from generation_reference import greedy_without_cache
from stock_checkpoints import TINY_GPT2, build_stock_gpt2
from torch.utils.flop_counter import FlopCounterMode
from transformers import GPT2LMHeadModel
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from interlayer import GPT2SentinelLMHeadModel


@pytest.fixture
def gpt2_dir(tmp_path):
    build_stock_gpt2(str(tmp_path / "gpt2"))
    return str(tmp_path / "gpt2")


def test_identity_gates_are_exactly_one(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir)
    for gates in model.gate_values():
        assert torch.equal(gates, torch.ones_like(gates))
    seed_gates = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, identity_init=False).gate_values()[0]
    torch.testing.assert_close(seed_gates, torch.sigmoid(torch.full((4,), 3.0)))


@pytest.mark.parametrize("gate_init", [-65504.0, -1000.0, -104.0, 65504.0])
def test_extreme_gate_inits_give_the_stock_model_at_identity(gpt2_dir, gate_init):
    """Down to the lowest allowed `sentinel_gate_init` (and up to the highest) every gate is exactly 1 at conversion,
    also in fp16 weights, and the logits are the stock model's; finite gradients reach the gates (sigmoid(-104) is 0
    in float32: a gate divided by its initial value was 0/0 there, and -1000 overflowed)."""
    stock = GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, sentinel_gate_init=gate_init).eval()
    half = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, sentinel_gate_init=gate_init, dtype=torch.float16)
    for gates in model.gate_values() + half.gate_values():
        assert torch.equal(gates, torch.ones_like(gates))
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, stock(**batch).logits)
    model(**batch, labels=lm_labels(batch)).loss.backward()
    assert all(torch.isfinite(attn.sentinel_gate_logits.grad).all() for attn in model.gated_attentions)


@pytest.mark.parametrize("gate_init", [-65504.5, 65505.0, float("nan"), float("-inf")])
def test_gate_init_beyond_the_fp16_range_is_refused(gate_init):
    from interlayer import GPT2SentinelConfig
    from interlayer.models.zoo_common import ConfigError

    with pytest.raises(ConfigError, match=r"`sentinel_gate_init` must be (>= -65504.0 and <= 65504.0|a finite number)"):
        GPT2SentinelConfig(**TINY_GPT2, sentinel_gate_init=gate_init)


def test_gate_scales_each_head_before_c_proj(gpt2_dir):
    """A manual computation of layer 0's attention with per-head gates equals the module's output."""
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager").eval()
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        attn.sentinel_gate_logits.copy_(torch.tensor([3.0, -1.0, 0.5, 8.0]))
        x = torch.randn(2, 6, TINY_GPT2["n_embd"])
        causal = torch.zeros(6, 6).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
        got, _ = attn(x, attention_mask=causal[None, None])
        q, k, v = attn.c_attn(x).split(32, dim=2)
        heads = []
        for h in range(4):
            sl = slice(8 * h, 8 * (h + 1))
            scores = q[..., sl] @ k[..., sl].transpose(1, 2) / 8**0.5
            scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
            heads.append(attn.gates()[h] * scores.softmax(-1) @ v[..., sl])
        expected = attn.c_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(got, expected)


def test_l1_pressure_is_added_and_reported(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, gate_l1=0.01).eval()
    batch = lm_batch()
    out = model(**batch, labels=lm_labels(batch))
    total_heads = TINY_GPT2["n_layer"] * TINY_GPT2["n_head"]
    torch.testing.assert_close(out.gate_l1_loss, torch.tensor(0.01 * total_heads))
    torch.testing.assert_close(out.loss, out.lm_loss + out.gate_l1_loss)
    out.loss.backward()
    grad = model.transformer.h[0].attn.sentinel_gate_logits.grad
    assert grad is not None and (grad != 0).all()


def test_pruned_model_equals_gated_model_with_those_gates_at_zero(gpt2_dir, tmp_path):
    torch.manual_seed(0)
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, identity_init=False).eval()
    heads = {0: [1, 3], 2: [0], 3: [0, 1, 2, 3]}
    batch = lm_batch()
    with torch.no_grad():
        for layer, hs in heads.items():
            attn = model.transformer.h[layer].attn
            attn.sentinel_head_mask[hs] = 0.0
        masked = model(**batch).logits
        model.prune_heads(heads)
        pruned = model(**batch).logits
    torch.testing.assert_close(pruned, masked)
    assert model.transformer.h[0].attn.c_attn.weight.shape == (32, 3 * 16)
    assert model.transformer.h[0].attn.c_proj.weight.shape == (16, 32)
    assert model.transformer.h[0].attn.head_ids.tolist() == [0, 2]
    assert model.config.pruned_heads == {0: [1, 3], 2: [0], 3: [0, 1, 2, 3]}
    model.save_pretrained(tmp_path / "pruned")
    reloaded = GPT2SentinelLMHeadModel.from_pretrained(tmp_path / "pruned").eval()
    assert reloaded.transformer.h[2].attn.c_attn.weight.shape == (32, 3 * 24)
    assert reloaded.transformer.h[2].attn.head_ids.tolist() == [1, 2, 3]
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, pruned)


def test_a_layer_without_heads_outputs_a_tensor_of_its_own(gpt2_dir):
    """A layer whose every head is pruned adds c_proj's bias as a new tensor: writable in place without touching the
    bias, and the model runs under no_grad inside torch's FLOP counter (whose module tracker rejects a view of a
    parameter made under no_grad)."""
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir).eval()
    with torch.no_grad():
        model.transformer.h[3].attn.c_proj.bias.normal_()
    model.prune_heads({3: [0, 1, 2, 3]})
    attn, batch = model.transformer.h[3].attn, lm_batch()
    bias = attn.c_proj.bias.detach().clone()
    with torch.no_grad():
        expected = model(**batch).logits
        out, _ = attn(torch.randn(2, 5, TINY_GPT2["n_embd"]))
        torch.testing.assert_close(out, bias.expand(2, 5, -1))
        out.add_(1.0)
        with FlopCounterMode(display=False):
            counted = model(**batch).logits
    torch.testing.assert_close(attn.c_proj.bias, bias)
    torch.testing.assert_close(counted, expected)


def test_pruning_twice_uses_original_head_indices(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir).eval()
    model.prune_heads({1: [0]})
    model.prune_heads({1: [2]})
    assert model.transformer.h[1].attn.head_ids.tolist() == [1, 3]
    assert model.config.pruned_heads[1] == [0, 2]
    with pytest.raises(ValueError, match=r"layer 1 has no heads \[0\]; remaining heads are \[1, 3\]"):
        model.prune_heads({1: [0]})


def test_generate_with_cache_matches_recomputation_after_pruning(gpt2_dir):
    torch.manual_seed(0)
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, identity_init=False, unet_skips=True).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            if block.sentinel_unet_fuse is not None:
                block.sentinel_unet_fuse.weight.normal_(std=0.1)
    model.prune_heads({0: [0, 1], 1: [3], 3: [0, 1, 2, 3]})
    prompt = lm_batch(lengths=(5,))["input_ids"]
    cached = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(cached, greedy_without_cache(model, prompt, 8))


def test_identity_generation_equals_stock(gpt2_dir):
    stock = GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir).eval()
    prompt = lm_batch(lengths=(6,))["input_ids"]
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(model.generate(prompt, **kwargs), stock.generate(prompt, **kwargs))


@pytest.mark.parametrize(
    "layers, fused, sources",
    [(4, [False, False, True, True], {2: 1, 3: 0}), (5, [False, False, False, True, True], {3: 1, 4: 0})],
)
def test_unet_skips_pair_mirror_layers_scaled_by_depth(tmp_path, layers, fused, sources):
    """Decoder layer i >= L - floor(L/2) fuses encoder layer L-1-i's output into its own output, with the factor
    unet_skip_scale * (L - i) / floor(L/2): checked against a manual forward, for even and odd L. Every fusion joins
    two different states (even L used to pair the first decoder layer's input with itself)."""
    build_stock_gpt2(str(tmp_path / "gpt2"), n_layer=layers)
    model = GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / "gpt2"), unet_skips=True, unet_skip_scale=0.5)
    model.eval()
    blocks = model.transformer.h
    assert [b.sentinel_unet_fuse is not None for b in blocks] == fused
    scales = {i: 0.5 * (layers - i) / (layers // 2) for i in sources}
    torch.manual_seed(0)
    with torch.no_grad():
        for i in sources:
            blocks[i].sentinel_unet_fuse.weight.normal_(std=0.2)
            blocks[i].sentinel_unet_fuse.bias.normal_(std=0.2)
        ids = lm_batch(lengths=(7,))["input_ids"]
        h = model.transformer.wte(ids) + model.transformer.wpe(torch.arange(7))[None]
        outs = []
        for i, block in enumerate(blocks):
            h = GPT2Block.forward(block, h)
            if i in sources:
                enc = outs[sources[i]]
                assert (enc - h).abs().max() > 1e-3  # never [h; h]
                h = h + scales[i] * block.sentinel_unet_fuse(torch.cat([h, enc], dim=-1))
            outs.append(h)
        expected = model.lm_head(model.transformer.ln_f(h))
        torch.testing.assert_close(model(input_ids=ids).logits, expected)


def test_entropy_measurement_matches_manual_softmax(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir).eval()
    attn = model.transformer.h[1].attn
    attn.measure_entropy = True
    batch = lm_batch(lengths=(8, 8))
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states[1]
        q, k, _ = attn.c_attn(model.transformer.h[1].ln_1(hidden)).split(32, dim=2)
        expected = []
        for h in range(4):
            sl = slice(8 * h, 8 * (h + 1))
            scores = (q[..., sl] @ k[..., sl].transpose(1, 2) / 8**0.5).masked_fill(
                ~torch.ones(8, 8, dtype=torch.bool).tril(), float("-inf")
            )
            p = scores.softmax(-1)
            expected.append(-(p * p.clamp(min=1e-12).log()).sum(-1).mean())
    torch.testing.assert_close(attn.last_entropy, torch.stack(expected))


def test_gate_values_reach_mechanism_stats_by_original_head(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir)
    model.prune_heads({1: [0]})
    model.transformer.h[1].attn.sentinel_head_mask[1] = 0.0  # original head 2
    stats = model.mechanism_stats(split="train")
    assert stats["sentinel/L0/gate_h0"] == 1.0
    assert "sentinel/L1/gate_h0" not in stats and stats["sentinel/L1/gate_h2"] == 0.0
    assert (stats["sentinel/heads_active"], stats["sentinel/heads_masked"], stats["sentinel/heads_pruned"]) == (
        14.0,
        1.0,
        1.0,
    )
    assert model.mechanism_stats(split="eval") == {}


def test_prune_masked_heads_removes_what_the_controller_switched_off(gpt2_dir):
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, identity_init=False).eval()
    batch = lm_batch()
    model.transformer.h[0].attn.sentinel_head_mask[[0, 2]] = 0.0
    model.transformer.h[3].attn.sentinel_head_mask[1] = 0.0
    with torch.no_grad():
        masked = model(**batch).logits
        assert model.prune_masked_heads() == {0: [0, 2], 3: [1]}
        torch.testing.assert_close(model(**batch).logits, masked)
    assert model.prune_masked_heads() == {}


def test_cli_converts_stock_gpt2_as_a_causal_lm(gpt2_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from interlayer.cli import main

    assert (
        main(["convert", gpt2_dir, str(tmp_path / "out"), "--mechanism", "sentinel", "--set", "unet_skips=true"]) == 0
    )
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(loaded) is GPT2SentinelLMHeadModel and loaded.config.unet_skips
    # converted with U-Net skips and saved, then loaded, nothing overwritten: still stock GPT-2
    stock = GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, stock(**batch).logits)
    card = (tmp_path / "out" / "README.md").read_text()
    assert 'pipeline_tag: "text-generation"' in card


def test_model_saved_before_the_rename_loads_in_process(gpt2_dir, tmp_path):
    """A folder saved when the mechanism was `gated_gpt2` loads through the Auto classes with the package imported
    and no remote code, computes what it computed, and is saved again under the current model type. The folder is
    the current save with the three config fields the old code wrote differently (model_type, architectures,
    auto_map; checked against a folder that code saved: the weights' names and shapes are the same). The old class
    names are the current classes."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    from interlayer import GatedGPT2Config, GatedGPT2LMHeadModel, GatedGPT2Model, GPT2SentinelConfig, GPT2SentinelModel

    assert (GatedGPT2Config, GatedGPT2Model, GatedGPT2LMHeadModel) == (
        GPT2SentinelConfig,
        GPT2SentinelModel,
        GPT2SentinelLMHeadModel,
    )
    model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, unet_skips=True, identity_init=False).eval()
    model.prune_heads({1: [0, 2]})
    old = tmp_path / "old"
    model.save_pretrained(old)
    config = json.loads((old / "config.json").read_text())
    config["model_type"] = "gated_gpt2"
    config["architectures"] = ["GatedGPT2LMHeadModel"]
    config["auto_map"] = {
        "AutoConfig": "configuration_gated_gpt2.GatedGPT2Config",
        "AutoModel": "modeling_gated_gpt2.GatedGPT2Model",
        "AutoModelForCausalLM": "modeling_gated_gpt2.GatedGPT2LMHeadModel",
    }
    (old / "config.json").write_text(json.dumps(config))
    assert type(AutoConfig.from_pretrained(old)) is GPT2SentinelConfig
    loaded = AutoModelForCausalLM.from_pretrained(old).eval()
    assert type(loaded) is GPT2SentinelLMHeadModel and loaded.config.pruned_heads == {1: [0, 2]}
    batch = lm_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)
        torch.testing.assert_close(
            GatedGPT2LMHeadModel.from_pretrained(old).eval()(**batch).logits, model(**batch).logits
        )
    loaded.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["model_type"] == "gpt2_sentinel"


def test_pruned_heads_at_conversion_is_refused_naming_it(tmp_path):
    """A stock checkpoint has every head: `pruned_heads` given to a conversion is refused with a config error that
    says how to prune, instead of transformers' shape-mismatch error; a pruned model still reloads its heads."""
    from interlayer.models.zoo_common import ConfigError
    from interlayer.zoo import convert

    build_stock_gpt2(str(tmp_path / "stock"))
    with pytest.raises(ConfigError, match=r"`pruned_heads=\{0: \[1\]\}` cannot be given when converting.*prune_heads"):
        convert(str(tmp_path / "stock"), "sentinel", pruned_heads={0: [1]})
    with pytest.raises(ConfigError, match=r"pruned_heads.*cannot be given when converting"):
        GPT2SentinelLMHeadModel.from_pretrained(tmp_path / "stock", pruned_heads={"0": [1]})
    model = GPT2SentinelLMHeadModel.from_pretrained(tmp_path / "stock", pruned_heads={})
    model.prune_heads({0: [1]})
    model.save_pretrained(tmp_path / "pruned")
    assert GPT2SentinelLMHeadModel.from_pretrained(tmp_path / "pruned").config.pruned_heads == {0: [1]}


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_gate_l1_term_keeps_its_gradient_under_activation_checkpointing(gpt2_dir, reentrant):
    """The loss's L1 term sums the gates each attention recorded in its forward (so that under FSDP2 and ZeRO-3 it
    reads no parameter outside a layer's forward). Reentrant checkpointing runs that forward without gradients, so its
    records carry none and the term computes the gates again: either way the term, the loss and every gradient are
    those of the run without checkpointing."""
    batch = lm_batch()
    batch["labels"] = lm_labels(batch)
    runs = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = GPT2SentinelLMHeadModel.from_pretrained(gpt2_dir, identity_init=False, gate_l1=0.5).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        out = model(**batch)
        assert all(attn.forward_gates is None for attn in model.gated_attentions), "records kept after the loss"
        out.loss.backward()
        runs.append((out.gate_l1_loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (l1, grads), (l1_checkpointed, grads_checkpointed) = runs
    torch.testing.assert_close(l1_checkpointed, l1, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_checkpointed[name], grad, msg=lambda m: f"{name}: {m}")
