"""Pictures of what a mechanism does, from a model and its statistics: the ones `interlayer inspect` draws, the
`MechanismStatsCallback` sends to TensorBoard, and each mechanism's record names (`interlayer.mechanisms`).

Pictures are drawn with matplotlib (`pip install "interlayer[inspect]"`) on `matplotlib.figure.Figure` objects,
which render with the Agg backend without touching pyplot's global state. Each `draw_*` function takes a model (or
statistics) and a path, so that a training script or another module can draw the same picture.
"""

from __future__ import annotations

import math
import os
import re

import torch

from .models.configuration_attention_bridge import FIXED_LENGTH_TYPES


def _figure(width: float, height: float):
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            'interlayer inspect draws with matplotlib, which is not installed: pip install "interlayer[inspect]"'
        ) from err
    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, path) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(str(path))), exist_ok=True)
    fig.savefig(str(path), dpi=100)
    return str(path)


def _require(items, what: str):
    """`items`, or a ValueError saying which statistics the model did not give (a renamed or missing statistic)."""
    if not items:
        raise ValueError(f"the model's statistics have no {what}; cannot draw it")
    return items


def _grid(n: int, columns: int = 4) -> tuple[int, int]:
    columns = max(1, min(columns, n))
    return math.ceil(n / columns), columns


def _layers(stats: dict, pattern: str) -> list[int]:
    return sorted({int(m.group(1)) for k in stats if (m := re.fullmatch(pattern, k))})


def draw_bridge_routing(stats: dict, path) -> str:
    """Per target layer, the share of examples whose router picked each source layer (`bridge/L{j}/source_{i}`)."""
    targets = _require(_layers(stats, r"bridge/L(\d+)/source_\d+"), "`bridge/L{j}/source_{i}`")
    rows, columns = _grid(len(targets))
    fig = _figure(3.2 * columns, 2.6 * rows)
    for n, j in enumerate(targets):
        ax = fig.add_subplot(rows, columns, n + 1)
        sources = sorted(int(k.rsplit("_", 1)[1]) for k in stats if k.startswith(f"bridge/L{j}/source_"))
        ax.bar(sources, [stats[f"bridge/L{j}/source_{i}"] for i in sources], color="tab:blue")
        ax.set_title(f"target layer {j}")
        ax.set_xlabel("source layer")
        ax.set_ylabel("share of examples")
        ax.set_xticks(sources)
        ax.set_ylim(0, max(1.0, max(stats[f"bridge/L{j}/source_{i}"] for i in sources)))
    fig.suptitle("Which source layers the routers pick")
    return _save(fig, path)


def draw_bridge_gates(stats: dict, path) -> str:
    """Per target layer, the gates (`alpha_attn`, `alpha_hdim`) and the norms of what they let through."""
    targets = _require(_layers(stats, r"bridge/L(\d+)/inject_norm"), "`bridge/L{j}/inject_norm`")
    fig = _figure(max(5.0, 1.2 * len(targets) + 3), 3.2)
    gates, norms = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    width = 0.38
    for ax, names in ((gates, ("alpha_attn", "alpha_hdim")), (norms, ("qkv_norm", "hdim_norm", "inject_norm"))):
        present = [name for name in names if any(f"bridge/L{j}/{name}" in stats for j in targets)]
        width = 0.8 / max(len(present), 1)
        for n, name in enumerate(present):
            values = [stats.get(f"bridge/L{j}/{name}", float("nan")) for j in targets]
            ax.bar([t + (n - (len(present) - 1) / 2) * width for t in range(len(targets))], values, width, label=name)
        ax.set_xticks(range(len(targets)), [f"L{j}" for j in targets])
        ax.set_xlabel("target layer")
        ax.legend(fontsize="small")
    gates.set_title("gates")
    norms.set_title("mean token norm of the gated messages")
    return _save(fig, path)


def sentinel_gate_grid(model):
    """`(gates, masked, pruned)` as `[layers, heads]` tensors over original head indices: the gate of every
    remaining head (NaN where pruned), whether its controller mask is 0, whether it was pruned."""
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    gates = torch.full((layers, heads), float("nan"))
    masked = torch.zeros(layers, heads, dtype=torch.bool)
    pruned = torch.zeros(layers, heads, dtype=torch.bool)
    for layer, attn in enumerate(model.gated_attentions):
        ids = attn.head_ids.tolist()
        gates[layer, ids] = attn.gates().detach().float().cpu()
        masked[layer, ids] = attn.sentinel_head_mask.detach().cpu() == 0
        for head in (config.pruned_heads or {}).get(layer, ()):
            pruned[layer, head] = True
    return gates, masked, pruned


def draw_sentinel_gates(model, path) -> str:
    """The gate of every head as a heat map (layers top to bottom, original heads left to right), pruned heads
    grey with `P`, heads switched off by the controller (mask 0) marked `M` (matplotlib, the `inspect` extra)."""
    while hasattr(model, "module"):  # a DDP- or accelerate-wrapped model
        model = model.module
    gates, masked, pruned = sentinel_gate_grid(model)
    layers, heads = gates.shape
    fig = _figure(max(4.0, 0.45 * heads + 2), max(3.0, 0.4 * layers + 1.5))
    ax = fig.add_subplot()
    ax.set_facecolor("0.75")
    image = ax.imshow(gates.numpy(), vmin=0, vmax=max(1.0, float(gates.nan_to_num(0).max())), cmap="viridis")
    fig.colorbar(image, ax=ax, label="gate")
    for layer in range(layers):
        for head in range(heads):
            if pruned[layer, head]:
                ax.text(head, layer, "P", ha="center", va="center", color="black", fontsize=8)
            elif masked[layer, head]:
                ax.text(head, layer, "M", ha="center", va="center", color="red", fontsize=8, weight="bold")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_title(f"Sentinel gates ({int(pruned.sum())} pruned: P, {int(masked.sum())} masked: M)")
    return _save(fig, path)


def hc_matrices(stats: dict, k: int, name: str = "res") -> list[tuple[str, torch.Tensor]]:
    """`[(label, tensor)]` of every hyper-connection's mean `H_res` (`[k, k]`) or `pre`/`post` (`[k]`) in depth order
    (layer 0 attn, layer 0 mlp, layer 1 attn, ...)."""
    out = []
    for layer in _layers(stats, rf"hc/L(\d+)/attn/{name}_0(?:_0)?"):
        for sub in ("attn", "mlp"):
            prefix = f"hc/L{layer}/{sub}/{name}"
            if name == "res":
                if f"{prefix}_0_0" in stats:
                    rows = [[stats[f"{prefix}_{i}_{j}"] for j in range(k)] for i in range(k)]
                    out.append((f"L{layer} {sub}", torch.tensor(rows, dtype=torch.float64)))
            elif f"{prefix}_0" in stats:
                out.append((f"L{layer} {sub}", torch.tensor([stats[f"{prefix}_{i}"] for i in range(k)])))
    return out


HC_RES_MAX_INCHES = (16.0, 12.0)  # the whole picture, whatever the depth: 1600 x 1200 pixels at most


def contrasting_text_colour(rgba) -> str:
    """ "white" on a dark colour, "black" on a light one (relative luminance of the cell's colour)."""
    red, green, blue = rgba[:3]
    return "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"


def hc_res_figure(matrices: list[tuple[str, torch.Tensor]], k: int):
    """A grid of small `H_res` heatmaps, a layer's attn and mlp side by side, as many layers per row as keeps the
    grid about square; the picture stays within `HC_RES_MAX_INCHES`. Each cell shows its value when it fits, in
    white on dark cells and black on light ones."""
    layers_per_row = max(1, round(math.sqrt(len(matrices) / 2)))
    columns = min(len(matrices), 2 * layers_per_row)
    rows = math.ceil(len(matrices) / columns)
    width, height = HC_RES_MAX_INCHES
    size = min(1.6, (width - 1.2) / columns, (height - 0.6) / rows - 0.25)  # inches per heatmap
    fig = _figure(columns * size + 1.2, rows * (size + 0.25) + 0.6)
    largest = max(float(m.abs().max()) for _, m in matrices)
    fontsize = min(8.0, 26 * size / k)  # a value "0.25" in a k-th of the heatmap's width
    for n, (label, matrix) in enumerate(matrices):
        ax = fig.add_subplot(rows, columns, n + 1)
        image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-largest, vmax=largest)
        if fontsize >= 4.5:
            for i in range(k):
                for j in range(k):
                    value = float(matrix[i, j])
                    colour = contrasting_text_colour(image.cmap(image.norm(value)))
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=fontsize, color=colour)
        ax.set_title(label, fontsize=8, pad=2)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=fig.axes, shrink=0.6, label="H_res")
    fig.suptitle("H_res per layer (rows: output stream, columns: input stream)")
    return fig


def draw_hc_res(stats: dict, k: int, path) -> str:
    """The mean `H_res` of every hyper-connection, one small matrix per layer and sublayer (`hc_res_figure`)."""
    matrices = _require(hc_matrices(stats, k), "`hc/L{i}/{attn,mlp}/res_{i}_{j}`")
    return _save(hc_res_figure(matrices, k), path)


def hc_composite_gain(stats: dict, k: int) -> tuple[list[str], list[float], list[float]]:
    """Labels and the largest absolute row and column sums of `H_res^(n) ... H_res^(1)` after every sublayer n:
    how much the residual streams can be amplified across depth (`hc/amax_gain_row/col` is the last point)."""
    composite = torch.eye(k, dtype=torch.float64)
    labels, rows, columns = [], [], []
    for label, res in hc_matrices(stats, k):
        composite = res @ composite
        labels.append(label)
        rows.append(composite.abs().sum(1).max().item())
        columns.append(composite.abs().sum(0).max().item())
    return labels, rows, columns


def draw_hc_gain(stats: dict, k: int, path) -> str:
    labels, rows, columns = hc_composite_gain(stats, k)
    _require(labels, "`hc/L{i}/{attn,mlp}/res_{i}_{j}`")
    fig = _figure(max(5.0, 0.35 * len(labels) + 2), 3.4)
    ax = fig.add_subplot()
    ax.plot(range(len(labels)), rows, marker="o", label="max |row sum|")
    ax.plot(range(len(labels)), columns, marker="s", label="max |column sum|")
    ax.axhline(1.0, color="0.6", linestyle=":")
    ax.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7)
    ax.set_ylabel("composite residual gain")
    if max(rows + columns) / max(min(rows + columns), 1e-12) > 100:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, 1.15 * max(rows + columns + [1.0]))
    ax.legend()
    ax.set_title("Composite H_res across depth")
    return _save(fig, path)


def draw_hc_pre_post(stats: dict, k: int, path) -> str:
    """The mean read-in `H_pre` and write-out `H_post` weights per sublayer (rows) and stream (columns)."""
    fig = _figure(2 * (1.2 + 0.5 * k) + 1.5, 3.5)
    for n, name in enumerate(("pre", "post")):
        vectors = _require(hc_matrices(stats, k, name), f"`hc/L{{i}}/{{attn,mlp}}/{name}_{{k}}`")
        ax = fig.add_subplot(1, 2, n + 1)
        image = ax.imshow(torch.stack([v for _, v in vectors]).numpy(), aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(vectors)), [label for label, _ in vectors], fontsize=7)
        ax.set_xticks(range(k))
        ax.set_xlabel("stream")
        ax.set_title(f"H_{name}")
        fig.colorbar(image, ax=ax)
    return _save(fig, path)


def draw_latent(model, stats: dict, path) -> str:
    """Per (source -> target) pair, the gate `sigmoid(g_t)` and the adjustment ratio |sigmoid(g) up(latent)| /
    |MLP output| of the target layer."""
    pairs = model.config.latent_pairs
    _require([t for _, t in pairs if f"latent/L{t}/gate" in stats], "`latent/L{t}/gate`")
    labels = [f"L{s}->L{t}" for s, t in pairs]
    fig = _figure(max(6.0, 0.7 * len(pairs) + 3), 3.4)
    for n, (name, title) in enumerate((("gate", "gate sigmoid(g_t)"), ("adjustment_ratio", "adjustment ratio"))):
        ax = fig.add_subplot(1, 2, n + 1)
        values = [stats.get(f"latent/L{t}/{name}", float("nan")) for _, t in pairs]
        bars = ax.bar(range(len(pairs)), values, color="tab:green" if n == 0 else "tab:orange")
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_xticks(range(len(pairs)), labels, rotation=45, fontsize=8)
        ax.set_title(title)
        finite = [v for v in values if math.isfinite(v)]
        ax.set_ylim(0, 1.0 if name == "gate" else 1.2 * max(finite + [1e-3]))
    fig.suptitle("Latent back-projection per source -> target layer")
    return _save(fig, path)


def draw_slot_attention(model, path, input_ids, attention_mask=None, tokens=None, example: int = 0, layer=None):
    """The attention of each slot of a fixed-length bridge layer (the first unless `layer`) over the source tokens of
    one example, as a heat map (rows slots, columns source tokens labelled with `tokens` when given). Returns the
    attention shown, `[slots, real source tokens]`."""
    attention = model.bridge_attention(input_ids, attention_mask, layer)[example]
    if attention_mask is not None and attention.shape[-1] == attention_mask.shape[-1]:
        attention = attention[:, attention_mask[example].bool()]
    slots, width = attention.shape
    fig = _figure(max(4.0, 0.35 * width + 2), max(2.5, 0.3 * slots + 1.5))
    ax = fig.add_subplot()
    image = ax.imshow(attention.float().numpy(), aspect="auto", cmap="magma", vmin=0)
    fig.colorbar(image, ax=ax, label="attention")
    labels = list(tokens)[:width] if tokens is not None and len(tokens) >= width else [str(i) for i in range(width)]
    ax.set_xticks(range(width), labels, rotation=70, fontsize=7)
    ax.set_xlabel("source token")
    ax.set_ylabel("slot")
    ax.set_title("Bridge slots' attention over the source")
    _save(fig, path)
    return attention


def depth_weight_maps(stats: dict) -> dict[str, torch.Tensor]:
    """The depth-routing weights as layer x source maps, `{way: [layers, sources]}` (NaN where a layer reads no such
    source): DenseFormer's averages and the attention residuals' softmax (`depth/L{i}/weights_{j}`, way ""),
    MUDD's per way (`depth/L{i}/{way}_weights_{j}`)."""
    found: dict[str, dict[tuple[int, int], float]] = {}
    for key, value in stats.items():
        match = re.fullmatch(r"depth/L(\d+)/(?:(\w+)_)?weights_(\d+)", key)
        if match:
            found.setdefault(match.group(2) or "", {})[int(match.group(1)), int(match.group(3))] = value
    maps = {}
    for way, entries in found.items():
        rows, columns = (max(index[k] for index in entries) + 1 for k in (0, 1))
        grid = torch.full((rows, columns), float("nan"))
        for (i, j), value in entries.items():
            grid[i, j] = value
        maps[way] = grid
    return maps


def draw_depth_weights(stats: dict, path) -> str:
    """What each layer reads, as a layer x source map: row i weighs the embedding (source 0) and the outputs of blocks
    1 .. i + 1 into what block i + 2 reads (the final norm after the last block); one map per MUDD way. The attention
    residuals' rows are a layer's sublayers and their columns the sources they attend over (the embedding, then each
    earlier sublayer's output, or each completed block's)."""
    maps = _require(depth_weight_maps(stats), "`depth/L{i}/weights_{j}`")
    names = {"": "weights", "q": "query way", "k": "key way", "v": "value way", "r": "residual way"}
    names |= {"attn": "attention sublayers", "mlp": "MLP sublayers"}
    fig = _figure(4.2 * len(maps), 3.8)
    order = ["", "q", "k", "v", "r", "attn", "mlp"]
    for n, (way, grid) in enumerate(sorted(maps.items(), key=lambda item: order.index(item[0]))):
        ax = fig.add_subplot(1, len(maps), n + 1)
        image = ax.imshow(grid.numpy(), cmap="viridis", aspect="auto")
        fig.colorbar(image, ax=ax, shrink=0.8)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_xlabel("source (0: embedding, j: block j's output)")
        ax.set_ylabel("after block")
        ax.set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
        ax.set_title(names.get(way, way))
    fig.suptitle("Depth-routing weights over earlier outputs")
    return _save(fig, path)


def draw_depth_gates(stats: dict, path) -> str:
    """The depth-routing parameters that are one number a layer, each a series over the layers: the attention
    residuals' gates, the value residual's (l1, l2), LAuReL's weights, its previous activations' gammas and its
    low-rank terms' size."""
    series: dict[str, dict[int, float]] = {}
    for key, value in stats.items():
        match = re.fullmatch(r"depth/L(\d+)/(l1|l2|(?:attn|mlp)_(?:gate|alpha|beta|lowrank_norm|gamma_\d+))", key)
        if match:
            series.setdefault(match.group(2), {})[int(match.group(1))] = value
    _require(series, "per-layer depth-routing weights")
    fig = _figure(6.5, 3.6)
    ax = fig.add_subplot()
    for name, values in sorted(series.items()):
        layers = sorted(values)
        ax.plot(layers, [values[i] for i in layers], marker="o", label=name)
    ax.set_xlabel("layer")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle("Depth-routing weights per layer")
    return _save(fig, path)


# --- each mechanism's pictures, as its record names them -------------------------------------------------------
# `draw(model, stats, inputs, tokens, path)`: the picture into `path` (returned), or None where this model has no such
# picture. `stats` are the mechanism's statistics and state (`mechanism_stats()`, `mechanism_state()`); `inputs` is
# a batch and `tokens` its first example's tokens, which only a picture drawn from a source sentence reads.


def bridge_routing(model, stats, inputs, tokens, path) -> str:
    return draw_bridge_routing(stats, path)


def bridge_gates(model, stats, inputs, tokens, path) -> str:
    return draw_bridge_gates(stats, path)


def sentinel_gates(model, stats, inputs, tokens, path) -> str:
    return draw_sentinel_gates(model, path)


def hc_res(model, stats, inputs, tokens, path) -> str:
    return draw_hc_res(stats, model.config.hc_streams, path)


def hc_gain(model, stats, inputs, tokens, path) -> str:
    return draw_hc_gain(stats, model.config.hc_streams, path)


def hc_pre_post(model, stats, inputs, tokens, path) -> str:
    return draw_hc_pre_post(stats, model.config.hc_streams, path)


def latent(model, stats, inputs, tokens, path) -> str:
    return draw_latent(model, stats, path)


def slot_attention(model, stats, inputs, tokens, path) -> str | None:
    """The first example's slot attention, for a bridge with a fixed-length layer (slots to show)."""
    if not any(t in FIXED_LENGTH_TYPES for t in model.config.bridge_layers):
        return None
    draw_slot_attention(model, path, inputs["input_ids"][:1], inputs["attention_mask"][:1], tokens)
    return str(path)


def depth_weights(model, stats, inputs, tokens, path) -> str | None:
    """The layer x source maps, for the forms that weigh earlier outputs (DWA, attention residuals, MUDD)."""
    if not depth_weight_maps(stats):
        return None
    return draw_depth_weights(stats, path)


def depth_gates(model, stats, inputs, tokens, path) -> str | None:
    """The per-layer weights, for the forms that have them (attention residuals' delta, value residual, LAuReL)."""
    try:
        return draw_depth_gates(stats, path)
    except ValueError:
        return None
