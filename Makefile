# hone — build, test, demo. Everything a fresh Debian/Ubuntu machine with Go
# needs is installed by these targets (see README.md).
SHELL := /bin/bash
GO ?= go
BIN := bin/hone
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
export CGO_CFLAGS ?= -Wno-deprecated-declarations

.PHONY: all build test test-short lint demo deps-test clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/hone

# deps-test installs what the test suite needs and is not part of Go:
# python3 (>= 3.10) for the CPU exercise's submission bridge and driver.
deps-test:
	@./scripts/ensure-deps.sh

test: deps-test build
	HONE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# demo: the CPU exercise end to end on the simulator — the reconstructed
# driver calls exercise/submission.py, which relays to hone's policy.
demo: deps-test build
	HONE_BIN=$(CURDIR)/$(BIN) python3 exercise/driver.py --submission exercise/submission.py --output demo-results.json --tables

clean:
	rm -rf bin demo-results.json

# generate regenerates bpf/'s eBPF objects and Go bindings from the C sources
# (committed, so building needs no clang); it installs clang, llvm,
# libbpf-dev and bpftool when missing. vmlinux.h is committed too: refresh it
# with `bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h`.
.PHONY: generate
generate:
	@./scripts/ensure-bpf-toolchain.sh
	$(GO) generate ./bpf/
