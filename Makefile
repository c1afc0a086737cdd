PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
ZC     := $(VENV)/bin/zc

.PHONY: venv transformer test demo bench clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# the transformer extra (torch pinned to the CPU build by constraints.txt): `make test` needs it,
# the core install does not
$(VENV)/.installed-transformer: $(VENV)/.installed
	$(PIP) install -c constraints.txt -e '.[test,transformer]'
	touch $@

transformer: $(VENV)/.installed-transformer

test: transformer
	$(PY) -m pytest

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
	  cmp build/receipts/tau-airline-gpt4o.jsonl.gz receipts/tau-airline-gpt4o.jsonl.gz && \
	  echo "re-imported $(CHAT): identical to the bundled receipts/"; \
	else echo "($(CHAT) is not here: using the bundled receipts/)"; fi
	$(ZC) receipts check receipts/ --policy build/airline_chat.zcp
	@# conformal selection: Learn-then-Test certifies nothing on these 1,368 decisions (README, Distillation)
	$(ZC) distill --from receipts/ --policy build/airline_chat.zcp --guarantee conformal -o build/specialists/airline_chat
	$(ZC) eval --policy build/airline_chat.zcp --specialists build/specialists/airline_chat --receipts receipts/ \
	  --json build/eval.json --html build/eval.html

bench: transformer
	$(PY) bench/legal_bench.py --write BENCHMARKS.md
	$(PY) bench/router_bench.py --write BENCHMARKS.md
	$(PY) bench/specialist_bench.py --write BENCHMARKS.md
	$(PY) bench/routing_bench.py --write BENCHMARKS.md
	$(PY) bench/gateway_bench.py --write BENCHMARKS.md

clean:
	rm -rf $(VENV) build .pytest_cache
