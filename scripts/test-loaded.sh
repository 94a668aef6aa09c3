#!/usr/bin/env bash
# test-loaded: run `make test` while a CPU hog spins on every core, so the
# suite is tried the way a busy CI host or a shared workstation runs it. Each
# hog is a busy loop at normal priority (the tests compete with it as equals).
# Usage: scripts/test-loaded.sh [make target, default: test]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-test}
cores=$(nproc)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for _ in $(seq "$cores"); do
  ( while :; do :; done ) &
  pids+=("$!")
done
echo "test-loaded: ${#pids[@]} CPU hogs running (one per core); running make $target"
start=$(date +%s)
make "$target"
echo "test-loaded: make $target passed under load in $(( $(date +%s) - start ))s"
