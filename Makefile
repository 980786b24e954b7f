# Weir's make targets. `make help` lists them.

GO ?= go
STATICCHECK_VERSION := v0.8.2
BIN := $(CURDIR)/bin

# Tests and benchmarks get a private Postgres for the run (internal/cmd/withpostgres)
# unless TEST_DATABASE_URL points at one.
WITH_POSTGRES := $(GO) run ./internal/cmd/withpostgres --

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z\/_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## Start weir locally (uses DATABASE_URL, else a private Postgres it starts)
	@if [ -z "$$DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	$(GO) run ./cmd/weir dev

.PHONY: dev-examples
dev-examples: ## make dev, plus example workflows running so the web UI has runs to show
	@if [ -z "$$DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	$(GO) run ./cmd/weir dev --examples

.PHONY: test
test: ## go vet, then every test with -race against real Postgres (the bench module's too)
	@if [ -z "$$TEST_DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(WITH_POSTGRES) $(GO) test -race -count=1 -timeout 20m ./...
	cd bench && $(GO) test -race -count=1 -timeout 5m ./...

.PHONY: river-conformance
river-conformance: ## River's own tests (river, rivertest, riverlog) on riverpgxv5 and on the fencing driver; fails on unlisted differences
	@if [ -z "$$TEST_DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	$(WITH_POSTGRES) $(GO) run ./internal/cmd/riverconformance $(RIVER_CONFORMANCE_FLAGS)

.PHONY: chaos
chaos: ## Fault-injection suite at full size (WEIR_CHAOS_WORKFLOWS, default 5000 per scenario)
	WEIR_CHAOS_WORKFLOWS=$${WEIR_CHAOS_WORKFLOWS:-5000} WEIR_CHAOS_RATE=$${WEIR_CHAOS_RATE:-40} \
		$(GO) test -race -count=1 -timeout 4h -run 'TestChaos' -v ./integration/

# `make bench` writes its results here, under bench/; BENCH_RUNS repetitions.
BENCH_OUT ?= results/$(shell date -u +%Y%m%d-%H%M%S)
BENCH_RUNS ?= 3

.PHONY: bench
bench: ## Compare weir with River, go-workflows and DBOS (bench/ harness): bench/results/<time>/
	@if [ -z "$$DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	cd bench && $(GO) run . all --runs $(BENCH_RUNS) --out $(BENCH_OUT)

# `make bench-scale` runs `bench scale` (BENCH_SCALE_RUNS repetitions; more
# flags in BENCH_SCALE_FLAGS, e.g. --parts workers) into BENCH_OUT as well.
BENCH_SCALE_RUNS ?= 1
BENCH_SCALE_FLAGS ?=

.PHONY: bench-scale
bench-scale: ## Scale workloads (pool 64, 20,000 burst, normal start, K worker processes, network hop): bench/results/<time>/
	@if [ -z "$$DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	cd bench && $(GO) run . scale --runs $(BENCH_SCALE_RUNS) --out $(BENCH_OUT) $(BENCH_SCALE_FLAGS)

.PHONY: bench-go
bench-go: ## Run the Go micro-benchmarks against real Postgres
	@if [ -z "$$TEST_DATABASE_URL" ]; then ./scripts/ensure-postgres; fi
	$(WITH_POSTGRES) $(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: lint
lint: $(BIN)/staticcheck ## gofmt check, go vet and staticcheck (the bench module's too)
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	cd bench && $(GO) vet ./... && $(BIN)/staticcheck ./...

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: build
build: ## Build bin/weir
	$(GO) build -o $(BIN)/weir ./cmd/weir
