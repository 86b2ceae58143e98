"""Resident memory of `pruner train` as the training data grows: runs the same short training on
1x and 4x the training groups (a subprocess each) and prints the process's RSS at intervals, the
RSS once the data is loaded, and the peak.

    python3 benchmarks/bench_train_memory.py --config configs/reference.yaml --scales 1 4 --steps 150
    python3 benchmarks/bench_train_memory.py --bare --steps 240   # the training loop alone

Only the data size changes between runs (same steps, batch size, dev slice); calibration and the
report slice are off, so the numbers are the data and the training loop. ``--env NAME=VALUE``
(repeatable) sets variables for the training processes; ``--set KEY=VALUE`` overrides the config,
e.g. ``train.malloc_mmap_threshold=0`` for glibc's adaptive allocator (the default maps blocks of 16 MiB
and more).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mb(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(m.group(1)) / 1024 if m else None


def run(
    config: str, groups: int, steps: int, interval: float, env: dict, out_dir: Path, overrides: list[str]
) -> dict:
    log = out_dir / f"train-{groups}.log"
    cmd = [
        sys.executable, "-m", "pruner_model.cli", "train", "--config", config, "--output", str(out_dir / f"m{groups}"),
        "--set", f"data.max_train_groups={groups}", "--set", f"train.max_steps={steps}",
        "--set", "train.eval_every=0", "--set", f"train.save_every={steps}", "--set", "calibration.enabled=false",
        "--set", "data.report_dev_groups=0", "--set", "data.max_dev_groups=50",
        *[a for o in overrides for a in ("--set", o)],
    ]  # fmt: skip
    t0 = time.perf_counter()
    samples: list[tuple[float, float, int | None]] = []
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})
        while proc.poll() is None:
            mb = rss_mb(proc.pid)
            if mb is not None:
                samples.append((time.perf_counter() - t0, mb, _step(log)))
            time.sleep(interval)
    if proc.returncode != 0:
        raise SystemExit(f"training on {groups} groups failed (exit {proc.returncode}): see {log}")
    text = log.read_text(errors="replace")
    windows = re.search(r"(\d+) windows", text)
    first_step = next((mb for _, mb, step in samples if step), None)
    return {
        "groups": groups,
        "windows": int(windows.group(1)) if windows else None,
        "rss_at_first_step_mb": first_step,
        "peak_rss_mb": max(mb for _, mb, _ in samples),
        "samples": samples,
        "seconds": time.perf_counter() - t0,
    }


def _step(log: Path) -> int | None:
    tail = log.read_bytes()[-400:].decode(errors="replace")
    found = re.findall(r"training:\s+\d+%\|[^|]*\|\s*(\d+)/\d+", tail)
    return int(found[-1]) if found else None


def bare_loop(steps: int, threshold: int, fixed_length: bool, attention_dropout: float | None = None) -> None:
    """The training loop alone (bundled MiniLM, AdamW, random windows, bf16 autocast where it is
    native): RSS every 20 steps and its highest after any step, with batch shapes that change every
    step (60-256 tokens) or one fixed shape; ``attention_dropout`` as ``model.attention_dropout``."""
    import torch
    from pruner_model.core.memory import fix_mmap_threshold
    from pruner_model.core.precision import resolve_precision
    from pruner_model.training.config import load_config
    from pruner_model.training.model_setup import build_model

    fix_mmap_threshold(threshold)
    bf16 = resolve_precision("auto", "cpu") == "bf16"
    print(f"  precision: {'bf16' if bf16 else 'fp32'}", flush=True)
    torch.manual_seed(0)
    cfg = load_config(None)
    cfg.model.attention_dropout = attention_dropout
    model, _ = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(0)
    t0, peak = time.perf_counter(), 0.0
    for step in range(1, steps + 1):
        n = 160 if fixed_length else int(torch.randint(60, 257, (1,), generator=g))
        ids = torch.randint(1000, 20000, (16, n), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                labels=torch.randint(0, 2, (16, n), generator=g),
                relevance_labels=torch.ones(16),
            )
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        rss = rss_mb(os.getpid())
        peak = max(peak, rss)
        if step % 20 == 0:
            rate = (time.perf_counter() - t0) / step
            print(
                f"  step {step}: {rss:.0f} MB, peak after a step {peak:.0f} MB ({rate:.2f} s/step)",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/reference.yaml")
    ap.add_argument("--base-groups", type=int, default=4500, help="training groups at scale 1")
    ap.add_argument("--scales", type=float, nargs="+", default=[1, 4])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every run, e.g. train.malloc_mmap_threshold=0 (glibc's default)",
    )
    ap.add_argument("--output", default=None, help="write all samples here (JSON)")
    ap.add_argument(
        "--bare",
        action="store_true",
        help="instead: the training loop alone, glibc's adaptive threshold vs fixed ones (16 MiB, 64 KiB), "
        "varied vs fixed shapes, the backbone's attention dropout vs none (model.attention_dropout=0)",
    )
    args = ap.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    if args.bare:
        from pruner_model.core.memory import TRAINING_MMAP_THRESHOLD

        mib16 = TRAINING_MMAP_THRESHOLD
        for threshold, fixed, dropout in (
            (0, False, None), (mib16, False, None), (65536, False, None), (0, True, None), (mib16, False, 0.0)
        ):  # fmt: skip
            label = f"mmap threshold {threshold or 'adaptive'}, {'fixed' if fixed else 'varied'} shapes"
            print(label + ("" if dropout is None else f", attention dropout {dropout}"), flush=True)
            code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_train_memory as b; "
            code += f"b.bare_loop({args.steps}, {threshold}, {fixed}, {dropout})"
            subprocess.run(
                [sys.executable, "-c", code],
                check=True,
                env={**os.environ, **env},
            )
        return 0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales:
            groups = int(args.base_groups * scale)
            r = run(args.config, groups, args.steps, args.interval, env, Path(tmp), args.set)
            results.append(r)
            print(
                f"scale {scale:g} ({r['groups']} groups, {r['windows']} windows): RSS over time (s: MB @ step)"
            )
            for t, mb, step in r["samples"][:: max(1, len(r["samples"]) // 12)]:
                print(f"  {t:6.0f}: {mb:7.0f} @ {step}")
    print("\n| training groups | windows | RSS at the first step (MB) | peak RSS (MB) |\n|---|---|---|---|")
    for r in results:
        print(
            f"| {r['groups']} | {r['windows']} | {r['rss_at_first_step_mb']:.0f} | {r['peak_rss_mb']:.0f} |"
        )
    if args.output:
        Path(args.output).write_text(json.dumps({"env": env, "set": args.set, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
