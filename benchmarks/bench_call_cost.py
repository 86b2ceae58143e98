"""The cost of one encoder call by its shape, fitted to what the batch plan assumes.

`pruner_model.core.scoring.plan_batches` cuts length-sorted windows into the calls that cost
least under ``CALL_TOKENS + n * L * (1 + L / ATTENTION_TOKENS)`` tokens for a call of ``n``
windows padded to ``L``. This times a backend on a grid of shapes (1-8 windows of 32-256 tokens,
random token ids, no padding), fits ``fixed + per_token * n * L + quadratic * n * L**2`` by least
squares, and prints the constants the fit implies beside the ones the planner uses. With
``--split-sessions`` it also times one onnxruntime session of ``--threads`` threads against as many
one-thread sessions, each running its share of the same windows at once (a thread-settings lever).

    python3 benchmarks/bench_call_cost.py --model pruner_model/default_model --onnx DIR --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

WINDOWS = (1, 2, 4, 8)
LENGTHS = (32, 64, 96, 128, 192, 256)


def time_call(forward, names, n: int, length: int, seconds: float, rng) -> float:
    """Best of 3 mean seconds of one call of ``n`` windows of ``length`` tokens."""
    batch = {name: np.zeros((n, length), dtype=np.int64) for name in names}
    batch["input_ids"] = rng.integers(1000, 20000, (n, length))
    if "attention_mask" in batch:
        batch["attention_mask"][:] = 1
    forward(batch)
    best = float("inf")
    for _ in range(3):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            forward(batch)
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def fit(rows: list[tuple[int, int, float]]) -> dict:
    """Least-squares ``fixed + per_token * n * L + quadratic * n * L**2`` (seconds) and the
    planner's constants it implies."""
    design = np.array([[1.0, n * length, n * length * length] for n, length, _ in rows])
    fixed, per_token, quadratic = np.linalg.lstsq(design, np.array([t for *_, t in rows]), rcond=None)[0]
    return {
        "fixed_ms": fixed * 1e3,
        "per_token_ms": per_token * 1e3,
        "call_tokens": fixed / per_token,
        "attention_tokens": per_token / quadratic if quadratic > 0 else float("inf"),
    }


def split_sessions(whole, threads: int, rng) -> None:
    """Best of 4 for each shape: ``whole`` (an ONNX backend of ``threads`` threads) on all the
    windows, against ``threads`` one-thread sessions of its graph on an equal share each, run at
    once from a thread pool."""
    from concurrent.futures import ThreadPoolExecutor

    from pruner_model.inference.onnx_backend import OnnxBackend

    parts = [OnnxBackend(whole.model_path, threads=1) for _ in range(threads)]
    for n, length in ((5, 180), (8, 200), (16, 200), (40, 200)):
        batch = {name: np.zeros((n, length), dtype=np.int64) for name in whole.input_names}
        batch["input_ids"] = rng.integers(1000, 20000, (n, length))
        batch["attention_mask"][:] = 1
        shares = [{k: v[i::threads] for k, v in batch.items()} for i in range(threads)]
        best = [float("inf"), float("inf")]
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(5):  # the first round warms both up
                start = time.perf_counter()
                whole(batch)
                one = time.perf_counter() - start
                start = time.perf_counter()
                list(pool.map(lambda pair: pair[0](pair[1]), zip(parts, shares)))
                best = [min(best[0], one), min(best[1], time.perf_counter() - start)]
        print(
            f"{n} x {length} tokens: one session of {threads} threads {best[0] * 1e3:.1f} ms, "
            f"{threads} one-thread sessions at once {best[1] * 1e3:.1f} ms ({best[0] / best[1]:.2f}x)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder (torch fp32)")
    ap.add_argument("--onnx", default=None, help="its ONNX export (the int8 graph is timed when there)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=0.3, help="per shape and round")
    ap.add_argument(
        "--split-sessions", action="store_true", help="also time one-thread sessions side by side"
    )
    args = ap.parse_args()

    import torch
    from pruner_model.core import scoring
    from pruner_model.core.precision import machine_info
    from pruner_model.inference import ContextPruner

    torch.set_num_threads(args.threads)
    backends = {
        "torch fp32": ContextPruner.from_pretrained(args.model, backend="torch", device="cpu", dtype="fp32")
    }
    if args.onnx:
        backends["onnx int8"] = ContextPruner.from_pretrained(
            args.onnx, device="cpu", threads=args.threads, quantized=True
        )
    print(
        f"CPU: {machine_info('cpu').to_dict().get('cpu_class', '?')}, {args.threads} threads", file=sys.stderr
    )
    print(
        f"planner: CALL_TOKENS {scoring.CALL_TOKENS:.0f}, ATTENTION_TOKENS {scoring.ATTENTION_TOKENS:.0f}",
        file=sys.stderr,
    )
    rng = np.random.default_rng(0)
    for name, pruner in backends.items():
        backend = pruner.backend
        rows = []
        for length in LENGTHS:
            for n in WINDOWS:
                rows.append(
                    (n, length, time_call(backend, backend.input_names, n, length, args.seconds, rng))
                )
        for n, length, t in rows:
            print(
                f"{name}: {n} x {length:3d} tokens {t * 1e3:7.2f} ms  {n * length / t / 1e3:5.1f}k tokens/s"
            )
        f = fit(rows)
        print(
            f"{name}: a call {f['fixed_ms']:.2f} ms + {f['per_token_ms']:.4f} ms a token: "
            f"call_tokens {f['call_tokens']:.0f}, attention_tokens {f['attention_tokens']:.0f}"
        )
    if args.split_sessions and args.onnx:
        split_sessions(backends["onnx int8"].backend, args.threads, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
