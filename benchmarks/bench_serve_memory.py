"""Resident memory and time of a real `pruner serve` over a soak of requests of every length, with
glibc's mmap threshold fixed at each of ``--thresholds`` (0: left to the allocator), in one run:

    python3 benchmarks/bench_serve_memory.py --model runs/quickstart --rounds 6 --requests 150

Each round sends ``--requests`` requests of 1 to 10 passages drawn from nyt dev paragraphs (the
same sequence for both servers), then reads the server's VmRSS from /proc. Prints one row a round.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def soak(model: str, threshold: int, rounds: int, requests: int, pairs) -> tuple[list[float], float]:
    import httpx
    from bench_inference import start_server

    proc, url = start_server(model, ["--malloc-mmap-threshold", str(threshold)])
    rng = np.random.default_rng(0)
    out = [rss_mb(proc.pid)]
    t0 = time.perf_counter()
    try:
        with httpx.Client(timeout=120) as client:
            for _ in range(rounds):
                for _ in range(requests):
                    k = int(rng.integers(1, 11))
                    pick = rng.choice(len(pairs), k, replace=False)
                    body = {"query": pairs[int(pick[0])][0], "passages": [pairs[int(i)][1] for i in pick]}
                    r = client.post(url + "/v1/prune", json=body)
                    r.raise_for_status()
                out.append(rss_mb(proc.pid))
        seconds = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out, seconds


def main() -> int:
    from bench_inference import load_pairs
    from pruner_model.core.precision import machine_info

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=150)
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument(
        "--thresholds",
        type=int,
        nargs="+",
        default=[65536, 0],
        help="mmap thresholds to compare (0: glibc's own)",
    )
    args = ap.parse_args()
    pairs = load_pairs(2000, args.data)
    runs = {t: soak(args.model, t, args.rounds, args.requests, pairs) for t in args.thresholds}
    print(f"{machine_info().describe()}; {args.requests} requests a round")
    print("soak time: " + ", ".join(f"threshold {t}: {sec:.1f} s" for t, (_, sec) in runs.items()))
    print("| after round | " + " | ".join(f"RSS, threshold {t}" for t in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for i in range(args.rounds + 1):
        cells = " | ".join(f"{rss[i]:.0f} MB" for rss, _ in runs.values())
        print(f"| {'start' if i == 0 else i} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
