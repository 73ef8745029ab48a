"""The conformance suite's loading part (`LoadingTests`)."""

from __future__ import annotations

import copy

import pytest
import torch

from .case import _output


class LoadingTests:
    """Loading: every stock weight loads, into a model built with or without weight init, from a folder or from a stock
    model in memory; what a saved model takes when it is loaded again; the mechanism's parameters named under its
    prefix."""

    def test_stock_weights_load_exactly(self, tmp_path):
        """every stock tensor loads bit for bit; nothing unused; only the mechanism's own tensors are new"""
        folder, stock = self._stock(tmp_path)
        model, info = self.case.model_class.from_pretrained(folder, output_loading_info=True)
        assert not info["unexpected_keys"], f"stock weights left unused: {sorted(info['unexpected_keys'])}"
        base_missing = [k for k in info["missing_keys"] if not model.is_mechanism_parameter(k)]
        assert not base_missing, f"stock weights missing: {base_missing}"
        assert info["missing_keys"], "the mechanism added no parameter"
        zoo_state = model.state_dict()
        for name, tensor in stock.state_dict().items():
            torch.testing.assert_close(zoo_state[name], tensor, rtol=0, atol=0, msg=f"{name} differs from stock")

    def test_convert_a_loaded_stock_model(self, tmp_path):
        """`interlayer.convert(stock_model, mechanism)` on a model already in memory gives the model that converting
        its saved checkpoint gives: the stock function where identity is claimed; with the mechanism active, every
        stock weight and the config equal, so with the same mechanism weights the same outputs; in the stock
        model's dtype."""
        from ..zoo import ZOO, convert

        entry = next(e for e in ZOO if e.model_class is self.case.model_class)
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            model, report = convert(stock, entry.mechanism, entry.task, **options)
            assert type(model) is entry.model_class and not report.unexpected_keys
            self._assert_matches_stock(model.eval(), stock, f"in-memory conversion, {options}")
        from_folder, _ = convert(folder, entry.mechanism, entry.task, **self.case.active_options)
        in_memory, _ = convert(stock, entry.mechanism, entry.task, **self.case.active_options)
        assert in_memory.config.to_diff_dict() | {"base_model_name_or_path": None} == (
            from_folder.config.to_diff_dict() | {"base_model_name_or_path": None}
        )
        for name, tensor in stock.state_dict().items():
            torch.testing.assert_close(in_memory.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
        mechanism = set(from_folder.mechanism_parameter_names())
        in_memory.load_state_dict({k: v for k, v in from_folder.state_dict().items() if k in mechanism}, strict=False)
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(in_memory.eval(), batch, self.case.output_name),
                _output(from_folder.eval(), batch, self.case.output_name),
            )
        half, _ = convert(copy.deepcopy(stock).to(torch.bfloat16), entry.mechanism, entry.task)
        assert {p.dtype for p in half.parameters()} == {torch.bfloat16}

    def test_built_without_weight_init_then_loaded_equals_the_loaded_model(self, tmp_path):
        """A model built under `transformers.initialization.no_init_weights` (as `from_pretrained` builds it under
        DeepSpeed ZeRO-3, on a real device and with no init run) and given a saved model's state dict has that
        model's buffers and computes its outputs: whatever the config determines is right at construction, not only
        once `_init_weights` has run."""
        from transformers.initialization import no_init_weights

        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        loaded = self.case.model_class.from_pretrained(out_dir).eval()
        with no_init_weights():
            bare = self.case.model_class(self.case.model_class.config_class.from_pretrained(out_dir))
        result = bare.load_state_dict(loaded.state_dict(), strict=False)
        assert not result.missing_keys and not result.unexpected_keys, result
        bare_buffers = dict(bare.named_buffers())
        for name, buffer in loaded.named_buffers():
            torch.testing.assert_close(bare_buffers[name], buffer, rtol=0, atol=0, msg=lambda m: f"buffer {name}: {m}")
        batch = self.case.make_batch()
        with torch.no_grad():
            torch.testing.assert_close(
                _output(bare.eval(), batch, self.case.output_name), _output(loaded, batch, self.case.output_name)
            )

    def test_reload_with_a_changed_init_option_is_refused(self, tmp_path):
        """Each init-only option of the mechanism (`init_options`: `identity_init` and the initial values), given with
        a value other than the saved one when a saved (trained) zoo model is loaded, is refused with a `ConfigError`
        naming the option, both values and that it only applies at conversion; given with the saved value it
        changes neither the config nor the outputs."""
        from ..models.zoo_common import ConfigError, mechanism_field_names

        _, model = self._trained_copy(tmp_path)
        out_dir = str(tmp_path / "saved")
        model.save_pretrained(out_dir)
        config_class = self.case.model_class.config_class
        names = sorted(config_class.init_options & set(mechanism_field_names(config_class)))
        assert "identity_init" in names, names
        batch = self.case.make_batch()
        with torch.no_grad():
            expected = _output(model, batch, self.case.output_name)
        for name in names:
            saved = getattr(model.config, name)
            changed = (not saved) if isinstance(saved, bool) else 0.5 if saved is None else saved + 1
            with pytest.raises(ConfigError) as refusal:
                self.case.model_class.from_pretrained(out_dir, **{name: changed})
            message = str(refusal.value)
            assert f"`{name}={changed!r}` only applies when a stock checkpoint is converted" in message, message
            assert f"saved with {name}={saved!r}" in message, message
            same = self.case.model_class.from_pretrained(out_dir, **{name: saved}).eval()
            assert getattr(same.config, name) == saved, name
            with torch.no_grad():
                torch.testing.assert_close(_output(same, batch, self.case.output_name), expected, msg=name)

    def test_the_mechanism_parameters_are_named_under_its_prefix(self, tmp_path):
        """Every tensor the mechanism adds to the stock checkpoint (with the case's options) has a name component
        starting with the prefix of its record in `interlayer.mechanisms` (the class's `mechanism_param_prefix`), and
        no stock weight does: freezing the base, the parameter report and a conversion's report tell the
        mechanism's tensors by that one test (`has_parameter_prefix`)."""
        from ..mechanisms import mechanism_of
        from ..models.zoo_common import has_parameter_prefix

        folder, stock = self._stock(tmp_path)
        model, info = self.case.model_class.from_pretrained(
            folder, output_loading_info=True, **self.case.active_options
        )
        prefix = mechanism_of(self.case.model_class).parameter_prefix
        assert prefix == model.mechanism_param_prefix, (prefix, model.mechanism_param_prefix)
        added = set(model.state_dict()) - set(stock.state_dict())
        outside = sorted(k for k in added if not has_parameter_prefix(k, prefix))
        assert added and not outside, f"mechanism tensors not under `{prefix}`: {outside}"
        claimed = sorted(k for k in stock.state_dict() if has_parameter_prefix(k, prefix))
        assert not claimed, f"stock weights named under the mechanism's prefix `{prefix}`: {claimed}"
        assert set(info["missing_keys"]) <= added, "a stock weight did not load"
