"""ONNX export of one class per mechanism: `torch.onnx.export(..., dynamo=True)`, the `.onnx` file run in onnxruntime on
CPU, its outputs compared with the eager model's (fp32, `TOLERANCE`) on inputs of other batch sizes and lengths than
the export's example (the batch and the lengths are dynamic, and the graphs' inputs say so). Every mechanism is
active (trained-like parameters, not the identity): a graph that gives an active model's logits gives an identity
conversion's too, which are the stock model's (the conformance suite's identity test). The decoders export without a
cache (`Logits`) and with one (`CachedForward`: a prompt graph and a one-token step graph, chained); the attention
bridge as transformers' seq2seq models are exported: the encoder (with the bridge) and the decoder. docs/serving.md
("Exporting to ONNX") has the table of results."""

import pytest
import torch
from batches import lm_batch, pair_batch, source_batch
from conformance_cases import TINY_BRIDGE
from converted_models import active_bridge
from stock_checkpoints import build_stock_gpt2, build_stock_llama, build_stock_marian, build_stock_qwen3
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from interlayer import (
    BRIDGE_PRESETS,
    LlamaLatentForCausalLM,
    MarianAttentionBridgeForConditionalGeneration,
    Qwen3MHCForCausalLM,
    convert,
)

pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript: pip install -e '.[onnx]'")
ort = pytest.importorskip(
    "onnxruntime", reason="running the exported graphs needs onnxruntime: pip install -e '.[onnx]'"
)

# fp32 logits of order 0.1 to 1: onnxruntime's kernels sum in another order than torch's (measured: at most 1.1e-6)
TOLERANCE = dict(rtol=1e-4, atol=1e-4)
# each example's tokens: the export's batch (3 rows, right-padded), then other batch sizes and lengths
LM_SHAPES = [(12, 9, 5), (7, 7), (15, 3, 8, 1)]
PAIR_SHAPES = [((6, 5), (4, 3), (2, 2)), ((3, 4), (5, 6)), ((2, 3), (7, 5), (4, 4), (1, 1))]


class Logits(nn.Module):
    """The logits of `model(**inputs, **fixed)`: what is exported (the model itself returns an output class, with a
    cache for the decoders)."""

    def __init__(self, model, **fixed):
        super().__init__()
        self.model, self.fixed = model, fixed

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **self.fixed).logits


BATCH = torch.export.Dim("batch", min=1, max=64)


def batch_and_length(inputs: dict) -> dict:
    """Dynamic shapes: every input's dimension 0 is the batch, dimension 1 the sequence length."""
    length = torch.export.Dim("length", min=1, max=4096)
    return {name: {0: BATCH, 1: length} for name in inputs}


def export(module, inputs: dict, path, dynamic_shapes: dict) -> "ort.InferenceSession":
    """`module(**inputs)` exported with `dynamo=True` and `dynamic_shapes` into `path` (one file, weights in it);
    the onnxruntime CPU session that runs it. Every dimension marked dynamic is dynamic in the graph: when
    `torch.export` finds code that fixes one, `torch.onnx.export` falls back to a draft export that fixes it
    without an error (a graph that then refuses every other batch size)."""
    with torch.no_grad():
        torch.onnx.export(
            module.eval(), (), str(path), kwargs=inputs, dynamo=True, external_data=False, dynamic_shapes=dynamic_shapes
        )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for graph_input in session.get_inputs():
        for dim, marked in dynamic_shapes[graph_input.name].items():
            if marked is not None:
                assert isinstance(graph_input.shape[dim], str), f"{graph_input.name} {graph_input.shape}: {dim} fixed"
    return session


def run(session, inputs: dict) -> torch.Tensor:
    """The first output of the graph on `inputs` (the graph's inputs by name: an input it does not read is gone)."""
    return torch.from_numpy(session.run(None, {i.name: inputs[i.name].numpy() for i in session.get_inputs()})[0])


def assert_exports(model, batches: list[dict], path, **fixed) -> None:
    """`Logits(model)` exported on `batches[0]`; the graph gives the eager logits on every batch."""
    module = Logits(model.eval(), **fixed)
    session = export(module, batches[0], path, batch_and_length(batches[0]))
    for batch in batches:
        with torch.no_grad():
            expected = module(**batch)
        torch.testing.assert_close(run(session, batch), expected, **TOLERANCE)


def lm_batches():
    return [lm_batch(lengths, seed=i) for i, lengths in enumerate(LM_SHAPES)]


def perturbed(model, markers: tuple[str, ...], scale: float, seed: int = 0):
    """`model` with `scale * N(0, 1)` added to every parameter whose name contains one of `markers`."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(m in name for m in markers):
                p.add_(scale * torch.randn(p.shape, generator=generator))
    return model.eval()


class CachedForward(nn.Module):
    """A forward with the cache as tensors, as a graph takes it: the new tokens, the padding mask over the past and
    the new tokens, and the cache's tensors (each layer's keys and values, then a latent model's latents; none for a
    prompt) -> the logits and the updated cache's tensors, in the same order."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *state):
        cache = self.model.base_model.new_cache()
        for layer in range(len(state) // 2):
            cache.update(state[2 * layer], state[2 * layer + 1], layer)
        if len(state) % 2:
            cache.latents = state[-1]
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        latents = [cache.latents] if getattr(cache, "latents", None) is not None else []
        return (out.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)], *latents)


def export_cached(module, args: tuple, path) -> "ort.InferenceSession":
    """`CachedForward(...)(*args)` exported into `path`; its onnxruntime CPU session. Dynamic: the batch, the mask's
    length, the prompt's length (the step graph takes one new token: a dynamic query length that is 1 on the
    example turns the stock SDPA function's `is_causal` into a symbolic bool, which `scaled_dot_product_attention`
    refuses) and the cache's length (the keys' and values' dimension 2); a latent model's latents are one token's."""
    batch, dynamic = torch.export.Dim.AUTO, torch.export.Dim.AUTO
    state = args[2:]
    latents = len(state) % 2
    shapes = (
        {0: batch} if state else {0: batch, 1: dynamic},
        {0: batch, 1: dynamic},
    )
    if state:  # torch.export groups `*state` into one element of the inputs (none when it is empty)
        shapes += (tuple({0: batch, 2: dynamic} for _ in state[: len(state) - latents]) + ({0: batch},) * latents,)
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, str(path), dynamo=True, external_data=False, dynamic_shapes=shapes)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    graph = [i.shape for i in session.get_inputs()]
    assert len(graph) == len(args)
    assert all(isinstance(shape[0], str) for shape in graph) and isinstance(graph[1][1], str), graph
    assert all(isinstance(shape[2], str) for shape in graph[2 : len(graph) - latents]), graph
    return session


def run_cached(session, args) -> list[torch.Tensor]:
    feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return [torch.from_numpy(t) for t in session.run(None, feed)]


def assert_cached_decoding_exports(model, path) -> None:
    """Two graphs: the prompt (no cache in, the cache out) and a one-token step (the cache in and out), exported on
    one batch; on other batch sizes and prompt lengths, the prompt graph then two steps of the step graph, chained in
    onnxruntime, give the eager model's logits and cache at every step."""
    module = CachedForward(model.eval())
    first = lm_batch((6, 4, 6), seed=0)
    with torch.no_grad():
        prompt_out = module(first["input_ids"], first["attention_mask"])
    step = torch.tensor([[3], [5], [7]])
    step_args = (step, torch.cat((first["attention_mask"], torch.ones_like(step)), dim=1), *prompt_out[1:])
    prompt = export_cached(module, (first["input_ids"], first["attention_mask"]), path.with_suffix(".prompt.onnx"))
    decode = export_cached(module, step_args, path.with_suffix(".step.onnx"))
    for i, lengths in enumerate([(9, 9), (3, 1, 3, 2)], start=1):
        batch = lm_batch(lengths, seed=i)
        args = (batch["input_ids"], batch["attention_mask"])
        with torch.no_grad():
            expected = module(*args)
        got = run_cached(prompt, args)
        for _ in range(2):
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                torch.testing.assert_close(g, e, **TOLERANCE)
            token = expected[0][:, -1:].argmax(-1)
            mask = torch.cat((args[1], torch.ones_like(token)), dim=1)
            with torch.no_grad():
                expected = module(token, mask, *expected[1:])
            got = run_cached(decode, (token, mask, *got[1:]))
            args = (token, mask)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, **TOLERANCE)


# -- hyper-connections / mHC -------------------------------------------------------------------------------------------


def hyper_connections(tmp_path, hc_mode):
    """Qwen3 with 4 streams, input-dependent mHC (Sinkhorn unrolled in the graph: 3 rounds, where the default's 20
    repeat the same operations and take longer to export) or static HC, every coefficient parameter moved
    away from its init."""
    build_stock_qwen3(str(tmp_path / "stock"))
    model = Qwen3MHCForCausalLM.from_pretrained(str(tmp_path / "stock"), hc_mode=hc_mode, sinkhorn_iters=3)
    return perturbed(model, ("hc_",), 0.3)


def test_hyper_connections_export(tmp_path):
    assert_exports(hyper_connections(tmp_path, "static"), lm_batches(), tmp_path / "model.onnx", use_cache=False)


def test_hyper_connections_cached_decoding_export(tmp_path):
    assert_cached_decoding_exports(hyper_connections(tmp_path, "mhc"), tmp_path / "model")


# -- latent back-projection --------------------------------------------------------------------------------------------


def active_latent(tmp_path, latent_source):
    """Llama with 3 layers (the default pair: layer 1's latents to layer 0, so layer 2 runs the stock pass alone), the
    up projections and gates open (as `test_latent.active`)."""
    build_stock_llama(str(tmp_path / "stock"))
    torch.manual_seed(1)
    model = LlamaLatentForCausalLM.from_pretrained(
        str(tmp_path / "stock"), identity_init=False, latent_gate_init=2.0, latent_source=latent_source
    )
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.latent_up is not None:
                layer.latent_up.weight.mul_(40.0)
    return model


def test_latent_export(tmp_path):
    """Both passes in one graph, each token's own latents (the seed's training)."""
    assert_exports(active_latent(tmp_path, "same_position"), lm_batches(), tmp_path / "model.onnx", use_cache=False)


@pytest.mark.parametrize("latent_source", ["previous_position", "recurrent"])
def test_latent_cached_decoding_export(tmp_path, latent_source):
    """The latents the next token receives are one more cache tensor: the previous token's stock-pass latents (the
    step graph runs both passes as one batch of 2B rows up to the deepest source layer, whose cache layers hold 2B
    rows) or its latent-applied pass's (the seed's inference: one pass a step)."""
    assert_cached_decoding_exports(active_latent(tmp_path, latent_source), tmp_path / "model")


# -- depth routing -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["dwa", "mudd", "attention_residual", "value_residual", "laurel"])
def test_depth_routing_export(tmp_path, form):
    """Each form on Llama, its parameters away from the identity, without a cache: the weighted or routed sums over
    the earlier layers' outputs (or values) are ordinary operations in the graph."""
    build_stock_llama(str(tmp_path / "stock"))
    torch.manual_seed(0)
    model, _ = convert(str(tmp_path / "stock"), "depth-routing", depth_form=form, identity_init=False)
    assert_exports(perturbed(model, ("depth_",), 0.3), lm_batches(), tmp_path / "model.onnx", use_cache=False)


# -- sentinel gates ----------------------------------------------------------------------------------------------------


def trained_gates(model, seed: int = 0):
    """Gates away from 1 (as after training) and one head masked."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for attn in model.gated_attentions:
            attn.sentinel_gate_logits.copy_(torch.randn(attn.num_heads, generator=generator))
        model.gated_attentions[-1].sentinel_head_mask[0] = 0.0
    return model


def test_gpt2_sentinel_export(tmp_path):
    build_stock_gpt2(str(tmp_path / "stock"))
    model, _ = convert(str(tmp_path / "stock"), "sentinel")
    assert_exports(trained_gates(model), lm_batches(), tmp_path / "model.onnx", use_cache=False)


def test_pruned_llama_sentinel_cached_decoding_export(tmp_path):
    """Llama (4 query heads in 2 key/value groups) with U-Net skips, trained gates, and pruned unevenly: layer 0
    keeps groups of 1 and 2 query heads (each head gets its own copy of its group's keys), layer 1 keeps no head
    (its cache tensors have no head)."""
    build_stock_llama(str(tmp_path / "stock"))
    model, _ = convert(str(tmp_path / "stock"), "sentinel", unet_skips=True)
    trained_gates(model)
    model.prune_heads({0: [1], 1: [0, 1, 2, 3]})
    assert [a.num_heads for a in model.gated_attentions] == [3, 0, 4]
    assert not model.gated_attentions[0].uniform_groups
    assert_cached_decoding_exports(perturbed(model, ("unet_",), 0.3), tmp_path / "model")


# -- cross-layer bridges -----------------------------------------------------------------------------------------------


def test_roberta_bridge_export(tmp_path):
    """RoBERTa sequence classification with the hybrid bridge (QKV and HDIM messages, routed), the bridge
    projections enlarged (`converted_models.active_bridge`). The eager model scores the HDIM target tokens 4 at a
    time, fewer than the batches' lengths; the graph scores them at once (a number of chunks would fix the
    length), which gives the same logits."""
    model = active_bridge(tmp_path / "stock", "roberta", **BRIDGE_PRESETS["hybrid"], hdim_chunk_size=4)
    batches = [pair_batch("roberta", lengths, seed=i) for i, lengths in enumerate(PAIR_SHAPES)]
    assert_exports(model, batches, tmp_path / "model.onnx")


# -- attention bridges -------------------------------------------------------------------------------------------------


class Encoder(nn.Module):
    """The encoder and the bridge: the decoders' memory."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderStep(nn.Module):
    """One decoder forward over the memory, without a cache: the logits of every target position."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states, attention_mask):
        memory = BaseModelOutput(last_hidden_state=encoder_hidden_states)
        out = self.model(
            encoder_outputs=memory, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        )
        return out.logits


# each batch: the sources' lengths, the target length
SEQ2SEQ_SHAPES = [((12, 9, 5), 7), ((6, 6), 3), ((4, 11, 2, 8), 10)]


@pytest.mark.parametrize(
    "bridge_layers", [["transformer", "perceiver"], ["transformer"]], ids=["fixed_length", "variable_length"]
)
def test_marian_attention_bridge_export(tmp_path, bridge_layers):
    """Marian with a transformer bridge layer and a perceiver (a fixed-length memory of 5 slots; the decoder takes
    no memory mask) or the transformer layer alone (a memory of the source length, masked), bridge weights at the
    seed's init: the encoder graph and the decoder graph, chained in onnxruntime, give the eager model's logits."""
    build_stock_marian(str(tmp_path / "stock"))
    torch.manual_seed(0)
    model = MarianAttentionBridgeForConditionalGeneration.from_pretrained(
        str(tmp_path / "stock"), **{**TINY_BRIDGE, "bridge_layers": bridge_layers}
    ).eval()
    batches = [source_batch(sources, target, seed=i) for i, (sources, target) in enumerate(SEQ2SEQ_SHAPES)]
    first = {k: batches[0][k] for k in ("input_ids", "attention_mask")}
    encoder = export(Encoder(model), first, tmp_path / "encoder.onnx", batch_and_length(first))
    with torch.no_grad():
        memory = Encoder(model)(**first)
    source, target = torch.export.Dim("source", min=1, max=4096), torch.export.Dim("target", min=1, max=4096)
    slots = None if model.config.bridge_is_fixed_length else source
    decoder = export(
        DecoderStep(model),
        {
            "decoder_input_ids": batches[0]["decoder_input_ids"],
            "encoder_hidden_states": memory,
            "attention_mask": first["attention_mask"],
        },
        tmp_path / "decoder.onnx",
        {
            "attention_mask": {0: BATCH, 1: source},
            "decoder_input_ids": {0: BATCH, 1: target},
            "encoder_hidden_states": {0: BATCH, 1: slots},
        },
    )
    for batch in batches:
        with torch.no_grad():
            expected = model(**batch, use_cache=False).logits
        memory = run(encoder, batch)
        got = run(decoder, {**batch, "encoder_hidden_states": memory})
        torch.testing.assert_close(got, expected, **TOLERANCE)
