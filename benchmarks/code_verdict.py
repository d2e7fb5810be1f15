"""Code verdict latency (issue #23): the time from handing an answer's code to the sandbox to its
tests' verdicts (cases drawn, code run in a warm container, outputs compared), p50/p95, for a
correct numpy and a correct torch answer to the GAE task, on a quiet machine and with two busy
processes (`while True: pass`) on the cores. Targets: p50 <= 0.3 s, p95 <= 1 s, every case passed.

Runs are sequential with a pause between them (an answer every --gap seconds), so the pool's
replacement container has imported before the next answer arrives, as with human answers.

Run: .venv/bin/python benchmarks/code_verdict.py [--runs 20] [--gap 3] [--busy 0 2]
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import time

from common import ROOT, percentile

from server.corpus.coding import load_coding_tasks
from server.grading.code_grader import _run_cases, _test_results
from server.grading.sandbox import Sandbox


def answers() -> tuple[dict[str, str], object]:
    gae = next(t for t in load_coding_tasks(ROOT / "corpus" / "coding").tasks if t.task.id == "gae")
    torch_code = next(k.code for k in gae.task.known_answers if k.name == "correct-torch")
    return {"numpy": gae.task.reference, "torch": torch_code}, gae


def measure(sandbox: Sandbox, prepared, code: str, runs: int, gap: float) -> tuple[list, int]:
    seconds, failed = [], 0
    for _ in range(runs):
        time.sleep(gap)
        started = time.perf_counter()
        cases = prepared.draw(secrets.randbits(63))
        results = _test_results(
            prepared, cases, _run_cases(sandbox, prepared, cases, code), "en", 0
        )
        seconds.append(time.perf_counter() - started)
        failed += sum(not r.passed for r in results)
    return seconds, failed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--gap", type=float, default=3.0)
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    codes, prepared = answers()
    sandbox = Sandbox()
    print(sandbox.isolation.summary or sandbox.isolation.reason)
    sandbox.warm()
    time.sleep(10)  # the first containers import numpy and torch
    for busy in args.busy:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            for kind, code in codes.items():
                measure(sandbox, prepared, code, 1, args.gap)  # this kind's pool is warm
                seconds, failed = measure(sandbox, prepared, code, args.runs, args.gap)
                p50, p95 = percentile(seconds, 50), percentile(seconds, 95)
                ok = p50 <= 0.3 and p95 <= 1.0 and failed == 0
                print(
                    f"{kind:5} busy={busy}: n={len(seconds)} p50={p50:.2f} s p95={p95:.2f} s "
                    f"max={max(seconds):.2f} s failed cases={failed} | target p50<=0.3 s, "
                    f"p95<=1 s, none failed: {'met' if ok else 'MISSED'}"
                )
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    sandbox.close()


if __name__ == "__main__":
    main()
