# Every target works on a fresh machine with Go 1.26 and network access to the
# Go module proxy: tools are installed into ./bin by the targets that need them.

SHELL         := /usr/bin/env bash
.SHELLFLAGS   := -eu -o pipefail -c
GO            ?= go
MODULES       := pkg gateway hub pylon
BIN           := $(CURDIR)/bin
VERSION       ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X main.version=$(VERSION)
GOLANGCI_LINT_VERSION := v2.15.0
BENCHSTAT_VERSION     := v0.0.0-20260908200009-22c9c6c9d4da
FUZZTIME      ?= 5s
BENCHCOUNT    ?= 6
# make compare: suites, repeats, results folder (default results/compare-<UTC time>)
# and more loadgen campaign flags (e.g. EXTRA="--duration 30s" or EXTRA=--resume with OUT).
SUITES        ?= sessions,mixed
REPEATS       ?= 1
OUT           ?=
EXTRA         ?=

# Binaries and the package each is built from.
CMDS := ./pkg/cmd/mock-engine ./pkg/cmd/demo ./pkg/cmd/baseline-proxy ./pkg/cmd/loadgen ./gateway/cmd/gateway ./hub/cmd/hub ./pylon/cmd/pylon ./hub/cmd/routing-sim

.PHONY: all build test unit fuzz-smoke lint fmt vet golangci tidy-check citations demo bench compare e2e clean tools

all: build

## build: every binary into ./bin
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(CMDS)

## test: the whole gate CI runs: lint, race tests of every module, fuzz smoke, e2e
test: lint unit fuzz-smoke e2e

## unit: go test -race in every module, as one go command over the workspace (go.work) so the
## packages of all modules share the cores: a module's slowest test no longer idles the other core
## (184 s as a loop over modules, 123 s as one command, warm, on 2 cores)
unit:
	$(GO) test -race -count=1 -timeout 10m $(MODULES:%=./%/...)

## fuzz-smoke: every Fuzz target for FUZZTIME (default 5s) on top of its seed corpus
fuzz-smoke:
	@scripts/fuzz-smoke.sh $(FUZZTIME)

## lint: gofmt, go vet, golangci-lint (pinned), go.mod tidiness (every module), and citations a
## reader of the repository can follow (no section numbers of outside documents, no broken doc links)
lint: fmt vet golangci tidy-check citations

citations:
	@cd pkg && $(GO) run ./internal/cmd/citecheck -root ..

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	@echo "gofmt: clean"

vet:
	$(GO) vet $(MODULES:%=./%/...)
	@echo "go vet: clean"

$(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(BIN)/golangci-lint $@

golangci: $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
	@for m in $(MODULES); do \
		(cd $$m && $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; \
	done

tidy-check:
	@for m in $(MODULES); do \
		(cd $$m && $(GO) mod tidy -diff) || { echo "go.mod/go.sum of $$m are not tidy: run 'go mod tidy' in $$m"; exit 1; }; \
	done
	@echo "go mod tidy: clean"

## demo: the main job on loopback (see README)
demo: build
	$(BIN)/demo --bin-dir $(BIN)

## bench: Go benchmarks of the hot paths (-benchmem) summarised with benchstat, then HTTP throughput of the mock
bench: build $(BIN)/benchstat
	@mkdir -p bench-results
	@for m in $(MODULES); do \
		(cd $$m && $(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCHCOUNT) ./...) ; \
	done | tee bench-results/latest.txt
	$(BIN)/benchstat bench-results/latest.txt
	@scripts/bench-mock-http.sh $(BIN) | tee bench-results/mock-http.txt

## compare: the same workloads against every arm of bench/compare/arms.json, a fresh stack per arm
## (loadgen campaign --compare); SUITES, REPEATS, OUT and EXTRA as above
compare: build
	out='$(OUT)'; out=$${out:-results/compare-$$(date -u +%Y%m%dT%H%M%SZ)}; \
	$(BIN)/loadgen campaign --compare --bin $(BIN) --arms bench/compare/arms.json --suites $(SUITES) \
		--repeats $(REPEATS) --out "$$out" $(EXTRA)

$(BIN)/benchstat:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

## e2e: end-to-end checks on loopback with the built binaries: the demo in
## --check mode, the last-cluster cache-thrash case through the gateway and
## a smoke compare (a fresh stack per arm; every request must succeed and
## every arm record its versions and engine counters)
e2e: build
	$(BIN)/demo --bin-dir $(BIN) --check
	scripts/e2e-last-cluster.sh $(BIN)
	@out=$$(mktemp -d); \
	$(BIN)/loadgen campaign --compare --bin $(BIN) --suites smoke --arms bench/compare/arms.json --out "$$out" \
		--max-errors 0 --progress-interval 60s || { echo "e2e: compare smoke failed (results in $$out)"; exit 1; }; \
	for arm in "$$out"/arms/*/; do for f in versions.txt engines-before.txt engines-after.txt; do \
		[ -s "$$arm$$f" ] || { echo "e2e: $$arm$$f is missing or empty (results in $$out)"; exit 1; }; \
	done; done; \
	rm -rf "$$out"; echo "e2e: compare smoke passed"

clean:
	rm -rf $(BIN) bench-results
