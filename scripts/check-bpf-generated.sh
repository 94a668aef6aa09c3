#!/usr/bin/env bash
# Checks that the committed eBPF objects and Go bindings in bpf/ are what
# their C sources compile to: regenerates them in a scratch copy of bpf/ and
# compares byte for byte. Installs the toolchain when missing. Exit 1 on a
# difference, naming the files; run `make generate` and commit to fix.
# Every program must be generated for each architecture in archs (bpf2go's
# file suffixes: x86 for amd64, arm64), so that hone builds on both.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure-bpf-toolchain.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A scratch module that mirrors the repository, so go:generate runs with the
# same go.mod (and bpf2go version) without touching the work tree.
mkdir -p "$tmp/repo"
cp go.mod go.sum "$tmp/repo/"
cp -r bpf "$tmp/repo/bpf"
rm -f "$tmp"/repo/bpf/*_bpfel.go "$tmp"/repo/bpf/*_bpfel.o
(cd "$tmp/repo" && go generate ./bpf/ >/dev/null)

status=0
archs=(x86 arm64)
for src in bpf/*.bpf.c; do
  name=$(basename "$src" .bpf.c)
  for a in "${archs[@]}"; do
    for ext in go o; do
      f=bpf/${name}_${a}_bpfel.$ext
      if [ ! -e "$tmp/repo/$f" ]; then
        echo "check-bpf-generated: bpf/gen.go does not generate $f (every program is built for ${archs[*]})" >&2
        status=1
      fi
    done
  done
done
for f in bpf/*_bpfel.go bpf/*_bpfel.o; do
  [ -e "$f" ] || continue # no match for the glob
  if ! cmp -s "$f" "$tmp/repo/$f"; then
    echo "check-bpf-generated: $f differs from what its source compiles to" >&2
    status=1
  fi
done
for f in "$tmp"/repo/bpf/*_bpfel.go "$tmp"/repo/bpf/*_bpfel.o; do
  rel=bpf/$(basename "$f")
  if [ -e "$f" ] && [ ! -e "$rel" ]; then
    echo "check-bpf-generated: $rel is generated but not committed" >&2
    status=1
  fi
done
if [ $status -ne 0 ]; then
  echo "check-bpf-generated: run 'make generate' and commit bpf/" >&2
  exit 1
fi
n=$(ls bpf/*_bpfel.o | wc -l)
echo "check-bpf-generated: bpf/'s $n objects (${archs[*]}) and their bindings match their sources ($(clang --version | head -1))"
