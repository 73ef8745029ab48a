"""The conformance suite's serving part (`ServingTests`)."""

from __future__ import annotations

import json

import pytest
import torch

from .case import _engine_attention


class ServingTests:
    """Serving engines: the contract of vLLM's and SGLang's transformers backend."""

    def _served_base_class(self):
        """The class a serving engine's transformers backend builds from `auto_map["AutoModel"]`: the base model of
        a decoder. Encoder bridges, encoder sentinels and seq2seq attention bridges are outside the contract."""
        from ..zoo import ZOO

        config_class = self.case.model_class.config_class
        entries = [e for e in ZOO if e.config_class is config_class]
        if not any(e.task == "causal-lm" for e in entries):
            pytest.skip(
                f"{self.case.model_class.__name__} is not a decoder: the engines' transformers backend serves "
                "decoders here (docs/serving.md says what else it could serve and why it is not checked)"
            )
        return next(e.model_class for e in entries if e.task == "base")

    def _engine_forward(self, model_class, folder, input_ids):
        """A forward as vLLM's and SGLang's transformers backend run it: the model built with the engine's attention
        implementation (here `interlayer_recording`, which records each call and attends as the engine does), one
        row of flattened tokens with position ids and no attention mask, `use_cache=False`, the engine's own keyword
        (`attention_instances`, a dict of one attention object per layer index) in the call, and the attention
        output returned in the engine's layout, `(tokens, heads * head_dim)`. Returns the last hidden state, the
        calls `(module, query shape, key shape, keyword arguments)` and the `attention_instances` passed."""
        from transformers import AttentionInterface

        calls = []

        def recording_attention(module, query, key, value, attention_mask, **kwargs):
            calls.append((module, tuple(query.shape), tuple(key.shape), kwargs))
            return _engine_attention(module, query, key, value, **kwargs), None

        AttentionInterface.register("interlayer_recording", recording_attention)
        model = model_class.from_pretrained(folder, attn_implementation="interlayer_recording").eval()
        instances = {i: object() for i in range(model.config.num_hidden_layers)}
        positions = torch.arange(input_ids.shape[-1])[None]
        with torch.no_grad():
            out = model(
                input_ids=input_ids,
                position_ids=positions,
                use_cache=False,
                attention_instances=instances,
                return_dict=False,
            )
        return out[0], calls, instances

    def test_serving_engine_attention_contract(self, tmp_path):
        """What vLLM's and SGLang's transformers backend need of a custom decoder (docs/serving.md): the saved
        `auto_map` names an `AutoModel` class, which declares `_supports_attention_backend`; every layer's attention
        goes through the attention interface once per forward, with the engine's keyword arguments passed down, the
        layer's `layer_idx` and the config's head counts (the engine builds one attention object per layer from
        them); the outputs equal those of eager attention; the config's `base_model_tp_plan` is the stock config's
        and names modules of the model. A mechanism whose layers attend more than once per forward (latent's two
        passes) must say why it cannot be served in `serving_exclusion` and declare `_supports_attention_backend =
        False`, so that the engines do not choose their transformers backend for it. Wherever the stock model does
        not take the engine's layout (GPT-2's attention reshapes its output as 4-D), the zoo class need not either."""
        import re

        from transformers import AutoModel

        base_class = self._served_base_class()
        folder, stock = self._stock(tmp_path)
        saved = tmp_path / "saved"
        self._zoo(folder, **self.case.active_options).save_pretrained(str(saved))
        auto_map = json.load(open(saved / "config.json"))["auto_map"]
        assert auto_map.get("AutoModel", "").endswith(f".{base_class.__name__}"), auto_map
        exclusion = getattr(base_class, "serving_exclusion", None)
        for model_class in (base_class, self.case.model_class):
            assert model_class.is_backend_compatible() == (not exclusion), (model_class.__name__, exclusion)

        input_ids = self.case.make_batch()["input_ids"][:1]
        try:
            self._engine_forward(AutoModel, folder, input_ids)
        except Exception as err:  # the stock class itself does not take the engine's layout
            pytest.skip(f"the stock {type(stock).__name__} does not take the engine's attention layout either: {err}")

        hidden, calls, instances = self._engine_forward(base_class, str(saved), input_ids)
        config = calls[0][0].config if calls else base_class.config_class.from_pretrained(str(saved))
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        for module, query, key, kwargs in calls:
            assert kwargs.get("attention_instances") is instances, f"{type(module).__name__}: {sorted(kwargs)}"
            assert query[1:2] + query[3:] == (config.num_attention_heads, head_dim), (type(module).__name__, query)
            assert key[1:2] + key[3:] == (kv_heads, head_dim), (type(module).__name__, key)
        layers = [module.layer_idx for module, *_ in calls]
        assert sorted(set(layers)) == list(range(config.num_hidden_layers)), layers
        if len(layers) != config.num_hidden_layers:
            assert exclusion, f"layers attend more than once a forward without a `serving_exclusion`: {layers}"
        else:
            assert not exclusion, f"every layer attends once, yet the class says {exclusion!r}"

        eager = base_class.from_pretrained(str(saved), attn_implementation="eager").eval()
        with torch.no_grad():
            expected = eager(input_ids=input_ids, use_cache=False).last_hidden_state
        torch.testing.assert_close(hidden, expected)

        assert config.base_model_tp_plan == stock.config.base_model_tp_plan
        names = [name for name, _ in eager.named_modules()]
        for pattern in config.base_model_tp_plan or {}:
            regex = re.compile(pattern.replace(".", r"\.").replace("*", r"\d+"))
            assert any(regex.fullmatch(name) for name in names), f"tp plan entry {pattern!r} names no module"
