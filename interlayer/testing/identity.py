"""The conformance suite's identity part (`IdentityTests`)."""

from __future__ import annotations

import torch

from .case import _output


class IdentityTests:
    """The stock function: a conversion computes it where the mechanism says so, and the mechanism acts once active."""

    def test_identity_init_matches_stock(self, tmp_path):
        """Every option set that claims identity: `from_pretrained(stock, **options)` as loaded, nothing overwritten,
        computes the stock model's outputs on a padded and an unpadded batch."""
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            self._assert_matches_stock(self._zoo(folder, **options), stock, options)

    def test_identity_from_config_matches_stock(self, tmp_path):
        """The same from a config (the model built directly, as the Trainer or a script does, then given the stock
        weights): the mechanism's own init must also run outside `from_pretrained`."""
        folder, stock = self._stock(tmp_path)
        for options in self._identity_option_sets():
            config = self.case.model_class.config_class.from_pretrained(folder, **options)
            model = self.case.model_class(config)
            result = model.load_state_dict(stock.state_dict(), strict=False)
            assert not result.unexpected_keys, result.unexpected_keys
            self._assert_matches_stock(model.eval(), stock, options)

    def test_active_mechanism_changes_outputs(self, tmp_path):
        """The identity test above can fail: with the mechanism active the outputs move away from stock."""
        folder, stock = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            diff = (_output(model, batch, self.case.output_name) - _output(stock, batch, self.case.output_name)).abs()
        assert diff.max() > 1e-6
