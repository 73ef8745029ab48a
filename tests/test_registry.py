"""The zoo's registry is written once (each modeling file's `register_for_auto_classes`) and everything reads it:
the Auto classes, the package's exports, `interlayer list`, the docs' matrix and the conformance suite's cases."""

import importlib
import inspect
import pathlib

import transformers

import interlayer
from interlayer.cli import main
from interlayer.testing import ConformanceSuite
from interlayer.zoo import MECHANISMS, ZOO, matrix, matrix_markdown

TESTS = pathlib.Path(__file__).parent
DOCS_MATRIX = TESTS.parent / "docs" / "matrix.md"
BEGIN, END = "<!-- matrix: interlayer list --markdown -->", "<!-- end of matrix -->"


def conformance_classes() -> set[type]:
    """The model class of every conformance case in the test suite."""
    classes = set()
    for path in sorted(TESTS.glob("test_*conformance*.py")):
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, ConformanceSuite) and value is not ConformanceSuite:
                classes.add(value().make_case().model_class)
    return classes


def test_every_cell_runs_the_conformance_suite():
    """Each mechanism x family cell has a conformance case (on one of its task classes: the classes of a cell share
    the mechanism's code, and each mechanism's tests convert every task class of every cell)."""
    covered = conformance_classes()
    assert covered <= {e.model_class for e in ZOO}, "a conformance case tests a class the registry does not list"
    for (mechanism, family), tasks in matrix().items():
        assert covered & set(tasks.values()), f"no conformance case for {mechanism} on {family}"


def test_the_registry_is_what_the_package_registers_and_exports():
    for e in ZOO:
        assert e.mechanism in MECHANISMS
        assert getattr(interlayer, e.model_class.__name__) is e.model_class
        assert getattr(interlayer, e.config_class.__name__) is e.config_class
        assert transformers.AutoConfig.for_model(e.config_class.model_type).__class__ is e.config_class
        assert e.auto_class._model_mapping[e.config_class] is e.model_class
        assert e.model_class._auto_class == e.auto_class.__name__  # what the saved auto_map names
        assert e.stock_model_type in e.config_class.stock_model_types


def test_list_prints_the_matrix(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert f"{len(matrix())} mechanism x family cells" in text
    for e in ZOO:
        assert e.model_class.__name__ in text
    assert main(["list", "--markdown"]) == 0
    assert capsys.readouterr().out == matrix_markdown()


def test_docs_matrix_is_the_registry():
    """docs/matrix.md carries `interlayer list --markdown` between its markers: regenerate it when a cell changes."""
    text = DOCS_MATRIX.read_text()
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert table == matrix_markdown(), "docs/matrix.md is out of date: paste `interlayer list --markdown` into it"
