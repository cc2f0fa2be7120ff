# The README's two commands are `make demo` and `make test`; each sets up
# what it needs first (scripts/ensure-tools).

GO ?= go
PKGS ?= ./...
BENCHTIME ?= 1s

.PHONY: test demo bench tools vet

## test: vet, then every test with the race detector, against private redis-servers the tests start
test: tools vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

## demo: a live demonstration of the limiter
demo: tools
	$(GO) run ./cmd/hybridlimit demo

## bench: the package benchmarks (decision cost, allocations, memory per key)
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

vet:
	$(GO) vet $(PKGS)

tools:
	@scripts/ensure-tools
