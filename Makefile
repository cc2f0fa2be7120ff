# The README's two commands are `make demo` and `make test`; each sets up
# what it needs first (scripts/ensure-tools).

GO ?= go
PKGS ?= ./...
BENCHTIME ?= 1s

.PHONY: test test-under-load demo bench bench-compare tools vet

## test: vet, then every test with the race detector, against private redis-servers the tests start;
## then the comparison suite's own tests (bench/ is a module of its own, to keep the peers out of go.mod)
test: tools vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

## test-under-load: `make test` RUNS times (5) while `stress-ng --cpu LOAD` (2) keeps the CPUs busy
## beside it, as on a loaded developer's machine; says how many runs passed (installs stress-ng first)
RUNS ?= 5
LOAD ?= 2
test-under-load: tools
	@scripts/ensure-stress
	RUNS=$(RUNS) LOAD=$(LOAD) MAKE="$(MAKE)" scripts/test-under-load

## demo: a live demonstration of the limiter
demo: tools
	$(GO) run ./cmd/hybridlimit demo

## bench: the package benchmarks (decision cost, allocations, memory per key)
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-compare: hybridlimit side by side with x/time/rate, redis_rate, ulule/limiter and others (~2 min);
## writes bench/results.md and docs/bench-compare.png
bench-compare: tools
	cd bench && $(GO) run ./cmd/compare

vet:
	$(GO) vet $(PKGS)

tools:
	@scripts/ensure-tools
