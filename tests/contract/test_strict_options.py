"""Strict options for every zoo config: a typo or a non-finite number is refused where it is written, with an error
naming the field, and saving never loses a model already on disk."""

import dataclasses
import json
import os
import shutil

import pytest
import torch
from stock_checkpoints import build_stock_llama, build_stock_roberta

import interlayer.zoo as zoo
from interlayer.cli import main
from interlayer.models.zoo_common import ConfigError, mechanism_field_names
from interlayer.zoo import ZOO, convert, parked_folder, save_atomically

CONFIG_CLASSES = list(dict.fromkeys(e.config_class for e in ZOO))


def _float_fields(config_class):
    types = {f.name: str(f.type) for f in dataclasses.fields(config_class)}
    return [n for n in mechanism_field_names(config_class) if "float" in types[n]]


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_misspelt_mechanism_option_is_refused_at_config_creation(config_class):
    for name in mechanism_field_names(config_class):
        typo = name[:-1]
        with pytest.raises(ValueError, match=f"no option `{typo}`.*did you mean"):
            config_class(**{typo: 1})


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_misspelt_mechanism_option_is_refused_by_from_pretrained(config_class, tmp_path):
    """`Config.from_pretrained(folder, typo=...)` refuses a misspelt option with the error of config creation
    (transformers drops a keyword no field takes)."""
    config_class().save_pretrained(tmp_path)
    for name in mechanism_field_names(config_class):
        typo = name[:-1]
        with pytest.raises(ValueError) as created:
            config_class(**{typo: 1})
        with pytest.raises(ValueError) as loaded:
            config_class.from_pretrained(tmp_path, **{typo: 1})
        assert str(loaded.value) == str(created.value)


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_transformers_keywords_are_never_taken_for_misspelt_options(config_class, tmp_path):
    """`attn_implementation` and `experts_implementation`, which every transformers config takes, pass whatever
    mechanism option they look like (`hc_implementation`), at config creation and in `from_pretrained`."""
    config_class().save_pretrained(tmp_path)
    for name in ("attn_implementation", "experts_implementation"):
        config_class(**{name: "eager"})
        config_class.from_pretrained(tmp_path, **{name: "eager"})


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_non_finite_float_options_are_refused(config_class):
    names = _float_fields(config_class)
    if not names:
        pytest.skip(f"{config_class.__name__} has no float option")
    for name in names:
        for value in (float("nan"), float("inf"), float("-inf")):
            with pytest.raises(ValueError, match=f"`{name}` must be"):
                config_class(**{name: value})


def test_config_errors_are_value_errors_naming_field_and_value():
    from interlayer import LlamaMHCConfig

    with pytest.raises(ValueError, match=r"`hc_streams` must be >= 1, got 0\.") as info:
        LlamaMHCConfig(hc_streams=0)
    assert isinstance(info.value, ConfigError)


def test_convert_refuses_an_unknown_option_naming_the_closest(tmp_path):
    build_stock_llama(str(tmp_path / "stock"))
    with pytest.raises(ValueError, match="no option `hc_stream`; did you mean `hc_streams`"):
        convert(str(tmp_path / "stock"), "hyper-connections", hc_stream=2)
    with pytest.raises(ValueError, match="no option `latent_dimm`; did you mean `latent_dim`"):
        convert(str(tmp_path / "stock"), "latent", latent_dimm=8)


def test_cli_set_typo_fails_before_writing(tmp_path, capsys):
    build_stock_llama(str(tmp_path / "stock"))
    out = tmp_path / "out"
    code = main(
        ["convert", str(tmp_path / "stock"), str(out), "--mechanism", "hyper-connections", "--set", "hc_stream=2"]
    )
    assert code == 2
    assert "did you mean `hc_streams`" in capsys.readouterr().err
    assert not out.exists()


def test_cli_reports_a_missing_source_and_a_task_the_mechanism_lacks(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "absent"), str(tmp_path / "out"), "--mechanism", "bridge"]) == 2
    assert "interlayer convert: error:" in capsys.readouterr().err
    build_stock_llama(str(tmp_path / "stock"))
    code = main(
        ["convert", str(tmp_path / "stock"), str(tmp_path / "o"), "--mechanism", "bridge", "--task", "causal-lm"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "no model for task 'causal-lm'" in err and "sequence-classification" in err


def test_cli_checks_the_output_folder_before_converting(tmp_path, capsys, monkeypatch):
    build_stock_llama(str(tmp_path / "stock"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    monkeypatch.setattr(zoo, "convert", lambda *a, **k: pytest.fail("converted before checking the output folder"))
    assert main(["convert", str(tmp_path / "stock"), str(tmp_path / "out"), "--mechanism", "latent"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_config_without_model_type_is_refused(tmp_path):
    from interlayer import LlamaMHCForCausalLM

    build_stock_llama(str(tmp_path / "stock"))
    path = tmp_path / "stock" / "config.json"
    config = json.loads(path.read_text())
    del config["model_type"]
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type"):
        LlamaMHCForCausalLM.from_pretrained(tmp_path / "stock")


# -- saving -------------------------------------------------------------------------------------------------------


def _saved_weight(folder):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    return model.classifier.out_proj.weight.detach().clone()


def _two_models(tmp_path):
    from transformers import RobertaForSequenceClassification

    build_stock_roberta(str(tmp_path / "stock"))
    first = RobertaForSequenceClassification.from_pretrained(tmp_path / "stock")
    second = RobertaForSequenceClassification.from_pretrained(tmp_path / "stock")
    with torch.no_grad():
        second.classifier.out_proj.weight.add_(1.0)
    return first, second


def _hidden_leftovers(folder):
    return [n for n in os.listdir(os.path.dirname(folder)) if n.startswith(".")]


def test_save_interrupted_between_the_renames_keeps_the_old_model(tmp_path, monkeypatch):
    first, second = _two_models(tmp_path)
    out = str(tmp_path / "model")
    save_atomically(first, out)
    kept = _saved_weight(out)
    real_replace, calls = os.replace, []

    def interrupted_replace(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the new folder moving into place
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(zoo.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        save_atomically(second, out, overwrite=True)
    monkeypatch.setattr(zoo.os, "replace", real_replace)
    torch.testing.assert_close(_saved_weight(out), kept)
    assert _hidden_leftovers(out) == []


def test_save_after_a_killed_save_restores_the_parked_model(tmp_path):
    first, second = _two_models(tmp_path)
    out = str(tmp_path / "model")
    save_atomically(first, out)
    kept = _saved_weight(out)
    old = parked_folder(out)
    os.replace(out, old)  # what a process killed between the two renames leaves behind
    os.makedirs(tmp_path / ".model.interlayer-new-0123abcd")  # and the staging folder of a save killed earlier
    with pytest.raises(FileExistsError):  # the parked model is back, so the folder is not empty
        save_atomically(second, out)
    torch.testing.assert_close(_saved_weight(out), kept)
    assert _hidden_leftovers(out) == []
    save_atomically(second, out, overwrite=True)
    torch.testing.assert_close(_saved_weight(out), kept + 1.0)


def test_save_warns_but_succeeds_when_the_old_folder_cannot_be_removed(tmp_path, monkeypatch):
    first, second = _two_models(tmp_path)
    out = str(tmp_path / "model")
    save_atomically(first, out)
    real_rmtree = shutil.rmtree
    old = parked_folder(out)

    def stubborn_rmtree(path, ignore_errors=False, **kwargs):
        if os.path.abspath(path) == old:
            if not ignore_errors:
                raise PermissionError(path)
            return
        real_rmtree(path, ignore_errors=ignore_errors, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", stubborn_rmtree)
    with pytest.warns(UserWarning, match="could not be removed"):
        save_atomically(second, out, overwrite=True)
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    torch.testing.assert_close(_saved_weight(out), _saved_weight(str(tmp_path / "stock")) + 1.0)


# -- reloading a saved model with options -----------------------------------------------------------------------


def _saved(tmp_path, model_class, build_stock, **options):
    build_stock(str(tmp_path / "stock"))
    model_class.from_pretrained(tmp_path / "stock", **options).save_pretrained(tmp_path / "saved")
    return tmp_path / "saved"


def test_reload_refuses_an_option_that_changes_what_the_weights_mean(tmp_path):
    from interlayer import LlamaMHCForCausalLM

    saved = _saved(tmp_path, LlamaMHCForCausalLM, build_stock_llama, hc_mode="mhc")
    with pytest.raises(ValueError, match=r"`hc_mode='static'` would change what the saved weights.*hc_mode='mhc'"):
        LlamaMHCForCausalLM.from_pretrained(saved, hc_mode="static")
    with pytest.raises(ValueError, match=r"`hc_streams=2`.*saved with hc_streams=4"):
        LlamaMHCForCausalLM.from_pretrained(saved, hc_streams=2)
    model = LlamaMHCForCausalLM.from_pretrained(saved, hc_mode="mhc", freeze_base=False)  # unchanged / run time
    assert model.config.freeze_base is False and all(p.requires_grad for p in model.parameters())


def test_reload_refuses_a_structural_option_of_every_mechanism(tmp_path):
    from stock_checkpoints import build_stock_gpt2

    from interlayer import GatedGPT2LMHeadModel, LlamaLatentForCausalLM

    saved = _saved(tmp_path / "latent", LlamaLatentForCausalLM, build_stock_llama)
    with pytest.raises(ValueError, match="`latent_dim=8`"):
        LlamaLatentForCausalLM.from_pretrained(saved, latent_dim=8)
    assert LlamaLatentForCausalLM.from_pretrained(saved, latent_source="recurrent").config.latent_source == "recurrent"
    saved = _saved(tmp_path / "gpt2", GatedGPT2LMHeadModel, build_stock_gpt2)
    with pytest.raises(ValueError, match="`unet_skips=True`"):
        GatedGPT2LMHeadModel.from_pretrained(saved, unet_skips=True)


def test_reload_refuses_a_changed_init_option(tmp_path):
    from interlayer import LlamaLatentForCausalLM

    saved = _saved(tmp_path, LlamaLatentForCausalLM, build_stock_llama)
    refusal = (
        r"`latent_gate_init=2.0` only applies when a stock checkpoint is converted.*saved with latent_gate_init=0.0"
    )
    with pytest.raises(ConfigError, match=refusal):
        LlamaLatentForCausalLM.from_pretrained(saved, latent_gate_init=2.0)
    assert LlamaLatentForCausalLM.from_pretrained(saved, latent_gate_init=0.0).config.latent_gate_init == 0.0


def test_reload_refuses_more_bridge_targets(tmp_path):
    from interlayer import RobertaBridgeForSequenceClassification

    saved = _saved(tmp_path, RobertaBridgeForSequenceClassification, build_stock_roberta, route_last_n=1)
    with pytest.raises(ValueError, match=r"`route_last_n=2`.*saved with route_last_n=1"):
        RobertaBridgeForSequenceClassification.from_pretrained(saved, route_last_n=2)
    assert RobertaBridgeForSequenceClassification.from_pretrained(saved, route_topk=2).config.route_topk == 2


def test_a_checkpoint_without_tokenizer_gets_none(tmp_path):
    build_stock_llama(str(tmp_path / "stock"))
    assert main(["convert", str(tmp_path / "stock"), str(tmp_path / "out"), "--mechanism", "latent"]) == 0
    assert not any("token" in name for name in os.listdir(tmp_path / "out"))


def test_errors_that_name_the_field():
    from stock_checkpoints import TINY_GPT2

    from interlayer import GatedGPT2Config, GatedGPT2LMHeadModel, MarianBridgeConfig, RobertaBridgeConfig

    with pytest.raises(ValueError, match=r"`decoder_languages`.*'pt\.br'.*'pt_br'"):
        MarianBridgeConfig(decoder_languages=["de", "pt.br"])
    with pytest.raises(ValueError, match=r"`route_last_n` must be >= 1 and <= 4, got 9"):
        RobertaBridgeConfig(num_hidden_layers=4, route_last_n=9)
    model = GatedGPT2LMHeadModel(GatedGPT2Config(**TINY_GPT2))
    with pytest.raises(ValueError, match=r"prune_heads: layer 7 does not exist"):
        model.prune_heads({0: [1], 7: [0]})
    assert model.config.pruned_heads == {} and all(a.num_heads == 4 for a in model.gated_attentions)  # nothing pruned


def test_contradicting_or_empty_layouts_are_refused():
    from interlayer import LlamaLatentConfig, LlamaMHCConfig

    with pytest.raises(ValueError, match=r"`latent_offset`=2 contradicts.*\(3, 0\)"):
        LlamaLatentConfig(
            num_hidden_layers=4, latent_source_layers=[3, 2], latent_target_layers=[0, 1], latent_offset=2
        )
    assert LlamaLatentConfig(num_hidden_layers=4, latent_source_layers=[3], latent_target_layers=[1], latent_offset=2)
    with pytest.raises(ValueError, match=r"`num_hidden_layers` must be >= 1, got 0"):
        LlamaMHCConfig(num_hidden_layers=0)


def test_an_output_path_that_is_a_file_is_refused(tmp_path):
    from interlayer.zoo import prepare_output_dir

    (tmp_path / "model").write_text("not a folder")
    with pytest.raises(FileExistsError, match="exists and is not a folder"):
        prepare_output_dir(str(tmp_path / "model"), overwrite=True)
