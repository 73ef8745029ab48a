"""The zoo's registry is written once (each modeling file's `register_for_auto_classes`) and everything reads it:
the Auto classes, the package's exports, `interlayer list`, the docs' matrix and the conformance suite's cases."""

import ast
import importlib
import inspect
import pathlib
import re

import transformers

import interlayer
from interlayer.cli import main
from interlayer.mechanisms import MECHANISMS as RECORDS
from interlayer.models.zoo_common import field_defaults
from interlayer.testing import THEMES, ConformanceSuite, conformance_table
from interlayer.zoo import MECHANISMS, ZOO, matrix, matrix_markdown, option_docs, options_markdown

TESTS = pathlib.Path(__file__).parent
DOCS_MATRIX = TESTS.parents[1] / "docs" / "matrix.md"
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


def test_every_mechanism_page_shows_its_options():
    """Each mechanism's page carries `interlayer list --options NAME` (every option, its type, real default and
    meaning, from the config docstrings) between its markers: regenerate it when an option changes."""
    for mechanism, record in RECORDS.items():
        page = record.docs_page
        text = (DOCS_MATRIX.parent / page).read_text()
        begin = f"<!-- options: interlayer list --options {mechanism} -->"
        assert begin in text, f"docs/{page} has no options table"
        table = text.split(begin, 1)[1].split("<!-- end of options -->", 1)[0].strip("\n") + "\n"
        assert table == options_markdown(mechanism), f"docs/{page}: options table out of date"


def _stated_default(kind: str):
    match = re.search(r"defaults to (.+)$", kind)
    if not match:
        return None
    text = match.group(1).strip().strip("`")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def test_docstring_defaults_are_the_real_ones():
    """An option's docstring `defaults to X` is the config's default (the table shows the real one; the docstring
    must not say otherwise)."""
    for e in ZOO:
        defaults = field_defaults(e.config_class)
        for name, (kind, _) in option_docs(e.config_class).items():
            stated = _stated_default(kind)
            if stated is not None:
                assert stated == defaults[name], f"{e.config_class.__name__}.{name}: docstring {stated!r}"


def test_docs_conformance_table_is_the_suite():
    """docs/conformance.md carries `interlayer list --conformance` (every test of the suite, by part, with the first
    paragraph of its docstring) between its markers: regenerate it when a test changes."""
    text = (DOCS_MATRIX.parent / "conformance.md").read_text()
    begin, end = "<!-- conformance: interlayer list --conformance -->", "<!-- end of conformance -->"
    table = text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert table == conformance_table(), "docs/conformance.md is out of date: paste `interlayer list --conformance`"
    tests = [name for theme in THEMES for name in vars(theme) if name.startswith("test_")]
    assert sorted(tests) == sorted(n for n in dir(ConformanceSuite) if n.startswith("test_")), "a test outside a part"
