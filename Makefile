# The README's commands. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test check build bench clean

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

clean:
	rm -rf bin
