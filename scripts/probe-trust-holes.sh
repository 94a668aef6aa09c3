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

want=("$@")
[ ${#want[@]} = 0 ] && want=(1 2 3 4 5 6 7 8)
for n in "${want[@]}"; do
	if declare -F "finding$n" >/dev/null; then "finding$n"; else echo "finding $n: not probed by this script"; fi
done
exit $broken
