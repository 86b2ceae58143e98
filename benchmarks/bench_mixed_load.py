"""Good requests' latency beside cheap bad ones, against a real `pruner serve`, in one run:

    python3 benchmarks/bench_mixed_load.py --model runs/quickstart --seconds 30

Phase "alone": ``--clients`` clients send good requests (a query and 1-5 nyt dev paragraphs) for
``--seconds``. Phase "mixed": the same clients and request sequence again, while bad clients send
1.9 MB bodies (over the token cap), bodies over the cap in tokens but not in words, malformed JSON
and a 64-query batch of must_keep patterns that backtrack. Prints the good requests' median and
p95 latency in each phase, their ratio, and what the bad requests got.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def good_bodies(pairs, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pick = rng.choice(len(pairs), int(rng.integers(1, 6)), replace=False)
        out.append({"query": pairs[int(pick[0])][0], "passages": [pairs[int(i)][1] for i in pick]})
    return out


BAD_KINDS = ("huge", "tokens_over", "patterns", "malformed")


def bad_senders(url: str, stop: threading.Event, codes: list, kinds=BAD_KINDS) -> list[threading.Thread]:
    import httpx

    rng = random.Random(0)
    word = lambda: "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(9))  # noqa: E731
    tokens_over = {"query": "q?", "passages": [" ".join(word() for _ in range(4000)) + "."] * 4}
    huge = {"query": "q?", "passages": ["The tower was built in 1889. " * 3400] * 19}
    patterns = {
        "requests": [
            {"query": "q?", "passages": ["The tower " + "x" * 26 + " was built."], "must_keep": ["(x|xx)+y"]}
        ]
        * 64
    }

    def send(kind, body: bytes):  # bodies encoded once: the clients' own work stays small
        path = "/v1/prune/batch" if kind == "patterns" else "/v1/prune"
        with httpx.Client(timeout=120, headers={"content-type": "application/json"}) as c:
            while not stop.is_set():
                codes.append((kind, c.post(url + path, content=body).status_code))

    malformed = b'{"query": "q?", "passages": [1'
    senders = [("huge", huge)] * 3 + [("tokens_over", tokens_over), ("patterns", patterns)]
    encoded = [(kind, json.dumps(body).encode()) for kind, body in senders] + [("malformed", malformed)]
    return [threading.Thread(target=send, args=kb) for kb in encoded if kb[0] in kinds]


def phase(
    url: str, bodies: list[list[dict]], seconds: float, mixed: bool, kinds=BAD_KINDS
) -> tuple[list[float], list]:
    import httpx

    latencies: list[float] = []
    codes: list = []
    stop = threading.Event()
    bad = bad_senders(url, stop, codes, kinds) if mixed else []
    for t in bad:
        t.start()
    end = time.perf_counter() + seconds

    def client(seq):
        with httpx.Client(timeout=120) as c:
            for body in seq:
                if time.perf_counter() > end:
                    return
                t0 = time.perf_counter()
                r = c.post(url + "/v1/prune", json=body)
                latencies.append(time.perf_counter() - t0)
                codes.append(("good", r.status_code))

    clients = [threading.Thread(target=client, args=(seq,)) for seq in bodies]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    stop.set()
    for t in bad:
        t.join()
    return latencies, codes


def main() -> int:
    from bench_inference import load_pairs, start_server
    from pruner_model.core.precision import machine_info

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument(
        "--server-cpus",
        default=None,
        help="CPU list the server runs on (e.g. 0); the clients take the others, as clients on "
        "other machines would",
    )
    ap.add_argument("--bad", default=",".join(BAD_KINDS), help="the bad senders of the mixed phase")
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="passed to pruner serve")
    args = ap.parse_args()
    pairs = load_pairs(2000, args.data)
    bodies = [good_bodies(pairs, 2000, seed) for seed in range(args.clients)]
    placement = "server and clients share every CPU"
    cpus = None
    if args.server_cpus:
        cpus = {int(c) for c in args.server_cpus.split(",")}
        others = set(os.sched_getaffinity(0)) - cpus
        if not others:
            ap.error("--server-cpus leaves no CPU for the clients")
        os.sched_setaffinity(0, others)
        placement = f"server on CPUs {sorted(cpus)}, clients on {sorted(others)}"
    proc, url = start_server(args.model, ["--max-request-tokens", "20000", *args.serve_args], cpus)
    try:
        rows = {}
        for name, mixed in (("alone", False), ("mixed", True)):
            lat, codes = phase(url, bodies, args.seconds, mixed, tuple(args.bad.split(",")))
            kinds = {}
            for kind, code in codes:
                kinds.setdefault(kind, {}).setdefault(code, 0)
                kinds[kind][code] += 1
            rows[name] = (np.median(lat) * 1000, np.percentile(lat, 95) * 1000, len(lat), kinds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"{machine_info().describe()}; {args.clients} good clients, {args.seconds:g} s a phase; {placement}"
    )
    print("| phase | good requests | median ms | p95 ms | answers |")
    print("|---|---|---|---|---|")
    for name, (med, p95, n, kinds) in rows.items():
        answers = "; ".join(
            f"{k}: " + ", ".join(f"{c} x{m}" for c, m in sorted(v.items())) for k, v in kinds.items()
        )
        print(f"| {name} | {n} | {med:.0f} | {p95:.0f} | {answers} |")
    print(f"median ratio mixed / alone: {rows['mixed'][0] / rows['alone'][0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
