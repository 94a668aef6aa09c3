#!/usr/bin/env bash
# Installs the non-Go tools hone's tests and demo need, on Debian/Ubuntu,
# only when they are missing. Safe to run repeatedly.
set -euo pipefail

need=()
py_ok() { command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; }
py_ok || need+=(python3)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-deps: missing ${need[*]} and no apt-get to install them; install them by hand" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "ensure-deps: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
