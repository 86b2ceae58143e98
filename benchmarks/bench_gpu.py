"""One-GPU benchmark: training windows/s and serving throughput, in one run.

    python3 benchmarks/bench_gpu.py --model runs/quickstart --output reports/gpu.json

Measures, on the first CUDA device: training steps of the model's recipe (AdamW, bf16 autocast)
on synthetic windows of 256 tokens at batch 16 and 64; encoder windows/s of the torch backend in
fp32 and bf16; the keep/drop agreement of ``prune()`` on the GPU (bf16) with torch fp32 on the CPU;
and a real `pruner serve --backend torch --device cuda --dtype bf16` process under
1, 8 and 64 concurrent clients with micro-batching on and off (requests/s, p50/p95 latency,
queries per encoder batch). Each measurement is time-boxed (``--seconds``); the whole run takes
a few minutes. Prints a markdown table and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def synthetic_batch(config, batch: int, length: int, device) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 29000, (batch, length), generator=g)
    ids[:, 0], ids[:, 12], ids[:, -1] = 101, 102, 102
    labels = (torch.rand(batch, length, generator=g) < 0.1).long()
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "labels": labels.to(device),
        "relevance_labels": labels.amax(dim=1).float().to(device),
    }


DEVICE = "cuda"


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, seconds: float, warmup: int = 3) -> tuple[int, float]:
    for _ in range(warmup):
        fn()
    sync()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    sync()
    return n, time.perf_counter() - t0


def bench_training(model_dir: str, seconds: float) -> dict:
    import torch

    from pruner_model import PrunerModel

    out = {}
    for batch in (16, 64):
        model = PrunerModel.from_pretrained(model_dir).to(DEVICE).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        data = synthetic_batch(model.config, batch, 256, DEVICE)

        def step(model=model, opt=opt, data=data):
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                loss = model(**data).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        n, dt = timed(step, seconds)
        out[f"batch_{batch}"] = {"windows_per_s": n * batch / dt, "steps_per_s": n / dt}
    return out


def bench_encoder(model_dir: str, seconds: float) -> dict:
    import torch

    from pruner_model import PrunerModel

    model = PrunerModel.from_pretrained(model_dir).to(DEVICE).eval()
    batch = {
        k: v.cpu().numpy()
        for k, v in synthetic_batch(model.config, 64, 256, "cpu").items()
        if k in ("input_ids", "attention_mask")
    }
    out = {}
    for dtype in (None, "bf16"):
        n, dt = timed(lambda d=dtype: model.predict(batch, dtype=d), seconds)
        out["fp32" if dtype is None else dtype] = {"windows_per_s": n * 64 / dt}
    model.cpu()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def bench_agreement(model_dir: str, n_groups: int = 100) -> dict:
    """Keep/drop agreement of the GPU path (torch, bf16) with torch fp32 on the CPU, per sentence,
    on retriever-style 5-passage groups at the checkpoint's default operating point."""
    from bench_inference import groups_of, load_pairs

    from pruner_model import ContextPruner

    groups = groups_of(load_pairs(5 * n_groups, "data/qa/dev.jsonl"))
    kept = {}
    for name, kwargs in (
        ("cpu_fp32", {"device": "cpu", "dtype": "fp32"}),
        ("gpu_bf16", {"device": DEVICE, "dtype": "bf16"}),
    ):
        pruner = ContextPruner.from_pretrained(model_dir, backend="torch", **kwargs)
        results = pruner.prune_batch(groups)
        kept[name] = [s.kept for r in results for p in r.passages for s in p.sentences]
        kept[name + "_compression"] = float(np.mean([r.stats.compression for r in results]))
    a, b = np.array(kept["cpu_fp32"]), np.array(kept["gpu_bf16"])
    return {
        "groups": len(groups),
        "sentences": int(len(a)),
        "keep_drop_agreement": float((a == b).mean()),
        "compression_cpu_fp32": kept["cpu_fp32_compression"],
        "compression_gpu_bf16": kept["gpu_bf16_compression"],
    }


def bench_serving(model_dir: str, seconds: float) -> dict:
    import httpx
    from bench_inference import groups_of, load_pairs, run_clients, start_server

    groups = groups_of(load_pairs(400, "data/qa/dev.jsonl"))
    out = {}
    for batching in (True, False):
        extra = ["--backend", "torch", "--device", DEVICE, "--dtype", "bf16", "--max-concurrency", "256"]
        proc, url = start_server(model_dir, [*extra, *([] if batching else ["--no-batching"])])
        try:
            for clients in (1, 8, 64):
                lat, errors, done = [], [], [0]
                stop = time.perf_counter() + seconds

                def client(k, lat=lat, errors=errors, done=done, stop=stop, url=url):
                    with httpx.Client(timeout=120) as c:
                        j = 0
                        while time.perf_counter() < stop:
                            q, ps = groups[(k * 97 + j) % len(groups)]
                            t = time.perf_counter()
                            r = c.post(url + "/v1/prune", json={"query": q, "passages": ps})
                            lat.append(time.perf_counter() - t)
                            done[0] += 1
                            if r.status_code != 200:
                                errors.append(r.status_code)
                            j += 1

                before = httpx.get(url + "/v1/stats").json()
                dt = run_clients(client, clients)
                after = httpx.get(url + "/v1/stats").json()
                batches = after["encoder_batches"] - before["encoder_batches"]
                out[f"{'batching' if batching else 'no_batching'}_{clients}"] = {
                    "requests_per_s": done[0] / dt,
                    "p50_ms": float(np.percentile(lat, 50) * 1000),
                    "p95_ms": float(np.percentile(lat, 95) * 1000),
                    "errors": len(errors),
                    "queries_per_encoder_batch": (after["requests"] - before["requests"]) / batches
                    if batches
                    else 0.0,
                }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="checkpoint folder")
    ap.add_argument("--seconds", type=float, default=8.0, help="time box of each measurement")
    ap.add_argument("--output", default="reports/gpu.json")
    ap.add_argument("--skip-serving", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (what it is for) or cpu (a dry run of the script)")
    args = ap.parse_args(argv)
    import torch

    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device: this benchmark needs a GPU (--device cpu for a dry run)")
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    report = {"device": name, "torch": torch.__version__}
    report["training"] = bench_training(args.model, args.seconds)
    print(json.dumps(report["training"]), file=sys.stderr)
    report["encoder"] = bench_encoder(args.model, args.seconds)
    print(json.dumps(report["encoder"]), file=sys.stderr)
    report["agreement"] = bench_agreement(args.model)
    print(json.dumps(report["agreement"]), file=sys.stderr)
    if not args.skip_serving:
        report["serving"] = bench_serving(args.model, args.seconds)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2))
    print(f"| {report['device']} | windows/s |\n|---|---|")
    for k, v in report["training"].items():
        print(f"| training, {k} (bf16) | {v['windows_per_s']:.0f} |")
    for k, v in report["encoder"].items():
        print(f"| encoder, batch 64 x 256, {k} | {v['windows_per_s']:.0f} |")
    ag = report["agreement"]
    print(
        f"| prune(), GPU bf16 vs CPU fp32 on {ag['groups']} groups: keep/drop agreement "
        f"{ag['keep_drop_agreement']:.4f}, compression {ag['compression_gpu_bf16']:.3f} vs "
        f"{ag['compression_cpu_fp32']:.3f} | |"
    )
    for k, v in report.get("serving", {}).items():
        print(
            f"| serve {k} clients: requests/s {v['requests_per_s']:.1f}, p95 {v['p95_ms']:.0f} ms, "
            f"{v['queries_per_encoder_batch']:.1f} queries/batch | |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
