"""Depth routing beyond the conformance suite: each form's equations against an independent reference written from its
paper (loops over the layers and their sources, attention written out by hand where a form changes what attention
reads), forward and every gradient at random (not initial) parameters; LAuReL's low-rank term against transformers'
`Gemma3nTextLaurelBlock` with the same weights; which earlier outputs DenseFormer's dilation and period read; the
forms refused with `identity_init=True`."""

import functools
import math

import pytest
import torch
from batches import lm_batch
from stock_checkpoints import build_stock_gpt2_decoder, build_stock_llama
from transformers.models.gemma3n.configuration_gemma3n import Gemma3nTextConfig
from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextLaurelBlock
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from interlayer import GPT2DepthRoutingForCausalLM, LlamaDepthRoutingConfig, LlamaDepthRoutingForCausalLM
from interlayer.models.modeling_depth_routing import STACK_AT_MOST, TapCall

LAYERS = 4


@pytest.fixture(scope="module")
def stock_llama(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("stock_llama"))
    return folder, build_stock_llama(folder, num_hidden_layers=LAYERS).eval()


def active(folder, **options):
    """A conversion with every depth parameter away from its start (seeded noise, scaled up), in float64, where the
    model and a reference agree to far below any error in the equations."""
    torch.manual_seed(3)
    model = LlamaDepthRoutingForCausalLM.from_pretrained(folder, identity_init=False, freeze_base=False, **options)
    with torch.no_grad():
        for name in model.mechanism_parameter_names():
            parameter = model.get_parameter(name)
            parameter.add_(0.3 * torch.randn_like(parameter))
    return model.double().eval()


# ---- the reference: a Llama written out, layer by layer -------------------------------------------------------------


def rms(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class Llama:
    """The stock Llama's computation from the model's own weights, with attention written out by hand, so that a form
    can give the key and value projections other inputs and mix the values."""

    def __init__(self, model, input_ids):
        self.model, self.inner = model, model.model
        self.x0 = self.inner.embed_tokens(input_ids)
        seq = input_ids.shape[1]
        self.rotary = self.inner.rotary_emb(self.x0, torch.arange(seq)[None])
        self.causal = torch.full((seq, seq), float("-inf")).triu(1)

    def attention(self, i, x, key=None, value=None, value_mix=None, key_norm=None, value_norm=None):
        """Layer i's attention with queries from `x`, keys from `key` and values from `value` (`x` where None),
        each through the block's norm (keys and values through `key_norm` / `value_norm` where given)."""
        layer = self.inner.layers[i]
        a, norm = layer.self_attn, layer.input_layernorm
        batch, seq, _ = x.shape
        heads, head_dim = a.config.num_attention_heads, a.head_dim
        kv_heads = a.config.num_key_value_heads
        q = a.q_proj(norm(x))
        k = a.k_proj((key_norm or norm)(x if key is None else key))
        v = a.v_proj((value_norm or norm)(x if value is None else value))
        if value_mix is not None:
            v = value_mix(v)
        q = q.view(batch, seq, heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *self.rotary)
        k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        probs = (q @ k.transpose(-1, -2) / math.sqrt(head_dim) + self.causal).softmax(-1)
        return a.o_proj((probs @ v).transpose(1, 2).reshape(batch, seq, heads * head_dim))

    def mlp(self, i, h):
        layer = self.inner.layers[i]
        return layer.mlp(layer.post_attention_layernorm(h))

    def block(self, i, x, **attention):
        h = x + self.attention(i, x, **attention)
        return h + self.mlp(i, h)

    def logits(self, y):
        return self.model.lm_head(self.inner.norm(y))


def dwa_reference(model, input_ids, dilation, period):
    """DenseFormer (Pagliardini et al. 2024, eq. 1-2, and its `denseformer` package's k x p sparsity): after block i
    (1-based) with i a multiple of p, y_i = sum over j <= i with (i - j) a multiple of k of alpha_ij x_j; after the
    other blocks y_i = x_i; every block's output is a source."""
    ref, alpha = Llama(model, input_ids), model.model.depth_router.weight
    outputs, y = [ref.x0], ref.x0
    for i in range(1, LAYERS + 1):
        outputs.append(ref.block(i - 1, y))
        if i % period == 0:
            y = sum(alpha[i - 1, j] * outputs[j] for j in range(i + 1) if (i - j) % dilation == 0)
        else:
            y = outputs[-1]
    return ref.logits(y)


def depth_softmax(sources, query, key_norm):
    """sum_j softmax_j(query . RMSNorm(v_j) * key_norm / sqrt(C)) v_j."""
    scores = torch.stack([(rms(v) * key_norm * query).sum(-1) / math.sqrt(v.shape[-1]) for v in sources])
    weights = scores.softmax(0)
    return sum(weights[j, ..., None] * v for j, v in enumerate(sources))


def attention_residual_reference(model, input_ids, variant="delta", block_size=0):
    """Delta attention residuals (the reference's `delta` / `delta_block` modes with its learnable gate): sublayer s
    reads h_s + g_s r_s, r_s the softmax attention over the sources with its query and key-norm weight; the residual
    stream stays h_{s+1} = h_s + o_s. The sources: the embedding and every earlier sublayer output o, or (blocks of
    n layers) the embedding and each completed block's delta. Kimi's full form: the sublayer reads r_s alone, and the
    final norm reads the attention over all the sources with the final query."""
    ref = Llama(model, input_ids)
    h, sources, start = ref.x0, [ref.x0], ref.x0
    for i in range(LAYERS):
        layer = ref.inner.layers[i]
        for n, branch in enumerate((lambda x, i=i: ref.attention(i, x), lambda x, i=i: ref.mlp(i, x))):
            r = depth_softmax(sources, layer.depth_queries[n], layer.depth_key_norms[n])
            out = branch(h + layer.depth_gates[n] * r) if variant == "delta" else branch(r)
            h = h + out
            if not block_size:
                sources.append(out)
        if block_size and (i + 1) % block_size == 0:
            sources.append(h - start)
            start = h
    if variant == "full":
        final = model.model.depth_final
        return ref.logits(depth_softmax(sources, final.query, final.key_norm))
    return ref.logits(h)


def mudd_reference(model, input_ids, ways=("q", "k", "v", "r")):
    """MUDDFormer (Xiao et al. 2025, its PyTorch model): after block i, per token and way, A = W2 GELU(RMSNorm(x)
    W1) + a (the norm without weight) over x_0 .. x_{i+1}; block i + 1 computes r + attn(queries from norm(q), keys
    from norm_k(k), values from norm_v(v)), then its MLP; a way not chosen reads the residual way. After the last
    block the residual way alone is the output."""
    ref, generators = Llama(model, input_ids), model.model.depth_router.generators
    outputs = [ref.x0]
    query = key = value = residual = ref.x0
    for i in range(LAYERS):
        layer = ref.inner.layers[i]
        if i == 0:
            x = ref.block(0, ref.x0)
        else:
            # the block's own norm, with the key and value ways' own weights
            norms = {
                f"{way}_norm": functools.partial(
                    torch.func.functional_call,
                    layer.input_layernorm,
                    {"weight": getattr(layer, f"depth_{way}_norms")[0].weight},
                )
                for way in ("key", "value")
            }
            h = residual + ref.attention(i, query, key=key, value=value, **norms)
            x = h + ref.mlp(i, h)
        outputs.append(x)
        generator = generators[i]
        hidden = torch.nn.functional.gelu(rms(x) @ generator.weight_in)
        count, sources = generator.static.shape
        chosen = ["r"] if count == 1 else list(ways)
        mixed = {}
        for w, way in enumerate(chosen):
            weights = hidden @ generator.weight_out[:, w * sources : (w + 1) * sources] + generator.static[w]
            mixed[way] = sum(weights[..., j, None] * outputs[j] for j in range(sources))
        residual = mixed.get("r", x)
        query, key, value = (mixed.get(way, residual) for way in "qkv")
    return ref.logits(residual)


def value_residual_reference(model, input_ids):
    """ResFormer (Zhou et al.): the attention of layer n > 0 uses values l1_n v_n + l2_n v_1, v_1 the first layer's
    values of the same tokens."""
    ref = Llama(model, input_ids)
    first = ref.inner.layers[0]
    v1 = first.self_attn.v_proj(first.input_layernorm(ref.x0))
    y = ref.block(0, ref.x0)
    for n in range(1, LAYERS):
        l1, l2 = ref.inner.layers[n].depth_value_weights
        y = ref.block(n, y, value_mix=lambda v, l1=l1, l2=l2: l1 * v + l2 * v1)
    return ref.logits(y)


def laurel_reference(model, input_ids, form, previous=3):
    """LAuReL (Menghani et al. 2025) around each sublayer f with residual input h: rw `alpha f(h) + beta h`; lr `f(h) +
    h + B A h` (with `laurel_norm`, RMSNorm(B A h) * w as Gemma 3n); pa `f(h_s) + h_s + B A sum_j gamma_j h_{s-j}`
    over the last `previous` residual inputs (missing ones count as 0)."""
    ref = Llama(model, input_ids)

    def low_rank(term, h):
        out = h @ term.left.T @ term.right.T
        return out if term.norm_weight is None else rms(out, term.eps) * term.norm_weight

    h, inputs = ref.x0, []
    for i in range(LAYERS):
        layer = ref.inner.layers[i]
        for n, branch in enumerate((lambda x, i=i: ref.attention(i, x), lambda x, i=i: ref.mlp(i, x))):
            inputs.append(h)
            if form == "rw":
                alpha, beta = layer.depth_laurel_weights[n]
                h = beta * h + alpha * branch(h)
                continue
            term = layer.depth_laurel_attn if n == 0 else layer.depth_laurel_mlp
            if form == "pa":
                window = inputs[::-1][:previous]
                mixed = sum(layer.depth_laurel_previous[n, j] * x for j, x in enumerate(window))
            else:
                mixed = h
            h = h + branch(h) + low_rank(term, mixed)
    return ref.logits(h)


FORMS = {
    "dwa": (dict(depth_form="dwa"), lambda m, ids: dwa_reference(m, ids, 1, 1)),
    "dwa-k2-p2": (dict(depth_form="dwa", dwa_dilation=2, dwa_period=2), lambda m, ids: dwa_reference(m, ids, 2, 2)),
    "dwa-k1-p3": (dict(depth_form="dwa", dwa_period=3), lambda m, ids: dwa_reference(m, ids, 1, 3)),
    "attention-residual": (dict(depth_form="attention_residual"), attention_residual_reference),
    "attention-residual-blocks": (
        dict(depth_form="attention_residual", attention_residual_block_size=2),
        lambda m, ids: attention_residual_reference(m, ids, block_size=2),
    ),
    "attention-residual-full": (
        dict(depth_form="attention_residual", attention_residual_variant="full"),
        lambda m, ids: attention_residual_reference(m, ids, variant="full"),
    ),
    "mudd": (dict(depth_form="mudd"), mudd_reference),
    "mudd-kvr": (dict(depth_form="mudd", mudd_ways=["k", "v", "r"]), lambda m, ids: mudd_reference(m, ids, "kvr")),
    "mudd-q": (dict(depth_form="mudd", mudd_ways=["q"]), lambda m, ids: mudd_reference(m, ids, "q")),
    "value-residual": (dict(depth_form="value_residual"), value_residual_reference),
    "laurel-rw": (dict(depth_form="laurel", laurel_form="rw"), lambda m, ids: laurel_reference(m, ids, "rw")),
    "laurel-lr": (dict(depth_form="laurel"), lambda m, ids: laurel_reference(m, ids, "lr")),
    "laurel-lr-norm": (dict(depth_form="laurel", laurel_norm=True), lambda m, ids: laurel_reference(m, ids, "lr")),
    "laurel-pa": (dict(depth_form="laurel", laurel_form="pa"), lambda m, ids: laurel_reference(m, ids, "pa")),
    "laurel-pa-2": (
        dict(depth_form="laurel", laurel_form="pa", laurel_previous=2),
        lambda m, ids: laurel_reference(m, ids, "pa", previous=2),
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_form_follows_its_equations_forward_and_backward(stock_llama, form):
    """The model's logits and the gradient of every parameter (the stock weights' too) equal the reference's, in
    float64, at random depth parameters (the gradients to 1e-5: the stock RMS norms and rotary tables compute in
    float32 whatever the model's dtype, which rounds the two computations' different orders of summation apart)."""
    options, reference = FORMS[form]
    model = active(stock_llama[0], **options)
    input_ids = lm_batch(lengths=(9, 9))["input_ids"]
    weights = torch.randn(2, 9, model.config.vocab_size, generator=torch.Generator().manual_seed(0)).double()
    parameters = [p for p in model.parameters() if p.requires_grad]
    logits = model(input_ids).logits
    expected = reference(model, input_ids)
    torch.testing.assert_close(logits, expected)
    grads = torch.autograd.grad((logits * weights).sum(), parameters)
    expected_grads = torch.autograd.grad((expected * weights).sum(), parameters, allow_unused=True)
    for name, got, want in zip([n for n, p in model.named_parameters() if p.requires_grad], grads, expected_grads):
        want = torch.zeros_like(got) if want is None else want
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")
    with torch.no_grad():
        assert not torch.allclose(logits.float(), stock_llama[1](input_ids).logits, atol=1e-3), "the form does not act"


def test_dilation_and_period_choose_the_outputs_each_average_reads():
    """DenseFormer's k x p: an average after every p-th block i (1-based), reading x_i, x_{i-k}, ... down to i's
    residue class mod k; on 6 layers with k = 2, p = 3, the averages after blocks 3 and 6 (rows 2 and 5), and on 7
    layers none after the last (7 is no multiple of 3), as the `denseformer` package has it."""
    config = LlamaDepthRoutingConfig(num_hidden_layers=6, hidden_size=8, num_attention_heads=2, dwa_dilation=2,
                                     dwa_period=3, vocab_size=16)  # fmt: skip
    model = LlamaDepthRoutingForCausalLM(config)
    assert model.model.depth_router.sources == {2: [1, 3], 5: [0, 2, 4, 6]}
    dense = LlamaDepthRoutingForCausalLM(LlamaDepthRoutingConfig(**{**config.to_dict(), "dwa_dilation": 1}))
    assert dense.model.depth_router.sources == {2: [0, 1, 2, 3], 5: [0, 1, 2, 3, 4, 5, 6]}
    seven = LlamaDepthRoutingForCausalLM(LlamaDepthRoutingConfig(**{**config.to_dict(), "num_hidden_layers": 7}))
    assert seven.model.depth_router.sources == {2: [1, 3], 5: [0, 2, 4, 6]}


def test_laurel_low_rank_term_is_gemma3n_laurel_block():
    """With `laurel_norm`, `h + B A h` normed is transformers' `Gemma3nTextLaurelBlock` given the same weights
    (`linear_left` = A, `linear_right` = B, `post_laurel_norm`), forward and every gradient, to 1e-6 in float32."""
    torch.manual_seed(0)
    shape = dict(hidden_size=32, num_attention_heads=4, vocab_size=16, num_hidden_layers=1)
    config = LlamaDepthRoutingConfig(**shape, laurel_rank=8, laurel_norm=True, depth_form="laurel", identity_init=False)
    ours = LlamaDepthRoutingForCausalLM(config).model.layers[0].depth_laurel_attn
    gemma = Gemma3nTextLaurelBlock(Gemma3nTextConfig(hidden_size=32, laurel_rank=8, rms_norm_eps=ours.eps))
    with torch.no_grad():
        for parameter in (ours.left, ours.right, ours.norm_weight):
            parameter.normal_()
        gemma.linear_left.weight.copy_(ours.left)
        gemma.linear_right.weight.copy_(ours.right)
        gemma.post_laurel_norm.weight.copy_(ours.norm_weight)
    x = torch.randn(2, 5, 32, requires_grad=True)
    got, expected = x + ours(x), gemma(x)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    probe = torch.randn_like(got)
    got_grads = torch.autograd.grad((got * probe).sum(), (x, ours.left, ours.right, ours.norm_weight))
    gemma_parameters = (x, gemma.linear_left.weight, gemma.linear_right.weight, gemma.post_laurel_norm.weight)
    expected_grads = torch.autograd.grad((expected * probe).sum(), gemma_parameters)
    for got_grad, expected_grad in zip(got_grads, expected_grads):
        torch.testing.assert_close(got_grad, expected_grad, rtol=1e-6, atol=1e-6)


def test_fused_projections_take_the_multiway_inputs(tmp_path):
    """GPT-2's one fused `c_attn` (queries, keys, values side by side): MUDD's keys and values come from their own
    ways, as with separate projections: the model equals the same routing computed with `c_attn`'s three parts
    applied to the three (normed) inputs."""
    build_stock_gpt2_decoder(str(tmp_path / "stock"))
    torch.manual_seed(0)
    model = GPT2DepthRoutingForCausalLM.from_pretrained(str(tmp_path / "stock"), identity_init=False,
                                                        depth_form="mudd", depth_init_std=0.2).eval()  # fmt: skip
    layer = model.transformer.h[1]
    x = torch.randn(2, 6, 32)
    key, value = torch.randn_like(x), torch.randn_like(x)
    width = x.shape[-1]
    normed = [layer.ln_1(t) for t in (x, key, value)]
    expected = torch.cat(
        [layer.attn.c_attn(t)[..., part * width : (part + 1) * width] for part, t in enumerate(normed)], -1
    )
    layer.tap_call = TapCall(key_input=normed[1], value_input=normed[2])
    try:
        got = layer.attn.c_attn(normed[0])
    finally:
        layer.tap_call = None
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(layer.attn.c_attn(normed[0]), expected)


@pytest.mark.parametrize(
    "options, field",
    [
        (dict(depth_form="attention_residual", attention_residual_variant="full"), "attention_residual_variant"),
        (dict(depth_form="value_residual", value_residual_mix="half"), "value_residual_mix"),
    ],
)
def test_forms_that_cannot_start_as_the_stock_model_are_refused_at_identity(options, field):
    with pytest.raises(ValueError, match=rf"identity_init=True.*{field}="):
        LlamaDepthRoutingConfig(**options)
    assert getattr(LlamaDepthRoutingConfig(**options, identity_init=False), field) == options[field]


def growth_with_depth(tmp_path, depths, width, convert, measure, input_ids, unit_bytes) -> list[float]:
    """What the depth-routing model `convert(folder)` of a stock Llama of each depth in `depths` (width `width`, 4
    heads) adds to the stock model's `measure(model, input_ids)`, in hidden states of the batch (`unit_bytes` per
    element: what `measure` counts is bytes (4) or elements (1))."""
    extra = []
    for layers in depths:
        folder = str(tmp_path / f"stock{layers}")
        stock = build_stock_llama(folder, num_hidden_layers=layers, hidden_size=width, head_dim=width // 4)
        vector = input_ids.numel() * width * unit_bytes
        extra.append((measure(convert(folder), input_ids) - measure(stock, input_ids)) / vector)
    return extra


def saved_for_backward(model, input_ids) -> int:
    """The bytes of the distinct storages autograd keeps for the backward pass of one training forward."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=input_ids, labels=input_ids).loss.backward()
    return sum(storages.values())


@pytest.mark.parametrize("options", [dict(depth_form=form) for form in ("dwa", "mudd", "attention_residual")])
def test_what_the_backward_pass_keeps_grows_linearly_with_depth(tmp_path, options):
    """The forms that read every earlier output keep each output once for the backward pass: what they keep beyond
    the stock model grows linearly with the depth, its second difference over 3, 6 and 9 layers is about 0 (a stacked
    copy of the earlier outputs per layer or sublayer, as `torch.stack(history)` made, keeps L^2 / 2 hidden states:
    measured, second differences of 9 (DenseFormer), 9.5 (MUDD) and 108 hidden states (the attention residuals, whose
    normed keys were kept too)). A width of 512, so that
    what the equations themselves make grow with L^2 (the per-token weights over the sources, MUDD's generators)
    stays small beside the hidden states."""
    input_ids = torch.randint(0, 128, (2, 64))

    def convert(folder):
        return LlamaDepthRoutingForCausalLM.from_pretrained(folder, freeze_base=False, **options)

    extra = growth_with_depth(tmp_path, (3, 6, 9), 512, convert, saved_for_backward, input_ids, unit_bytes=4)
    assert abs(extra[2] - 2 * extra[1] + extra[0]) < 1.0, extra


def elements_concatenated(model, input_ids) -> int:
    """The elements written by `torch.stack` and `torch.cat` in one forward without gradient."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (torch.ops.aten.cat.default, torch.ops.aten.stack.default):
                Count.total += out.numel()
            return out

    with torch.no_grad(), Count():
        model(input_ids=input_ids, use_cache=False)
    return Count.total


@pytest.mark.parametrize("options", [dict(depth_form=form) for form in ("dwa", "mudd", "attention_residual")])
def test_an_evaluation_forward_copies_each_earlier_output_at_most_once(tmp_path, options):
    """Without gradient, on more tokens than a decoding step (`STACK_AT_MOST` elements per source), the sums read the
    earlier outputs where they are: what the forward copies grows linearly with the depth (stacking the earlier
    outputs for every layer or sublayer copied L^2 / 2 hidden states, and made an evaluation forward of the
    attention residuals 2.8x stock's time at the SmolLM2 shape, against 1.25x one source at a time; measured before,
    second differences of 4, 4 and 16.2 hidden states). A width of 128, so that what the equations make grow with
    L^2 (the attention residuals' logits, a number per token and source) stays small beside the hidden states."""
    input_ids = torch.randint(0, 128, (2, 300))
    assert input_ids.numel() * 128 > STACK_AT_MOST  # the elements of one hidden state of the batch

    def convert(folder):
        return LlamaDepthRoutingForCausalLM.from_pretrained(folder, identity_init=False, **options).eval()

    copied = growth_with_depth(tmp_path, (2, 4, 6), 128, convert, elements_concatenated, input_ids, unit_bytes=1)
    assert abs(copied[2] - 2 * copied[1] + copied[0]) < 0.5, copied
