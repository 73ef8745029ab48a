"""The zoo's conformance suite: the contract every mechanism meets, written once, in themed parts composed into one
class (as transformers composes its tester mixins: `ModelTesterMixin`, `GenerationTesterMixin`, ...), so that a check is
found by its theme: loading, the stock function, training, inputs, precision, the outputs API, attention and compile,
PEFT, generation, sharing, errors, several processes, serving.

A test class subclasses `ConformanceSuite` (pytest collects it as `Test...`) and implements `make_case()` returning a
`ConformanceCase`: how to build a tiny stock checkpoint, the zoo class, options that make the mechanism active, a padded
batch and the config errors the mechanism documents (`tests/conformance_cases.py` builds one from each example of every
mechanism's record). Each test compares against the stock model or against the zoo model itself with
`torch.testing.assert_close`, so each can fail. `conformance_table()` is docs/conformance.md's table of the tests, made
from their docstrings.
"""

from __future__ import annotations

import inspect

from .case import ConformanceBase, ConformanceCase
from .compile import AttentionAndCompileTests
from .distributed import DistributedTests
from .dtypes import DtypeTests
from .errors import ErrorTests
from .generation import GenerationTests
from .identity import IdentityTests
from .inputs import InputTests
from .loading import LoadingTests
from .outputs import OutputsTests
from .peft import PeftTests
from .serving import ServingTests
from .sharing import SharingTests
from .training import TrainingTests

THEMES = (
    LoadingTests,
    IdentityTests,
    TrainingTests,
    InputTests,
    DtypeTests,
    OutputsTests,
    AttentionAndCompileTests,
    PeftTests,
    GenerationTests,
    SharingTests,
    ErrorTests,
    DistributedTests,
    ServingTests,
)


# the parts whose outcome a class's options (a mechanism's form, mode or sizes) can change; the others (the outputs API,
# PEFT's wrapping of the stock projections, saving and the card, the documented config errors) are the class's
CLASS_THEMES = (OutputsTests, PeftTests, SharingTests, ErrorTests)
OPTION_THEMES = tuple(theme for theme in THEMES if theme not in CLASS_THEMES)


class ConformanceSuite(*THEMES, ConformanceBase):
    """Every part of the conformance suite: subclass as `TestXConformance(ConformanceSuite)` and implement
    `make_case`."""


class OptionsConformanceSuite(*OPTION_THEMES, ConformanceBase):
    """The parts of the suite that depend on a class's options, for a further option set of a class that
    `ConformanceSuite` already runs on (another form or mode of the mechanism on the same family)."""


def conformance_table() -> str:
    """The suite's tests as a markdown table (docs/conformance.md): each part, then each of its tests with the first
    paragraph of its docstring."""
    lines = ["| part | test | what it proves |", "| --- | --- | --- |"]
    for theme in THEMES:
        part = theme.__name__.removesuffix("Tests")
        for name, test in vars(theme).items():
            if name.startswith("test_"):
                text = " ".join(inspect.getdoc(test).split("\n\n")[0].split())
                lines.append(f"| {part} | `{name}` | {text} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "CLASS_THEMES",
    "OPTION_THEMES",
    "THEMES",
    "ConformanceBase",
    "ConformanceCase",
    "ConformanceSuite",
    "OptionsConformanceSuite",
    "conformance_table",
]
