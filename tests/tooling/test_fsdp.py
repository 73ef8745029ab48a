"""FSDP2 (`torch.distributed.fsdp.fully_shard`) on CPU with gloo, one model class of each mechanism, against one
process; and the checkpoints written while scalar gates were 0-d tensors (FSDP2 shards no 0-d parameter).

`fsdp_train.py` trains each case 3 AdamW steps on 8 examples: unsharded in one process (batch 8), and sharded over
2 processes (4 + 4; every module of a `_no_split_modules` class, then the root: the plain recipe, nothing specific to
the model) under `torch.distributed.run`. The two launches run side by side, once for the module. Tolerances as in
`test_multiprocess.py`: losses `rtol=1e-6, atol=1e-6`, weights `rtol=1e-5, atol=5e-6` (measured, Adam's eps 1e-6: losses
<= 4.8e-7, weights <= 7.8e-7 apart).
"""

import sys
from pathlib import Path

import pytest
import torch
from distributed_runs import assert_trains, free_port, load_rank, run_side_by_side
from fsdp_train import CASES
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

import interlayer

SCRIPT = Path(__file__).with_name("fsdp_train.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):

    root = tmp_path_factory.mktemp("fsdp")
    names = list(CASES)
    one = [sys.executable, str(SCRIPT), str(root / "one"), *names]
    two = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    two += ["--master_port", str(free_port()), str(SCRIPT), str(root / "two"), *names]
    run_side_by_side([one, two], timeout=300)
    return root


@pytest.mark.parametrize("name", CASES)
def test_plain_recipe_trains_as_one_process(runs, name):
    """The plain recipe (`fully_shard` on every `_no_split_modules` class, then the root; no unit or method specific
    to the model) trains every mechanism: the same loss at every step and the same final weights, gathered from the
    shards, as one unsharded process on the same global batch. Latent, bridges and sentinel once stopped here with
    "mixed torch.Tensor and DTensor" (a layer's module or parameter used outside that layer's forward)."""
    one, two = load_rank(runs, "one", name, 0), load_rank(runs, "two", name, 0)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert_trains(one["losses"])
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), rtol=1e-6, atol=1e-6)
    assert two["state_dict"].keys() == one["state_dict"].keys()
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(two["state_dict"][key], value, rtol=1e-5, atol=5e-6, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("name", CASES)
def test_every_layer_is_its_own_unit_and_ranks_agree(runs, name):
    """`_no_split_modules` named the layers (every decoder/encoder layer became a unit), and both ranks gathered the
    same full weights."""
    rank0, rank1 = load_rank(runs, "two", name, 0), load_rank(runs, "two", name, 1)
    config = AutoConfig.from_pretrained(runs / "one" / name / "stock")
    seq2seq = config.is_encoder_decoder
    depth = config.encoder_layers + config.decoder_layers if seq2seq else config.num_hidden_layers
    layers = [unit for unit in rank0["sharded"] if unit.rsplit(".", 1)[-1].isdigit()]
    assert len(layers) == depth, rank0["sharded"]
    for key, value in rank0["state_dict"].items():
        torch.testing.assert_close(rank1["state_dict"][key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize(
    "model_class, build, options, names",
    [
        (
            interlayer.LlamaLatentForCausalLM,
            "build_stock_llama",
            dict(identity_init=False, latent_gate_init=0.3),
            {"latent_gate"},
        ),
        (
            interlayer.RobertaBridgeForSequenceClassification,
            "build_stock_roberta",
            dict(identity_init=False, bridge_mode="hybrid", hdim_token_temp=0.7),
            {"alpha_attn", "alpha_hdim", "token_temp"},
        ),
    ],
)
def test_checkpoints_with_0d_scalars_still_load_bit_exactly(tmp_path, model_class, build, options, names):
    """Gates and temperatures are `(1,)` parameters now; a folder saved when they were 0-d tensors loads into them
    with no missing, unexpected or mismatched key and the same values, by the class and by the remote code."""
    import stock_checkpoints
    from transformers import AutoModel

    getattr(stock_checkpoints, build)(str(tmp_path / "stock"))
    torch.manual_seed(0)
    model = model_class.from_pretrained(str(tmp_path / "stock"), **options)
    scalars = {n for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in names}
    assert {n.rsplit(".", 1)[-1] for n in scalars} == names
    assert all(p.shape == (1,) for p in model.parameters() if p.ndim < 2 and p.numel() == 1)
    with torch.no_grad():
        for i, name in enumerate(sorted(scalars)):
            model.get_parameter(name).fill_(0.1234567 + i)
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    saved = load_file(folder / "model.safetensors")
    assert all(saved[k].shape == (1,) for k in scalars)
    old = {k: v.reshape(()) if k in scalars else v for k, v in saved.items()}
    save_file(old, folder / "model.safetensors", metadata={"format": "pt"})

    reloaded, info = model_class.from_pretrained(folder, output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    state = reloaded.state_dict()
    for key, value in saved.items():
        assert torch.equal(state[key], value), key
    remote = AutoModel.from_pretrained(folder, trust_remote_code=True)
    prefix = remote.base_model_prefix + "."
    for key in scalars:
        assert torch.equal(remote.get_parameter(key.removeprefix(prefix)), saved[key]), key
