#!/usr/bin/env python
"""What a saved zoo checkpoint ships and imports: for one class of every mechanism, converted from a tiny stock
checkpoint and saved, the remote-code files in the folder (count, lines) and the `transformers.models` packages a
fresh process imports when it loads the folder through its Auto class with `trust_remote_code=True` (offline, the
interlayer package hidden), beyond those the stock model of the same family imports.

    python benchmarks/remote_code_footprint.py   # a markdown table (docs/conformance.md records it)
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
)

import interlayer

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=64)
CASES = {  # mechanism: (stock model, zoo class, Auto class)
    "hyper-connections": (lambda: LlamaForCausalLM(LlamaConfig(**TINY)), interlayer.LlamaMHCForCausalLM),
    "latent": (lambda: LlamaForCausalLM(LlamaConfig(**TINY)), interlayer.LlamaLatentForCausalLM),
    "sentinel": (lambda: LlamaForCausalLM(LlamaConfig(**TINY)), interlayer.LlamaSentinelForCausalLM),
    "depth-routing": (lambda: LlamaForCausalLM(LlamaConfig(**TINY)), interlayer.LlamaDepthRoutingForCausalLM),
    "bridge": (
        lambda: BertForSequenceClassification(BertConfig(**TINY)),
        interlayer.BertBridgeForSequenceClassification,
    ),
    "attention-bridge": (
        lambda: MarianMTModel(
            MarianConfig(
                d_model=32,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                vocab_size=64,
                pad_token_id=63,
                decoder_start_token_id=63,
                max_position_embeddings=32,
            )
        ),
        interlayer.MarianAttentionBridgeForConditionalGeneration,
    ),
}
LOAD = """
import json, sys
sys.modules["interlayer"] = None
import transformers
before = {m for m in sys.modules if m.startswith("transformers.models.") and m.count(".") == 2}
getattr(transformers, sys.argv[2]).from_pretrained(sys.argv[1], trust_remote_code=True)
after = {m for m in sys.modules if m.startswith("transformers.models.") and m.count(".") == 2}
print(json.dumps(sorted(after - before)))
"""


def imported(folder: str, auto_class: str) -> list[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": "", "HF_HOME": os.path.join(folder, "hf")}
    out = subprocess.run(
        [sys.executable, "-c", LOAD, folder, auto_class], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    print(
        "| mechanism | remote-code files | lines | `transformers.models` packages imported (beyond the stock model's) "
        "| files |"
    )
    print("| --- | ---: | ---: | --- | --- |")
    for mechanism, (build, zoo_class) in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            torch.manual_seed(0)
            stock = build()
            stock.save_pretrained(f"{tmp}/stock")
            zoo_class.from_pretrained(f"{tmp}/stock").save_pretrained(f"{tmp}/zoo")
            files = sorted(pathlib.Path(f"{tmp}/zoo").glob("*.py"))
            lines = sum(len(f.read_text().splitlines()) for f in files)
            auto = zoo_class._auto_class
            stock_auto = {"AutoModelForCausalLM": "AutoModelForCausalLM"}.get(auto, auto)
            zoo_packages = imported(f"{tmp}/zoo", auto)
            stock_packages = set(imported(f"{tmp}/stock", stock_auto))
            extra = [p.removeprefix("transformers.models.") for p in zoo_packages if p not in stock_packages]
            names = ", ".join(f"`{f.name}`" for f in files)
            print(f"| {mechanism} | {len(files)} | {lines:,} | {len(extra)}: {', '.join(extra)} | {names} |")


if __name__ == "__main__":
    main()
