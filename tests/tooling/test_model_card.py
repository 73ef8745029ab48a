"""What a saved zoo model says about itself: the model card's metadata and text, and the transformers it needs."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from stock_checkpoints import build_stock_llama
from transformers.pipelines import SUPPORTED_TASKS

import interlayer
from interlayer import LlamaLatentForCausalLM
from interlayer.models.zoo_common import hub_id
from interlayer.zoo import ZOO, convert


def test_every_pipeline_tag_is_a_transformers_pipeline():
    for entry in ZOO:
        tag = entry.model_class.pipeline_tag
        assert tag is None or tag in SUPPORTED_TASKS, f"{entry.model_class.__name__}: {tag!r}"


def test_hub_id_is_never_a_local_path(tmp_path):
    assert hub_id("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert hub_id("gpt2") == "gpt2"
    cache = "/home/u/.cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/0123abc"
    assert hub_id(cache) == "Qwen/Qwen3-0.6B"
    assert hub_id(str(tmp_path)) is None
    assert hub_id("/nowhere/checkpoint") is None
    assert hub_id("./checkpoint") is None
    assert hub_id(None) is None


def _front_matter(card: str) -> str:
    return card.split("---")[1]


def test_card_of_an_untrained_conversion_and_of_a_trained_model(tmp_path):
    folder = tmp_path / "models--acme--tiny-llama" / "snapshots" / "abc123"
    build_stock_llama(str(folder))
    model = LlamaLatentForCausalLM.from_pretrained(folder)
    model.save_pretrained(tmp_path / "untrained")
    card = (tmp_path / "untrained" / "README.md").read_text()
    assert 'base_model: "acme/tiny-llama"' in _front_matter(card)
    assert "Converted from the stock checkpoint `acme/tiny-llama`" in card
    assert "untrained conversion: it computes the stock model's function exactly until it is trained" in card
    assert "transformers>=5` (tested with 5.23, 5.24;" in card
    assert 'from_pretrained("untrained", trust_remote_code=True)' in card
    assert "PATH_OR_REPO" not in card and "pypi.org" not in card and str(tmp_path) not in card

    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    batch = torch.arange(8).unsqueeze(0)
    model(input_ids=batch, labels=batch).loss.backward()
    optimizer.step()
    model.save_pretrained(tmp_path / "trained")
    card = (tmp_path / "trained" / "README.md").read_text()
    assert "untrained conversion" not in card


def test_card_of_a_local_checkpoint_names_no_path(tmp_path):
    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock", identity_init=False).save_pretrained(tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    assert "base_model" not in _front_matter(card)
    assert "Converted from a local stock checkpoint" in card and str(tmp_path) not in card
    assert "does not compute the stock model's function" in card


def test_saved_code_refuses_transformers_4_clearly(tmp_path):
    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock").save_pretrained(tmp_path / "out")
    script = textwrap.dedent(
        f"""
        import transformers
        transformers.__version__ = "4.57.1"
        from transformers import AutoModelForCausalLM
        AutoModelForCausalLM.from_pretrained({str(tmp_path / "out")!r}, trust_remote_code=True)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0
    assert "need transformers>=5" in result.stderr and "4.57.1" in result.stderr


class _Records(logging.Handler):
    """What transformers logs (the zoo's lines included), read and cleared by `take()`."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def take(self) -> str:
        text, self.messages = "\n".join(self.messages), []
        return text


def test_conversion_says_in_one_line_what_it_added_and_keeps_real_warnings(tmp_path):
    from safetensors.torch import load_file, save_file

    build_stock_llama(str(tmp_path / "stock"))
    records = _Records()
    logging.getLogger("transformers").addHandler(records)
    try:
        LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
        err = records.take()
        assert "LOAD REPORT" not in err and "to instantiate a model of type" not in err
        added = [line for line in err.splitlines() if "added" in line]
        assert len(added) == 1 and "every stock weight loaded; added 5 latent back-projection tensors" in added[0]
        convert(str(tmp_path / "stock"), "latent")  # the config is loaded on its own first there
        err = records.take()
        assert "to instantiate a model of type" not in err and len(err.splitlines()) == 1, err

        model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
        model.save_pretrained(tmp_path / "saved")
        weights = load_file(tmp_path / "saved" / "model.safetensors")
        del weights["model.layers.0.latent_gate"]
        save_file(weights, tmp_path / "saved" / "model.safetensors", metadata={"format": "pt"})
        records.take()
        LlamaLatentForCausalLM.from_pretrained(tmp_path / "saved")
        assert "LOAD REPORT" in records.take()  # a saved model missing a tensor: transformers' report stays

        weights = load_file(tmp_path / "stock" / "model.safetensors")
        weights["model.layers.0.mlp.extra.weight"] = torch.zeros(2)
        save_file(weights, tmp_path / "stock" / "model.safetensors", metadata={"format": "pt"})
        LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
        err = records.take()
        assert "unused weights" in err and "model.layers.0.mlp.extra.weight" in err
        assert "every stock weight loaded" not in err
    finally:
        logging.getLogger("transformers").removeHandler(records)


def test_every_shipped_file_names_the_transformers_it_needs_before_importing_it(tmp_path):
    """Remote code under transformers 4 (simulated: a `transformers` package with version 4.57.1 and none of its
    modules) stops at the version check with both versions named, whichever shipped file is imported, instead of
    at the first v5-only import (transformers 4.57 lacks `transformers.conversion_mapping`)."""
    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock").save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "zoo_requirements.py").is_file()
    models = os.path.join(os.path.dirname(interlayer.__file__), "models")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    names = sorted(n[:-3] for n in os.listdir(models) if n.endswith(".py") and n != "__init__.py")
    for name in names:
        shutil.copy(os.path.join(models, name + ".py"), shipped / (name + ".py"))
    script = textwrap.dedent(
        f"""
        import importlib, sys, types
        fake = types.ModuleType("transformers")
        fake.__version__ = "4.57.1"
        fake.__path__ = []
        sys.modules["transformers"] = fake
        sys.path.insert(0, {str(tmp_path)!r})
        for name in {names!r}:
            try:
                importlib.import_module("shipped." + name)
            except ImportError as err:
                print(name, "|", err)
            else:
                print(name, "| imported")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" | ", 1) for line in result.stdout.splitlines())
    assert sorted(lines) == names
    for name, message in lines.items():
        assert "need transformers>=5" in message and "4.57.1" in message, f"{name}.py: {message}"


# -- issue 25: what the card claims, its metadata, and the Hub ---------------------------------------------------------


def test_untrained_is_decided_from_the_values_not_from_the_optimizer(tmp_path):
    """An optimizer step changes values without bumping `p._version` in every path; the check compares the values:
    a bf16 conversion cast to fp32 is still untrained (same values), an untrained LoRA merged in changes nothing, a
    trained one does, and so does any in-place change."""
    peft = pytest.importorskip("peft")
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock", dtype=torch.bfloat16)
    assert model.is_untrained_conversion()
    model = model.float()
    assert model.is_untrained_conversion()
    model = peft.get_peft_model(model, peft.LoraConfig(target_modules=["q_proj"], r=2)).merge_and_unload()
    assert model.is_untrained_conversion()
    torch.compile(model, backend="eager").save_pretrained(tmp_path / "compiled")  # the wrapper saves the model
    assert "untrained conversion" in (tmp_path / "compiled" / "README.md").read_text()
    gathered = {name: tensor.clone() for name, tensor in model.state_dict().items()}  # as FSDP gathers it to save
    assert model.is_untrained_conversion(gathered)
    gathered["model.norm.weight"] = gathered["model.norm.weight"] * 2
    assert not model.is_untrained_conversion(gathered)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.data[0, 0] += 1e-3  # .data: no version counter involved
    assert not model.is_untrained_conversion()
    model.save_pretrained(tmp_path / "out")
    assert "untrained conversion" not in (tmp_path / "out" / "README.md").read_text()


def test_a_local_folder_is_never_a_hub_id_wherever_the_card_is_written(tmp_path, monkeypatch):
    """A checkpoint converted from a relative folder (`minilm`) is recorded as `./minilm`: written later from
    another working directory, the card still names no Hub model."""
    monkeypatch.chdir(tmp_path)
    build_stock_llama("tiny-llama")
    model = LlamaLatentForCausalLM.from_pretrained("tiny-llama")
    assert model.config.base_model_name_or_path == os.path.join(".", "tiny-llama")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    model.save_pretrained("out")
    card = (tmp_path / "elsewhere" / "out" / "README.md").read_text()
    assert "base_model" not in _front_matter(card) and "Converted from a local stock checkpoint" in card


def test_license_from_the_stock_card_or_the_user(tmp_path):
    """The stock checkpoint's license (its model card's metadata) is carried into the card and through a reload;
    `card_data["license"]` sets or overrides it; without either the card has none."""
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    model.save_pretrained(tmp_path / "none")
    assert "license" not in _front_matter((tmp_path / "none" / "README.md").read_text())

    (tmp_path / "stock" / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a stock model\n")
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    model.save_pretrained(tmp_path / "carried")
    assert 'license: "apache-2.0"' in _front_matter((tmp_path / "carried" / "README.md").read_text())
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "carried").save_pretrained(tmp_path / "again")
    assert 'license: "apache-2.0"' in _front_matter((tmp_path / "again" / "README.md").read_text())

    model.card_data = {**model.card_data, "license": "mit"}
    model.save_pretrained(tmp_path / "chosen")
    assert 'license: "mit"' in _front_matter((tmp_path / "chosen" / "README.md").read_text())


class _FakeHub:
    """What `push_to_hub` would upload, read at commit time (the staging folder is gone afterwards)."""

    def __init__(self):
        self.uploaded = {}

    def create_repo(self, repo_id, **kwargs):
        return type("Repo", (), {"repo_id": repo_id})()

    def create_commit(self, repo_id, operations, **kwargs):
        for op in operations:
            with open(op.path_or_fileobj, "rb") as f:
                self.uploaded[op.path_in_repo] = f.read()

    def upload_folder(self, repo_id, folder_path, **kwargs):  # a Trainer's push: the card is all that is read here
        with open(os.path.join(folder_path, "README.md"), "rb") as f:
            self.uploaded["README.md"] = f.read()


def test_push_to_hub_uploads_the_zoo_card_naming_the_repository(tmp_path, monkeypatch):
    """`push_to_hub` replaces the folder's card with transformers' generic one before uploading; the zoo's card is
    what reaches the Hub, its snippet loading the repository (not a temporary folder) with the task's Auto class."""
    import huggingface_hub
    import transformers.modeling_utils
    import transformers.utils.hub

    hub = _FakeHub()
    for module in (transformers.utils.hub, transformers.modeling_utils):
        monkeypatch.setattr(module, "hf_api", lambda: hub, raising=False)
    monkeypatch.setattr(
        huggingface_hub.ModelCard, "load", classmethod(lambda cls, *a, **k: (_ for _ in ()).throw(_missing()))
    )
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    model.push_to_hub("acme/tiny-latent")
    card = hub.uploaded["README.md"].decode()
    assert "# LlamaLatentForCausalLM (Latent back-projection)" in card
    assert 'AutoModelForCausalLM.from_pretrained("acme/tiny-latent", trust_remote_code=True)' in card
    assert "tmp" not in card.split("## Use")[1] and "interlayer-new" not in card

    hub.uploaded.clear()
    monkeypatch.chdir(tmp_path)
    model.save_pretrained("local-copy", push_to_hub=True)
    assert 'from_pretrained("local-copy", trust_remote_code=True)' in hub.uploaded["README.md"].decode()


def test_trainer_push_to_hub_names_the_mechanism_and_can_publish_the_full_card(tmp_path, monkeypatch):
    """`Trainer.push_to_hub` saves the model (the zoo's card), then writes its own draft over README.md and uploads
    it. The model's `model_tags` put `interlayer` and the mechanism into the draft's tags (before: only
    `generated_from_trainer`); with `attach_card(trainer)` the card uploaded is the zoo's, its snippet loading the Hub
    repository, with the Trainer's metadata (tags, datasets, `model-index`) and its evaluation results and training
    procedure below it, and never the draft's claim that the model was trained from scratch."""
    import transformers.trainer
    import yaml
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    from interlayer.card import attach_card

    hub = _FakeHub()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    build_stock_llama(str(tmp_path / "stock"))
    model = LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock")
    assert model.model_tags == ["interlayer", "latent-back-projection"]
    rows = Dataset.from_list([{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (8, 8)).tolist()])
    args = TrainingArguments(
        str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        eval_strategy="steps",
        eval_steps=1,
        hub_model_id="acme/tiny-latent",
        report_to=[],
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows)
    trainer.train()

    trainer.push_to_hub(dataset_tags="tiny-rows")
    draft = hub.uploaded["README.md"].decode()
    tags = yaml.safe_load(_front_matter(draft))["tags"]
    assert {"interlayer", "latent-back-projection", "generated_from_trainer"} <= set(tags), tags

    attach_card(trainer).push_to_hub(dataset_tags="tiny-rows")
    card = hub.uploaded["README.md"].decode()
    meta = yaml.safe_load(_front_matter(card))
    assert {"interlayer", "latent-back-projection", "custom_code", "generated_from_trainer"} <= set(meta["tags"])
    assert meta["datasets"] == ["tiny-rows"] and meta["model-index"][0]["name"] == "tiny-latent"
    assert card.index("# LlamaLatentForCausalLM (Latent back-projection)") < card.index("## Settings")
    assert 'AutoModelForCausalLM.from_pretrained("acme/tiny-latent", trust_remote_code=True)' in card
    training = card[card.index("## Training\n") :]
    assert "which reports on the evaluation set:\n\n- Loss: " in training
    assert "### Training hyperparameters" in training and "- learning_rate: 0.001" in training
    assert "### Training results" in training and "Training procedure" not in training
    assert "trained from scratch" not in card and "More information needed" not in card
    assert "untrained conversion" not in card
    assert (tmp_path / "run" / "README.md").read_text() == card


def _missing():
    from huggingface_hub.errors import EntryNotFoundError

    return EntryNotFoundError("no card yet")


def test_readme_words_the_stock_function_verdict_as_the_card_does():
    """One verdict, worded once (`stock_function_words`): the README states hyper-connections' tolerance as the card
    and `interlayer inspect` do."""
    from interlayer import LlamaLatentConfig, LlamaMHCConfig, LlamaMHCForCausalLM
    from interlayer.models.zoo_common import stock_function_words

    tiny = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=64)
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8").read()
    assert stock_function_words(LlamaMHCForCausalLM(LlamaMHCConfig(**tiny))) in " ".join(readme.split())
    assert stock_function_words(LlamaLatentForCausalLM(LlamaLatentConfig(**tiny))) == "exactly"


def test_inspect_and_the_card_give_one_verdict(tmp_path):
    """An untrained hyper-connection conversion: its card says it computes the stock function to float rounding, and
    `interlayer inspect`'s check of the saved folder says yes, in the same words; an exact mechanism's say exactly."""
    from interlayer import LlamaMHCForCausalLM
    from interlayer.inspection import check_stock_function, load_model, model_inputs
    from interlayer.models.zoo_common import stock_function_words

    build_stock_llama(str(tmp_path / "stock"))
    for model_class in (LlamaMHCForCausalLM, LlamaLatentForCausalLM):
        out = tmp_path / model_class.__name__
        converted = model_class.from_pretrained(tmp_path / "stock")
        converted.save_pretrained(out)
        words = stock_function_words(converted)
        assert f"computes the stock model's function {words} until it is trained" in (out / "README.md").read_text()
        model, entry = load_model(str(out))
        inputs, _, _ = model_inputs(model, str(out))
        check = check_stock_function(model, entry, inputs)
        assert check.same and check.detail.startswith(f"yes, {words}:"), check.detail


def test_the_tested_transformers_releases_are_the_installed_range():
    """The card's "tested with" list, setup.cfg's upper bound and the release constraints.txt pins for CI agree: CI
    runs a tested release, and the package admits no release past the last tested one."""
    from interlayer.models.zoo_requirements import TESTED_TRANSFORMERS

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "constraints.txt")) as f:
        pinned = re.search(r"^transformers==(\d+\.\d+)\.\d+$", f.read(), re.M).group(1)
    with open(os.path.join(root, "setup.cfg")) as f:
        bound = re.search(r"transformers>=5\.0,<(\d+)\.(\d+)", f.read())
    last = TESTED_TRANSFORMERS[-1].split(".")
    assert pinned in TESTED_TRANSFORMERS
    assert (int(bound.group(1)), int(bound.group(2))) == (int(last[0]), int(last[1]) + 1)


# -- issue 22: the card writer is library code, not shipped ---------------------------------------------------------


def test_saved_folder_ships_no_card_writing_code(tmp_path):
    """The model card and the conversion report are written by the interlayer package (`interlayer/card.py`), and the
    staged, locked save is the package's too (`interlayer/saving.py`); the folder `save_pretrained` writes ships the
    modeling code only."""
    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock").save_pretrained(tmp_path / "out")
    shipped = {path.name: path.read_text() for path in (tmp_path / "out").glob("*.py")}
    assert "modeling_latent.py" in shipped and "zoo_common.py" in shipped
    assert "card.py" not in shipped and "saving.py" not in shipped
    for name, code in shipped.items():
        for definition in ("def write_model_card", "def report_conversion", "def stock_license", "def swap_into_place"):
            assert definition not in code, f"{name} ships {definition}"
    assert "## Parameters" in (tmp_path / "out" / "README.md").read_text()  # written by the package in this process


def _run_without_interlayer(script: str, tmp_path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    code = 'import sys\nsys.modules["interlayer"] = None  # not in this process\n' + textwrap.dedent(script)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_remote_code_without_interlayer_saves_no_card_and_drops_the_stale_one(tmp_path):
    """A model loaded as remote code in a process without interlayer saves without a card: into a new folder none is
    written, and saving over the folder it came from removes the card interlayer wrote there, which described the
    previous weights (an untrained conversion: no longer true once trained); the folder's other files stay."""
    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock").save_pretrained(tmp_path / "out")
    assert "untrained conversion" in (tmp_path / "out" / "README.md").read_text()
    (tmp_path / "out" / "notes.txt").write_text("kept")
    out, again = str(tmp_path / "out"), str(tmp_path / "again")
    _run_without_interlayer(
        f"""
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({out!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        model.save_pretrained({again!r})
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "latent_" in name:
                    p.add_(0.1)
        model.save_pretrained({out!r})
        """,
        tmp_path,
    )
    assert not (tmp_path / "again" / "README.md").exists()
    assert (tmp_path / "again" / "model.safetensors").is_file()
    assert not (tmp_path / "out" / "README.md").exists()
    assert (tmp_path / "out" / "notes.txt").read_text() == "kept"
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "out")  # and it loads


def test_remote_code_in_a_process_with_interlayer_writes_the_same_card(tmp_path):
    """Remote code saved again in a process where interlayer is imported writes the card the package writes for its
    own class (the shipped code calls the package's writer)."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    build_stock_llama(str(tmp_path / "stock"))
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "stock").save_pretrained(tmp_path / "out")
    # the Auto class would give the package's own class (registered when interlayer is imported): the folder's code
    reference = json.loads((tmp_path / "out" / "config.json").read_text())["auto_map"]["AutoModelForCausalLM"]
    remote = get_class_from_dynamic_module(reference, tmp_path / "out").from_pretrained(tmp_path / "out")
    assert type(remote).__module__.startswith("transformers_modules")
    remote.save_pretrained(tmp_path / "card")
    remote_card = (tmp_path / "card" / "README.md").read_text()
    shutil.rmtree(tmp_path / "card")
    LlamaLatentForCausalLM.from_pretrained(tmp_path / "out").save_pretrained(tmp_path / "card")
    assert remote_card == (tmp_path / "card" / "README.md").read_text()
