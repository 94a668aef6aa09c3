#!/usr/bin/env python3
"""A driver for the brief's CPU exercise, reconstructed from its text.

The original run.py is not available. This driver checks what the brief says
the original checks:

- optimize(baseline, evaluate) returns (best_config, experiment_log);
- evaluate is called at most --budget times (4);
- the log equals the evaluation results, unchanged and in call order;
- the selected config was evaluated;
- an independent replay of the selected config reproduces its result;
- it writes a JSON result with kind=simulation_only, baseline, candidate
  and experiments, and exits 0 (1 when a check fails, 2 on bad arguments).

Key names are flags (--mode-key, --cache-key) and --extra adds keys the
submission must carry through untouched, so private-style instances with
other key names can be exercised.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload  # noqa: E402  (the reconstructed workload.py beside this file)


class BudgetExceeded(RuntimeError):
    pass


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--submission", required=True, help="path to submission.py")
    ap.add_argument("--output", required=True, help="where to write the result JSON")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--input-tokens", type=int, default=4096)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--qps", default="1,2,4,8,16,32", help="comma-separated offered rates")
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--mode-key", default="mode")
    ap.add_argument("--cache-key", default="prefix_cache")
    ap.add_argument("--extra", default="{}", help="JSON object of extra baseline keys to carry through")
    ap.add_argument("--tables", action="store_true", help="print each evaluated config's levels")
    a = ap.parse_args(argv)
    try:
        a.qps = [float(x) if "." in x else int(x) for x in a.qps.split(",") if x.strip()]
        a.extra = json.loads(a.extra)
    except ValueError as exc:
        ap.error(f"--qps/--extra: {exc}")
    if not isinstance(a.extra, dict):
        ap.error("--extra: want a JSON object")
    if a.requests < 9 or a.input_tokens <= workload.UNCACHED_TOKENS - 1 or a.output_tokens < 1 or not a.qps or min(a.qps) <= 0:
        ap.error("--requests >= 9, --input-tokens >= 128, --output-tokens >= 1 and positive --qps are required")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    baseline = {a.mode_key: "colocated", a.cache_key: True, **a.extra}
    shape = {"requests": a.requests, "input_tokens": a.input_tokens, "output_tokens": a.output_tokens}

    def run_config(config):
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, got {type(config).__name__}")
        if set(config) != set(baseline):
            raise ValueError(f"config keys {sorted(config)} differ from the baseline's {sorted(baseline)}")
        mode, cache = config[a.mode_key], config[a.cache_key]
        if mode not in ("colocated", "disaggregated"):
            raise ValueError(f"{a.mode_key}={mode!r}: want 'colocated' or 'disaggregated'")
        if not isinstance(cache, bool):
            raise ValueError(f"{a.cache_key}={cache!r}: want a boolean")
        for k, v in a.extra.items():
            if config[k] != v:
                raise ValueError(f"{k}={config[k]!r}: the submission changed a key it does not own (was {v!r})")
        levels = [workload.level(q, mode, cache, **shape) for q in a.qps]
        return {"kind": "simulation_only", "config": copy.deepcopy(config), "levels": levels,
                "objective": workload.objective(levels)}

    calls, results = [], []

    def evaluate(config):
        calls.append(copy.deepcopy(config))
        if len(calls) > a.budget:
            raise BudgetExceeded(f"evaluate called {len(calls)} times; the budget is {a.budget}")
        result = run_config(config)
        results.append(copy.deepcopy(result))
        return result

    spec = importlib.util.spec_from_file_location("submission", a.submission)
    sub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sub)
    best, log = sub.optimize(copy.deepcopy(baseline), evaluate)

    failures = []
    if len(calls) > a.budget:
        failures.append(f"experiment budget exceeded: {len(calls)} calls > {a.budget}")
    if log != results:
        failures.append(f"experiment_log ({len(log)} entries) is not the {len(results)} evaluation results in call order")
    if best not in calls:
        failures.append(f"selected config {best!r} was never evaluated")
    candidate = None
    if not failures:
        candidate = run_config(best)  # the independent replay
        logged = [r for r in results if r["config"] == best]
        if not logged or any(r != candidate for r in logged):
            failures.append("the independent replay of the selected config differs from its logged result")

    if a.tables:
        for i, r in enumerate(results, 1):
            c = r["config"]
            print(f"call {i}: {a.mode_key}={c[a.mode_key]} {a.cache_key}={c[a.cache_key]}  objective={r['objective']!r}")
            print("  offered_qps  p99_ttft_ms  p99_tpot_ms  effective_qps  passed")
            for l in r["levels"]:
                print(f"  {l['offered_qps']:>11}  {l['p99_ttft_ms']:>11.3f}  {l['p99_tpot_ms']:>11.3f}  {l['effective_qps']:>13.4f}  {l['passed']}")
        print(f"selected: {best!r}")

    out = {"kind": "simulation_only", "baseline": {"config": baseline, "result": results[0] if results else None},
           "candidate": {"config": best, "result": candidate}, "experiments": log,
           "calls": len(calls), "budget": a.budget, "checks_passed": not failures, "failures": failures}
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.output)
    for msg in failures:
        print("driver: FAIL:", msg, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
