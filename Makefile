# Every target works on a fresh machine with Go 1.26 and network access to the
# Go module proxy: tools are installed into ./bin by the targets that need them.

SHELL         := /usr/bin/env bash
.SHELLFLAGS   := -eu -o pipefail -c
GO            ?= go
MODULES       := pkg gateway hub pylon
# Tool modules outside go.work (their dependencies, helm and k8s.io among
# them, must not join the services' build list): linted like the others,
# with GOWORK=off.
TOOL_MODULES  := tools/charts tools/obs
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

.PHONY: overload all build test unit config-doc config-doc-check fuzz fuzz-smoke lint fmt vet golangci tidy-check citations demo bench compare e2e clean tools

all: build

## build: every binary into ./bin (without -trimpath, so the build shares its compiled packages
## with go vet, golangci-lint and the e2e tests' own builds; the images use -trimpath)
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(CMDS)

## test: the whole gate CI runs: lint, race tests of every module, fuzz smoke, e2e
test: lint unit fuzz-smoke e2e config-doc-check charts-check dashboards-check ui-e2e

## unit: go test -race in every module, as one go command over the workspace (go.work) so the
## packages of all modules share the cores: a module's slowest test no longer idles the other core
## (184 s as a loop over modules, 123 s as one command, warm, on 2 cores)
unit:
	$(GO) test -race -count=1 -timeout 10m $(MODULES:%=./%/...)

## config-doc: docs/configuration.md from the deployable binaries' --help
config-doc: build
	@cd pkg && $(GO) run ./internal/cmd/configdoc -bin $(BIN) -out $(CURDIR)/docs/configuration.md

## config-doc-check: fail when docs/configuration.md differs from the binaries' flags
config-doc-check: build
	@cd pkg && $(GO) run ./internal/cmd/configdoc -bin $(BIN) -out $(CURDIR)/docs/configuration.md -check

## fuzz-smoke: every Fuzz target for FUZZTIME (default 5s) on top of its seed corpus
fuzz-smoke:
	@scripts/fuzz-smoke.sh $(FUZZTIME)

## fuzz: every Fuzz target (or those matching FUZZ_MATCH) for FUZZ_LONG (default 10m) each, one after
## the other; execs and findings per target go to results/fuzz-<time>.tsv (not in make test)
FUZZ_LONG ?= 10m
fuzz:
	@mkdir -p results
	FUZZ_SUMMARY=$(CURDIR)/results/fuzz-$$(date -u +%Y%m%dT%H%M%SZ).tsv scripts/fuzz-smoke.sh $(FUZZ_LONG)

## lint: gofmt, go vet, golangci-lint (pinned), go.mod tidiness (every module), and citations a
## reader of the repository can follow (no section numbers of outside documents, no broken doc links)
lint: fmt vet golangci tidy-check citations

citations:
	@cd pkg && $(GO) run ./internal/cmd/citecheck -root ..

fmt:
	@out=$$(gofmt -l $(MODULES) $(TOOL_MODULES)); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
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
	@for m in $(TOOL_MODULES); do \
		(cd $$m && GOWORK=off $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; \
	done

tidy-check:
	@for m in $(MODULES); do \
		(cd $$m && $(GO) mod tidy -diff) || { echo "go.mod/go.sum of $$m are not tidy: run 'go mod tidy' in $$m"; exit 1; }; \
	done
	@for m in $(TOOL_MODULES); do \
		(cd $$m && GOWORK=off $(GO) mod tidy -diff) || { echo "go.mod/go.sum of $$m are not tidy: run 'GOWORK=off go mod tidy' in $$m"; exit 1; }; \
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
## --check mode, the last-cluster cache-thrash case through the gateway, the
## scale-out tests (three hubs and three gateways: hubs agree, sessions keep
## their cluster, a hub lost under load loses no unstarted request) and
## a smoke compare (a fresh stack per arm; every request must succeed and
## every arm record its versions and engine counters)
e2e: build
	$(BIN)/demo --bin-dir $(BIN) --check
	scripts/e2e-last-cluster.sh $(BIN)
	cd pkg && $(GO) test -count=1 -timeout 10m ./internal/scaleout -args -bin $(BIN)
	@out=$$(mktemp -d); \
	$(BIN)/loadgen campaign --compare --bin $(BIN) --suites smoke --arms bench/compare/arms.json --out "$$out" \
		--max-errors 0 --progress-interval 60s || { echo "e2e: compare smoke failed (results in $$out)"; exit 1; }; \
	for arm in "$$out"/arms/*/; do for f in versions.txt engines-before.txt engines-after.txt; do \
		[ -s "$$arm$$f" ] || { echo "e2e: $$arm$$f is missing or empty (results in $$out)"; exit 1; }; \
	done; done; \
	rm -rf "$$out"; echo "e2e: compare smoke passed"

clean:
	rm -rf $(BIN) bench-results

# Helm charts (charts/), their check and the container images (deploy/Dockerfile).
# helm and helm-unittest are pinned in tools/charts/go.mod, a module outside
# go.work, built once per version like golangci-lint.
HELM_VERSION          := v3.22.0
HELM_UNITTEST_VERSION := v1.1.2
HELM                  := $(BIN)/helm-$(HELM_VERSION)
HELM_UNITTEST         := $(BIN)/helm-unittest-$(HELM_UNITTEST_VERSION)
IMAGE_REGISTRY        ?= stargate
IMAGE_TAG             ?= $(VERSION)
IMAGES                := gateway hub pylon mock-engine

# chartcheck is ours: always rebuilt (go build's cache makes that cheap).
.PHONY: charts-check charts-doc images $(BIN)/chartcheck

$(HELM): tools/charts/go.mod tools/charts/go.sum
	@mkdir -p $(BIN)
	cd tools/charts && GOWORK=off $(GO) build -o $@ helm.sh/helm/v3/cmd/helm
	@ln -sf $(notdir $@) $(BIN)/helm

$(HELM_UNITTEST): tools/charts/go.mod tools/charts/go.sum
	@mkdir -p $(BIN)
	cd tools/charts && GOWORK=off $(GO) build -o $@ github.com/helm-unittest/helm-unittest/cmd/helm-unittest

$(BIN)/chartcheck:
	@cd tools/charts && GOWORK=off $(GO) build -o $@ ./cmd/chartcheck

## charts-check: every chart linted (--strict), rendered with its defaults and its ci/ values and decoded
## strictly against k8s.io/api, its helm-unittest suites, every flag of gateway, hub, pylon and
## mock-engine settable from its chart, the dev stack rendered phase by phase and whole
## (scripts/dev-stack --dry-run), docs/deploy.md's values tables current (tools/charts/check.sh)
charts-check: build $(HELM) $(HELM_UNITTEST) $(BIN)/chartcheck
	@HELM=$(HELM) HELM_UNITTEST=$(HELM_UNITTEST) CHARTCHECK=$(BIN)/chartcheck BIN=$(BIN) tools/charts/check.sh

## charts-doc: rewrite docs/deploy.md's values tables from the charts' values.yaml comments
charts-doc: $(BIN)/chartcheck
	$(BIN)/chartcheck values-doc -write -doc docs/deploy.md charts/gateway charts/hub charts/pylon charts/mock-engine charts/dev-stack

## images: docker build of every deployable binary (deploy/Dockerfile), tagged $(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG)
images:
	@command -v docker >/dev/null 2>&1 || { echo "images: docker is not installed; build the images where a Docker engine runs (docs/deploy.md#images)"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "images: no Docker engine answers (docker info failed); build the images where one runs (docs/deploy.md#images)"; exit 1; }
	@for b in $(IMAGES); do \
		echo "images: $(IMAGE_REGISTRY)/$$b:$(IMAGE_TAG)"; \
		docker build -f deploy/Dockerfile --build-arg BINARY=$$b --build-arg VERSION=$(VERSION) \
			-t $(IMAGE_REGISTRY)/$$b:$(IMAGE_TAG) . || exit 1; \
	done

# Observability: the dashboards and rules of charts/observability, generated and checked by
# tools/obs (a module outside go.work, built with GOWORK=off); docs/operations.md explains them.
.PHONY: dashboards-check observe-e2e soak faults ui-e2e bench-path

## dashboards-check: promtool checks and unit-tests the chart's rules and parses every dashboard
## expression; tools/obs is linted (golangci-lint, go vet among its linters) and tested (the
## dashboards' JSON is what its Go definitions build, every alert has a runbook and a firing and a
## silent test, every recording rule a test); then a demo stack with a short workload and an
## overload burst: every metric a panel or rule names must be exported, and docs/metrics.md must
## document exactly what the binaries export
dashboards-check: build $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
	@scripts/need-prometheus
	promtool check rules charts/observability/rules/*.yaml
	promtool test rules charts/observability/rules/tests/*.yaml
	cd tools/obs && GOWORK=off $(GO) mod tidy -diff && \
		GOWORK=off $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION) run --config $(CURDIR)/.golangci.yml ./... && \
		GOWORK=off $(GO) test -count=1 ./... && GOWORK=off $(GO) build -o $(BIN)/obs ./cmd/obs
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		$(BIN)/obs exprs -out "$$tmp/exprs.yaml" && promtool check rules "$$tmp/exprs.yaml"
	$(BIN)/obs live -bin $(BIN)

## faults: the fault-injection suite (pkg/internal/faults): real processes on loopback, a pylon killed
## mid-load, engines failing, hanging and dropping streams, a hub restarted, gateways and their Olric
## nodes lost, poisoned engine statistics; every scenario asserts counts against a stated bound
## (docs/reliability.md; about 80 s on 2 cores)
faults: build
	cd pkg && $(GO) test -count=1 -timeout 10m ./internal/faults -args -bin $(BIN)

## soak: 30 minutes (SOAK_DURATION) of the mixed workload through the whole stack; every process's
## memory and goroutines must stay flat after a 5-minute warm-up and every request succeed; writes
## a report.md into results/soak-<time> (not in make test: docs/reliability.md has the last report)
SOAK_DURATION ?= 30m
soak: build
	cd pkg && $(GO) run ./internal/cmd/soak -bin $(BIN) -duration $(SOAK_DURATION) -out $(CURDIR)/results/soak-$$(date -u +%Y%m%dT%H%M%SZ) $(SOAK_FLAGS)

## overload: the whole stack past its capacity (OVERLOAD_FACTOR, default 2x the measured capacity) for
## OVERLOAD_DURATION per arm, once with the hub's defaults (waiting room, returning sessions first) and once
## without them; new vs returning sessions' success and TTFT, refusals, peak goroutines and memory go to
## a report.md in results/overload-<time> (not in make test: docs/reliability/overload.md has the last reports)
OVERLOAD_DURATION ?= 90s
OVERLOAD_FACTOR ?= 2
overload: build
	cd pkg && $(GO) run ./internal/cmd/overload -bin $(BIN) -duration $(OVERLOAD_DURATION) -factor $(OVERLOAD_FACTOR) -out $(CURDIR)/results/overload-$$(date -u +%Y%m%dT%H%M%SZ) $(OVERLOAD_FLAGS)

## ui-e2e: a real-browser test of the hub's live routing page (tools/obs/cmd/uie2e): a demo stack with a workload
## whose sessions escape and follow, then headless Chromium (Debian's chromium, installed by
## scripts/need-chromium when /usr/bin/chromium is missing; never downloaded) loads /ui on the hub's admin
## listener; every cluster of /debug/state, an escaped-and-followed session and the content-prefix panel must
## show, with no console error; its packages' own tests run first; screenshots, the demo's output and
## Chromium's log go to results/ui-e2e-<UTC time> (part of make test: about 30 s, 11 s more to install Chromium)
ui-e2e: build
	@scripts/need-chromium
	cd tools/obs && GOWORK=off $(GO) test -count=1 ./cmd/uie2e/ ./internal/pagecheck/ ./internal/routeview/ ./internal/demostack/ && \
		GOWORK=off $(GO) build -o $(BIN)/uie2e ./cmd/uie2e
	$(BIN)/uie2e -bin $(BIN) -out $(CURDIR)/results/ui-e2e-$$(date -u +%Y%m%dT%H%M%SZ)

## bench-path: the request path tier by tier against relay-floor hops (bin/baseline-proxy): fresh processes
## per round, paths in a rotated order, 1/32/256 KiB x 1/32 clients x JSON/SSE; CPU, syscalls and switches per
## request from /proc, added p50/p99, the tiers' Go benchmarks (allocs/op) and pprof tops; a report.md in
## results/bench-path-<time> (about 9 minutes on 2 cores; docs/performance/path.md keeps the passes)
BENCH_PATH_FLAGS ?= -profile
bench-path: build
	cd pkg && $(GO) run ./internal/cmd/benchpath -bin $(BIN) -out $(CURDIR)/results/bench-path-$$(date -u +%Y%m%dT%H%M%SZ) $(BENCH_PATH_FLAGS)

## observe-e2e: a real Prometheus (Debian's, on loopback) scrapes the demo stack under about a minute
## of load with the chart's rules loaded; every panel query and recording rule must return data;
## writes docs/operations/observe-e2e.md and one picture per dashboard (scripts/observe-e2e)
observe-e2e: build
	VERSION=$(VERSION) scripts/observe-e2e $(BIN)
