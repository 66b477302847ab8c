# Tollgate: the two commands are `make run` and `make test`; the rest helps.
SHELL := /bin/bash
GO    ?= go
# Packages that hold the store contract and its backends run with the race
# detector; the rest would only be slower. In the others, the tests named
# for a race (the body budget's, the keys' last use) run under it too.
RACE_PKGS := ./internal/kit/atomicmap/ ./internal/counter/... ./internal/limit/... ./internal/policy/... ./internal/usage/... ./internal/audit/... ./internal/gate/... ./internal/httpapi/ ./internal/pgstore/

.PHONY: run test soak generate check-generated build bench bench-batch bench-gateways bench-pgcall bench-floors bench-scale deps vet lint-openapi

## run: build and serve a demo on 127.0.0.1:8080 (TOLLGATE_ADDR=:9090 for another port; embedded PostgreSQL unless DATABASE_URL is set)
# PostgreSQL's packages, when missing, install while Go builds: on a fresh
# machine both take a while, and apt-get mostly waits on the network and the
# disk while the compiler keeps both cores busy.
run:
	@echo '$(BUILD)  # and scripts/deps.sh postgres beside it'
	@scripts/deps.sh postgres & deps=$$!; $(BUILD); built=$$?; wait $$deps && exit $$built
	TOLLGATE_DEV=$${TOLLGATE_DEV:-1} TOLLGATE_GRPC_ADDR=$${TOLLGATE_GRPC_ADDR:-127.0.0.1:8081} ./bin/tollgate serve --demo

## test: every test, against real PostgreSQL and Redis (found or started)
test: check-generated vet lint-openapi
	@scripts/deps.sh postgres redis chromium node nginx caddy
	@# Every test binary compiled first: the tests that must run alone hold
	@# the machine's test lock (internal/testkit/solo), which the go
	@# command's compiles know nothing of.
	$(GO) test -count=1 -exec /bin/true ./... > /dev/null
	$(GO) test -count=1 -timeout 14m ./...
	@# The race detector's build is another binary per package: one more
	@# go test, of the packages whose concurrency it proves.
	$(GO) test -count=1 -timeout 8m -race -run 'Conformance|Property|Concurr|Catalog|Recorder|Race|Breaker' $(RACE_PKGS) ./client/

## soak: the fault suite's phases, cycle after cycle, for DURATION (make soak DURATION=30m)
DURATION ?= 30m
soak:
	@scripts/deps.sh postgres redis
	@# go test's timeout: DURATION, plus 30 minutes for the last cycle and start-up.
	set -o pipefail; TOLLGATE_FAULT_DURATION=$(DURATION) $(GO) test -count=1 -v -run 'TestFaultSuite' \
		-timeout $$(( $$(echo '$(DURATION)' | sed -E 's/h/*3600+/; s/m/*60+/; s/s$$//; s/\+$$//') + 1800 ))s ./blackbox/ \
		| grep -vE '^(=== (PAUSE|CONT)|\s*$$)'

# BUILD builds bin/tollgate and nothing else: not sqlc or templ, whose output
# is committed.
BUILD = $(GO) build -o bin/tollgate ./cmd/tollgate

## build: bin/tollgate
build:
	$(BUILD)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

## lint-openapi: Redocly CLI's recommended rules (redocly.yaml) must find nothing in the OpenAPI document
# Redocly CLI is pinned by scripts/redocly/package-lock.json and installed by
# scripts/deps.sh; it sends no telemetry and checks for no update.
lint-openapi:
	@scripts/deps.sh redocly
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_NOTIFICATIONS=true "$$(scripts/deps.sh --path redocly)" lint --config redocly.yaml internal/httpapi/openapi.json

## generate: regenerate sqlc and templ output (committed)
generate:
	$(GO) tool sqlc generate
	scripts/sqlc-sum.sh write
	$(GO) tool templ generate -include-version=false
	@# The TypeScript client's types come from the OpenAPI document.
	@scripts/deps.sh node
	cd clients/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run --silent generate

## check-generated: fail when committed generated code differs from its sources
# sqlc's output is compared through its stamp (scripts/sqlc-sum.sh): when its
# inputs or output changed since `make generate` wrote it, `sqlc diff` decides
# (compiling sqlc first: minutes on an empty build cache). SQLC_DIFF=always
# runs the diff whatever the stamp says.
check-generated:
	@if [ "$(SQLC_DIFF)" != always ] && scripts/sqlc-sum.sh check; then \
		echo "sqlc output is what sqlc generated from the migrations and queries sqlc.yaml names (sqlc.sum)"; \
	else \
		$(GO) tool sqlc diff && { scripts/sqlc-sum.sh check || \
			echo "sqlc output is current, but its stamp is stale: run make generate so the next check need not compile sqlc"; }; \
	fi
	@$(GO) tool templ generate -include-version=false >/dev/null
	@git diff --exit-code -- web || { echo "templ output is stale: run make generate"; exit 1; }

## bench: the counter-store benchmarks quoted in docs/benchmarks.md
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/counter/... ./internal/limit/

## bench-batch: batched checks through the Go client against one check per request and a bare handler (scripts/bench-batch.sh)
bench-batch:
	scripts/bench-batch.sh

## bench-gateways: Envoy's rate limit service, Tollgate against envoyproxy/ratelimit on the same Redis and a bare gRPC handler (scripts/bench-gateways.sh; RATELIMIT_SRC=checkout)
bench-gateways:
	@scripts/deps.sh postgres redis
	scripts/bench-gateways.sh

## bench-pgcall: what one call of the PostgreSQL counter store costs PostgreSQL, by keys a call (scripts/bench-pgcall.sh)
bench-pgcall:
	scripts/bench-pgcall.sh

## bench-floors: what Redis and PostgreSQL spend on the counter a check writes, done as simply as each can, beside the bare handler (scripts/bench-floors.sh; TOLLGATE_US=… bounds issue 42's ratio)
bench-floors:
	@scripts/deps.sh postgres redis
	scripts/bench-floors.sh

## bench-scale: how cost grows, by subjects, tenants, policies a tenant and checks a request, on every store (scripts/bench-scale.sh; SUBJECTS_AXIS="1000 100000" … to shrink it)
bench-scale:
	@scripts/deps.sh postgres redis
	scripts/bench-scale.sh

deps:
	@scripts/deps.sh postgres redis
