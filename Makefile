# Two commands for a fresh machine:
#   make run   creates .venv, installs ragbench with the real embedder, runs `ragbench compare` on pydocs
#   make test  creates .venv if needed, installs the dev extras, runs the test suite
#
# torch is pinned to the CPU build (torch==2.13.0) in every pip command that installs the
# embed extra; a bare `torch` requirement would pull a multi-GB CUDA build and nvidia-* packages.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH := torch==2.13.0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test bench protos lint typecheck clean check-no-cuda

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.core: $(PY) pyproject.toml
	$(PIP) install -q -e .
	touch $@

# One pip run: the torch pin in the same command keeps the CPU build (torch==2.13.0+cpu).
# Then the numba kernels compile into their on-disk cache, so `make run` does not start with it.
$(VENV)/.embed: $(VENV)/.core
	$(PIP) install -q -e '.[embed]' $(TORCH)
	$(PY) -c "from ragbench import rerankers; rerankers.create('numba').warmup(384)"
	touch $@

$(VENV)/.dev: $(VENV)/.embed
	$(PIP) install -q -e '.[dev,embed]' $(TORCH)
	touch $@

check-no-cuda:
	@if $(PIP) list 2>/dev/null | grep -qi '^nvidia-'; then \
		echo "error: nvidia-* packages found in $(VENV); torch must be the CPU build ($(TORCH))"; exit 1; fi

run: $(VENV)/.embed check-no-cuda
	$(VENV)/bin/ragbench compare --dataset pydocs --embed minilm --index flat,hnsw,lsh \
		--rerank numba --codec json,orjson,protobuf --queries 200 --warmup 20

test: $(VENV)/.dev check-no-cuda
	$(PY) -m pytest -q

bench: $(VENV)/.dev
	$(PY) -m pytest bench -p no:cacheprovider -q -s

protos: $(VENV)/.dev
	$(PY) tools/gen_protos.py

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check ragbench tests bench tools
	$(VENV)/bin/ruff format --check ragbench tests bench tools

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy ragbench

# the five layers of DESIGN.md ([tool.importlinter] in pyproject.toml); the test suite runs it too
.PHONY: layers
layers: $(VENV)/.dev
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
