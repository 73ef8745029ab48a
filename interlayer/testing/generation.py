"""The conformance suite's generation part (`GenerationTests`)."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from .case import (
    _example,
    _generation_inputs,
    _left_padded,
    _output,
)


class GenerationTests:
    """Generation: `generate()` and cached decoding as the stock classes do them."""

    def _stepped_outputs(self, model, batch, cache_name, new_tokens=3):
        """A forward over all but the last `new_tokens` (decoder) tokens with `use_cache`, then one forward per
        remaining token, the returned cache passed back as `cache_name`; the outputs concatenated over the sequence."""
        from ..models.zoo_common import CACHE_KWARG

        seq2seq = model.config.is_encoder_decoder
        key = "decoder_input_ids" if seq2seq else "input_ids"
        ids = batch[key]
        fixed = {k: v for k, v in batch.items() if k != key} if seq2seq else {}
        outputs = model(**fixed, **{key: ids[:, :-new_tokens]}, use_cache=True)
        steps = [getattr(outputs, self.case.output_name)]
        for t in range(ids.shape[1] - new_tokens, ids.shape[1]):
            cache = getattr(outputs, CACHE_KWARG)
            outputs = model(**fixed, **{key: ids[:, t : t + 1], cache_name: cache}, use_cache=True)
            steps.append(getattr(outputs, self.case.output_name))
        return torch.cat(steps, dim=1)

    def test_generate_with_each_stock_input_gives_the_stock_tokens(self, tmp_path):
        """Greedy `generate()` at identity, on a left-padded prompt, with each input the stock class's `generate()`
        accepts (the attention mask alone, and with token type ids, position ids or input embeddings) gives the
        stock tokens, or raises the ValueError the mechanism documents for that input, naming it; never
        `generate()`'s own "not used by the model" (a name missing from the zoo's forward signature)."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate() or stock.config.is_encoder_decoder:
            pytest.skip("generate() inputs of decoder-only language models")
        model = self._zoo(folder, **self._identity_option_sets()[0])
        ids, mask = _left_padded(self.case.make_batch())
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + 3  # shifted, so that the positions matter
        optional = {
            "token_type_ids": mask.flip(-1),  # not all zero, so that the token types matter
            "position_ids": positions,
            "inputs_embeds": stock.get_input_embeddings()(ids).detach(),
        }
        greedy = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
        for name in (None, *optional):
            inputs = {"input_ids": ids, "attention_mask": mask}
            if name == "inputs_embeds":
                inputs = {"inputs_embeds": optional[name], "attention_mask": mask}
            elif name is not None:
                inputs[name] = optional[name]
            with torch.no_grad():
                try:
                    expected = stock.generate(**inputs, **greedy)
                except ValueError as err:
                    assert "not used by the model" in str(err), f"stock generate() with {name}: {err}"
                    continue  # the stock class does not take this input either
                try:
                    got = model.generate(**inputs, **greedy)
                except ValueError as err:
                    assert "not used by the model" not in str(err), f"generate() refuses {name}: {err}"
                    assert f"`{name}`" in str(err), f"a refusal of {name} names it: {err}"
                    continue
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=lambda m: f"generate() with {name}: {m}")

    def test_cached_decoding_matches_full_forward_under_either_cache_name(self, tmp_path):
        """With the mechanism active, decoding token by token with the cache (passed back under the installed
        transformers' name for it, and under the old name `past_key_values`) gives the full forward's outputs."""
        from ..models.zoo_common import CACHE_KWARG

        folder, _ = self._stock(tmp_path)
        model = self._zoo(folder, **self.case.active_options)
        if not model.can_generate():
            pytest.skip("not a generative model: no cache")
        batch = _example(self.case.make_batch(), 0)
        if model.config.is_encoder_decoder:  # decoding starts as `generate()` starts it (M2M100 counts positions from
            # the non-padding tokens, so a padding start token puts cached and full decoding at other positions)
            batch["decoder_input_ids"] = batch["decoder_input_ids"].clone()
            batch["decoder_input_ids"][:, 0] = model.config.decoder_start_token_id
        else:
            batch = {"input_ids": batch["input_ids"]}
        with torch.no_grad():
            full = _output(model, batch, self.case.output_name)
            for cache_name in dict.fromkeys((CACHE_KWARG, "past_key_values")):
                torch.testing.assert_close(
                    self._stepped_outputs(model, batch, cache_name), full, msg=lambda m: f"cache as {cache_name}: {m}"
                )

    def test_identity_generate_is_stock(self, tmp_path):
        """At identity, greedy `generate()` (which keeps the cache under the installed transformers' name for it, in
        the cache class the model makes) gives the stock model's tokens and logits."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate():
            pytest.skip("not a generative model")
        model = self._zoo(folder, **self.case.identity_options, identity_init=True)
        inputs = _generation_inputs(self.case.make_batch())
        settings = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
        with torch.no_grad():
            generated, expected = model.generate(**inputs, **settings), stock.generate(**inputs, **settings)
        torch.testing.assert_close(generated.sequences, expected.sequences, rtol=0, atol=0)
        torch.testing.assert_close(torch.stack(generated.logits), torch.stack(expected.logits))

    def test_checkpointed_training_leaves_a_passed_cache_as_stock(self, tmp_path):
        """Training with gradient checkpointing and a cache passed in: the layers drop the cache as the stock layers
        do (their checkpointing clears it under the installed transformers' name for it), so the recomputation in
        backward does not write it a second time."""
        folder, stock = self._stock(tmp_path)
        if not stock.can_generate() or stock.config.is_encoder_decoder:
            pytest.skip("not a decoder-only generative model")
        model = self._zoo(folder, **self.case.active_options)
        ids = _example(self.case.make_batch(), 0)["input_ids"]
        lengths = []
        for m in (stock, model):
            m.train()
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            new_cache = getattr(m.base_model, "new_cache", None)
            cache = new_cache() if new_cache is not None else DynamicCache(config=m.config)
            m(input_ids=ids, past_key_values=cache, use_cache=True, labels=ids).loss.backward()
            lengths.append(cache.get_seq_length())
        assert lengths[1] == lengths[0], f"cache length after the step: {lengths[1]}, stock {lengths[0]}"
