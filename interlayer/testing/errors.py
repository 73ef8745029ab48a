"""The conformance suite's errors part (`ErrorTests`)."""

from __future__ import annotations


class ErrorTests:
    """Errors: the config errors the mechanism documents, and a checkpoint of another architecture."""

    def test_documented_config_errors(self):
        """every documented bad value fails at config creation with a message naming the field"""
        import re

        assert self.case.config_errors, "a mechanism documents at least one config error"
        for options, pattern in self.case.config_errors:
            try:
                self.case.model_class.config_class(**options)
            except Exception as err:  # strict dataclass errors wrap the ValueError raised by the validator
                assert re.search(pattern, str(err)), f"{options}: {err}"
            else:
                raise AssertionError(f"{options} was accepted")

    def test_wrong_architecture_is_refused(self, tmp_path):
        """a checkpoint of another architecture raises a `ValueError` naming its `model_type`"""
        folder = str(tmp_path / "wrong")
        self.case.wrong_architecture(folder)
        try:
            self.case.model_class.from_pretrained(folder)
        except ValueError as err:
            assert "model_type" in str(err)
        else:
            raise AssertionError("a checkpoint of another architecture was accepted")
