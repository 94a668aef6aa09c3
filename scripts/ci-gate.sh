#!/usr/bin/env bash
# ci-gate.sh: hone's latency gate as CI runs it (.github/workflows/gate.yml),
# runnable locally, and run by `make test` (cmd/hone/gate_script_test.go).
#
# It starts hone's engine emulator (`hone sim serve`) on a free loopback port,
# replays a small coding-agent workload against it, and checks the record
# against the committed baseline with `hone gate check`. The JUnit report is
# written whatever happens (a failed step becomes an errored testcase), the
# emulator is always stopped, and the exit code is the gate's.
#
#   scripts/ci-gate.sh                    check against the baseline
#   scripts/ci-gate.sh --record-baseline  measure GATE_BASELINE_RUNS runs and
#                                         rewrite the baseline (commit it)
#
# Environment:
#   HONE            the hone binary (default: `make build`, then bin/hone)
#   GATE_OUT        output directory (default results/ci-gate; relative paths
#                   are from the repository root): record.json.gz,
#                   junit.xml, emulator.log
#   GATE_BASELINE   baseline file (default .github/gate/emulator-l4.json)
#   GATE_CONFIG     gate config (default .github/gate/gate.yaml)
#   GATE_RUNS       candidate runs (default 3); GATE_BASELINE_RUNS (default 8)
#   GATE_SIM_FLAGS  extra `hone sim serve` flags, e.g. a planted regression:
#                   GATE_SIM_FLAGS=--no-enable-prefix-caching
# The workload, profile and time scale below are part of the baseline's
# fingerprint: change them only together with --record-baseline.
#
# Exit codes: 0 pass, warn or improved; 1 regression or suspect; 2 bad
# input, an incomparable or unusable comparison, or a step before the check
# failed (the JUnit report says which).
set -uo pipefail
if [[ -n ${HONE:-} && $HONE != /* ]]; then
	HONE=$PWD/$HONE # relative to where the script was started
fi
cd "$(dirname "$0")/.." || exit 2

PROFILE=qwen2.5-coder-0.5b-l4
TIME_SCALE=0.25
QPS=4,12
REQUESTS=20
INPUT_TOKENS=2048
OUTPUT_TOKENS=32
SCENARIO=ci-emulator-l4
MODEL=Qwen/Qwen2.5-Coder-0.5B-Instruct

record=0
case "${1:-}" in
"") ;;
--record-baseline) record=1 ;;
-h | --help)
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "ci-gate: unknown argument $1 (want --record-baseline or nothing)" >&2
	exit 2
	;;
esac

OUT=${GATE_OUT:-results/ci-gate}
BASELINE=${GATE_BASELINE:-.github/gate/emulator-l4.json}
CONFIG=${GATE_CONFIG:-.github/gate/gate.yaml}
RUNS=${GATE_RUNS:-3}
if [[ $record == 1 ]]; then
	RUNS=${GATE_BASELINE_RUNS:-8}
fi
read -r -a sim_flags <<<"${GATE_SIM_FLAGS:-}"
mkdir -p "$OUT"
junit=$OUT/junit.xml
rec=$OUT/record.json.gz
emu_log=$OUT/emulator.log
rm -f "$junit" "$rec"

# junit_error writes a JUnit report with one errored testcase, so that CI
# shows why there is no gate result.
junit_error() {
	local step=$1 detail=$2
	[[ $record == 0 ]] || return 0
	# Quoted replacements: bash 5.2 reads a bare & as the matched text.
	detail=${detail//&/"&amp;"}
	detail=${detail//</"&lt;"}
	detail=${detail//>/"&gt;"}
	detail=${detail//\"/"&quot;"}
	cat >"$junit" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="hone ci-gate" tests="1" failures="0" errors="1" skipped="0">
  <testcase name="$step" classname="hone.ci-gate">
    <error message="$step failed">$detail</error>
  </testcase>
</testsuite>
EOF
	echo "ci-gate: JUnit report: $junit" >&2
}

# step_failed reports a step that failed before the check, and exits 2.
step_failed() {
	echo "ci-gate: $1 failed: $2" >&2
	junit_error "$1" "$2"
	exit 2
}

if [[ -z ${HONE:-} ]]; then
	make build >&2 || step_failed build "make build failed"
	HONE=bin/hone
fi
[[ -x $HONE ]] || step_failed build "HONE=$HONE is not an executable"
command -v curl >/dev/null || step_failed setup "curl is not installed"
if [[ $record == 0 && ! -f $BASELINE ]]; then
	step_failed setup "no baseline $BASELINE (make one with scripts/ci-gate.sh --record-baseline)"
fi

# The emulator and the replay run in the background so that a signal's
# trap runs at once (bash defers traps while a foreground child runs).
emu_pid="" replay_pid=""
stop() {
	local pid
	for pid in $replay_pid $emu_pid; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	replay_pid="" emu_pid=""
}
trap stop EXIT
trap 'stop; junit_error interrupted "SIGINT before the gate decided"; exit 130' INT
trap 'stop; junit_error interrupted "SIGTERM before the gate decided"; exit 143' TERM

# Port 0: the emulator binds a free port itself and names its URL on stderr.
"$HONE" sim serve --host 127.0.0.1 --port 0 --profile "$PROFILE" --time-scale "$TIME_SCALE" \
	--enable-prompt-tokens-details --enable-per-request-metrics --log-level warn \
	"${sim_flags[@]}" >"$emu_log" 2>&1 &
emu_pid=$!
url=""
for _ in $(seq 100); do
	url=$(sed -n 's|^hone sim serve: \(http://[^ ]*\) .*|\1|p' "$emu_log" | head -n 1)
	[[ -n $url ]] && break
	kill -0 "$emu_pid" 2>/dev/null || break
	sleep 0.1
done
[[ -n $url ]] || step_failed emulator "hone sim serve did not start: $(tail -n 5 "$emu_log")"
healthy=0
for _ in $(seq 100); do
	if curl -fsS -o /dev/null --max-time 2 "$url/health"; then
		healthy=1
		break
	fi
	sleep 0.1
done
[[ $healthy == 1 ]] || step_failed emulator "$url/health did not answer: $(tail -n 5 "$emu_log")"
echo "ci-gate: emulator $url (profile $PROFILE, time scale $TIME_SCALE${GATE_SIM_FLAGS:+, $GATE_SIM_FLAGS})" >&2

# Exit 1 from replay is a record with an invalid level: the gate judges it.
"$HONE" replay --endpoint "$url" --model "$MODEL" --kind emulated --scenario "$SCENARIO" \
	--qps "$QPS" --requests "$REQUESTS" --input-tokens "$INPUT_TOKENS" --output-tokens "$OUTPUT_TOKENS" \
	--runs "$RUNS" --out "$rec" >&2 &
replay_pid=$!
wait "$replay_pid"
replay_rc=$?
replay_pid=""
stop
if [[ $replay_rc -gt 1 || ! -s $rec ]]; then
	step_failed replay "hone replay exited $replay_rc without a complete record"
fi

if [[ $record == 1 ]]; then
	mkdir -p "$(dirname "$BASELINE")"
	"$HONE" gate baseline create "$rec" --name "$SCENARIO" --out "$BASELINE" || step_failed baseline "hone gate baseline create failed"
	echo "ci-gate: baseline written to $BASELINE ($RUNS runs); commit it" >&2
	exit 0
fi

check=("$HONE" gate check --baseline "$BASELINE" --config "$CONFIG" --candidate "$rec")
"${check[@]}" -o junit >"$junit.tmp" 2>"$OUT/check.err"
rc=$?
if [[ -s $junit.tmp ]]; then
	mv "$junit.tmp" "$junit"
else
	rm -f "$junit.tmp"
	step_failed check "hone gate check exited $rc: $(cat "$OUT/check.err")"
fi
cat "$OUT/check.err" >&2
# The same check for people: a table here, the summary and annotations on
# GitHub. Their exit codes are the junit run's.
"${check[@]}" -o table
if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
	"${check[@]}" -o md >>"$GITHUB_STEP_SUMMARY"
	"${check[@]}" -o github
fi
echo "ci-gate: exit $rc; JUnit report: $junit" >&2
exit "$rc"
