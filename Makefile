# The README's two commands are `make demo` and `make test`; each sets up
# what it needs first (scripts/ensure-tools).

GO ?= go
PKGS ?= ./...
BENCHTIME ?= 1s

.PHONY: test test-under-load demo bench bench-compare bench-keys pressure bench-rls rls-peer rls-compat verify verify-sim tools vet lint

## test: no tracked file over 2 MiB (scripts/check-size); lint (go vet, staticcheck, deadcode) beside every
## test with the race detector, against private redis-servers the tests start; then the comparison suite's
## own tests (bench/ is a module of its own, to keep the peers out of go.mod); see scripts/test
test: tools
	GO=$(GO) PKGS="$(PKGS)" scripts/test

## test-under-load: `make test` RUNS times (5) while `stress-ng --cpu LOAD` (2) keeps the CPUs busy
## beside it, as on a loaded developer's machine; says how each run went (passed or failed, its time,
## the tests that failed) and how many passed (installs stress-ng first). PKGS narrows it: PKGS=./rules
RUNS ?= 5
LOAD ?= 2
test-under-load: tools
	@scripts/ensure-stress
	RUNS=$(RUNS) LOAD=$(LOAD) PKGS="$(PKGS)" MAKE="$(MAKE)" scripts/test-under-load

## demo: a live demonstration of the limiter
demo: tools
	$(GO) run ./cmd/hybridlimit demo

## bench: the package benchmarks (decision cost, allocations, memory per key)
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-compare: hybridlimit side by side with x/time/rate, redis_rate, ulule/limiter and others, then the
## many-keys workload (Redis CPU and commands per decision under Zipf-drawn keys) (~3 min);
## writes bench/results.md and docs/bench-compare.png. COMPARE_FLAGS passes flags: COMPARE_FLAGS='-keys 1000000 -zipf 0.9'
COMPARE_FLAGS ?=
bench-compare: tools
	cd bench && $(GO) run ./cmd/compare $(COMPARE_FLAGS)

## bench-keys: the many-keys workloads, our Async and Sync side by side on the same open-loop request stream
## (W1: 100,000 keys at Zipf 1.1, 20,000 decisions/s, 10/s burst 10 a key, 4 nodes; per-client keys pinned,
## round-robin and at random: 500,000 keys at Zipf 1.2, 1/s burst 1, 6 nodes; a hot key; sticky bursts; an
## idle fleet): Redis CPU and commands a decision, latency from the scheduled send time, the share answered
## from memory, first requests, both sides against an exact limiter (~4 min); writes bench/keys-results.md.
## COMPARE_FLAGS passes flags, as for bench-compare: COMPARE_FLAGS='-keys-workloads w1,idle -keys-peers'
## (bench/README.md lists them)
bench-keys: tools
	cd bench && $(GO) run ./cmd/compare -keys-only -out keys-results.md $(COMPARE_FLAGS)

## pressure: the targets of Redis work that follows pressure, held strictly, without the race detector:
## a cold key on one node of four, a hot key beside a flood of new keys, memory through a 60 s outage,
## a key over its limit on every node refused without waiting (~2 min)
pressure: tools
	HYBRIDLIMIT_TARGETS=1 HYBRIDLIMIT_OUTAGE=60s $(GO) test -count=1 -v -timeout 10m -run 'TestColdKeyOnOneNode|TestFloodOfNewKeys|TestMemoryThroughAnOutage|TestAKeyOverItsLimitEverywhere' ./hybrid/

## rls-peer: build hybridlimit and envoyproxy/ratelimit (pinned in bench/rlsrun/ratelimit.version, never in go.mod) into bench/.bin (git-ignored)
RATELIMIT_VERSION ?= $(shell cat bench/rlsrun/ratelimit.version)
rls-peer:
	$(GO) build -o bench/.bin/hybridlimit ./cmd/hybridlimit
	@test -x bench/.bin/service_cmd -a -x bench/.bin/config_check_cmd -a -f bench/.bin/ratelimit-$(RATELIMIT_VERSION) || { \
	  GOBIN=$(CURDIR)/bench/.bin $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(RATELIMIT_VERSION) \
	    github.com/envoyproxy/ratelimit/src/config_check_cmd@$(RATELIMIT_VERSION) && touch bench/.bin/ratelimit-$(RATELIMIT_VERSION); }

## rls-compat: the compatibility suite against envoyproxy/ratelimit's own service and hybridlimit rls, side by side (~10 s after the build)
rls-compat: tools rls-peer
	cd bench && $(GO) run ./cmd/rlscompat

## bench-rls: hybridlimit rls and envoyproxy/ratelimit under the same gRPC load, 1 to 4 instances, and Redis killed for 10 s;
## 2 and 4 replicas on a new key at its limit (sticky, round-robin) and bursting at once; replicas at rest;
## writes bench/rls-results.md and docs/bench-rls.png
bench-rls: tools rls-peer
	cd bench && $(GO) run ./cmd/rlsbench

## verify: the long randomized runs. First the simulation (verify-sim: internal/sharesim, on every CPU):
## SIM_COUNT scenarios (10,000) from seed SIM_SEED, every node, clock, round trip and fault of Async mode's
## share protocol simulated from the seed, each checked on both sides (the bound, and compliant traffic
## admitted whole); it prints what the scenarios sent (routings, faults, changes of the fleet), what each
## check judged and left out and why, and the failures by class with their seeds. Then the fleet checker
## (about 40 minutes): VERIFY_COUNT scenarios drawn from seeds VERIFY_SEED on (0: from the clock), each a
## fleet of real limiters against a private redis-server, some killed, paused or slowed. Each prints a
## replay command for each failed seed
SIM_COUNT ?= 10000
SIM_SEED ?= 1
VERIFY_COUNT ?= 240
VERIFY_SEED ?= 0
verify: verify-sim
	$(GO) test -count=1 -timeout 90m -run 'TestVerify$$' -v ./internal/fleetcheck \
		-verify.count=$(VERIFY_COUNT) -seed=$(VERIFY_SEED)

## verify-sim: verify's first part alone, the simulation
verify-sim: tools
	$(GO) test -count=1 -timeout 60m -run 'TestSearch$$' -v ./internal/sharesim -sim.count=$(SIM_COUNT) -seed=$(SIM_SEED)

vet:
	$(GO) vet $(PKGS)

## lint: go vet, staticcheck and deadcode -test on the module and on bench/, failing on any finding;
## staticcheck and deadcode are pinned in tools/go.mod (fetched once, then offline)
lint:
	GO=$(GO) scripts/lint

tools:
	@scripts/ensure-tools
