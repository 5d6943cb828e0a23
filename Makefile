# The README's commands. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test check build bench fuzz-short clean

# Every test: formatting, vet, and the whole suite.
test: check
	$(GO) test ./...

check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

build:
	$(GO) build -o bin/shockwave ./cmd/shockwave

# Benchmarks quoted in the README (see there for each one's command).
bench:
	$(GO) test -run XXX -bench . -benchmem ./...

# Fuzz every decoder briefly (FUZZTIME each). `make test` already runs the
# seed corpora; this explores beyond them.
FUZZTIME ?= 10s
FUZZ_PKGS ?= ./protocol ./coordinator
fuzz-short:
	@for pkg in $(FUZZ_PKGS); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test $$pkg -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

clean:
	rm -rf bin
