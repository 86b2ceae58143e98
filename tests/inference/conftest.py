"""Fixtures of the inference tests."""

import pytest


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, _tiny_bert, bert_tokenizer):
    """A tiny saved checkpoint shared by one test module (its live server, its CLI runs)."""
    path = tmp_path_factory.mktemp("module") / "ckpt"
    _tiny_bert.save_pretrained(path)
    bert_tokenizer.save_pretrained(path)
    return path
