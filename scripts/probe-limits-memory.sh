#!/usr/bin/env bash
# probe-limits-memory: the hostile-body memory probe, not run in CI. Starts
# `hone sim serve` (and, with VIA_PROXY=1, `hone proxy` in front of it),
# fires N concurrent POST /v1/completions of SIZE_MIB MiB each, and prints
# each process's peak RSS (VmHWM in /proc/PID/status) against its
# --max-body-memory, and how the clients fared: HTTP statuses, or transport
# errors (ConnectionResetError, BrokenPipeError: a reset while writing).
# The clients write the whole request, then read the answer, as most do
# (Python's http.client, curl without Expect): a server that closes on a
# body it has not read resets them while they write.
#
# Usage: scripts/probe-limits-memory.sh [path/to/hone]
# Env: N (40), SIZE_MIB (30), KIND (word: a text prompt of one long word,
# accepted | words: short words, refused as too long | ids: token ids,
# refused as too long | chat: one message of short words), VIA_PROXY (0),
# BODY_MEMORY (1073741824), TIME_SCALE (0.01), EMU_FLAGS (more flags for
# hone sim serve, e.g. "--body-timeout 1s").
set -euo pipefail
hone=${1:-}
if [[ -z $hone ]]; then
  hone=$(mktemp -d)/hone
  (cd "$(dirname "$0")/.." && CGO_CFLAGS=-Wno-deprecated-declarations go build -o "$hone" ./cmd/hone)
fi
n=${N:-40}
size_mib=${SIZE_MIB:-30}
kind=${KIND:-word}
via_proxy=${VIA_PROXY:-0}
body_memory=${BODY_MEMORY:-1073741824}
scale=${TIME_SCALE:-0.01}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One body of size_mib MiB exactly.
cat >"$work/body.py" <<'PY'
import sys
path, mib, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
size = mib << 20
head, tail = '{"max_tokens":4,"prompt":', '}'
if kind == "chat":
    head, tail = '{"max_tokens":4,"messages":[{"role":"user","content":', '}]}'
room = size - len(head) - len(tail) - 2
if kind == "ids":
    mid = "[" + ",".join(["12345"] * ((room + 1) // 6)) + "]"
else:
    unit = "a" if kind == "word" else " ab"
    mid = '"' + unit * (room // len(unit)) + '"'
body = head + mid + tail
open(path, "w").write(body + " " * (size - len(body)))
PY
python3 "$work/body.py" "$work/body.json" "$size_mib" "$kind"

cat >"$work/clients.py" <<'PY'
import http.client, sys, threading, urllib.parse
url, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = open(path, "rb").read()
host = urllib.parse.urlparse(url).netloc
out, lock = [], threading.Lock()
def one():
    try:
        c = http.client.HTTPConnection(host, timeout=120)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        res = str(r.status)
    except Exception as e:
        res = "transport error: " + type(e).__name__
    with lock:
        out.append(res)
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print("\n".join(out))
PY

emu_port=$(free_port)
"$hone" sim serve --port "$emu_port" --time-scale "$scale" --max-body-memory "$body_memory" \
  ${EMU_FLAGS:-} --log-level error >"$work/emu.log" 2>&1 &
emu_pid=$!
pids+=("$emu_pid")
target="http://127.0.0.1:$emu_port"
if [[ $via_proxy == 1 ]]; then
  proxy_port=$(free_port)
  cat >"$work/proxy.json" <<EOF
{"listen":"127.0.0.1:$proxy_port","mode":"colocated","routing":"round_robin",
 "workers":[{"name":"emu","role":"colocated","url":"$target"}],"max_body_memory":$body_memory}
EOF
  "$hone" proxy --config "$work/proxy.json" >"$work/proxy.log" 2>&1 &
  proxy_pid=$!
  pids+=("$proxy_pid")
  target="http://127.0.0.1:$proxy_port"
fi
for _ in $(seq 100); do
  curl -fsS -o /dev/null "$target/health" 2>/dev/null && break
  sleep 0.1
done

python3 "$work/clients.py" "$target" "$work/body.json" "$n" >"$work/clients.txt"

hwm() { awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$1/status"; }
echo "probe: $n x $size_mib MiB ($kind), --max-body-memory $((body_memory >> 20)) MiB"
echo "emulator peak RSS: $(hwm "$emu_pid")"
if [[ $via_proxy == 1 ]]; then echo "proxy peak RSS: $(hwm "$proxy_pid")"; fi
echo "clients (HTTP status, or the transport error):"
sort "$work/clients.txt" | uniq -c | sed 's/^/  /'
