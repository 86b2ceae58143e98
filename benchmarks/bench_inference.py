"""Inference benchmark: torch fp32, torch bf16 (where native), what ``from_pretrained`` picks with
no flags for the checkpoint (``default``: where bf16 is not native, its int8 export, which that load
builds into ``$PRUNER_CACHE`` when none is cached) and for its ONNX folder (``default_onnx``: the int8 graph
where the export kept it), onnx fp32 and onnx int8, 1 and 2 threads, and the HTTP
server with and without micro-batching, all measured in one run on the same inputs.

    python benchmarks/bench_inference.py --model runs/quickstart [--onnx runs/quickstart-onnx]

Prints ratios (what this script is for: absolute times depend on the machine and its load), each
backend's windows of 256 tokens a second (counted by tokens) with the CPU class named, and
writes a JSON report (default: benchmarks/reports/inference.json). Pairs are (query, passage)
pairs from the dev split built by ``pruner data qa`` (or a synthetic fallback).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def load_pairs(n: int, path: str) -> list[tuple[str, str]]:
    pairs = []
    if Path(path).is_file():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                pairs.append((r["query"], r["context"]))
                if len(pairs) >= n:
                    break
    if len(pairs) < n:  # synthetic fallback of realistic length (~150 tokens)
        rng = np.random.default_rng(0)
        words = "the of river city was built in year by people who lived near old tower museum art".split()
        while len(pairs) < n:
            text = " ".join(" ".join(rng.choice(words, 14)).capitalize() + "." for _ in range(7))
            pairs.append(("when was the tower built?", text))
    return pairs


def groups_of(pairs, size=5):
    return [(pairs[i][0], [p for _, p in pairs[i : i + size]]) for i in range(0, len(pairs), size)]


def bench_pruners(pruners: dict, pairs, rounds: int = 3) -> dict:
    """Throughput of prune_batch over all pairs for each pruner, and the latency of one query (5
    passages) at a time. The throughput passes are interleaved (each round times every pruner once,
    the best round kept), so that a machine whose load drifts during the run slows every backend
    alike and the ratios between them hold."""
    groups = groups_of(pairs)
    for pruner in pruners.values():
        pruner.prune_batch(groups[:2])  # warm-up
    out = {name: {"batch_seconds": float("inf")} for name in pruners}
    for _ in range(rounds):
        for name, pruner in pruners.items():
            t = time.perf_counter()
            res = pruner.prune_batch(groups)
            dt = time.perf_counter() - t
            if dt < out[name]["batch_seconds"]:
                enc = sum(r.stats.encoder_seconds for r in res)
                post = sum(r.stats.postprocess_seconds for r in res)
                out[name].update(
                    batch_seconds=dt,
                    pairs_per_s=len(pairs) / dt,
                    postprocess_share=post / (enc + post) if enc + post else 0.0,
                )
    for name, pruner in pruners.items():
        lat = []
        for q, ps in groups[:20]:
            t = time.perf_counter()
            pruner.prune(q, ps)
            lat.append(time.perf_counter() - t)
        out[name].update(
            p50_ms=float(np.percentile(lat, 50) * 1000), p95_ms=float(np.percentile(lat, 95) * 1000)
        )
    return out


def bench_batching_ceiling(pruner, pairs, clients: int = 8, repeats: int = 3) -> dict:
    """In-process upper bound of what micro-batching can gain, without HTTP: queries (5 passages
    each) scored one call at a time vs ``clients`` queries per call, as the server's queue would
    group them under ``clients`` concurrent clients; each with the batch plan of
    :func:`pruner_model.core.scoring.plan_batches` (``planned``: the cheapest split of the
    length-sorted windows under its cost model) and with the fewest calls of up to
    ``pruner.batch_size`` windows padded to their longest (``unplanned``), interleaved and the best
    of ``repeats`` kept."""
    from pruner_model.inference.requests import PruneRequest

    params = pruner.selection_params()
    reqs = [PruneRequest(q, ps, params) for q, ps in groups_of(pairs)]
    pruner.run(reqs[:2])  # warm-up
    backend = pruner.backend
    planned = (backend.batch_tokens, backend.call_tokens)
    best = {}
    for _ in range(repeats):
        for plan in ("planned", "unplanned"):
            # unplanned: the fewest calls (a huge fixed cost a call), each up to batch_size windows
            backend.batch_tokens, backend.call_tokens = planned if plan == "planned" else (1 << 30, 1e12)
            for name, per_call in (("one_at_a_time", 1), ("batched", clients)):
                t = time.perf_counter()
                for i in range(0, len(reqs), per_call):
                    pruner.run(reqs[i : i + per_call])
                key = f"{plan}_{name}_s"
                best[key] = min(best.get(key, float("inf")), time.perf_counter() - t)
    backend.batch_tokens, backend.call_tokens = planned
    return {
        **best,
        "queries_per_call": clients,
        "ratio": best["planned_one_at_a_time_s"] / best["planned_batched_s"],
        "unplanned_ratio": best["unplanned_one_at_a_time_s"] / best["unplanned_batched_s"],
        "plan_gain_one_at_a_time": best["unplanned_one_at_a_time_s"] / best["planned_one_at_a_time_s"],
        "plan_gain_batched": best["unplanned_batched_s"] / best["planned_batched_s"],
    }


def gemm_peak(threads: int, size: int = 2048, seconds: float = 1.5) -> dict:
    """This machine's measured matrix-multiply throughput (GFLOP/s) in fp32 and bf16 at
    ``threads`` threads: the ceiling an encoder-bound backend can approach."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            n += 1
        out[name] = 2 * size**3 * n / (time.perf_counter() - t0) / 1e9
    out["int8"] = int8_gemm_peak(threads, size, seconds)
    return out


def int8_gemm_peak(threads: int, size: int = 2048, seconds: float = 1.5) -> float:
    """The int8 ONNX graph's matrix product as onnxruntime runs it on this CPU (an fp32 input
    quantized to uint8 by ``DynamicQuantizeLinear``, ``MatMulInteger`` with int8 weights), in
    GOP/s at ``threads`` threads; 0 without onnx/onnxruntime."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return 0.0
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.integers(-127, 128, (size, size), dtype=np.int8), "w")
    zero = numpy_helper.from_array(np.zeros((), dtype=np.int8), "w_zero")
    graph = helper.make_graph(
        [
            helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"]),
            helper.make_node("MatMulInteger", ["xq", "w", "x_zero", "w_zero"], ["y"]),
        ],
        "int8_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [size, size])],
        [weight, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = {"x": rng.standard_normal((size, size), dtype=np.float32)}
    sess.run(None, x)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, x)
        n += 1
    return 2 * size**3 * n / (time.perf_counter() - t0) / 1e9


def biencoder_queries_per_s(pairs, repeats: int = 1) -> float:
    """End-to-end queries/s of the bundled bi-encoder baseline scoring the same sentences."""
    from pruner_model.evaluation.baselines import biencoder_scores
    from pruner_model.evaluation.groups import load_groups

    groups = load_groups(
        [
            {"id": f"g{i}/{k}", "query": q, "context": ps[k], "relevant_spans": []}
            for i, (q, ps) in enumerate(groups_of(pairs))
            for k in range(len(ps))
        ]
    )
    biencoder_scores(groups[:2])
    t0 = time.perf_counter()
    for _ in range(repeats):
        biencoder_scores(groups)
    return len(groups) * repeats / (time.perf_counter() - t0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    model_dir: str, extra: list[str], cpus: set[int] | None = None
) -> tuple[subprocess.Popen, str]:
    """A real `pruner serve` process on a free 127.0.0.1 port, once it answers /health
    (``cpus``: the CPUs it may run on; all by default)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "pruner_model.cli",
        "serve",
        "--model",
        model_dir,
        "--port",
        str(port),
        *extra,
    ]
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    wait_for_server(proc, url + "/health")
    return proc, url


def wait_for_server(proc: subprocess.Popen, health_url: str, attempts: int = 600) -> None:
    """Until ``health_url`` answers 200; a process that exits or never answers is stopped and
    raised as RuntimeError."""
    import httpx

    for _ in range(attempts):
        if proc.poll() is not None:
            break
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
    raise RuntimeError(f"server did not start: {err}")


def run_clients(client, clients: int) -> float:
    """Seconds for ``clients`` threads running ``client(k)`` at once, k = 0..clients-1."""
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - start


def bench_server(
    model_dir: str,
    pairs,
    batching: bool,
    clients: int = 8,
    per_client: int = 24,
    extra: list[str] | None = None,
    rounds: int = 1,
    in_process=None,
) -> dict:
    """Throughput of a real `pruner serve` process under `clients` concurrent clients (127.0.0.1),
    each sending ``per_client`` requests one after another: 24 each, so the steady state dominates
    the first batches of new shapes and the last ones, where fewer clients are left. The best of
    ``rounds`` passes is kept; ``in_process`` (a callable returning queries per second, run while
    the server is idle) is timed before each pass and its best kept too, so that the two compare
    under the same drift of the machine's speed."""
    import httpx

    proc, url = start_server(model_dir, [*([] if batching else ["--no-batching"]), *(extra or [])])
    try:
        groups = groups_of(pairs)
        httpx.post(url + "/v1/prune", json={"query": groups[0][0], "passages": groups[0][1]}, timeout=60)
        best: dict = {"requests_per_s": 0.0}
        in_process_best = 0.0
        for _ in range(rounds):
            if in_process is not None:
                in_process_best = max(in_process_best, in_process())
            lat, errors = [], []

            def client(k, lat=lat, errors=errors):
                with httpx.Client(timeout=120) as c:
                    for j in range(per_client):
                        q, ps = groups[(k * per_client + j) % len(groups)]
                        t = time.perf_counter()
                        r = c.post(url + "/v1/prune", json={"query": q, "passages": ps})
                        lat.append(time.perf_counter() - t)
                        if r.status_code != 200:
                            errors.append(r.status_code)

            dt = run_clients(client, clients)
            n = clients * per_client
            if n / dt > best["requests_per_s"]:
                best = {
                    "requests_per_s": n / dt,
                    "pairs_per_s": n * 5 / dt,
                    "errors": len(errors),
                    "p50_ms": float(np.percentile(lat, 50) * 1000),
                    "p95_ms": float(np.percentile(lat, 95) * 1000),
                }
        metrics = httpx.get(url + "/v1/stats").json()
        best.update(rounds=rounds, mean_queries_per_batch=metrics["mean_queries_per_batch"])
        if in_process is not None:
            best["in_process_queries_per_s"] = in_process_best
        return best
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder")
    ap.add_argument("--onnx", default=None, help="ONNX export of it (exported to a temp folder if absent)")
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--report", default="benchmarks/reports/inference.json")
    args = ap.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        ap.error(f"no checkpoint at {args.model} (config.json missing)")

    import torch
    from pruner_model.export.onnx import export_onnx
    from pruner_model.inference import ContextPruner
    from pruner_model.inference.requests import PruneRequest

    pairs = load_pairs(args.pairs, args.data)
    onnx_dir = args.onnx
    if onnx_dir is None or not (Path(onnx_dir) / "model.int8.onnx").is_file():
        onnx_dir = onnx_dir or tempfile.mkdtemp(prefix="pruner-onnx-")
        print(f"exporting to {onnx_dir} ...", file=sys.stderr)
        export_onnx(args.model, onnx_dir, quantize="int8")
    from pruner_model.core.precision import cpu_has_bf16, machine_info

    results: dict = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "cpu": machine_info("cpu").to_dict(),
        "pairs": len(pairs),
        "runs": {},
    }
    encoder = ContextPruner.from_pretrained(args.model, backend="torch", device="cpu").backend.model.encoder
    # the weights that take part in matrix products (embedding tables are lookups, not GEMMs)
    encoder_params = sum(m.weight.numel() for m in encoder.modules() if isinstance(m, torch.nn.Linear))
    results["encoder_matrix_params"] = encoder_params
    for n in [int(x) for x in args.threads.split(",")]:
        peak = gemm_peak(n)
        results[f"gemm_peak_gflops@{n}t"] = peak
        print(
            f"GEMM peak {n} thread(s): fp32 {peak['fp32']:.0f} GFLOP/s, bf16 {peak['bf16']:.0f} GFLOP/s, "
            f"int8 (onnxruntime) {peak['int8']:.0f} GOP/s",
            file=sys.stderr,
        )
        torch.set_num_threads(n)
        runs = {
            "torch_fp32": ContextPruner.from_pretrained(
                args.model, backend="torch", device="cpu", dtype="fp32"
            ),
            # what a user gets with no flags: the fastest precision that agrees with fp32 here
            "default": ContextPruner.from_pretrained(args.model, device="cpu"),
            # what an ONNX folder serves with no flags: its int8 graph where the export kept it
            "default_onnx": ContextPruner.from_pretrained(onnx_dir, device="cpu", threads=n),
            "onnx_fp32": ContextPruner.from_pretrained(
                onnx_dir, backend="onnx", device="cpu", threads=n, quantized=False
            ),
            "onnx_int8": ContextPruner.from_pretrained(
                onnx_dir, backend="onnx", device="cpu", threads=n, quantized=True
            ),
        }
        if cpu_has_bf16():
            runs["torch_bf16"] = ContextPruner.from_pretrained(
                args.model, backend="torch", device="cpu", dtype="bf16"
            )
        timed = bench_pruners(runs, pairs)
        for name, pruner in runs.items():
            r = timed[name]
            # windows of the pairs (one each at these lengths) and the encoder's share of the GEMM peak
            tokens = np.mean([len(pruner.tokenizer(q, p)["input_ids"]) for q, p in pairs[:50]])
            gflop_per_window = 2 * encoder_params * tokens / 1e9
            r["windows_per_s"] = r["pairs_per_s"]
            r["windows256_per_s"] = (
                r["pairs_per_s"] * tokens / 256
            )  # windows of 256 tokens, counted by tokens
            r["precision"] = pruner.precision
            kind = pruner.precision if peak.get(pruner.precision) else "fp32"  # the peak it runs against
            r["peak_fraction"], r["peak_kind"] = r["pairs_per_s"] * gflop_per_window / peak[kind], kind
            results["runs"][f"{name}@{n}t"] = r
            print(
                f"{name:>10} ({pruner.backend.name} {pruner.precision}) {n} thread(s) on {results['cpu']['cpu_class']}: "
                f"{r['pairs_per_s']:6.1f} pairs/s = {r['windows256_per_s']:6.1f} windows of 256 tokens/s, "
                f"p50 {r['p50_ms']:6.1f} ms, "
                f"p95 {r['p95_ms']:6.1f} ms, post-processing {r['postprocess_share']:.1%}, "
                f"{r['peak_fraction']:.0%} of the {kind} GEMM peak",
                file=sys.stderr,
            )
    ratios = {}
    n_max = max(int(x) for x in args.threads.split(","))
    torch.set_num_threads(n_max)
    be = biencoder_queries_per_s(pairs)
    results["biencoder_queries_per_s"] = be
    fastest = max(
        (k for k in results["runs"] if k.endswith(f"@{n_max}t")),
        key=lambda k: results["runs"][k]["pairs_per_s"],
    )
    ratios[f"prune({fastest})/biencoder queries@{n_max}t"] = results["runs"][fastest]["pairs_per_s"] / 5 / be
    for n in [int(x) for x in args.threads.split(",")]:
        base = results["runs"][f"torch_fp32@{n}t"]["pairs_per_s"]
        if f"torch_bf16@{n}t" in results["runs"]:
            ratios[f"torch_bf16/torch_fp32@{n}t"] = results["runs"][f"torch_bf16@{n}t"]["pairs_per_s"] / base
        ratios[f"default/torch_fp32@{n}t"] = results["runs"][f"default@{n}t"]["pairs_per_s"] / base
        ratios[f"default_onnx/torch_fp32@{n}t"] = results["runs"][f"default_onnx@{n}t"]["pairs_per_s"] / base
        ratios[f"onnx_fp32/torch_fp32@{n}t"] = results["runs"][f"onnx_fp32@{n}t"]["pairs_per_s"] / base
        ratios[f"onnx_int8/torch_fp32@{n}t"] = results["runs"][f"onnx_int8@{n}t"]["pairs_per_s"] / base
    batching_pruners = {}
    for name, pruner in (
        (
            "torch_fp32",
            ContextPruner.from_pretrained(args.model, backend="torch", device="cpu", dtype="fp32"),
        ),
        ("onnx_int8", ContextPruner.from_pretrained(onnx_dir, device="cpu", threads=n_max, quantized=True)),
    ):
        batching_pruners[name] = pruner
        ceiling = bench_batching_ceiling(pruner, pairs)
        results[f"batching_{name}"] = ceiling
        ratios[f"{name}: 8 queries a call/one at a time@{n_max}t"] = ceiling["ratio"]
        ratios[f"{name}: planned/unplanned batches, one at a time@{n_max}t"] = ceiling[
            "plan_gain_one_at_a_time"
        ]
        ratios[f"{name}: planned/unplanned batches, 8 a call@{n_max}t"] = ceiling["plan_gain_batched"]
        print(
            f"in-process ({name}, {n_max} threads): 8 queries per call vs one at a time = {ceiling['ratio']:.2f}x "
            f"(batches padded to their longest window without the plan: {ceiling['unplanned_ratio']:.2f}x)",
            file=sys.stderr,
        )
    if not args.no_server:
        extra = ["--quantized"]
        int8 = batching_pruners["onnx_int8"]
        params = int8.selection_params()
        reqs = [PruneRequest(q, ps, params) for q, ps in groups_of(pairs)]

        def eight_a_call() -> float:  # the same int8 graph in process, 8 queries a call
            t = time.perf_counter()
            for i in range(0, len(reqs), 8):
                int8.run(reqs[i : i + 8])
            return len(reqs) / (time.perf_counter() - t)

        single = bench_server(onnx_dir, pairs, batching=False, extra=extra, rounds=3)
        batched = bench_server(onnx_dir, pairs, batching=True, extra=extra, rounds=3, in_process=eight_a_call)
        results["server"] = {"one_at_a_time": single, "micro_batching": batched, "clients": 8}
        ratios["server_batched/one_at_a_time@8clients"] = batched["requests_per_s"] / single["requests_per_s"]
        # what the server's batches could reach: best of 3 passes each, interleaved
        ratios["server_batched@8clients/in-process 8 a call (onnx int8)"] = (
            batched["requests_per_s"] / batched["in_process_queries_per_s"]
        )
        print(
            f"server (onnx int8, 8 clients): one-at-a-time {single['requests_per_s']:.1f} req/s, "
            f"micro-batching {batched['requests_per_s']:.1f} req/s "
            f"({batched['mean_queries_per_batch']:.1f} queries/batch)",
            file=sys.stderr,
        )
    results["ratios"] = ratios
    print("\nratios (same run, same inputs):")
    for k, v in ratios.items():
        print(f"  {k:<56} {v:5.2f}x")
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    print(f"report: {args.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
