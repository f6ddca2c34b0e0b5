# The README's two commands: `make test` and `make demo`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is installed first and explicitly: a bare `torch` requirement pulls a multi-GB
# CUDA build. On this machine kind `torch==2.13.0` resolves to a CPU wheel on disk; elsewhere
# set TORCH_PIP_ARGS (e.g. to a CPU wheel index) or pre-install torch in the venv.
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=

# The shared MNIST folder, when present, is handed to the package and tests.
MNIST_DIR := $(abspath ../shared/data/mnist)
ifneq ($(wildcard $(MNIST_DIR)/train-images-idx3-ubyte.gz),)
export NEURALGRAPH_MNIST ?= $(MNIST_DIR)
endif

.PHONY: install test demo bench scatter docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PIP) install -e ".[test]"
	@touch $@

# Optional accelerator (PyG treats it as one): builds from source in 6-13 minutes here and
# measured no model-level gain, so `make test` does not build it.
scatter: install
	$(PIP) install --no-build-isolation torch-scatter

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/neuralgraph demo

bench: install
	$(PY) benchmarks/speed.py

# The reference site (docs/index.md): guides and API pages, warnings are errors. -E: every page is
# read again, so a warning of an unchanged page is never hidden by an incremental build.
docs: $(VENV)/.docs-installed
	$(VENV)/bin/sphinx-build -E -q -W --keep-going -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PIP) install -e ".[docs]"
	@touch $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/api
