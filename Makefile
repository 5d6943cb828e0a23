# The README's commands. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test test-long check build lib wheel test-python bench fuzz-short results results-nodes results-pollux clean

# Every test: formatting, vet, the whole Go suite, then the Python bindings'
# suite (which builds libshockwave.so and the shockwave binary first). The Go
# suite runs as `go test -json` through internal/testsummary, which prints
# what a plain `go test ./...` prints plus a line counting the tests skipped
# for lack of ../shared data; the exit status is go test's.
test: check
	@{ $(GO) test -json ./...; echo $$? > .go-test-status; } | $(GO) run ./internal/testsummary; \
	status=$$(cat .go-test-status); rm -f .go-test-status; exit $$status
	$(MAKE) test-python

# The scale claims (SHOCKWAVE_LONG): the four experiments' margins over
# Gavel and Themis in profile and online mode, the binding fairness rule's
# worst ρ, calibrated bands and the noisy workload's targets
# (docs/forecasting.md), then Pollux's five-seed fidelity and Shockwave's
# targets on Pollux's six workloads (docs/pollux.md). Needs ../shared/data;
# about 3 + 8 minutes on 2 idle cores.
test-long:
	SHOCKWAVE_LONG=1 $(GO) test ./sim -count=1 -timeout 25m -run 'TestShockwave_|TestOnline_|TestForecast_|TestNoisy_|TestFairness_'
	SHOCKWAVE_LONG=1 $(GO) test ./sim/pollux -count=1 -timeout 25m -run 'TestShockwave_TargetsOnPolluxWorkloads|TestPollux_MatchesPublished'

check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

build:
	$(GO) build -o bin/shockwave ./cmd/shockwave

# libshockwave.so (and the generated libshockwave.h, internal) for the Python
# package and other C callers; the interface is bindings/shockwave.h.
lib:
	$(GO) build -buildmode=c-shared -o bindings/libshockwave.so ./bindings

# The Python package as a platform wheel with libshockwave.so inside:
# dist/shockwave-<version>-py3-none-<platform>.whl, built offline by the
# package's own stdlib-only backend (bindings/python/shockwave_build.py).
wheel: lib
	$(PYTHON) bindings/python/shockwave_build.py --library bindings/libshockwave.so --out dist

# The Python package's tests (stdlib unittest) against a real coordinator,
# the PyTorch example's end-to-end run included (skipped without torch).
# Debian's interpreter, where python3-torch installs, when it exists.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
test-python: lib build
	SHOCKWAVE_BIN=$(CURDIR)/bin/shockwave $(PYTHON) -m unittest discover -s bindings/python/tests -t bindings/python -v

# Benchmarks quoted in the README (see there for each one's command).
bench:
	$(GO) test -run XXX -bench . -benchmem ./...

# Fuzz every decoder briefly (FUZZTIME each). `make test` already runs the
# seed corpora; this explores beyond them.
FUZZTIME ?= 10s
FUZZ_PKGS ?= ./protocol ./coordinator
fuzz-short:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) ./.ci/fuzz-short $(FUZZ_PKGS)

clean:
	rm -rf bin dist bindings/libshockwave.so bindings/libshockwave.h

# The four experiments of the README's results section: every policy, with
# Shockwave in profile mode like the original, then Shockwave online with its
# forecast report. Needs ../shared/data (the original traces and configs);
# writes results/*.txt, results/*-forecasts.json and charts.
DATA ?= ../shared/data
results: build results-pollux
	@mkdir -p results
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/120jobs-32gpus.trace --throughputs tacc --gpus 32 --config $(DATA)/shockwave-config-tacc_32gpus.json --plot results/32gpus > results/32gpus.txt
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/220jobs-64gpus.trace --throughputs wisr --gpus 64 --config $(DATA)/shockwave-config-scale_64gpus.json --plot results/64gpus > results/64gpus.txt
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/460jobs-128gpus.trace --throughputs wisr --gpus 128 --config $(DATA)/shockwave-config-scale_128gpus.json --plot results/128gpus > results/128gpus.txt
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/900jobs-256gpus.trace --throughputs wisr --gpus 256 --config $(DATA)/shockwave-config-scale_256gpus.json --plot results/256gpus > results/256gpus.txt
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/120jobs-32gpus.trace --throughputs tacc --gpus 32 --config $(DATA)/shockwave-config-tacc_32gpus.json --forecast-report results/32gpus-forecasts.json > results/32gpus-online.txt
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/220jobs-64gpus.trace --throughputs wisr --gpus 64 --config $(DATA)/shockwave-config-scale_64gpus.json --forecast-report results/64gpus-forecasts.json > results/64gpus-online.txt
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/460jobs-128gpus.trace --throughputs wisr --gpus 128 --config $(DATA)/shockwave-config-scale_128gpus.json --forecast-report results/128gpus-forecasts.json > results/128gpus-online.txt
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/900jobs-256gpus.trace --throughputs wisr --gpus 256 --config $(DATA)/shockwave-config-scale_256gpus.json --forecast-report results/256gpus-forecasts.json > results/256gpus-online.txt

# The same four experiments (profile mode, every policy; then Shockwave
# online) on nodes of 8 and of 4 GPUs (docs/cluster.md): writes
# results/<G>gpus-<K>pernode.txt and results/<G>gpus-<K>pernode-online.txt.
results-nodes: build
	@mkdir -p results
	for k in 8 4; do \
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/120jobs-32gpus.trace --throughputs tacc --nodes $$((32/k))x$$k --config $(DATA)/shockwave-config-tacc_32gpus.json > results/32gpus-$${k}pernode.txt && \
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/220jobs-64gpus.trace --throughputs wisr --nodes $$((64/k))x$$k --config $(DATA)/shockwave-config-scale_64gpus.json > results/64gpus-$${k}pernode.txt && \
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/460jobs-128gpus.trace --throughputs wisr --nodes $$((128/k))x$$k --config $(DATA)/shockwave-config-scale_128gpus.json > results/128gpus-$${k}pernode.txt && \
	bin/shockwave simulate --info profile --trace $(DATA)/shockwave-traces/900jobs-256gpus.trace --throughputs wisr --nodes $$((256/k))x$$k --config $(DATA)/shockwave-config-scale_256gpus.json > results/256gpus-$${k}pernode.txt && \
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/120jobs-32gpus.trace --throughputs tacc --nodes $$((32/k))x$$k --config $(DATA)/shockwave-config-tacc_32gpus.json > results/32gpus-$${k}pernode-online.txt && \
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/220jobs-64gpus.trace --throughputs wisr --nodes $$((64/k))x$$k --config $(DATA)/shockwave-config-scale_64gpus.json > results/64gpus-$${k}pernode-online.txt && \
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/460jobs-128gpus.trace --throughputs wisr --nodes $$((128/k))x$$k --config $(DATA)/shockwave-config-scale_128gpus.json > results/128gpus-$${k}pernode-online.txt && \
	bin/shockwave simulate --info online --policy shockwave --trace $(DATA)/shockwave-traces/900jobs-256gpus.trace --throughputs wisr --nodes $$((256/k))x$$k --config $(DATA)/shockwave-config-scale_256gpus.json > results/256gpus-$${k}pernode-online.txt || exit 1; \
	done

# The Pollux comparison (docs/pollux.md): the load-1.0 workloads 1-6 of the
# Pollux artifact on 16 nodes of 4 GPUs, every policy, with the published
# average JCTs beside ours. Needs $(DATA)/pollux; writes results/pollux-*.txt.
POLLUX_SEED ?= 1
results-pollux: build
	@mkdir -p results
	@for k in 1 2 3 4 5 6; do \
	  bin/shockwave simulate --trace $(DATA)/pollux/workloads/workload-$$k.csv --seed $(POLLUX_SEED) \
	    --published $(DATA)/pollux/published-avg-jct.json > results/pollux-workload-$$k.txt || exit 1; \
	  cat results/pollux-workload-$$k.txt; \
	done
