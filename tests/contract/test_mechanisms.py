"""A record per mechanism (`interlayer.mechanisms`), registered once: what it declares is what the zoo, the CLI,
`interlayer inspect` and `interlayer bench` use, and a name or prefix another mechanism has is refused."""

import dataclasses
import os
import re

import pytest

from interlayer.bench import CASES
from interlayer.inspection import STATISTIC_PREFIXES, draw_model
from interlayer.mechanisms import (
    MECHANISMS,
    BenchCase,
    Example,
    Picture,
    check_record,
    mechanism_of,
    register_mechanism,
)
from interlayer.zoo import ZOO


@pytest.fixture
def registry():
    """The records as they are, restored after a test registers more."""
    saved = dict(MECHANISMS)
    yield MECHANISMS
    MECHANISMS.clear()
    MECHANISMS.update(saved)


def latent_record(**changes):
    """The latent record's fields under new names, with `changes`."""
    fields = {f.name: getattr(MECHANISMS["latent"], f.name) for f in dataclasses.fields(MECHANISMS["latent"])}
    fields |= dict(name="latent-2", parameter_prefix="lat2_", statistics_prefix="l2/", docs_page="latent-2.md")
    fields |= dict(examples=(Example("Latent2", "llama", {}),), bench_cases={"latent-2": BenchCase("llama")})
    return {**fields, **changes}


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(name="latent"), "name 'latent' is taken by mechanism 'latent'"),
        (dict(statistics_prefix="hc/"), "statistics_prefix 'hc/' is taken by mechanism 'hyper-connections'"),
        (dict(name="x", parameter_prefix="latent_"), "parameter_prefix 'latent_' is taken by mechanism 'latent'"),
        (dict(parameter_prefix="hc_x"), "`parameter_prefix` 'hc_x' and 'hc_' (mechanism 'hyper-connections') start"),
        (dict(parameter_prefix="lat"), "`parameter_prefix` 'lat' and 'latent_' (mechanism 'latent') start alike"),
        (dict(bench_cases={"mhc": BenchCase("llama")}), "bench case 'mhc' is taken by mechanism 'hyper-connections'"),
        (dict(parameter_prefix=""), "`parameter_prefix` must not be empty"),
        (dict(docs_page="latent.md"), "docs_page 'latent.md' is taken by mechanism 'latent'"),
        (dict(examples=(Example("GPT2MHC", "gpt2", {}),)), "example label 'GPT2MHC' is taken by mechanism"),
        (dict(examples=()), "mechanism 'latent-2' has no `examples`"),
        (dict(bench_cases={}), "mechanism 'latent-2' has no `bench_cases`"),
    ],
)
def test_a_name_or_prefix_another_mechanism_has_is_refused(registry, changes, message):
    before = dict(registry)
    with pytest.raises(ValueError, match=re.escape("register_mechanism: " + message)):
        register_mechanism(**latent_record(**changes))
    assert registry == before


def test_every_record_holds_what_its_classes_promise():
    for record in MECHANISMS.values():
        check_record(record)


def test_a_record_whose_prefix_is_not_its_classes_is_refused():
    record = dataclasses.replace(MECHANISMS["bridge"], name="bridge-2", parameter_prefix="xbridge_")
    with pytest.raises(ValueError, match=r"BertBridgeModel.mechanism_param_prefix is 'bridge', the record's"):
        check_record(record)


def test_the_zoo_bench_and_inspect_read_the_records():
    assert [e.mechanism for e in ZOO] == sorted((e.mechanism for e in ZOO), key=list(MECHANISMS).index)
    for entry in ZOO:
        record = mechanism_of(entry.model_class)
        assert record.name == entry.mechanism and entry.config_class in record.config_classes
        assert entry.model_class.mechanism_param_prefix == record.parameter_prefix
    assert {c.mechanism for c in CASES.values()} == set(MECHANISMS)
    assert CASES == {n: c for r in MECHANISMS.values() for n, c in r.bench_cases.items()}
    assert STATISTIC_PREFIXES == tuple(r.statistics_prefix for r in MECHANISMS.values())
    for record in MECHANISMS.values():
        assert len({p.file for p in record.pictures}) == len(record.pictures)
        for tool in record.training_tools:
            assert callable(record.tool(tool)), tool


def test_inspect_and_the_callback_draw_the_pictures_of_the_record(registry, tmp_path):
    """`draw_model` (what `interlayer inspect` and `MechanismStatsCallback` call) draws a record's pictures, nothing
    else: those drawn from a source sentence only when it has inputs, and a picture the model has none of is told
    apart with the record's reason."""
    drawn = []

    def draw(model, stats, inputs, tokens, path):
        drawn.append(os.path.basename(path))
        return path

    pictures = (
        Picture("a", "a.png", draw),
        Picture("b", "b.png", draw, reads_inputs=True),
        Picture("c", "c.png", lambda *args: None, absent="no c here"),
    )
    registry["latent"] = dataclasses.replace(registry["latent"], pictures=pictures)
    entry = next(e for e in ZOO if e.mechanism == "latent")
    paths, absent = draw_model(None, entry, {}, {"input_ids": None}, None, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == drawn == ["a.png", "b.png"] and absent == [pictures[2]]
    drawn.clear()
    paths, _ = draw_model(None, entry, {}, None, None, str(tmp_path))  # the callback: statistics only
    assert drawn == ["a.png"]
