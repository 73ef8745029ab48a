"""Latent back-projection beyond the conformance suite: the equations, the three latent sources at generation, the
frozen first pass, the cache, statistics and the seed's parameter count."""

import pytest
import torch
from batches import lm_batch, lm_labels
from stock_checkpoints import TINY_DECODER, build_stock_llama, build_stock_qwen3
from transformers import DataCollatorWithFlattening, DynamicCache

from interlayer import LlamaLatentConfig, LlamaLatentForCausalLM, Qwen3LatentConfig, Qwen3LatentForCausalLM
from interlayer.models.configuration_latent import LATENT_SOURCES

FOUR_LAYERS = {**TINY_DECODER, "num_hidden_layers": 4}


def save_stock_llama(folder, layers):
    return folder, build_stock_llama(folder, num_hidden_layers=layers).eval()


@pytest.fixture(scope="module")
def stock_llama(tmp_path_factory):
    return save_stock_llama(str(tmp_path_factory.mktemp("stock_llama")), FOUR_LAYERS["num_hidden_layers"])


@pytest.fixture(scope="module")
def stock_llama_two_layers(tmp_path_factory):
    return save_stock_llama(str(tmp_path_factory.mktemp("stock_llama_two_layers")), 2)


def active(folder, **options):
    """A converted model whose latents matter: seed init (up projections not zero) and gates well open."""
    torch.manual_seed(1)
    model = LlamaLatentForCausalLM.from_pretrained(folder, identity_init=False, latent_gate_init=2.0, **options)
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.latent_up is not None:
                layer.latent_up.weight.mul_(40.0)
    return model.eval()


def reference_logits(model, input_ids, source, recurrent_from=None):
    """The equations written out with the model's own modules: a stock pass, latents `down_s(h_s)`, then every layer
    again with `sigmoid(g_t) * up_t(z)` added to the MLP output of target t (z of the same or the previous token).
    With `recurrent_from` (`"recurrent"` generation after a prompt of that many tokens), token t >= recurrent_from gets
    instead the latents of token t-1's latent-applied pass."""
    inner = model.model
    x0 = inner.embed_tokens(input_ids)
    position_ids = torch.arange(input_ids.shape[1])[None]
    rotary = inner.rotary_emb(x0, position_ids)
    seq = input_ids.shape[1]
    causal = torch.full((seq, seq), float("-inf")).triu(1)[None, None]

    def layer_forward(layer, x, add=None):
        attn, _ = layer.self_attn(layer.input_layernorm(x), position_embeddings=rotary, attention_mask=causal)
        x = x + attn
        out = layer.mlp(layer.post_attention_layernorm(x))
        return x + (out if add is None else out + add)

    def all_layers(latents):
        x, outputs = x0, []
        for i, layer in enumerate(inner.layers):
            add = torch.sigmoid(layer.latent_gate) * layer.latent_up(latents[i]) if i in latents else None
            x = layer_forward(layer, x, add)
            outputs.append(x)
        return outputs

    pairs = model.config.latent_pairs
    stock = all_layers({})
    latents = {t: inner.layers[s].latent_down(stock[s]) for s, t in pairs}
    if source != "same_position":
        latents = {t: torch.cat((torch.zeros_like(z[:, :1]), z[:, :-1]), dim=1) for t, z in latents.items()}
    for t in range(recurrent_from or seq, seq):
        applied = all_layers(latents)
        for s, target in pairs:
            latents[target][:, t] = inner.layers[s].latent_down(applied[s][:, t - 1])
    return model.lm_head(inner.norm(all_layers(latents)[-1]))


@pytest.mark.parametrize("source", LATENT_SOURCES)
def test_forward_matches_the_equations(stock_llama, source):
    model = active(stock_llama[0], latent_source=source, latent_source_layers=[2, 3], latent_target_layers=[0, 2])
    input_ids = lm_batch(lengths=(10,))["input_ids"]
    with torch.no_grad():
        logits = model(input_ids).logits
        torch.testing.assert_close(logits, reference_logits(model, input_ids, source))
        other = "same_position" if source != "same_position" else "previous_position"
        assert not torch.allclose(logits, reference_logits(model, input_ids, other), atol=1e-3)
        assert not torch.allclose(logits, stock_llama[1](input_ids).logits, atol=1e-3)


def test_default_layers_reproduce_the_seed_and_scale_with_depth():
    qwen3_0_6b = dict(num_hidden_layers=28, hidden_size=64, intermediate_size=64, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=128)  # fmt: skip
    pairs = Qwen3LatentConfig(**qwen3_0_6b).latent_pairs
    assert pairs == [(s, s - 5) for s in range(5, 26)]
    smollm2 = LlamaLatentConfig(**{**qwen3_0_6b, "num_hidden_layers": 30}).latent_pairs
    assert smollm2 == [(s, s - 5) for s in range(5, 28)]
    assert LlamaLatentConfig(**FOUR_LAYERS).latent_pairs == [(1, 0), (2, 1)]
    assert LlamaLatentConfig(**FOUR_LAYERS, latent_offset=2).latent_pairs == [(2, 0)]
    assert LlamaLatentConfig(**FOUR_LAYERS, latent_target_layers=[0, 1], latent_offset=2).latent_pairs == [
        (2, 0),
        (3, 1),
    ]


def test_qwen3_0_6b_shape_has_the_seed_parameter_count():
    config = Qwen3LatentConfig(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        report = Qwen3LatentForCausalLM(config).parameter_report()
    assert report["trainable"] == report["mechanism"] == 21 * ((1024 * 128 + 128) + (128 * 1024 + 1024) + 1)
    assert report["mechanism"] == 5_529_237 and round(report["mechanism_percent"], 2) == 0.92


@pytest.mark.parametrize("source", LATENT_SOURCES)
def test_packed_sequences_match_each_sequence_alone(stock_llama, source):
    """Padding-free packing (`DataCollatorWithFlattening`: one row, position ids restarting at 0 per sequence, no
    attention mask): each sequence gets the logits it gets alone; its first token receives no latent from the
    sequence packed before it. Without a cache, as transformers only separates packed sequences' attention then."""
    model = active(stock_llama[0], latent_source=source)
    g = torch.Generator().manual_seed(3)
    sequences = [torch.randint(1, model.config.vocab_size, (n,), generator=g).tolist() for n in (7, 5, 6)]
    batch = DataCollatorWithFlattening()([{"input_ids": ids} for ids in sequences])
    assert batch["position_ids"][0, 7] == 0 and "attention_mask" not in batch
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        start = 0
        for i, ids in enumerate(sequences):
            alone = model(torch.tensor([ids]), use_cache=False).logits
            torch.testing.assert_close(packed[:, start : start + len(ids)], alone, msg=f"sequence {i}")
            start += len(ids)


# -- generation -------------------------------------------------------------------------------------------------------


def incremental_logits(model, input_ids, attention_mask=None, prompt=4):
    with torch.no_grad():
        mask = attention_mask[:, :prompt] if attention_mask is not None else None
        out = model(input_ids[:, :prompt], attention_mask=mask, use_cache=True)
        steps = [out.logits]
        for t in range(prompt, input_ids.shape[1]):
            mask = attention_mask[:, : t + 1] if attention_mask is not None else None
            out = model(
                input_ids[:, t : t + 1], attention_mask=mask, past_key_values=out.past_key_values, use_cache=True
            )
            steps.append(out.logits)
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("source", ["previous_position", "same_position"])
def test_cached_decoding_matches_full_forward(stock_llama, source):
    model = active(stock_llama[0], latent_source=source)
    input_ids = lm_batch(lengths=(12,))["input_ids"]
    with torch.no_grad():
        full = model(input_ids).logits
    torch.testing.assert_close(incremental_logits(model, input_ids), full)
    torch.testing.assert_close(incremental_logits(model, input_ids, prompt=1), full)


@pytest.mark.parametrize("source", ["previous_position", "same_position"])
def test_left_padded_cached_decoding_matches_each_sequence_alone(stock_llama, source):
    model = active(stock_llama[0], latent_source=source)
    lengths = (12, 8)
    batch = lm_batch(lengths=lengths)
    ids = torch.zeros_like(batch["input_ids"])
    mask = torch.zeros_like(batch["attention_mask"])
    for i, n in enumerate(lengths):  # left padding, as generation uses
        ids[i, 12 - n :] = batch["input_ids"][i, :n]
        mask[i, 12 - n :] = 1
    together = incremental_logits(model, ids, mask, prompt=6)
    with torch.no_grad():
        for i, n in enumerate(lengths):
            alone = model(ids[i : i + 1, 12 - n :]).logits
            torch.testing.assert_close(together[i : i + 1, 12 - n :], alone)


def test_recurrent_decoding_takes_latents_from_the_latent_pass(stock_llama):
    recurrent = active(stock_llama[0], latent_source="recurrent")
    previous = active(stock_llama[0], latent_source="previous_position")
    input_ids = lm_batch(lengths=(12,))["input_ids"]
    with torch.no_grad():
        full = recurrent(input_ids).logits
        torch.testing.assert_close(full, previous(input_ids).logits)  # trains as previous_position
        stepped = incremental_logits(recurrent, input_ids, prompt=4)
    torch.testing.assert_close(stepped[:, :4], full[:, :4])  # the prompt runs as in training
    assert not torch.allclose(stepped[:, 5:], full[:, 5:], atol=1e-4)  # then the latents come from the latent pass
    with pytest.raises(ValueError, match="recurrent.*one token at a time.*got 3"):
        out = recurrent(input_ids[:, :4], use_cache=True)
        recurrent(input_ids[:, 4:7], past_key_values=out.past_key_values, use_cache=True)


@pytest.mark.parametrize("source", LATENT_SOURCES)
def test_generation_with_cache_matches_recomputation(stock_llama, source):
    model = active(stock_llama[0], latent_source=source)
    prompt = lm_batch(lengths=(6,))["input_ids"]
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    cached = model.generate(prompt, use_cache=True, **kwargs)
    if source != "recurrent":  # recurrent generation is defined by its cache; without one it is previous_position
        assert torch.equal(cached, model.generate(prompt, use_cache=False, **kwargs))
        beams = dict(kwargs, num_beams=3, num_return_sequences=2)
        assert torch.equal(model.generate(prompt, **beams), model.generate(prompt, use_cache=False, **beams))


def test_previous_position_batched_step_equals_the_passes_one_after_the_other(stock_llama):
    """`"previous_position"` decodes a token as one batch of 2B rows; running its stock pass and then its latent pass
    through the cache's two views (`PreviousPositionPasses.one_after_the_other`, what a prompt runs) gives the same
    scores at every step (what benchmarks/bench_latent.py's sequential variant relies on)."""
    model = active(stock_llama[0], latent_source="previous_position")
    prompt = lm_batch(lengths=(6, 4))
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    batched = model.generate(**prompt, **kwargs)
    model.model.passes.forward = model.model.passes.one_after_the_other
    sequential = model.generate(**prompt, **kwargs)
    assert torch.equal(sequential.sequences, batched.sequences)
    torch.testing.assert_close(torch.stack(sequential.scores), torch.stack(batched.scores))


LAST_LAYER_SOURCE = {
    "two_layers_default": ("stock_llama_two_layers", {}),  # the default pair is L1 -> L0
    "four_layers_sources_1_3": ("stock_llama", dict(latent_source_layers=[1, 3], latent_target_layers=[0, 2])),
}


def cached_generation_and_equations(model, source: str):
    """A greedy cached `generate()` of 4 tokens after a 5-token prompt, checked against the equations recomputed from
    scratch at every step: `(prompt, generate kwargs, its output, the reference logits)`."""
    prompt = lm_batch(lengths=(5, 5))["input_ids"]
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    out = model.generate(prompt, use_cache=True, output_logits=True, return_dict_in_generate=True, **kwargs)
    with torch.no_grad():
        reference = reference_logits(
            model, out.sequences[:, :-1], source, recurrent_from=prompt.shape[1] if source == "recurrent" else None
        )
    torch.testing.assert_close(torch.stack(out.logits, dim=1), reference[:, prompt.shape[1] - 1 :])
    return prompt, kwargs, out, reference


@pytest.mark.parametrize("source", LATENT_SOURCES)
@pytest.mark.parametrize("shape", LAST_LAYER_SOURCE)
def test_generation_when_a_source_is_the_last_layer(request, shape, source):
    """Greedy `generate()` with the cache gives the tokens and logits of the equations recomputed from scratch at every
    step (for `"recurrent"`: with the latents of the previous token's latent pass after the prompt), and without the
    cache the same tokens (except `"recurrent"`, which is defined by its cache)."""
    fixture, options = LAST_LAYER_SOURCE[shape]
    model = active(request.getfixturevalue(fixture)[0], latent_source=source, **options)
    assert max(s for s, _ in model.config.latent_pairs) == model.config.num_hidden_layers - 1
    prompt, kwargs, out, reference = cached_generation_and_equations(model, source)
    assert torch.equal(out.sequences[:, prompt.shape[1] :], reference[:, prompt.shape[1] - 1 :].argmax(-1))
    if source != "recurrent":
        assert torch.equal(out.sequences, model.generate(prompt, use_cache=False, **kwargs))
        beams = dict(kwargs, num_beams=3, num_return_sequences=2)
        assert torch.equal(model.generate(prompt, **beams), model.generate(prompt, use_cache=False, **beams))


def test_identity_generation_is_stock(tmp_path):
    folder = str(tmp_path / "stock")
    stock = build_stock_qwen3(folder).eval()
    prompt = lm_batch(lengths=(6,))["input_ids"]
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    expected = stock.generate(prompt, **kwargs)
    for source in LATENT_SOURCES:
        model = Qwen3LatentForCausalLM.from_pretrained(folder, latent_source=source).eval()
        assert torch.equal(model.generate(prompt, **kwargs), expected), source


def test_output_attentions_is_refused(stock_llama):
    model = active(stock_llama[0])
    input_ids = lm_batch(lengths=(6,))["input_ids"]
    refused = r"output_attentions=True.*not supported.*twice"
    with pytest.raises(ValueError, match=refused):
        model(input_ids, output_attentions=True)
    with pytest.raises(ValueError, match=refused):
        model.model(input_ids, output_attentions=True)
    with pytest.raises(ValueError, match=refused):
        model.generate(input_ids, max_new_tokens=2, output_attentions=True, return_dict_in_generate=True)
    with pytest.raises(ValueError, match=refused):  # in the config: refused at its creation
        active(stock_llama[0], attn_implementation="eager", output_attentions=True)
    eager = active(stock_llama[0], attn_implementation="eager")  # sdpa refuses it itself
    eager.config.output_attentions = True  # set on the config of a built model: refused when it runs
    with pytest.raises(ValueError, match=refused):
        eager(input_ids)
    assert eager(input_ids, output_attentions=False).attentions is None  # an explicit False wins over the config


def test_cache_type_and_cropping_are_checked(stock_llama):
    model = active(stock_llama[0])
    input_ids = lm_batch(lengths=(6,))["input_ids"]
    with pytest.raises(ValueError, match="past_key_values.*LatentCache.*DynamicCache"):
        model(input_ids, past_key_values=DynamicCache(), use_cache=True)
    cache = model(input_ids, use_cache=True).past_key_values
    with pytest.raises(ValueError, match="cannot be cropped"):
        cache.crop(-1)


@pytest.mark.parametrize("assisted", ["assistant_model", "prompt_lookup_num_tokens"])
def test_assisted_decoding_is_refused_before_any_token(stock_llama, assisted):
    """Assisted decoding (an assistant model, prompt lookup) rolls the cache back, which a `LatentCache` cannot do:
    `generate()` refuses it as stock refuses it for a stateful model, before either model runs a forward pass."""
    from transformers import AutoModelForCausalLM

    model = active(stock_llama[0])
    assistant = AutoModelForCausalLM.from_pretrained(stock_llama[0]).eval()
    calls = []
    for m in (model, assistant):
        m.register_forward_pre_hook(lambda module, args: calls.append(type(module).__name__))
    option = {"assistant_model": assistant} if assisted == "assistant_model" else {"prompt_lookup_num_tokens": 2}
    input_ids = lm_batch(lengths=(6,))["input_ids"]
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models.*LlamaLatent"):
        model.generate(input_ids, max_new_tokens=4, do_sample=False, **option)
    assert calls == [], f"forward passes before the refusal: {calls}"


def test_latent_source_is_chosen_when_the_model_is_built(stock_llama):
    """`latent_source` chooses how a forward runs its passes once, when the model is built (or reloaded with the
    option); a value set later on the built model's config is refused when the model runs, not ignored."""
    input_ids = lm_batch(lengths=(6,))["input_ids"]
    for source in LATENT_SOURCES:
        model = active(stock_llama[0], latent_source=source)
        assert model.model.passes.source == source
        model.config.latent_source = next(s for s in LATENT_SOURCES if s != source)
        with pytest.raises(ValueError, match=rf"latent_source=.* was set on a built .*'{source}'.*from_pretrained"):
            model(input_ids)


# -- training ---------------------------------------------------------------------------------------------------------


def test_frozen_first_pass_builds_no_graph_and_every_projection_learns(stock_llama):
    model = active(stock_llama[0]).train()
    batch = lm_batch(lengths=(10, 7))
    model(**batch, labels=lm_labels(batch)).loss.backward()
    for name, param in model.named_parameters():
        if "latent_" in name:
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert not param.requires_grad and param.grad is None, name
    calls = []
    first = model.model.layers[0]
    handle = first.register_forward_hook(lambda m, i, o: calls.append(o.requires_grad))
    model(**batch)
    handle.remove()
    assert calls == [False, True]  # the stock pass runs without a graph, the latent pass with one


def test_unfrozen_base_gets_gradients_through_both_passes(stock_llama):
    model = active(stock_llama[0], freeze_base=False).train()
    batch = lm_batch(lengths=(10, 7))
    calls = []
    handle = model.model.layers[1].register_forward_hook(lambda m, i, o: calls.append(o.requires_grad))
    model(**batch, labels=lm_labels(batch)).loss.backward()
    handle.remove()
    assert calls == [True, True]
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("source", LATENT_SOURCES)
@pytest.mark.parametrize("freeze_base", [True, False], ids=["frozen_base", "trainable_base"])
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_activation_checkpointing_gives_the_same_gradients(stock_llama, source, freeze_base, use_reentrant):
    batch = lm_batch(lengths=(10, 7))
    grads = []
    for checkpointing in (False, True):
        model = active(stock_llama[0], latent_source=source, freeze_base=freeze_base).train()
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
        model(**batch, labels=lm_labels(batch)).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[1].keys() == grads[0].keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, msg=f"gradient of {name}")


def test_stats_report_gates_and_adjustment_ratios(stock_llama):
    model = active(stock_llama[0])  # pairs L1 -> L0, L2 -> L1
    input_ids = lm_batch(lengths=(10,))["input_ids"]
    seen = {"mlp": [], "source": []}
    hooks = [
        model.model.layers[0].mlp.register_forward_hook(lambda m, i, o: seen["mlp"].append(o)),
        model.model.layers[1].register_forward_hook(lambda m, i, o: seen["source"].append(o)),
    ]
    with torch.no_grad():
        model(input_ids)
    for hook in hooks:
        hook.remove()
    stats = model.mechanism_stats()
    gate = torch.sigmoid(torch.tensor(2.0))
    assert stats["latent/L0/gate"] == pytest.approx(gate.item()) and "latent/L2/gate" not in stats
    with torch.no_grad():
        z = model.model.layers[1].latent_down(seen["source"][0])  # the stock pass's output of the source layer
        z = torch.cat((torch.zeros_like(z[:, :1]), z[:, :-1]), dim=1)
        adjustment = gate * model.model.layers[0].latent_up(z)
    expected = (adjustment.norm() / seen["mlp"][1].norm()).item()  # the latent pass's down projection output
    assert stats["eval/latent/L0/adjustment_ratio"] == pytest.approx(expected, rel=1e-5)
    assert "latent/L0/adjustment_ratio" not in stats  # eval forwards are kept apart from training ones
    with torch.no_grad():
        model(input_ids)
        model(input_ids[:, :5])
    second = model.mechanism_stats()["eval/latent/L0/adjustment_ratio"]
    with torch.no_grad():
        model(input_ids[:, :5])
    assert second == pytest.approx((expected + model.mechanism_stats()["eval/latent/L0/adjustment_ratio"]) / 2)


def test_hidden_states_are_the_latent_pass(stock_llama):
    model = active(stock_llama[0])
    input_ids = lm_batch(lengths=(10,))["input_ids"]
    seen = []
    hook = model.model.layers[1].register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        out = model(input_ids, output_hidden_states=True)
    hook.remove()
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    torch.testing.assert_close(out.hidden_states[2], seen[1])
    assert not torch.allclose(out.hidden_states[2], seen[0])


def test_trainable_report_and_card(stock_llama, tmp_path):
    model = LlamaLatentForCausalLM.from_pretrained(stock_llama[0])
    hidden, r = model.config.hidden_size, model.config.latent_dim
    pairs = len(model.config.latent_pairs)
    report = model.parameter_report()
    assert report["trainable"] == report["mechanism"] == pairs * ((hidden * r + r) + (r * hidden + hidden) + 1)
    model.save_pretrained(tmp_path / "saved")
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "Latent back-projection" in card and "latent_source" in card
    reloaded = LlamaLatentForCausalLM.from_pretrained(tmp_path / "saved")
    assert reloaded.parameter_report() == report


# -- the layers below the first target, shared by both passes ---------------------------------------------------------

# on 6 layers, pairs whose first target is L2: L0 and L1 see the same input in both passes and run once for both
SHARED_PAIRS = {
    # sources L1 (below the first target: its latents come from the shared layers) and L4; L2..L4 run both passes,
    # L5 only the latent pass
    "first_target_2": dict(latent_source_layers=[1, 4], latent_target_layers=[3, 2]),
    "last_layer_source": dict(latent_source_layers=[3, 5], latent_target_layers=[2, 4]),  # L2..L5 run both passes
    "target_above_the_sources": dict(latent_source_layers=[1], latent_target_layers=[3]),  # one pass: L0, L1 shared
}


@pytest.fixture(scope="module")
def stock_llama_six_layers(tmp_path_factory):
    return save_stock_llama(str(tmp_path_factory.mktemp("stock_llama_six_layers")), 6)


@pytest.mark.parametrize("source", LATENT_SOURCES)
@pytest.mark.parametrize("pairs", SHARED_PAIRS)
def test_shared_layers_forward_and_generation_match_the_equations(stock_llama_six_layers, pairs, source):
    """With the first target above L0, a forward, its hidden states, and greedy `generate()` with the cache (each
    step's logits) give those of the equations, where both passes run every layer; beam search with the cache gives
    the tokens it gives without one."""
    model = active(stock_llama_six_layers[0], latent_source=source, **SHARED_PAIRS[pairs])
    assert model.model.shared_depth == 2
    input_ids = lm_batch(lengths=(9, 9))["input_ids"]
    outputs = []
    hooks = [
        layer.register_forward_hook(lambda m, i, o: outputs.append((m.layer_idx, o))) for layer in model.model.layers
    ]
    with torch.no_grad():
        out = model(input_ids, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    torch.testing.assert_close(out.logits, reference_logits(model, input_ids, source))
    latent_pass = dict(outputs)  # the last output of each layer: the latent pass's
    for i in range(model.config.num_hidden_layers - 1):
        torch.testing.assert_close(out.hidden_states[i + 1], latent_pass[i], msg=f"hidden states of L{i}")

    prompt, kwargs, out, reference = cached_generation_and_equations(model, source)
    if source != "recurrent":
        beams = dict(kwargs, num_beams=3, num_return_sequences=2)
        assert torch.equal(model.generate(prompt, **beams), model.generate(prompt, use_cache=False, **beams))


@pytest.mark.parametrize("source", ["previous_position", "same_position"])
def test_shared_layers_left_padded_and_packed_sequences_match_each_sequence_alone(stock_llama_six_layers, source):
    model = active(stock_llama_six_layers[0], latent_source=source, **SHARED_PAIRS["first_target_2"])
    lengths = (12, 8)
    batch = lm_batch(lengths=lengths)
    ids, mask = torch.zeros_like(batch["input_ids"]), torch.zeros_like(batch["attention_mask"])
    for i, n in enumerate(lengths):  # left padding, as generation uses
        ids[i, 12 - n :] = batch["input_ids"][i, :n]
        mask[i, 12 - n :] = 1
    together = incremental_logits(model, ids, mask, prompt=6)
    sequences = [batch["input_ids"][i, :n].tolist() for i, n in enumerate(lengths)]
    packed = DataCollatorWithFlattening()([{"input_ids": s} for s in sequences])
    with torch.no_grad():
        packed_logits = model(
            input_ids=packed["input_ids"], position_ids=packed["position_ids"], use_cache=False
        ).logits
        for i, n in enumerate(lengths):
            alone = model(ids[i : i + 1, 12 - n :]).logits
            torch.testing.assert_close(together[i : i + 1, 12 - n :], alone)
            start = sum(lengths[:i])
            torch.testing.assert_close(packed_logits[:, start : start + n], alone)


@pytest.mark.parametrize("source", LATENT_SOURCES)
@pytest.mark.parametrize("freeze_base", [True, False], ids=["frozen_base", "trainable_base"])
@pytest.mark.parametrize("checkpointing", [None, True, False], ids=["no_checkpointing", "reentrant", "non_reentrant"])
def test_shared_layers_give_the_gradients_of_both_passes(stock_llama_six_layers, source, freeze_base, checkpointing):
    """A training step's gradients (every parameter that trains) equal those of the equations, where the layers
    below the first target run in both passes: with a trainable base they get the sum of both passes' gradients."""
    model = active(
        stock_llama_six_layers[0], latent_source=source, freeze_base=freeze_base, **SHARED_PAIRS["first_target_2"]
    )
    model.train()
    input_ids = lm_batch(lengths=(10, 10))["input_ids"]

    def loss(logits):
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())

    if checkpointing is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": checkpointing})
    loss(model(input_ids).logits).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    loss(reference_logits(model, input_ids, source)).backward()  # the modules called directly: no checkpointing
    expected = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, msg=f"gradient of {name}")


@pytest.mark.parametrize("source", LATENT_SOURCES)
def test_layers_below_the_first_target_run_once_and_are_cached_once(stock_llama_six_layers, source):
    """The layers below the first target (L0, L1 here) take B rows once per forward, in a training step and in each
    decoded token, and the cache keeps B rows of them; L2..L4 (up to the deepest source) run both passes (2B rows:
    one batch of 2B in `"previous_position"` decoding, two of B otherwise; cached twice), L5 the latent pass."""
    model = active(stock_llama_six_layers[0], latent_source=source, freeze_base=False, **SHARED_PAIRS["first_target_2"])
    rows = {i: [] for i in range(6)}
    hooks = [
        layer.register_forward_pre_hook(lambda m, args, i=i: rows[i].append(args[0].shape[0]))
        for i, layer in enumerate(model.model.layers)
    ]
    batch = lm_batch(lengths=(10, 7))
    model.train()
    model(**batch, labels=lm_labels(batch)).loss.backward()
    assert rows == {0: [2], 1: [2], 2: [2, 2], 3: [2, 2], 4: [2, 2], 5: [2]}

    model.eval()
    with torch.no_grad():
        cache = model(batch["input_ids"][:, :6], use_cache=True).past_key_values
        for layer_rows in rows.values():
            layer_rows.clear()
        model(batch["input_ids"][:, 6:7], past_key_values=cache, use_cache=True)
    for hook in hooks:
        hook.remove()
    two_passes = {"previous_position": [4], "same_position": [2, 2], "recurrent": [2]}[source]
    assert rows == {0: [2], 1: [2], 2: two_passes, 3: two_passes, 4: two_passes, 5: [2]}
    cached = [layer.keys.shape[0] for layer in cache.layers]
    assert cached == [2, 2, *([2] * 3 if source == "recurrent" else [4] * 3), 2]


@pytest.mark.parametrize("source", LATENT_SOURCES)
def test_shared_layers_cache_rows_are_selected_repeated_and_reordered(stock_llama_six_layers, source):
    """`batch_repeat_interleave`, `batch_select_indices` and `reorder_cache` (what generation strategies call) keep a
    sequence's rows together in every layer, whether it holds both passes' rows or the shared ones: the next token's
    logits are those of a cache filled with the selected sequences' prompts."""
    model = active(stock_llama_six_layers[0], latent_source=source, **SHARED_PAIRS["first_target_2"])
    prompts = lm_batch(lengths=(6, 6))["input_ids"]
    following = torch.tensor([[7], [9], [11]])
    with torch.no_grad():
        cache = model(prompts, use_cache=True).past_key_values
        cache.batch_repeat_interleave(2)  # rows a, a, b, b
        cache.batch_select_indices(torch.tensor([3, 0, 1]))  # b, a, a
        cache.reorder_cache(torch.tensor([1, 0, 2]))  # a, b, a
        stepped = model(following, past_key_values=cache, use_cache=True).logits[:, -1]
        alone = model(prompts[[0, 1, 0]], use_cache=True).past_key_values
        expected = model(following, past_key_values=alone, use_cache=True).logits[:, -1]
    torch.testing.assert_close(stepped, expected)
