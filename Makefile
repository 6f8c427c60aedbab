# The two commands a newcomer needs: `make run` starts a node (embedded
# JetStream under ./data, HTTP on 127.0.0.1:7700); `make test` runs the tests.
# Both first make sure ripgrep 14+ is available (scripts/ensure-rg); `make test`
# also a headless Chromium for the timeline page's tests (scripts/ensure-chromium)
# Python 3 for the hash chain's cross-language check (scripts/ensure-python), the RFC 8785
# library of its outside verifier in JavaScript (scripts/ensure-chain-deps), and openssl
# for the signing key's interop test (scripts/ensure-openssl), and the OpenTelemetry
# Collector the trace tests and the tracing bench export to (scripts/ensure-otelcol);
# the tests and the bench also use the pinned MCP software scripts/ensure-mcp-deps
# installs under .tools/mcp; the bench compares the sandbox with bubblewrap
# (scripts/ensure-bwrap).
# Long crash and soak suites: `make crash` and `make fleet-crash` (see docs/recovery.md).

RG := $(shell ./scripts/ensure-rg 2>/dev/null | tail -1)
export CALLSHEET_RG := $(RG)
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: run test vet bench crash fleet-crash

run:
	go run ./cmd/callsheet-node $(ARGS)

test:
	./scripts/ensure-chromium >/dev/null
	./scripts/ensure-chain-deps >/dev/null
	./scripts/ensure-python >/dev/null
	./scripts/ensure-openssl >/dev/null
	./scripts/ensure-otelcol >/dev/null
	./scripts/test

vet:
	go vet ./...

bench:
	./scripts/ensure-mcp-deps >/dev/null
	./scripts/ensure-bwrap >/dev/null
	./scripts/ensure-otelcol >/dev/null
	go run ./bench $(ARGS)

# The crash suite at length: TRIALS randomized kill -9 trials (CI runs 50).
TRIALS ?= 2000
crash:
	go test -count=1 -timeout 0 -run TestCrashSuite ./crash -crash.trials=$(TRIALS) -v

# The fleet crash suite at length: FLEET_TRIALS randomized trials on three node
# processes, each losing one node (kill -9 of an owner or of the stream's
# leader, or SIGSTOP past its lease), then as many on three nodes using an
# external 3-server nats-server cluster; CI runs 3 of each.
# FLEET_KINDS picks failure kinds (owner,leader,pause; default all).
FLEET_TRIALS ?= 30
FLEET_KINDS ?=
fleet-crash:
	go test -count=1 -timeout 0 -run TestFleetSuite ./crash/fleet -fleet.trials=$(FLEET_TRIALS) -fleet.kinds=$(FLEET_KINDS) -v
