"""The conformance suite's sharing part (`SharingTests`)."""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading

import torch

from .case import _output


class RemoteCodeLoader:
    """One interpreter per test process, started with `interlayer` made unimportable (`sys.modules["interlayer"] =
    None`), offline, with an empty Hugging Face home, that loads saved folders through their remote code as a user
    of the Hub would and runs them on a saved batch. Shared by every class's test in the process: starting torch
    and transformers is most of a fresh interpreter's cost, and each folder's remote code is imported as a package
    of its own (transformers names it by the hash of its files), so one load cannot lend another a module."""

    SCRIPT = """
import json, sys, traceback
sys.modules["interlayer"] = None  # the package must not be needed
import torch, transformers
for line in sys.stdin:
    job = json.loads(line)
    try:
        model = getattr(transformers, job["auto_class"]).from_pretrained(job["folder"], trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        batch = torch.load(job["batch"])
        with torch.no_grad():
            torch.save(getattr(model(**batch), job["output"]), job["out"])
        base = transformers.AutoModel.from_pretrained(job["folder"], trust_remote_code=True)
        assert type(base).__module__.startswith("transformers_modules"), type(base).__module__
        reply = {"error": None}
    except BaseException:
        reply = {"error": traceback.format_exc()}
    print("\\0" + json.dumps(reply), flush=True)
"""
    TIMEOUT = 300

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="interlayer-remote-code-")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": os.path.join(self.home, "hf_home"), "PYTHONPATH": ""}
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT],
            cwd=self.home,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        atexit.register(self.close)

    def _read(self):
        for line in self.process.stdout:
            if line.startswith("\0"):
                self.replies.put(json.loads(line[1:]))
        self.replies.put({"error": f"the loader exited with {self.process.wait()}"})

    _shared: RemoteCodeLoader | None = None

    @classmethod
    def shared(cls) -> RemoteCodeLoader:
        """This process's loader, started anew if the last one exited."""
        if cls._shared is None or cls._shared.process.poll() is not None:
            cls._shared = cls()
        return cls._shared

    def load(self, **job) -> None:
        """Load `folder` through `auto_class` and `AutoModel`, save the model's `output` on `batch` to `out`;
        AssertionError with the loader's traceback if anything fails."""
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        reply = self.replies.get(timeout=self.TIMEOUT)
        assert reply["error"] is None, reply["error"][-3000:]

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


class SharingTests:
    """Saving and sharing: a saved folder reloads, in a fresh process through remote code too, carries no path of the
    saving machine, and its card says what is true."""

    def _card(self, folder) -> str:
        return open(os.path.join(folder, "README.md"), encoding="utf-8").read()

    def test_save_load_reproduces_outputs(self, tmp_path):
        """`save_pretrained` -> `from_pretrained` reproduces outputs; `auto_map` and the model card are written; the
        model and the reloaded one carry `model_tags` (`interlayer`, the mechanism) for a Trainer's card"""
        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        loaded = self.case.model_class.from_pretrained(out_dir).eval()
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(loaded, batch, self.case.output_name), _output(model, batch, self.case.output_name)
            )
        config = json.load(open(os.path.join(out_dir, "config.json")))
        assert self.case.auto_class_name in config["auto_map"]
        card = open(os.path.join(out_dir, "README.md")).read()
        assert card.startswith("---\n") and "library_name" in card and "interlayer" in card
        tags = model.hub_tags()
        assert tags[0] == "interlayer" and all(f'"{tag}"' in card.split("---")[1] for tag in tags), tags
        assert model.model_tags[:2] == tags and loaded.model_tags[:2] == tags, (model.model_tags, loaded.model_tags)

    def test_fresh_process_loads_remote_code_offline(self, tmp_path):
        """An interpreter where `interlayer` cannot be imported (`RemoteCodeLoader`) loads the folder through the
        Auto class and `AutoModel` with `trust_remote_code=True` and `HF_HUB_OFFLINE=1`, and reproduces the
        outputs."""
        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "shared")
        model.save_pretrained(out_dir)
        batch = self.case.make_batch()
        torch.save(batch, tmp_path / "batch.pt")
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
        RemoteCodeLoader.shared().load(
            folder=out_dir,
            auto_class=self.case.auto_class_name,
            batch=str(tmp_path / "batch.pt"),
            output=self.case.output_name,
            out=str(tmp_path / "out.pt"),
        )
        torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected)

    def test_saved_folder_holds_no_local_path_and_keeps_a_hub_id(self, tmp_path):
        """A model converted from a local folder and saved holds no absolute local path in any JSON file of the folder
        (`config.json` records no source); one converted from a stock model named by a Hub id, or from a Hub cache
        snapshot folder, records that id."""
        import shutil

        from ..zoo import ZOO, convert

        entry = next(e for e in ZOO if e.model_class is self.case.model_class)
        folder, stock = self._stock(tmp_path)

        def saved_config(model, name):
            out = tmp_path / name
            model.save_pretrained(out)
            return out, json.loads((out / "config.json").read_text())

        def strings(value):
            if isinstance(value, dict):
                return [s for v in value.values() for s in strings(v)]
            if isinstance(value, list):
                return [s for v in value for s in strings(v)]
            return [value] if isinstance(value, str) else []

        out, config = saved_config(convert(folder, entry.mechanism, entry.task)[0], "local")
        assert config.get("base_model_name_or_path") is None
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                local = [s for s in strings(json.loads((out / name).read_text())) if os.path.isabs(s) or folder in s]
                assert not local, f"{name} holds local paths: {local}"
        stock.name_or_path = "hf-org/tiny-stock"
        _, config = saved_config(convert(stock, entry.mechanism, entry.task)[0], "from-hub-model")
        assert config["base_model_name_or_path"] == "hf-org/tiny-stock"
        snapshot = tmp_path / "hub" / "models--hf-org--tiny-stock" / "snapshots" / "0123abcd"
        shutil.copytree(folder, snapshot)
        _, config = saved_config(convert(str(snapshot), entry.mechanism, entry.task)[0], "from-hub-cache")
        assert config["base_model_name_or_path"] == "hf-org/tiny-stock"

    def test_card_claims_the_stock_function_only_until_a_trainer_step(self, tmp_path):
        """The card of an untrained conversion says what it computes (`stock_function_statement`); after one
        `Trainer` step that changes weights, `Trainer.save_model` writes a card that claims nothing of the kind."""
        from transformers import Trainer, TrainingArguments

        from ..card import stock_function_statement

        folder, _ = self._stock(tmp_path)
        model = self.case.model_class.from_pretrained(folder, **self._identity_option_sets()[0])
        model.save_pretrained(str(tmp_path / "untrained"))
        assert f"untrained conversion: {stock_function_statement(model)}" in self._card(tmp_path / "untrained")
        batch = self.case.make_batch()
        batch["labels"] = self.case.labels(batch)
        examples = [{k: v[i] for k, v in batch.items()} for i in range(len(batch["labels"]))]
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        args = TrainingArguments(
            output_dir=str(tmp_path / "trained"),
            per_device_train_batch_size=len(examples),
            max_steps=1,
            learning_rate=1e-2,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
        )
        trainer = Trainer(model=model.train(), args=args, train_dataset=examples)
        trainer.train()
        assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters()), "the step changed nothing"
        trainer.save_model()
        card = self._card(tmp_path / "trained")
        assert "untrained conversion" not in card and "computes the stock model's function" not in card

    def test_untrained_conversion_agrees_with_stock_as_the_card_says(self, tmp_path):
        """What the card says an untrained conversion computes (`stock_function_words`: exactly, or to float rounding
        within the mechanism's stated tolerance) is what it computes, on a padded batch."""
        from ..models.zoo_common import agrees_with_stock, stock_function_words

        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        for options in self._identity_option_sets():
            model = self._zoo(folder, **options)
            with torch.no_grad():
                ours = _output(model, batch, self.case.output_name)
                theirs = _output(stock, batch, self.case.output_name)
            agrees, diff = agrees_with_stock(model, ours, theirs)
            assert agrees, f"{options}: the card says {stock_function_words(model)!r}, max |diff| {diff:.3g}"

    def test_card_snippet_loads_the_model_with_its_task_class(self, tmp_path, monkeypatch):
        """The card's python snippet, run beside the saved folder, loads the model in its task class (with its head)
        from the folder's final name."""
        import re

        folder, _ = self._stock(tmp_path)
        out = tmp_path / "shared-model"
        self._zoo(folder, **self.case.active_options).save_pretrained(str(out))
        snippets = re.findall(r"```python\n(.*?)```", self._card(out), flags=re.S)
        assert len(snippets) == 1 and '"shared-model"' in snippets[0], snippets
        monkeypatch.chdir(tmp_path)
        namespace: dict = {}
        exec(snippets[0], namespace)
        assert type(namespace["model"]).__name__ == self.case.model_class.__name__
