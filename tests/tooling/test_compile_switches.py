"""torch's switch that it reads when it is imported, `TORCH_COMPILE_DISABLE=1`, in a fresh process: the compiled
defaults (`zoo_common.Fused`: the mHC coefficients, the bridges' HDIM scorer) are computed eagerly, silently and
exactly. The switches torch reads later are in the conformance suite
(`test_torch_compile_switches_give_the_eager_path`)."""

import json
import os
import subprocess
import sys
import textwrap

import torch
from batches import lm_batch, lm_labels, pair_batch
from stock_checkpoints import build_stock_llama, encoder_builder

# run with TORCH_COMPILE_DISABLE=1: each default model against the same weights with the option that computes the
# function eagerly (`hc_fused=False`, `hdim_fused=False`); prints what it found as JSON
SCRIPT = textwrap.dedent(
    """
    import json, sys

    import torch

    from interlayer import LlamaMHCForCausalLM, RobertaBridgeForSequenceClassification
    from interlayer.models.zoo_common import Fused
    from interlayer.testing.case import _nothing_warned

    llama, roberta, batches = sys.argv[1:]
    batches = torch.load(batches)
    found = {"torch.compile disabled": torch._dynamo.config.disable}

    def pair(model_class, folder, eager_option, **options):
        default = model_class.from_pretrained(folder, identity_init=False, **options)
        eager = model_class.from_pretrained(folder, identity_init=False, **{eager_option: False}, **options)
        eager.load_state_dict(default.state_dict())
        return default.eval(), eager.eval()

    def step(model, batch):
        loss = model(**batch).loss
        params = [p for p in model.parameters() if p.requires_grad]
        return [loss, *torch.autograd.grad(loss, params, allow_unused=True)]

    def same(a, b):
        return all(x is None and y is None or torch.equal(x, y) for x, y in zip(a, b, strict=True))

    mhc, mhc_eager = pair(LlamaMHCForCausalLM, llama, "hc_fused")
    bridge, bridge_eager = pair(RobertaBridgeForSequenceClassification, roberta, "hdim_fused", bridge_mode="hdim")
    with _nothing_warned():  # the conversions' reports are logged above, as warnings
        lm = batches["lm"]
        with torch.no_grad():
            found["mhc forward"] = torch.equal(mhc(lm["input_ids"]).logits, mhc_eager(lm["input_ids"]).logits)
        found["mhc training step"] = same(step(mhc.train(), lm), step(mhc_eager.train(), lm))
        prompt = lm["input_ids"][:1, :5]
        found["mhc generate"] = torch.equal(
            mhc.eval().generate(prompt, max_new_tokens=4, do_sample=False),
            mhc_eager.eval().generate(prompt, max_new_tokens=4, do_sample=False),
        )
        found["hdim bridge forward"] = same(step(bridge, batches["pairs"]), step(bridge_eager, batches["pairs"]))
    found["compiled calls"] = Fused.compiled_calls
    print(json.dumps(found))
    """
)


def test_torch_compile_disable_at_import_gives_the_eager_path_exactly(tmp_path):
    """With `TORCH_COMPILE_DISABLE=1` in the environment of a new process, a default mHC model's no-grad forward,
    training step (loss and every gradient) and `generate()`, and a default HDIM bridge's forward and gradients, equal
    bit for bit those of the same weights with the compiled function switched off by its option; nothing is warned, no
    compiled graph runs (before: every one of these raised "torch.compile with fullgraph=True found no compiled
    frames")."""
    build_stock_llama(str(tmp_path / "llama"))
    encoder_builder("roberta", "sequence-classification")(str(tmp_path / "roberta"))
    lm = lm_batch()
    lm["labels"] = lm_labels(lm)
    pairs = pair_batch("roberta")
    pairs["labels"] = torch.arange(pairs["input_ids"].shape[0]) % 2
    torch.save({"lm": lm, "pairs": pairs}, tmp_path / "batches.pt")
    env = {**os.environ, "TORCH_COMPILE_DISABLE": "1"}
    args = [str(tmp_path / "llama"), str(tmp_path / "roberta"), str(tmp_path / "batches.pt")]
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {
        "torch.compile disabled": True,
        "mhc forward": True,
        "mhc training step": True,
        "mhc generate": True,
        "hdim bridge forward": True,
        "compiled calls": 0,
    }
