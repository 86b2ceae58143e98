"""Fixtures of the training tests."""

import json

import pytest

from tests.training.helpers import make_records


@pytest.fixture
def data_files(tmp_path):
    recs = make_records()
    train_f, dev_f = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train_f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    dev_f.write_text("".join(json.dumps(r) + "\n" for r in recs[:8]))
    return train_f, dev_f
