"""The brief's CPU-exercise workload and queueing model, reconstructed.

The original starter (workload.py, run.py) is not available; this module
follows the brief's text term by term. It is independent of hone's Go
simulator on purpose: tests compare the two bit for bit.
"""

from __future__ import annotations

import math

PREFILL_TOKENS_PER_S = 4096
DECODE_MS = 1000 / 2048
TRANSFER_MS = 8
UNCACHED_TOKENS = 128


def generate(offered_qps, requests=128, input_tokens=4096, output_tokens=128):
    out = []
    for i in range(requests):
        if i < 8:
            arrival, cached = float(i * 2000), 0
        else:
            arrival, cached = 16000 + (i - 8) * 1000 / offered_qps, input_tokens - UNCACHED_TOKENS
        out.append({"id": i, "arrival_ms": arrival, "session": i % 8, "input_tokens": input_tokens,
                    "cached_tokens": cached, "output_tokens": output_tokens})
    return out


def simulate(reqs, mode, prefix_cache):
    """Return {id: (arrival, first, finish)} under the brief's equations."""
    d = DECODE_MS
    busy = prefill_end = decode_end = 0.0
    done = {}
    for r in sorted(reqs, key=lambda r: (r["arrival_ms"], r["id"])):
        a = r["arrival_ms"]
        cached = r["cached_tokens"] if prefix_cache else 0
        p = (r["input_tokens"] - cached) / 4096 * 1000
        n = r["output_tokens"] - 1
        if mode == "colocated":
            first = max(a, busy) + p + d
            finish = first + n * d
            busy = finish
        elif mode == "disaggregated":
            prefill_end = max(a, prefill_end) + p
            first = max(prefill_end + 8, decode_end) + d
            finish = first + n * d
            decode_end = finish
        else:
            raise ValueError(f"unknown mode {mode!r}")
        done[r["id"]] = (a, first, finish, r["output_tokens"])
    return done


def p99(values):
    s = sorted(values)
    return s[math.ceil(0.99 * len(s)) - 1]


def level(offered_qps, mode, prefix_cache, ttft_slo_ms=2000, tpot_slo_ms=50, **shape):
    done = simulate(generate(offered_qps, **shape), mode, prefix_cache)
    measured = [v for k, v in done.items() if k >= 8]
    ttft = [first - a for a, first, _, _ in measured]
    tpot = [(finish - first) / (n - 1) if n > 1 else 0.0 for _, first, finish, n in measured]
    last = max(finish for _, _, finish, _ in measured)
    eff = len(measured) / ((last - done[8][0]) / 1000)
    t, o = p99(ttft), p99(tpot)
    return {"offered_qps": offered_qps, "p99_ttft_ms": t, "p99_tpot_ms": o, "effective_qps": eff,
            "passed": t <= ttft_slo_ms and o <= tpot_slo_ms}


def objective(levels):
    return max([l["effective_qps"] for l in levels if l["passed"]], default=0)
