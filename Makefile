PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
ZC     := $(VENV)/bin/zc

.PHONY: venv test demo bench clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt -e '.[test]'
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest

demo: venv
	$(ZC) check policies/
	$(ZC) compile policies/ -o build/
	$(ZC) legal build/agent_core.zcp --state tests/golden/ok/agent_core/security_injected_instructions.json

bench: venv
	$(PIP) install -c constraints.txt -e '.[test,bench]'
	$(PY) bench/legal_bench.py --write BENCHMARKS.md

clean:
	rm -rf $(VENV) build .pytest_cache
