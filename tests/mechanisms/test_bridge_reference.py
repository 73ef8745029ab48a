"""The vectorised bridge against a literal, loop-by-loop reading of the seed's equations (sections 1-4).

The reference loops over examples, routed sources, heads, target tokens and source tokens, builds every pair
feature phi_st explicitly and applies the gates exactly once; the model must agree with it to float precision.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from batches import pair_batch
from converted_models import active_bridge


def ref_pool(h, valid, mode):
    return h[0] if mode == "cls" else h[valid].mean(0)


def ref_segments(ids, types, config):
    if config.hdim_segments == "token_type_ids" or (
        config.hdim_segments == "auto" and types is not None and types.any()
    ):
        return types.tolist()
    seg, seen = [], 0
    for tok in ids.tolist():
        seg.append(1 if seen > 0 else 0)
        seen += tok == config.sep_token_id
    return seg


def ref_qkv(attn_j, attn_i, config, h_j, h_i, valid, value_proj):
    heads, dh = attn_j.num_attention_heads, attn_j.attention_head_size
    kv = attn_j if config.qkv_kv_weights == "target" else attn_i
    q, k, v = attn_j.query(h_j), kv.key(h_i), kv.value(h_i)
    out = torch.zeros_like(h_j)
    for head in range(heads):
        sl = slice(head * dh, (head + 1) * dh)
        vh = v[:, sl] if value_proj is None else value_proj(v[:, sl])
        scores = q[:, sl] @ k[:, sl].T / math.sqrt(dh)
        scores[:, ~valid] = -math.inf
        out[:, sl] = scores.softmax(-1) @ vh
    return out


def ref_hdim(hdim, config, h_j, h_i, allowed):
    def proj(x, source):
        p = hdim.proj_src if (source and hdim.proj_src is not None) else hdim.proj_tgt
        z = p(x)
        return hdim.proj_norm(z) if hdim.proj_norm is not None else z

    zj, zi = proj(h_j, False), proj(h_i, True)
    seq = h_j.shape[0]
    logits = torch.full((seq, seq), -math.inf)
    for s in range(seq):
        for t in range(seq):
            if not allowed[s, t]:
                continue
            if config.hdim_scorer == "4term":
                phi = torch.cat([zj[s], zi[t], zj[s] * zi[t], (zj[s] - zi[t]).abs()])
                a = hdim.scorer(phi)[0]
            elif config.hdim_scorer == "bilinear":
                a = zj[s] @ hdim.scorer.weight @ zi[t]
            else:
                a = 10 * F.cosine_similarity(zj[s], zi[t], dim=0)
            if hdim.token_temp is not None:
                a = a / F.softplus(hdim.token_temp)
            logits[s, t] = a
    msg = torch.zeros_like(h_j)
    for s in range(seq):
        if not allowed[s].any():
            ctx = torch.zeros_like(h_j[s])
        else:
            ctx = logits[s].softmax(-1).nan_to_num(0.0) @ h_i
        parts = {
            "concat_only": [ctx, h_j[s]],
            "concat_hadam": [ctx, h_j[s], ctx * h_j[s]],
            "concat_diff_hadam": [ctx, h_j[s], ctx - h_j[s], ctx * h_j[s]],
        }[config.hdim_value_fusion]
        msg[s] = hdim.value_mlp(torch.cat(parts)) + config.hdim_value_residual * (ctx - h_j[s])
    return msg


def reference_hidden(model, batch):
    """Final hidden states computed one example at a time from the seed's equations."""
    base = model.base_model
    config = model.config
    outputs = []
    for b in range(batch["input_ids"].shape[0]):
        valid = batch["attention_mask"][b].bool()
        ids = batch["input_ids"][b]
        types = batch.get("token_type_ids")
        types = types[b] if types is not None else None
        emb_kwargs = {"token_type_ids": types[None]} if types is not None else {}
        h = base.embeddings(input_ids=ids[None], **emb_kwargs)[0]
        ext = torch.zeros(1, 1, 1, len(ids))
        ext[..., ~valid] = torch.finfo(h.dtype).min
        seg = ref_segments(ids, types, config)
        allowed = valid[None, :].repeat(len(ids), 1)
        if config.hdim_pair_mask == "cross_segment":
            allowed &= torch.tensor([[seg[s] != seg[t] for t in range(len(ids))] for s in range(len(ids))])
        if config.hdim_mask_special_tokens:
            special = (ids == config.sep_token_id) | (ids == config.cls_token_id)
            allowed &= ~special[None, :]
        outs = []
        for j, layer in enumerate(base.encoder.layer):
            attn_out = layer.attention(h[None], ext)[0][0]
            if layer.bridge is not None:
                block, router = layer.bridge, base.encoder.bridge_router
                q = router.route_q(ref_pool(h, valid, config.route_pool))
                logits = torch.stack([q @ router.route_k(ref_pool(o, valid, config.route_pool)) for o in outs])
                logits = logits / config.route_temp
                top = logits.topk(min(config.route_topk, j)).indices.tolist()
                w = logits[top].softmax(-1)
                qkv_msgs = [
                    ref_qkv(
                        layer.attention.self,
                        base.encoder.layer[i].attention.self,
                        config,
                        h,
                        outs[i],
                        valid,
                        block.value_proj,
                    )
                    for i in top
                ]
                hdim_msgs = [ref_hdim(block.hdim, config, h, outs[i], allowed) if block.hdim else 0 for i in top]
                gate = F.softplus if config.gate_activation == "softplus" else (lambda x: x)

                def blend(ctx_qkv, msg):
                    paths = []
                    if block.use_qkv:
                        paths.append((gate(block.alpha_attn), ctx_qkv, getattr(block, "norm_attn", None)))
                    if block.use_hdim:
                        paths.append((gate(block.alpha_hdim), msg, getattr(block, "norm_hdim", None)))
                    if config.gate_placement == "post_norm":
                        return sum(a * norm(m) for a, m, norm in paths)
                    return block.norm(sum(a * m for a, m, _ in paths))

                if config.route_placement == "pre_norm":  # the seed: mix the messages, then blend and normalise
                    mixed_qkv = sum(w[n] * m for n, m in enumerate(qkv_msgs))
                    add = blend(mixed_qkv, sum(w[n] * m for n, m in enumerate(hdim_msgs)))
                else:  # blend and normalise each routed source's messages, then mix
                    add = sum(w[n] * blend(qkv_msgs[n], hdim_msgs[n]) for n in range(len(top)))
                attn_out = attn_out + block.proj(add)
            h = layer.feed_forward_chunk(attn_out)
            outs.append(h)
        outputs.append(h[valid])
    return outputs


CASES = [
    ("roberta", dict(route_topk=2)),
    ("roberta", dict(route_topk=2, route_placement="pre_norm")),
    ("roberta", dict(route_pool="cls", hdim_value_fusion="concat_only", qkv_kv_weights="target", qkv_value_proj=True)),
    (
        "roberta",
        dict(bridge_mode="hdim", hdim_scorer="bilinear", hdim_pair_mask="cross_segment", hdim_value_residual=0.1),
    ),
    ("bert", dict(hdim_scorer="cosine", gate_activation="softplus", gate_placement="post_norm", hdim_token_temp=0.5)),
    (
        "bert",
        dict(
            route_topk=3,
            hdim_value_fusion="concat_diff_hadam",
            hdim_pair_mask="cross_segment",
            hdim_mask_special_tokens=True,
            hdim_proj_norm=True,
            hdim_share_proj=True,
            hdim_chunk_size=3,
        ),
    ),
    (
        "bert",
        dict(route_topk=3, route_placement="pre_norm", gate_placement="post_norm", route_estimator="topk_softmax"),
    ),
    ("bert", dict(bridge_mode="qkv", route_last_n=2)),
]


@pytest.mark.parametrize("family,options", CASES)
def test_bridge_matches_seed_equations(tmp_path, family, options):
    model = active_bridge(tmp_path, family, **options).eval()
    batch = pair_batch(family)
    with torch.no_grad():
        got = model.base_model(**batch).last_hidden_state
        expected = reference_hidden(model, batch)
    for b, exp in enumerate(expected):
        valid = batch["attention_mask"][b].bool()
        torch.testing.assert_close(got[b][valid], exp, rtol=1e-4, atol=1e-5)
