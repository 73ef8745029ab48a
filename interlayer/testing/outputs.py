"""The conformance suite's outputs part (`OutputsTests`)."""

from __future__ import annotations

import pytest
import torch


class OutputsTests:
    """The outputs API: tuples, hidden states and attention weights, from the call and from the config, as the stock
    classes give them."""

    def test_return_dict_false_gives_the_tuple(self, tmp_path):
        """`return_dict=False`, in the call or in the config, gives a tuple, for the task class and its base model
        alike: with the mechanism active, the output field first; at identity init, the stock class's tuple (the
        zoo's tuple starts with the stock tuple's entries; a mechanism's own outputs, such as an auxiliary loss, come
        after them)."""
        folder, stock = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        batch = self.case.make_batch()
        with torch.no_grad():
            as_dict = model(**batch)
            as_tuple = model(**batch, return_dict=False)
        assert isinstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[0], getattr(as_dict, self.case.output_name))
        options = self._identity_option_sets()[0]
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            with torch.no_grad():
                expected = stock(**batch, return_dict=False)
                for how in ("call", "config"):
                    if how == "call":
                        got = self._zoo_like_stock(zoo_class, folder, stock, **options)(**batch, return_dict=False)
                    else:
                        got = self._zoo_like_stock(zoo_class, folder, stock, return_dict=False, **options)(**batch)
                    where = f"{zoo_class.__name__}, return_dict=False from the {how}"
                    assert isinstance(got, tuple), f"{where}: {type(got).__name__}"
                    self._assert_same_outputs(got[: len(expected)], expected, where)

    def test_hidden_states_from_the_config_and_the_call(self, tmp_path):
        """`output_hidden_states` given in the config or in the call returns as many hidden states as the stock
        model does."""
        folder, _ = self._stock(tmp_path)
        batch = self.case.make_batch()
        stock_class = type(self.case.build_stock(str(tmp_path / "again")))
        with torch.no_grad():
            stock = stock_class.from_pretrained(folder, output_hidden_states=True).eval()(**batch)
            from_config = self._zoo(folder, output_hidden_states=True, **self.case.active_options)(**batch)
            from_call = self._zoo(folder, **self.case.active_options)(**batch, output_hidden_states=True)
        for name in ("hidden_states", "encoder_hidden_states", "decoder_hidden_states"):
            expected = getattr(stock, name, None)
            if expected is not None:
                for out, how in ((from_config, "config"), (from_call, "call")):
                    got = getattr(out, name, None)
                    assert got is not None and len(got) == len(expected), f"{name} from the {how}"

    def test_output_attentions_returned_or_refused(self, tmp_path):
        """attentions are returned, or the call raises a `ValueError` naming `output_attentions`"""
        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, attn_implementation="eager", **self.case.active_options)
        batch = self.case.make_batch()
        try:
            with torch.no_grad():
                out = model(**batch, output_attentions=True)
        except ValueError as err:
            assert "output_attentions" in str(err)
            return
        attentions = getattr(out, "attentions", None) or getattr(out, "encoder_attentions", None)
        assert attentions is not None and len(attentions) > 0 and all(a is not None for a in attentions)

    def test_output_attentions_from_the_config_as_from_the_call(self, tmp_path):
        """`output_attentions=True` in the config does what it does in the call: refused both ways (a ValueError
        naming `output_attentions`, from the config, the model's construction or the forward pass; the flag set on
        the config of a built model is refused when it runs, never ignored), or both ways returning the attention
        weights, at identity init those of the stock model."""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        options = {**self._identity_option_sets()[0], "attn_implementation": "eager"}
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            stock.set_attn_implementation("eager")
            model = self._zoo_like_stock(zoo_class, folder, stock, **options)
            results = {
                "call": self._returned_or_refused(lambda: model(**batch, output_attentions=True)),
                "config": self._returned_or_refused(
                    lambda: self._zoo_like_stock(zoo_class, folder, stock, output_attentions=True, **options)(**batch)
                ),
            }
            refused = {how for how, result in results.items() if isinstance(result, ValueError)}
            assert refused in (set(), set(results)), f"{zoo_class.__name__}: refused only from the {sorted(refused)}"
            if refused:
                model.config.output_attentions = True
                set_later = self._returned_or_refused(lambda: model(**batch))
                assert isinstance(set_later, ValueError), f"{zoo_class.__name__}: the config's flag set later ignored"
                continue
            with torch.no_grad():
                expected = stock(**batch, output_attentions=True)
            names = ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions")
            for name in [n for n in names if getattr(expected, n, None)]:  # not GPT-2's empty cross-attentions
                for how, result in results.items():
                    where = f"{zoo_class.__name__} {name} from the {how}"
                    self._assert_same_outputs(getattr(result, name, None), getattr(expected, name), where)

    @pytest.mark.parametrize("selection", [True, [0, 2], -1], ids=["all", "list", "negative_index"])
    def test_hidden_state_selection_as_stock(self, tmp_path, selection):
        """`output_hidden_states` (True, or transformers 5's selection by index: an index or a list, negative from
        the end), in the call or in the config, returns what the stock class returns: at identity init, the stock
        hidden states at the selected positions and None at the others. (A stock class that ignores the selection
        and returns every hidden state, as DeBERTa-v2's does, is the reference only at the selected positions.)"""
        folder, stock = self._stock(tmp_path)
        batch = self.case.make_batch()
        options = self._identity_option_sets()[0]
        for zoo_class, stock in self._task_and_base_pairs(folder, type(stock)):
            with torch.no_grad():
                expected = stock(**batch, output_hidden_states=selection)
                model = self._zoo_like_stock(zoo_class, folder, stock, **options)
                results = {
                    "call": model(**batch, output_hidden_states=selection),
                    "config": self._zoo_like_stock(zoo_class, folder, stock, output_hidden_states=selection, **options)(
                        **batch
                    ),
                }
            names = ("hidden_states", "encoder_hidden_states", "decoder_hidden_states")
            compared = [n for n in names if getattr(expected, n, None) is not None]
            assert compared, f"the stock {type(stock).__name__} returned no hidden states"
            for name in compared:
                stock_states = getattr(expected, name)
                count = len(stock_states)
                if selection is True:
                    selected = set(range(count))
                else:
                    selected = {i % count for i in ([selection] if isinstance(selection, int) else selection)}
                stock_states = tuple(h if i in selected else None for i, h in enumerate(stock_states))
                for how, result in results.items():
                    where = f"{zoo_class.__name__} {name}, output_hidden_states={selection!r} from the {how}"
                    self._assert_same_outputs(getattr(result, name, None), stock_states, where)
