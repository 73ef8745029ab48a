"""`interlayer inspect`: for a saved model of every mechanism, the summary names the mechanism, the settings that
differ from the default and whether it computes the stock function, and the pictures are real, non-blank PNGs; for
a Trainer output folder, the logged statistics become curves."""

import json

import numpy as np
import pytest
import torch
from batches import lm_batch
from conformance_cases import TINY_BRIDGE
from matplotlib.image import imread
from stock_checkpoints import (
    build_stock_gpt2,
    build_stock_marian,
    build_stock_qwen3,
    build_stock_roberta,
    save_tiny_llama_with_tokenizer,
)

from interlayer.cli import main
from interlayer.inspection import inspect_folder
from interlayer.zoo import convert, save_atomically

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def converted(tmp_path, build_stock, mechanism, name="model", edit=None, **options):
    stock = tmp_path / f"{name}-stock"
    build_stock(stock)
    model, _ = convert(str(stock), mechanism, **options)
    if edit is not None:
        edit(model)
    converted.report = model.parameter_report()
    return save_atomically(model, str(tmp_path / name), tokenizer_source=str(stock))


def inspect(folder, out, capsys, *extra):
    assert main(["inspect", str(folder), "--out", str(out), *extra]) == 0
    return capsys.readouterr().out


def assert_pictures(out, names):
    for name in names:
        path = out / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        image = imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) >= 100, name
        assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 10, f"{name} is blank"


def test_help_documents_every_mechanism_picture(capsys):
    with pytest.raises(SystemExit) as exit_code:
        main(["inspect", "--help"])
    assert exit_code.value.code == 0
    text = capsys.readouterr().out
    for word in ("bridge_routing.png", "sentinel_gates.png", "hc_res.png", "latent.png", "slot_attention.png"):
        assert word in text
    assert "trainer_state.json" in text and "--text" in text and "--no-stock-check" in text and "--tgt-lang" in text


def test_bridge_routing_and_gates(tmp_path, capsys):
    folder = converted(tmp_path, build_stock_roberta, "bridge", route_topk=2)
    text = inspect(folder, tmp_path / "pictures", capsys)
    assert "RobertaBridgeForSequenceClassification" in text and "mechanism `bridge`" in text
    assert "family: roberta" in text and "base checkpoint: not recorded" in text  # a local folder's path is not saved
    assert "route_topk = 2 (default 1)" in text
    assert "bridge_mode" not in text and "sep_token_id" not in text  # defaults, and values the config derives
    assert "computes the stock function: yes" in text and "random token ids" in text
    p = converted.report
    assert f"total {p['total']:,}; trainable {p['trainable']:,}; added by the mechanism {p['mechanism']:,}" in text
    assert_pictures(tmp_path / "pictures", ["bridge_routing.png", "bridge_gates.png"])


def test_sentinel_gates_with_pruned_and_masked_heads(tmp_path, capsys):
    from interlayer.inspection import load_model
    from interlayer.pictures import sentinel_gate_grid

    folder = converted(tmp_path, build_stock_gpt2, "sentinel", gate_l1=0.001)
    text = inspect(folder, tmp_path / "pictures", capsys)
    assert "mechanism `sentinel`" in text and "gate_l1 = 0.001 (default 0.0001)" in text
    assert "computes the stock function: yes" in text
    assert_pictures(tmp_path / "pictures", ["sentinel_gates.png"])

    def prune_and_mask(model):
        model.prune_heads({1: [2]})
        with torch.no_grad():
            model.gated_attentions[0].sentinel_head_mask[1] = 0.0

    folder = converted(tmp_path, build_stock_gpt2, "sentinel", name="pruned", edit=prune_and_mask)
    text = inspect(folder, tmp_path / "pruned-pictures", capsys)
    assert 'pruned_heads = {"1": [2]}' in text
    assert "computes the stock function: no" in text and "another shape" in text
    assert_pictures(tmp_path / "pruned-pictures", ["sentinel_gates.png"])
    gates, masked, pruned = sentinel_gate_grid(load_model(folder)[0])
    assert pruned.nonzero().tolist() == [[1, 2]] and masked.nonzero().tolist() == [[0, 1]]
    assert torch.isnan(gates[1, 2]) and gates[0, 1] == 0


def test_hyper_connections_matrices_and_gain(tmp_path, capsys):
    from interlayer.pictures import hc_composite_gain

    def trained(model):
        with torch.no_grad():
            for hc in model.model.hyper_connections:
                hc.res.copy_(torch.eye(3) * 1.1)

    folder = converted(tmp_path, build_stock_qwen3, "hyper-connections", edit=trained, hc_streams=3, hc_mode="static")
    out = tmp_path / "pictures"
    text = inspect(folder, out, capsys)
    assert "mechanism `hyper-connections`" in text and "family: qwen3" in text
    assert "hc_streams = 3 (default 4)" in text and 'hc_mode = "static" (default "mhc")' in text
    assert "computes the stock function: no: its outputs differ" in text
    assert_pictures(out, ["hc_res.png", "hc_composite_gain.png", "hc_pre_post.png"])
    from interlayer.inspection import load_model, model_inputs, read_statistics

    model = load_model(folder)[0]
    labels, rows, _ = hc_composite_gain(read_statistics(model, model_inputs(model, folder)[0]), 3)
    assert labels[:2] == ["L0 attn", "L0 mlp"] and rows[-1] == pytest.approx(1.1**6)


def test_latent_gates_and_adjustment_with_the_folder_tokenizer(tmp_path, capsys):
    def build(folder):
        save_tiny_llama_with_tokenizer(folder, "the cat sat on the mat. " * 40, layers=3)

    folder = converted(tmp_path, build, "latent", latent_dim=8)
    out = tmp_path / "pictures"
    text = inspect(folder, out, capsys, "--text", "the cat sat")
    assert "mechanism `latent`" in text and "latent_dim = 8 (default 128)" in text
    assert "through the folder's tokenizer" in text and "computes the stock function: yes" in text
    assert_pictures(out, ["latent.png"])


def test_attention_bridge_slot_attention(tmp_path, capsys):
    folder = converted(tmp_path, build_stock_marian, "attention-bridge", bridge_layers=["lin"], **TINY_BRIDGE)
    out = tmp_path / "pictures"
    text = inspect(folder, out, capsys, "--no-stock-check")
    assert "mechanism `attention-bridge`" in text and "family: marian (task translation)" in text
    assert "bridge_fixed_length = 5 (default 50)" in text and "bridge_layers" not in text
    assert "computes the stock function: not checked (--no-stock-check)" in text
    assert_pictures(out, ["slot_attention.png"])
    code = {path.name: path.read_text() for path in (tmp_path / "model").glob("*.py")}
    assert "modeling_attention_bridge.py" in code
    assert not any("zlib" in text or "PNG" in text for text in code.values())  # the saved model has no image encoder


def test_attention_bridge_with_two_target_languages_checks_each_or_the_one_asked_for(tmp_path, capsys):
    def train_french(model):
        with torch.no_grad():
            model.model.attention_bridge_decoders["fr"].layers[0].fc2.weight.mul_(3.0)

    options = dict(bridge_layers=["transformer", "lin"], identity_init=False, decoder_languages=["de", "fr"])
    folder = converted(tmp_path, build_stock_marian, "attention-bridge", edit=train_french, **options, **TINY_BRIDGE)
    text = inspect(folder, tmp_path / "every", capsys)
    assert "target languages: de, fr (each inspected; --tgt-lang LANG for one)" in text
    assert "tgt_lang='de': no: its outputs differ" in text and "tgt_lang='fr': no: its outputs differ" in text
    assert_pictures(tmp_path / "every", ["slot_attention.png"])

    text = inspect(folder, tmp_path / "french", capsys, "--tgt-lang", "fr", "--no-stock-check")
    assert "target languages: de, fr (inspected: fr)" in text and "tgt_lang='de'" not in text
    assert_pictures(tmp_path / "french", ["slot_attention.png"])

    assert main(["inspect", str(folder), "--out", str(tmp_path / "x"), "--tgt-lang", "it"]) == 2
    assert "`tgt_lang` must be one of ['de', 'fr'], got 'it'" in capsys.readouterr().err
    one = converted(tmp_path, build_stock_marian, "attention-bridge", name="one", bridge_layers=["lin"], **TINY_BRIDGE)
    assert main(["inspect", str(one), "--out", str(tmp_path / "y"), "--tgt-lang", "de"]) == 2
    assert "one decoder" in capsys.readouterr().err


def test_an_identity_bridge_with_two_languages_computes_the_stock_function_for_each(tmp_path, capsys):
    """A converted, untrained identity bridge: every language's decoder starts as the stock decoder, so each
    language computes the stock function until one is trained."""

    def train_french(model):
        with torch.no_grad():
            model.model.attention_bridge_decoders["fr"].layers[0].fc2.weight.mul_(3.0)

    options = dict(bridge_layers=["transformer"], identity_init=True, decoder_languages=["de", "fr"], **TINY_BRIDGE)
    folder = converted(tmp_path, build_stock_marian, "attention-bridge", **options)
    text = inspect(folder, tmp_path / "untrained", capsys)
    assert "tgt_lang='de': yes" in text and "tgt_lang='fr': yes" in text
    assert "no slot attention" in text
    folder = converted(tmp_path, build_stock_marian, "attention-bridge", name="trained", edit=train_french, **options)
    report = inspect_folder(str(folder), out=str(tmp_path / "trained-pictures"), echo=lambda line: None)
    assert report["stock_checks"]["de"].same is True and report["stock_checks"]["fr"].same is False


def test_trainer_output_folder_gives_curves_and_the_last_checkpoint(tmp_path, capsys):
    from transformers import Trainer, TrainingArguments

    from interlayer.callbacks import MechanismStatsCallback

    stock = tmp_path / "stock"
    build_stock_qwen3(stock)
    model, _ = convert(str(stock), "hyper-connections", hc_mode="static", hc_streams=2)
    batch = lm_batch()
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(3)]
    run = tmp_path / "run"
    args = TrainingArguments(
        output_dir=str(run),
        per_device_train_batch_size=3,
        max_steps=3,
        logging_steps=1,
        save_steps=3,
        learning_rate=0.05,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    MechanismStatsCallback.attach(trainer)
    trainer.train()
    capsys.readouterr()
    out = tmp_path / "pictures"
    text = inspect(run, out, capsys)
    assert "Trainer output folder" in text and f"model: {run / 'checkpoint-3'}" in text
    curves = sorted(p.name for p in out.glob("curves_*.png"))
    assert "curves_hc_amax_gain_row.png" in curves and "curves_hc_L_attn_res.png" in curves
    assert_pictures(out, [*curves[:3], "hc_res.png", "hc_composite_gain.png"])
    assert "computes the stock function: no" in text  # three steps at lr 0.05 moved H_res


def test_a_folder_that_is_neither_a_model_nor_a_run_is_refused(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_a_default_derived_from_the_stock_config_is_not_a_changed_setting():
    """A bridge over 3 layers gets `route_last_n=3` from the default (the seed's 4, capped): not a change; an explicit
    value is one."""
    from interlayer import RobertaBridgeConfig
    from interlayer.inspection import changed_settings

    assert changed_settings(RobertaBridgeConfig(num_hidden_layers=3)) == {}
    assert changed_settings(RobertaBridgeConfig(num_hidden_layers=3, route_last_n=2)) == {"route_last_n": (2, None)}


def deep_hc_statistics(layers: int = 30, k: int = 4) -> dict[str, float]:
    """The `hc/L{i}/{attn,mlp}/res_{i}_{j}` statistics of a SmolLM2-deep model: values in [-1, 1], the diagonal 1."""
    generator = torch.Generator().manual_seed(0)
    stats = {}
    for layer in range(layers):
        for sub in ("attn", "mlp"):
            matrix = torch.rand(k, k, generator=generator) * 2 - 1
            matrix.fill_diagonal_(1.0)
            for i in range(k):
                for j in range(k):
                    stats[f"hc/L{layer}/{sub}/res_{i}_{j}"] = float(matrix[i, j])
    return stats


def test_hc_res_picture_of_a_deep_model_is_bounded_and_its_numbers_readable(tmp_path):
    """30 layers x (attn, mlp) of 4 x 4 matrices: a grid within 1600 x 1200 pixels (a column of 60 heatmaps was 760 x
    8700), every value written, white on dark cells and black on light ones."""
    from interlayer.pictures import contrasting_text_colour, draw_hc_res, hc_matrices, hc_res_figure

    stats = deep_hc_statistics()
    path = draw_hc_res(stats, 4, tmp_path / "hc_res.png")
    height, width = imread(path).shape[:2]
    assert width <= 1600 and height <= 1200 and width > height / 2
    fig = hc_res_figure(hc_matrices(stats, 4), 4)
    texts = [text for ax in fig.axes for text in ax.texts]
    assert len(texts) == 60 * 16 and min(text.get_fontsize() for text in texts) >= 4.5
    colours = {text.get_text(): text.get_color() for text in texts}
    assert colours["1.00"] == "white"  # the darkest red
    assert contrasting_text_colour((0.02, 0.19, 0.38, 1.0)) == "white"  # the darkest blue of RdBu_r
    assert contrasting_text_colour((0.97, 0.97, 0.97, 1.0)) == "black"  # its middle, near 0
    near_zero = [text for text in texts if abs(float(text.get_text())) < 0.1]
    assert near_zero and all(text.get_color() == "black" for text in near_zero)


def test_training_curves_name_every_line():
    """Every line of a training-curve picture is in the legend (beside the axes beyond 12 lines), by its layer and
    indices."""
    from interlayer.inspection import training_curves_figure

    names = [f"hc/L{layer}/attn/res_{i}_0" for layer in range(10) for i in range(2)]
    series = {name: ([1, 2, 3], [0.1, 0.2, 0.3]) for name in names}
    for shown in (names[:4], names):
        legend = training_curves_figure("hc/L*/attn/res_*", shown, series).axes[0].get_legend()
        assert legend is not None
        assert [text.get_text() for text in legend.get_texts()] == [
            f"L{layer} {i}_0" for layer in range(10) for i in range(2)
        ][: len(shown)]


def test_a_model_saved_with_the_eager_hyper_connections_is_drawn_from_the_fast_ones_statistics(tmp_path, capsys):
    """The eager hyper-connections (`hc_implementation="eager"`, the specification) record no statistics: inspect
    loads the folder with the fast implementation (the same function), draws every picture, and leaves the folder's
    config as saved."""
    folder = converted(
        tmp_path, build_stock_qwen3, "hyper-connections", hc_streams=2, hc_mode="static", hc_implementation="eager"
    )
    inspect(folder, tmp_path / "pictures", capsys)
    assert_pictures(tmp_path / "pictures", ["hc_res.png", "hc_composite_gain.png", "hc_pre_post.png"])
    with open(f"{folder}/config.json") as f:
        assert json.load(f)["hc_implementation"] == "eager"
