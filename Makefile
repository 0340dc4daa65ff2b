# pgshard — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/pgshard
DEV_DIR ?= .pgshard
CHAOS_DIR ?= .pgshard-chaos
CHAOS_OUT ?= chaos-out
SHARDS ?= 4
# Integration tests must run, not skip: a missing Postgres/PgBouncer fails.
export PGSHARD_TEST_REQUIRE ?= 1
TEST_TIMEOUT ?= 75m
FUZZTIME ?= 1m
# Tests allowed to skip here: the testcontainers provider needs a Docker
# engine, which these machines do not have.
ALLOW_SKIP ?= ^TestContainers

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install missing system packages (postgresql, pgbouncer, python3-psycopg, python3-asyncpg, a JDK with pgJDBC, node and npm: scripts/install-deps.sh) and Go modules
	@scripts/install-deps.sh
	@$(GO) mod download

.PHONY: build
build: ## Build bin/pgshard
	$(GO) build -o $(BIN) ./cmd/pgshard

.PHONY: test
test: deps ## Run every test (unit + integration on a real local cluster) with -race
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) build -o bin/testreport ./internal/tools/testreport
	set -o pipefail; $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -json ./... 2>&1 | tee test-output.json | \
		bin/testreport -allow-skip '$(ALLOW_SKIP)'

.PHONY: chaos
chaos: deps build ## CI chaos suite: every fault kind against 3 shards (PgBouncer + proxy) verified, recovery per kind, online moves under every fault kind, then every mutant caught
	@scripts/chaos.sh $(BIN) $(CHAOS_DIR) $(CHAOS_OUT)

COMPAT_OUT ?= compat-out

.PHONY: compat
compat: deps build ## pgx's and lib/pq's test suites and PostgreSQL's regression suite through pgshard (session and transaction pooling) vs direct and PgBouncer: scoreboard in $(COMPAT_OUT), thresholds in scripts/compat-thresholds.txt
	@scripts/compat.sh $(BIN) $(COMPAT_OUT) scripts/compat-thresholds.txt

.PHONY: test-short
test-short: ## Run unit tests only (no database)
	$(GO) test -short -count=1 ./...

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 1m; CI: 8s); fails if any target fails
	@scripts/fuzz-all.sh $(FUZZTIME)

SEEDS ?= 1,2,3,4,5
CASES ?= 2000

.PHONY: fuzz-sql
fuzz-sql: deps ## Random differential SQL: SEEDS (comma-separated) × CASES generated reads × 5 modes (simple, extended, binary, COPY, a SQL cursor), pgshard (fence on) over 3 shards vs one Postgres (0 wrong or it fails); SHAPE=setop (etc.) generates one shape; MODES=set-pipe,txn-set (etc.) runs those modes instead
	PGSHARD_FUZZSQL_SEEDS=$(SEEDS) PGSHARD_FUZZSQL_CASES=$(CASES) PGSHARD_FUZZSQL_SHAPE=$(SHAPE) PGSHARD_FUZZSQL_MODES=$(MODES) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestFuzzSQL$$' -v ./proxy/

.PHONY: demo
demo: deps build ## Bring up a 4-shard cluster (PgBouncer, a catalog, the proxy following it), show it working, grow it to 5 shards online under load (DEV_DIR= to choose its directory)
	@scripts/demo.sh $(BIN) $(DEV_DIR) $(SHARDS)

.PHONY: bench-proxy
bench-proxy: build ## Point-SELECT benchmark, 16 clients: direct, PgBouncer, pgshard (direct, via PgBouncer, 2 shards) side by side, with ratios; then a fan-out (ORDER BY + LIMIT over 4 shards): merge throughput, proxy memory (BASE_BIN=other build compares it too)
	@scripts/bench-proxy.sh $(BIN)

.PHONY: bench-verify
bench-verify: ## The verifier on a synthetic 1,000,000-op history (goal < 60 s): wall, CPU-s, peak heap, ops/s (VERIFY_OPS= to change the size); asserts nothing
	PGSHARD_VERIFY_BENCH_OPS=$(VERIFY_OPS) $(GO) test -run '^$$' -bench 'BenchmarkVerifyMillion' -benchtime 1x -count 1 -timeout 30m ./verify/

VERIFY_OPS ?= 1000000

.PHONY: bench
bench: bench-proxy bench-loadgen bench-verify bench-fence bench-idle ## Every speed and memory benchmark in one run, each beside its anchor (PgBouncer, a bare pgx round trip, the fence off): ratios, never assertions

.PHONY: bench-idle
bench-idle: build ## Memory per idle client (goal ≤ 8 KiB at 5,000): STEPS (default 5000,10000) clients held by pgshard's proxy and by PgBouncer side by side, never-sent and after one query; KiB/client, failed connections, ratio; asserts no figure (fails only if a connection does)
	@scripts/bench-idle.sh $(BIN)

.PHONY: bench-fence
bench-fence: ## The shard fence's cost, on vs off interleaved in one run: on one real shard (fast-path commit, keyed point read; then the backend's own CPU: assert+SELECT vs SELECT, pgshard_cas vs unfenced, by repetition with the load), then through the proxy and PgBouncer (keyed point SELECT in the simple and extended protocol, the store's fast-path commit and Load, a read of every shard: each part through the served form, checked against the map, vs the table as is); prints µs/op and on/off (goal ≤ 1.05) per repetition beside the load average; asserts nothing
	$(GO) test -run '^$$' -bench 'BenchmarkFence' -benchtime 4000x -count 1 ./store/
	$(GO) test -v -run '^$$' -bench 'BenchmarkProxyFence' -benchtime $(FENCE_PROXY_OPS)x -count 1 ./proxy/

FENCE_PROXY_OPS ?= 2000

.PHONY: bench-reshard
bench-reshard: ## The mover on a real 2-shard cluster: a range moved back and forth under four writers (freeze p50/max at the 100 ms budget, freezes abandoned, rows copied/s, changes replayed) and the moving range's commit latency as clients see it (p50/p99/max) and the unmoved range's commits/s during moves vs outside them, both at saturation (closed-loop writers) and at a fixed offered load (open loop at half the measured saturation rate: the unmoved range's commits/s as a fraction of offered, its p50/p99, the freeze as clients see it); the capture triggers' cost per commit; asserts nothing
	$(GO) test -run '^$$' -bench 'BenchmarkMove|BenchmarkCaptureCost' -benchtime 4x -count 1 ./reshard/

.PHONY: bench-loadgen
bench-loadgen: deps ## loadgen's own CPU per operation (goal ≤ 50 µs): the engine against an in-memory target, then an open loop at 600 ops/s against a real shard beside a bare pgx round trip; prints µs/op and ×goal, asserts nothing
	$(GO) test -run '^$$' -bench 'EngineCPU' -benchtime 1x -count 1 ./loadgen/
	$(GO) test -run '^$$' -bench 'GeneratorCPU' -benchtime 1x -count 1 ./loadgen/storetarget/

.PHONY: up
up: build ## Start (or reuse) the local dev cluster
	$(BIN) dev up --dir $(DEV_DIR) --shards $(SHARDS)

.PHONY: down
down: ## Stop the local dev cluster (nothing left running)
	@if [ -x $(BIN) ]; then $(BIN) dev down --dir $(DEV_DIR); else $(GO) run ./cmd/pgshard dev down --dir $(DEV_DIR); fi

.PHONY: clean
clean: down ## Stop the dev cluster and remove build output and its state
	@if [ -d $(CHAOS_DIR) ]; then $(GO) run ./cmd/pgshard dev down --dir $(CHAOS_DIR); fi
	rm -rf bin $(DEV_DIR) $(CHAOS_DIR) $(CHAOS_OUT) $(COMPAT_OUT) test-output.json
