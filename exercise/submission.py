"""hone's submission for the brief's CPU exercise.

optimize(baseline, evaluate) relays to hone's policy (`hone exercise bridge`,
Go): hone asks for configs to evaluate, this module calls evaluate() for each
and sends the result back, and returns the config hone selects together with
every evaluation result, unchanged and in call order.

Standard library only; Python >= 3.10. hone is found on $HONE_BIN, then
PATH, then built with `go build` from the repository this file sits in.
The protocol is documented in exercise/README.md and `hone exercise bridge
--help`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["optimize"]

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class HoneNotFound(RuntimeError):
    """hone could be neither found nor built."""


def _find_hone() -> str:
    env = os.environ.get("HONE_BIN")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise HoneNotFound(f"HONE_BIN={env!r} is not an executable file")
    found = shutil.which("hone")
    if found:
        return found
    go = shutil.which("go")
    if go and os.path.isfile(os.path.join(_REPO, "go.mod")):
        out_dir = tempfile.mkdtemp(prefix="hone-bin-")
        out = os.path.join(out_dir, "hone")
        proc = subprocess.run([go, "build", "-o", out, "./cmd/hone"], cwd=_REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode == 0:
            return out
        raise HoneNotFound("building hone with `go build ./cmd/hone` in %s failed:\n%s" % (_REPO, proc.stdout))
    raise HoneNotFound(
        "hone is needed by this submission but was not found: set HONE_BIN to a hone binary, "
        "put hone on PATH (`make build` puts one in bin/), or install Go 1.26 or newer "
        "(https://go.dev/dl/) so submission.py can build it from " + _REPO)


def _finite(value):
    """A copy of value that JSON can carry: non-finite floats become strings.

    Only the copy sent to hone is changed; the log keeps the original object.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _send(proc, message) -> None:
    proc.stdin.write(json.dumps(_finite(message), allow_nan=False, default=repr) + "\n")
    proc.stdin.flush()


def _receive(proc) -> dict:
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        raise RuntimeError(f"hone exercise bridge stopped (exit code {code}) before deciding; see its messages above")
    return json.loads(line)


def optimize(baseline: dict, evaluate, budget: int = 4):
    """Return (best_config, experiment_log).

    best_config is one of the config objects passed to evaluate (or the
    baseline when no call succeeded); experiment_log is the list of objects
    evaluate returned, unchanged, in call order. A call that raises has no
    result object, so it adds nothing to the log; hone counts it as a failed
    candidate and goes on within the budget.
    """
    hone = _find_hone()
    proc = subprocess.Popen([hone, "exercise", "bridge"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=None, text=True, bufsize=1)
    log = []
    configs = {}  # call number -> the config object passed to evaluate
    try:
        _send(proc, {"type": "start", "baseline": baseline, "budget": budget})
        while True:
            msg = _receive(proc)
            kind = msg.get("type")
            if kind == "evaluate":
                call = msg["call"]
                config = msg["config"]
                configs[call] = config
                try:
                    result = evaluate(config)
                except Exception as exc:  # a failed candidate, not a failed exercise
                    _send(proc, {"type": "error", "call": call, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                log.append(result)
                _send(proc, {"type": "result", "call": call, "result": result})
            elif kind == "decision":
                call = msg.get("call", 0)
                best = configs.get(call, baseline) if call else baseline
                return best, log
            elif kind == "fatal":
                raise RuntimeError("hone exercise bridge: " + str(msg.get("error")))
            else:
                raise RuntimeError(f"hone exercise bridge sent an unknown message type {kind!r}")
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit("submission.py is a module: the exercise driver imports it and calls optimize()")
