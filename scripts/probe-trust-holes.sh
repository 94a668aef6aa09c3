#!/usr/bin/env bash
# probe-trust-holes.sh: the held-back probes of issue 44 ("Trust holes found
# by held-back probes"), one function per finding, each printing
#   finding N: held|BROKEN — the figure measured
# and the script exits 1 if any finding is broken. It needs a built hone
# (HONE, default bin/hone) and python3; it starts its own servers on
# loopback and cleans up after itself. About 1–2 minutes and up to ~2 GiB
# of memory (the emulator body probe): not part of make test; run it by hand
# or with `make probe`.
#
#   HONE=bin/hone scripts/probe-trust-holes.sh [finding...]   # e.g. 1 3 7
set -uo pipefail
HONE=${HONE:-bin/hone}
HONE=$(readlink -f "$HONE")
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
cd "$WORK" || exit 1
broken=0
report() { # report N held|BROKEN text
	printf 'finding %s: %s — %s\n' "$1" "$2" "$3"
	[ "$2" = held ] || broken=1
}
# peak KB and seconds of a command: "rc seconds peakKB"
measure() { /usr/bin/time -f '%x %e %M' -o "$WORK/.time" "$@" >"$WORK/.out" 2>"$WORK/.err"; cat "$WORK/.time" | tail -1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# predicted makes pred.json: a record of hone's model (virtual time, 0.3 s).
predicted() {
	[ -f pred.json ] || "$HONE" predict "$REPO/examples/emulator-l4-colocated.yaml" --qps 4,8 --out pred.json >/dev/null 2>&1
}

# failing_server starts an OpenAI-style server on loopback whose every
# completion fails (HTTP 500); it sets PORT.
failing_server() {
	[ -n "${PORT:-}" ] && return
	PORT=$(free_port)
	python3 - "$PORT" <<'PY' &
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body):
        b = json.dumps(body).encode()
        self.send_response(code); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path == "/v1/models": self.reply(200, {"data": [{"id": "m"}]})
        else: self.reply(404, {})
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0)); body = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/tokenize": self.reply(200, {"tokens": list(range(len(str(body.get("prompt", "")).split())))})
        else: self.reply(500, {"error": "boom"})
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
	PIDS+=($!)
	wait_port "$PORT"
}

# wait_port waits (up to 20 s: a busy host) until something listens on PORT.
wait_port() {
	python3 -c '
import socket, sys, time
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.1).close(); sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)' "$1"
}

# edit FILE.json OUT.json PYTHON-EXPR-ON-LEVEL: sets a field of run 0, level 0.
edit_level() {
	python3 - "$1" "$2" "$3" <<'PY'
import json, sys
src, dst, expr = sys.argv[1:]
r = json.load(open(src))
l = r["runs"][0]["levels"][0]
exec(expr)
json.dump(r, open(dst, "w"))
PY
}

# 1. The gate passed impossible latencies.
finding1() {
	predicted
	"$HONE" gate baseline create pred.json --out base.json >/dev/null 2>&1 || { report 1 BROKEN "no baseline from a predicted record"; return; }
	local fails=() figures=()
	for c in 'l["p99_tpot_ms"]=0' 'l["p99_tpot_ms"]=-1' 'l["p50_tpot_ms"]=-1' 'l["p99_ttft_ms"]=-50'; do
		edit_level pred.json cand.json "$c"
		"$HONE" gate check cand.json --baseline base.json >/dev/null 2>&1
		rc=$?
		figures+=("$c: exit $rc")
		[ $rc = 2 ] || fails+=("$c exit $rc (want 2)")
	done
	edit_level pred.json cand.json 'l["p99_ttft_ms"]=0.05'
	"$HONE" gate check cand.json --baseline base.json -o json >check.json 2>/dev/null
	v=$(python3 -c 'import json; r=json.load(open("check.json")); print([x["verdict"] for x in r["results"] if x["series"]["metric"]=="p99_ttft_ms" and x["series"]["offered_qps"]==4][0])' 2>/dev/null)
	figures+=("p99 TTFT 0.05 ms: $v")
	[ "$v" = suspect ] || fails+=("p99 TTFT 0.05 ms is $v (want suspect)")
	edit_level pred.json negbase.json 'l["p99_ttft_ms"]=-5'
	"$HONE" gate baseline create negbase.json --out nb.json >/dev/null 2>&1
	rc=$?
	figures+=("baseline create with p99 TTFT -5: exit $rc")
	[ $rc = 2 ] || fails+=("baseline create accepted p99 TTFT -5 (exit $rc)")
	if [ ${#fails[@]} = 0 ]; then report 1 held "$(IFS=';'; echo "${figures[*]}")"; else report 1 BROKEN "$(IFS=';'; echo "${fails[*]}")"; fi
}

# 2. Replay exited 0 when every request failed.
finding2() {
	failing_server
	"$HONE" replay --endpoint "http://127.0.0.1:$PORT" --model m --qps 4 --requests 12 --input-tokens 256 --output-tokens 4 --out r2.json >r2.out 2>r2.err
	rc=$?
	if [ $rc = 1 ] && grep -q FAILED r2.out && ! grep -q "every level valid" r2.out; then
		report 2 held "every request failed: exit $rc, '$(grep -m1 FAILED r2.out)'"
	else
		report 2 BROKEN "every request failed: exit $rc, verdict '$(grep -m1 verdict r2.out)' $(tail -c 200 r2.err)"
	fi
}

# 3. A gzip bomb given to gate check.
finding3() {
	head -c 2147483648 /dev/zero | gzip -1 >bomb.json.gz
	predicted
	[ -f base.json ] || "$HONE" gate baseline create pred.json --out base.json >/dev/null 2>&1
	read -r rc secs kb < <(measure "$HONE" gate check bomb.json.gz --baseline base.json)
	if [ "$rc" = 2 ] && [ "$kb" -lt 524288 ] && [ "${secs%.*}" -lt 10 ]; then
		report 3 held "$(du -k bomb.json.gz | cut -f1) KB .gz inflating to 2 GiB: exit $rc in ${secs} s, peak $((kb / 1024)) MB"
	else
		report 3 BROKEN "exit $rc in ${secs} s, peak $((kb / 1024)) MB (want exit 2, < 10 s, < 512 MB)"
	fi
}

# 4. The proxy's timeline store kept client-chosen header values: 3,000
# requests through hone proxy, each with a 60 KB X-Request-Id; the proxy's
# resident memory growth per request.
finding4() {
	local emu_port proxy_port; emu_port=$(free_port); proxy_port=$(free_port)
	"$HONE" sim serve --port "$emu_port" --time-scale 0.01 --log-level error >e4.log 2>&1 &
	PIDS+=($!)
	cat >p4.json <<JSON
{"listen":"127.0.0.1:$proxy_port","mode":"colocated","routing":"round_robin",
 "workers":[{"name":"emu","role":"colocated","url":"http://127.0.0.1:$emu_port"}]}
JSON
	"$HONE" proxy --config p4.json >p4.log 2>&1 &
	local ppid=$!
	PIDS+=($ppid)
	wait_port "$emu_port" && wait_port "$proxy_port" || { report 4 BROKEN "servers did not start: $(tail -c 200 p4.log)"; return; }
	rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
	# send N PREFIX: N requests over 8 connections, each with a 60 KB id.
	send() {
		python3 - "$proxy_port" "$1" "$2" >/dev/null <<'PY'
import http.client, json, sys, threading
port, n, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def run(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(k):
        c.request("POST", "/v1/completions", json.dumps({"model": "m", "prompt": "hi", "max_tokens": 1}),
                  {"Content-Type": "application/json", "X-Request-Id": "%s%d-%d-" % (prefix, threading.get_ident(), i) + "x" * 60000})
        c.getresponse().read()
ts = [threading.Thread(target=run, args=(n // 8,)) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
PY
	}
	send 200 warm # pools, first GC cycles
	local before; before=$(rss "$ppid")
	send 3000 q
	local after; after=$(rss "$ppid")
	local per=$(( (after - before) * 1024 / 3000 ))
	# ~60 kB a request kept means the header is stored whole; bounded
	# entries cost about a kilobyte.
	if [ "$per" -lt 10000 ]; then
		report 4 held "proxy RSS ${before} -> ${after} kB over 3,000 requests with a 60 KB X-Request-Id: ~${per} B a request"
	else
		report 4 BROKEN "proxy RSS ${before} -> ${after} kB over 3,000 requests with a 60 KB X-Request-Id: ~${per} B a request"
	fi
}

# 5. The emulator held ~3x its in-flight body cap: 40 concurrent 30 MiB
# posts against a 1 GiB cap (scripts/probe-limits-memory.sh), directly and
# through the proxy. Bound: the cap + 20%.
finding5() {
	local out peak ppeak
	N=40 SIZE_MIB=30 KIND=word "$REPO/scripts/probe-limits-memory.sh" "$HONE" >f5.out 2>&1
	peak=$(sed -n 's/^emulator peak RSS: \([0-9]*\) MiB/\1/p' f5.out)
	out=$(N=40 SIZE_MIB=30 KIND=word VIA_PROXY=1 "$REPO/scripts/probe-limits-memory.sh" "$HONE" 2>&1)
	ppeak=$(sed -n 's/^proxy peak RSS: \([0-9]*\) MiB/\1/p' <<<"$out")
	local epeak; epeak=$(sed -n 's/^emulator peak RSS: \([0-9]*\) MiB/\1/p' <<<"$out")
	local lim=$(( 1024 * 12 / 10 ))
	if [ -n "$peak" ] && [ "$peak" -le $lim ] && [ -n "$ppeak" ] && [ "$ppeak" -le $lim ] && [ "$epeak" -le $lim ]; then
		report 5 held "40 x 30 MiB, 1 GiB cap: emulator peak ${peak} MiB; through the proxy: proxy ${ppeak} MiB, emulator ${epeak} MiB (bound ${lim})"
	else
		report 5 BROKEN "40 x 30 MiB, 1 GiB cap: emulator peak ${peak:-?} MiB; through the proxy: proxy ${ppeak:-?} MiB, emulator ${epeak:-?} MiB (bound ${lim})"
	fi
}

# 6. The daemon's API starved by local users; ?view= echoed raw; --out
# /dev/null; a lowercase bearer scheme. Needs root (the daemon loads BPF).
finding6() {
	if [ "$(id -u)" != 0 ]; then echo "finding 6: not probed (needs root: the daemon loads BPF)"; return; fi
	sleep 600 & local target=$!
	PIDS+=($target)
	local port; port=$(free_port)
	# A copy of /dev/null's device node: the old daemon chmodded its --out
	# to 0600 and truncated it, which must not happen to the real one.
	local null="$WORK/null"; mknod -m 666 "$null" c 1 3
	local tok="$WORK/token"; head -c 24 /dev/urandom | base64 | tr -d '\n/+=' >"$tok"; chmod 600 "$tok"
	(ulimit -n 4096; exec "$HONE" daemon --pid "$target" --listen "127.0.0.1:$port" --token-file "$tok" --out "$null" >d6.log 2>&1) &
	local dpid=$!
	PIDS+=($dpid)
	wait_port "$port" || { report 6 BROKEN "the daemon did not listen: $(tail -c 300 d6.log)"; return; }
	local fails=() figures=()
	# 6a: 6,000 clients that announce a body and never send it, then a GET.
	# A body under 256 KiB: net/http reads (and waits for) the rest of
	# such a body after the handler, where a bigger one is just closed.
	(ulimit -n 20000 2>/dev/null; exec python3 - "$port" "$tok" "$dpid") >d6a.txt <<'PY'
import os, socket, sys, time, urllib.request
port, tok, dpid = int(sys.argv[1]), open(sys.argv[2]).read().strip(), sys.argv[3]
held = []
for i in range(6000):
    try:
        s = socket.create_connection(("127.0.0.1", port), 2)
        s.sendall(b"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok.encode() + b"\r\nContent-Length: 200000\r\n\r\nab")
        held.append(s)
    except OSError:
        break
time.sleep(2)
fds = len(os.listdir("/proc/%s/fd" % dpid))
t = time.time()
try:
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer " + tok}), timeout=10)
    print(r.status, round((time.time() - t) * 1000), len(held), fds)
except Exception as e:
    print(type(e).__name__, round((time.time() - t) * 1000), len(held), fds)
PY
	read -r status ms held fds <d6a.txt
	figures+=("GET /metrics beside $held stalled bodies: $status in ${ms} ms, daemon fds $fds")
	[ "$status" = 200 ] || fails+=("GET /metrics beside $held stalled bodies: $status after ${ms} ms (fds $fds)")
	# 6b: ?view= with a NUL byte and an unknown view.
	code=$(curl -s -o /dev/null -D d6b.h -w '%{http_code}' -H "Authorization: Bearer $(cat "$tok")" "http://127.0.0.1:$port/v1/profile?view=no%00pe")
	figures+=("view=no%00pe: $code")
	{ [ "$code" = 400 ] && ! grep -qi "no.pe" d6b.h; } || fails+=("view=no%00pe: $code, header: $(grep -i disposition d6b.h)")
	# 6d: a lowercase bearer scheme.
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: bearer $(cat "$tok")" "http://127.0.0.1:$port/v1/snapshot")
	figures+=("lowercase bearer: $code")
	[ "$code" = 200 ] || fails+=("lowercase bearer: $code")
	# 6c: --out /dev/null, written at the end: still a character device after.
	kill -TERM "$dpid"; wait "$dpid" 2>/dev/null; local rc=$?
	figures+=("--out /dev/null (a copy of its node): exit $rc, $(stat -c '%F %a' "$null")")
	{ [ "$rc" = 0 ] && [ "$(stat -c '%F %a' "$null")" = "character special file 666" ]; } ||
		fails+=("--out /dev/null (a copy of its node): exit $rc, now $(stat -c '%F %a' "$null"): $(tail -c 200 d6.log)")
	if [ ${#fails[@]} = 0 ]; then report 6 held "$(IFS=';'; echo "${figures[*]}")"; else report 6 BROKEN "$(IFS=';'; echo "${fails[*]}") [measured: $(IFS=';'; echo "${figures[*]}")]"; fi
}

# 7. Replay checked --out only after the run.
finding7() {
	failing_server
	mkdir -p ro && chmod 555 ro
	local target=ro/run.json
	[ "$(id -u)" = 0 ] && target=/proc/run.json # root writes into a 0555 directory
	for out in missing/run.json "$target"; do
		start=$(date +%s.%N)
		"$HONE" replay --endpoint "http://127.0.0.1:$PORT" --model m --qps 4 --requests 12 --input-tokens 256 --output-tokens 4 --out "$out" >/dev/null 2>r7.err
		rc=$?
		secs=$(python3 -c "import time; print(round(time.time()-$start, 2))")
		if [ $rc = 2 ] && grep -q -- "--out" r7.err; then
			report 7 held "--out $out: exit 2 before any request (${secs} s): $(head -c 120 r7.err)"
		else
			report 7 BROKEN "--out $out: exit $rc after ${secs} s: $(head -c 160 r7.err)"
		fi
	done
}

# 8. Clients posting large bodies at once saw a connection reset instead of
# the documented 503: 16 clients post 30 MiB each at once to an emulator
# whose in-flight budget holds a few of them and whose --body-timeout (1 s)
# runs out for the others while they wait for room.
finding8() {
	N=16 SIZE_MIB=30 KIND=word BODY_MEMORY=134217728 EMU_FLAGS="--body-timeout 1s" \
		"$REPO/scripts/probe-limits-memory.sh" "$HONE" >f8.out 2>&1
	local resets summary
	resets=$(grep -c "transport error: " f8.out)
	summary=$(sed -n '/^clients/,$p' f8.out | tail -n +2 | tr -s ' ' | paste -sd, -)
	if [ "$resets" = 0 ] && grep -q " 503$" f8.out; then
		report 8 held "16 x 30 MiB, 128 MiB budget, 1 s body timeout:${summary}"
	else
		report 8 BROKEN "16 x 30 MiB, 128 MiB budget, 1 s body timeout:${summary} (want 503s and no transport error)"
	fi
}

want=("$@")
[ ${#want[@]} = 0 ] && want=(1 2 3 4 5 6 7 8)
for n in "${want[@]}"; do
	if declare -F "finding$n" >/dev/null; then "finding$n"; else echo "finding $n: not probed by this script"; fi
done
exit $broken
