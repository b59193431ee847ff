GO      ?= go
PKGS    := ./...
BIN     := bin/compactor
# The version stamped into the binary: the release tag on this commit
# (v$(cat VERSION)), else the VERSION file's as a development build of the
# commit.
VERSION ?= $(shell git describe --tags --exact-match --match 'v*' 2>/dev/null || echo v$$(cat VERSION)-dev+$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))
LDFLAGS := -X main.version=$(VERSION)
# The shared test data lives beside the checkout; tests skip what is absent.
TESTFLAGS ?= -race -shuffle=on -timeout 8m

.PHONY: build test test-ts bench-ts test-race test-short bench recall gateway scale chaos microbench lint fmt tidy run demo docker screenshots clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/compactor

# All tests with the race detector (heavy replays scaled down under it), then
# the heavy replays and evaluations in full without it. No network, no keys.
test:
	$(GO) test $(TESTFLAGS) $(PKGS)
	$(GO) test -count=1 -timeout 8m -run 'TestReplay|TestLoCoMo|TestProperty|TestLargeSession|TestComparePrepared|TestChaosFailsOnABrokenBuild|TestChaosShort|TestNoisyShort' ./internal/pipeline ./internal/harness/eval ./internal/kvstore ./internal/harness/bench ./cmd/compactor
	$(MAKE) test-ts

# The TypeScript client's tests (node --test) against a real compactor
# serve; skipped, saying so, where Node is not installed.
test-ts: build
	@if ! command -v node >/dev/null 2>&1; then \
		echo "make test-ts: Node is not installed: the TypeScript client's tests are skipped (apt-get install nodejs npm)"; exit 0; fi; \
	cd clients/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && COMPACTOR_BIN=$(CURDIR)/$(BIN) npm test

test-race: test

test-short:
	$(GO) test -short -timeout 5m $(PKGS)

# Overhead and throughput against the JetStream floor, model cost over the
# LoCoMo replay (when ../shared/data is there), scale, prepared compactions
# (the bundled sets at 4k, and at 8k at a real agent's pace; the long
# agent runs at 32k and 64k at a real agent's pace); writes
# docs/BENCHMARKS.md and docs/BENCHMARKS.svg (about 45 minutes on 2 cores).
bench: build
	$(BIN) bench --data ../shared/data --out docs/BENCHMARKS.md
	$(BIN) eval recall --data ../shared/data --out docs/RECALL.md
	$(BIN) bench --gateway --out docs/GATEWAY.md

# The gateway (about a minute): what it adds to a call against the
# stand-in model called directly, and an agent's replay past its window
# (docs/GATEWAY.md).
gateway: build
	$(BIN) bench --gateway --out docs/GATEWAY.md

# Recall (under a minute): what a search finds of what the replays
# summarised, and search latency through the endpoint (docs/RECALL.md);
# exit 1 while a goal of issue 46 is missed, the document written first.
recall: build
	$(BIN) eval recall --data ../shared/data --out docs/RECALL.md

# The store at scale (under 10 minutes on 2 cores): the TypeScript client's
# appends (bench-ts); appends at 1/8/64 through compactor.session.append
# (below and past prepare_at, and at 10/1k/10k messages) and in process,
# against raw KV puts; subjects, bytes and server memory per
# message, idle sweeps of 1k/10k/100k sessions against reading records only,
# compactions per second against the floor, three nodes against one, eval
# through the service against in process, and a sizing model; writes
# docs/SCALE.md and docs/scale.json. Exit 1 when a goal is missed, naming it.
scale: build bench-ts
	$(BIN) bench --scale --data ../shared/data --out docs/SCALE.md

# The TypeScript client's appends against nats.js raw KV puts, 8 runtimes
# (docs/TS-APPENDS.md; skipped, saying so, where Node is not installed).
bench-ts: build
	@if ! command -v node >/dev/null 2>&1; then \
		echo "make bench-ts: Node is not installed: skipped (apt-get install nodejs npm)"; exit 0; fi; \
	cd clients/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && \
		COMPACTOR_BIN=$(CURDIR)/$(BIN) node bench/append.js --runtimes 8 --seconds 5 --out ../../docs/TS-APPENDS.md

# Faults under load (about 3 minutes on 2 cores): a three-node cluster, two
# serve replicas, 50 runtimes for a minute; the meta leader and the
# sessions, requests and events streams' leaders killed, the model down for
# 7 s, a replica killed and the other paused 20 s, a model failing 30% of
# calls, rate-limiting 5% and hanging 1%; checks every goal and writes
# docs/RELIABILITY.md. Exit 1 when a goal is missed, naming it. Then the
# noisy-neighbour check on nats.conf's tenants (about 4 minutes): tenant B
# alone and beside tenant A's floods within its quotas, taking turns in
# three rounds, and beside a flood with the quotas lifted; writes
# docs/NOISY.md.
chaos: build
	$(BIN) chaos --out docs/RELIABILITY.md
	$(BIN) chaos --noisy --out docs/NOISY.md

# The Go micro-benchmarks of counting, selection and in-memory compactions
# (with the reduction ladder and summary only).
microbench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x ./internal/tokens ./internal/pipeline ./internal/harness/bench

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy

# Runs the service: an embedded NATS server with JetStream on
# 127.0.0.1:4222 storing under ./data, the extractive summariser, /metrics
# /healthz and /readyz on 127.0.0.1:9464. Ctrl-C stops it cleanly. Flags go
# in ARGS: make run ARGS='--nats-port 4333 --data-dir /tmp/c'.
ARGS ?=
run: build
	$(BIN) serve --gateway 127.0.0.1:8090 $(ARGS)

# The whole system on one machine, with a real conversation.
demo: build
	$(BIN) demo

# The inspector page as headless Chromium sees it in its test (Debian's
# chromium package), kept as docs/inspector.png.
screenshots:
	@command -v chromium >/dev/null 2>&1 || { echo "make screenshots: no chromium (apt-get install chromium)"; exit 1; }
	rm -rf bin/shots && mkdir -p bin/shots
	$(GO) test -count=1 -run TestInspectorInChromium -artifacts -outputdir $(CURDIR)/bin/shots ./cmd/compactor
	cp bin/shots/_artifacts/*/inspector-session-desktop.png docs/inspector.png

clean:
	rm -rf bin

# The container image and, with docker compose, the 3-node cluster of
# compose.yaml serving one compaction (a session imported as admin, then
# compacted). Where no docker daemon runs it says so and stops: go test
# ./deploy checks both files either way.
docker:
	@if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then \
		echo "make docker: no docker daemon here (go test ./deploy checks the Dockerfile and compose.yaml)"; exit 0; fi; \
	set -e; \
	docker build --build-arg VERSION=$(VERSION) -t compactor:dev .; \
	docker compose up -d; \
	url=nats://admin:admin-secret@nats-1:4222,nats://admin:admin-secret@nats-2:4222,nats://admin:admin-secret@nats-3:4222; \
	for i in $$(seq 1 60); do docker compose ps --status running compactor | grep -q compactor && break; sleep 2; done; \
	docker compose run --rm --no-deps -v "$$PWD/testdata:/testdata:ro" compactor session import /testdata/tau-bench-airline-task2.json \
		--session-id docker-smoke --context-limit 6000 --nats-url $$url; \
	docker compose run --rm --no-deps compactor compact docker-smoke --nats-url $$url; \
	echo "make docker: the cluster serves (docker compose down -v to remove it)"
