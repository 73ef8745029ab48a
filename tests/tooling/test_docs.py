"""Every ```python block of docs/*.md runs (README.md's blocks are run by `test_readme.py`), offline, on tiny
models: the docs cannot drift from the code.

The blocks of one page run in order in one namespace, in a temporary working folder. What the test changes, and
nothing else: each Hub checkpoint id a snippet names (a quoted string in `STANDINS`) becomes a tiny local stock
checkpoint of the same architecture, built once per module. A block that cannot run offline or in one process
starts with `# not-run: REASON` (tests/snippets.py); it is skipped with that reason. A block that imports a module
of an optional extra (`OPTIONAL`) is skipped, naming the extra, when that module is not installed (`make install`
installs every extra). Any other block that fails is a failure: an incomplete snippet (a name it never defines), a
Hub id without a stand-in, or a real drift."""

import importlib.util
import os
import re
from pathlib import Path

import pytest
from snippets import code_blocks, not_run_reason
from stock_checkpoints import TINY_ENCODER, build_stock_llama, build_stock_marian, build_stock_qwen3

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))


def build_roberta_mlm(folder):
    """Like the Hub's `roberta-large`: a masked-LM checkpoint (no classification head), 24 layers deep so that the
    presets' layer numbers exist, 32 wide."""
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    config = {k: v for k, v in TINY_ENCODER.items() if k != "num_labels"}
    RobertaForMaskedLM(RobertaConfig(**{**config, "num_hidden_layers": 24})).save_pretrained(folder)


# Hub id -> builder of a tiny stock checkpoint of the same architecture
STANDINS = {
    "roberta-large": build_roberta_mlm,
    "Qwen/Qwen3-0.6B": build_stock_qwen3,
    "HuggingFaceTB/SmolLM2-135M": build_stock_llama,
    "Helsinki-NLP/opus-mt-en-de": build_stock_marian,
}
# module a block imports -> the setup.cfg extra that installs it
OPTIONAL = {"onnxruntime": "onnx", "onnxscript": "onnx"}
BLOCKS = [(page, line, code) for page in PAGES for _, line, code in code_blocks(page.read_text(), ("python",))]


def test_the_not_run_marker_is_recognised():
    assert not_run_reason("# not-run: needs 2 processes\nimport torch\n") == "needs 2 processes"
    assert not_run_reason("import torch  # not-run: no\n") is None


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    base = tmp_path_factory.mktemp("docs")
    return {"base": base, "standins": {}, "namespaces": {}}


def with_standins(code: str, workspace) -> str:
    for hub_id, build in STANDINS.items():
        for quoted in (f'"{hub_id}"', f"'{hub_id}'"):
            if quoted in code:
                folder = workspace["base"] / "standins" / hub_id.replace("/", "--")
                if hub_id not in workspace["standins"]:
                    build(str(folder))
                    workspace["standins"][hub_id] = folder
                code = code.replace(quoted, repr(str(folder)))
    return code


PARAMS = [pytest.param(page, line, code, id=f"{page.name}-line{line}") for page, line, code in BLOCKS]


@pytest.mark.parametrize("page, line, code", PARAMS)
def test_docs_block(workspace, page, line, code):
    reason = not_run_reason(code)
    if reason:
        pytest.skip(f"{page.name} line {line}: not-run: {reason}")
    for module, extra in OPTIONAL.items():
        if re.search(rf"^(import|from) {module}\b", code, re.M) and importlib.util.find_spec(module) is None:
            pytest.skip(f"{page.name} line {line}: needs {module}: pip install -e '.[{extra}]'")
    namespace = workspace["namespaces"].setdefault(page.name, {"__name__": "__docs__"})
    cwd = workspace["base"] / page.stem
    cwd.mkdir(exist_ok=True)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile("\n" * line + with_standins(code, workspace), str(page), "exec"), namespace)
    finally:
        os.chdir(old)
