#!/usr/bin/env python3
"""Per-iteration overhead of shockwave.Job.iterate over a plain Python loop.

Starts a coordinator (the harness of the test suite), opens a job, waits for
its lease, then times the same loop with and without job.iterate, for an
empty body and for a 1 ms body (a busy wait), and prints the median
overhead per iteration over several runs. From the repository root:

    make lib build
    SHOCKWAVE_BIN=bin/shockwave /usr/bin/python3 bindings/python/bench_iterate.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tests.harness import Coordinator  # noqa: E402

import shockwave  # noqa: E402


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(loop, n: int) -> float:
    start = time.perf_counter()
    loop(n)
    return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--empty-n", type=int, default=1_000_000)
    ap.add_argument("--body-n", type=int, default=2_000)
    args = ap.parse_args()
    with Coordinator(gpus=1, round_s=10.0) as coord:
        with shockwave.Job(model="bench", job_id="bench", url=coord.url, batch_size=32, dataset_size=10**6,
                           total_steps=10**9) as job:
            job.wait_for_lease()

            def plain_empty(n):
                for _ in range(n):
                    pass

            def wrapped_empty(n):
                for _ in job.iterate(range(n), epoch=False):
                    pass

            def plain_body(n):
                for _ in range(n):
                    spin(0.001)

            def wrapped_body(n):
                for _ in job.iterate(range(n), epoch=False):
                    spin(0.001)

            for name, plain, wrapped, n in (("empty body", plain_empty, wrapped_empty, args.empty_n),
                                            ("1 ms body", plain_body, wrapped_body, args.body_n)):
                diffs, base = [], []
                for _ in range(args.runs):
                    p = timed(plain, n)
                    w = timed(wrapped, n)
                    base.append(p)
                    diffs.append(w - p)
                print(f"{name:10s}: plain {statistics.median(base) * 1e9:10.0f} ns/iter, "
                      f"job.iterate overhead median {statistics.median(diffs) * 1e9:6.0f} ns/iter "
                      f"(min {min(diffs) * 1e9:.0f}, max {max(diffs) * 1e9:.0f}; {args.runs} runs of {n})")
            job.finish()


if __name__ == "__main__":
    main()
