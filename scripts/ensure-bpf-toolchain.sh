#!/usr/bin/env bash
# Installs what regenerating hone's eBPF objects needs (clang, llvm-strip,
# libbpf headers, bpftool), on Debian/Ubuntu, only when missing. Building
# hone does not need them: the generated objects are committed.
set -euo pipefail

need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v llvm-strip >/dev/null 2>&1 || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v bpftool >/dev/null 2>&1 || need+=(bpftool)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-bpf-toolchain: missing ${need[*]} and no apt-get to install them; install them by hand" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "ensure-bpf-toolchain: installing ${need[*]}" >&2
$sudo apt-get update -qq
# bpftool is its own package on Debian 12+/Ubuntu 24.04+; older Ubuntu ships
# it in linux-tools-common.
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null; then
  rest=()
  for p in "${need[@]}"; do [ "$p" = bpftool ] || rest+=("$p"); done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${rest[@]}" linux-tools-common >/dev/null
fi
