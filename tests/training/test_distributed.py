"""Training with 2 processes (accelerate launch, gloo on CPU): one checkpoint, identical replicas,
resume across the same number of processes, the relevance teacher scored once across them (and
not again on resume)."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.training.helpers import make_records

pytestmark = pytest.mark.slow


def launch(out, data, *extra):
    accelerate = shutil.which("accelerate") or pytest.fail("accelerate is not installed")
    cmd = [
        accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "pruner_model.cli", "train",
        "--output", str(out),
        "--set", f"data.train=[{data[0]}]", "--set", f"data.dev=[{data[1]}]",
        "--set", "train.max_steps=6", "--set", "train.batch_size=2", "--set", "train.eval_every=3",
        "--set", "train.save_every=3", "--set", "train.mixed_precision=no",
        "--set", "data.max_dev_groups=2", "--set", "data.calibration_dev_groups=2", "--set", "data.report_dev_groups=0",
        "--set", "model.max_length=64", "--set", "model.stride=16", "--set", "model.max_query_length=16",
        "--set", "model.relevance_distill_weight=1.0", "--set", "train.group_batches=true",
        *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_two_processes_train_one_checkpoint_and_resume(tmp_path):
    recs = make_records()
    data = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    data[0].write_text("".join(json.dumps(r) + "\n" for r in recs))
    data[1].write_text("".join(json.dumps(r) + "\n" for r in recs[:8]))
    full = launch(tmp_path / "full", data)
    assert full.returncode == 0, full.stderr[-3000:]
    assert "weights identical on 2 processes" in full.stderr
    # each process scored half of the training passages; every process trained on all the scores
    assert re.search(r"bi-encoder scored \d+ passages in \d+ s \(split over 2 processes\)", full.stderr)
    assert full.stdout.count('"output"') == 1  # the summary is printed once, by the main process
    state = tmp_path / "full.trainer" / "last"
    assert {"random_states_0.pkl", "random_states_1.pkl"} <= {p.name for p in state.iterdir()}
    assert (tmp_path / "full" / "model.safetensors").is_file() and (tmp_path / "full" / "README.md").is_file()
    cut = launch(tmp_path / "cut", data, "--stop-after", "3")
    assert "stopped at step 3/6" in cut.stderr, cut.stderr[-3000:]  # (torchrun reports the 130 as a failure)
    resumed = launch(tmp_path / "cut", data, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed at step 3" in resumed.stderr and "weights identical on 2 processes" in resumed.stderr
    assert "passage scores taken from the resumed state" in resumed.stderr  # not scored again
    from safetensors.torch import load_file

    a, b = (
        load_file(str(tmp_path / "full" / "model.safetensors")),
        load_file(str(tmp_path / "cut" / "model.safetensors")),
    )
    assert all((a[k] - b[k]).abs().max() < 1e-5 for k in a)  # resuming on 2 processes is exact
    assert sys.executable  # (the launcher runs this interpreter's accelerate)
