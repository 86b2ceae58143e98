"""Shared fixtures: tiny random models built from configs, tokenizers loaded from disk (no network)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, DistilBertConfig

from pruner_model import PrunerConfig, PrunerModel, default_backbone_path


@pytest.fixture(scope="session", autouse=True)
def _own_export_cache(tmp_path_factory):
    """A cache of checkpoint exports of the tests' own (``PRUNER_CACHE``): an export cached on
    this machine (``pruner export --cache``) never changes what a test's no-flag load runs; and
    no-flag loads build no int8 export (``PRUNER_AUTO_INT8=0``), so that a test runs the same
    encoder on every CPU class (tests/export/test_int8_build.py turns it on)."""
    import os

    before = {k: os.environ.get(k) for k in ("PRUNER_CACHE", "PRUNER_AUTO_INT8")}
    os.environ["PRUNER_CACHE"] = str(tmp_path_factory.mktemp("export_cache"))
    os.environ["PRUNER_AUTO_INT8"] = "0"
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def bert_tokenizer():
    """The bundled MiniLM WordPiece tokenizer (has token_type_ids)."""
    return AutoTokenizer.from_pretrained(str(default_backbone_path()))


@pytest.fixture(scope="session")
def no_tti_tokenizer(tmp_path_factory):
    """The same vocabulary, but a tokenizer that returns no token_type_ids (like RoBERTa), and
    keeps saying so after save_pretrained/from_pretrained."""
    path = tmp_path_factory.mktemp("no_tti")
    AutoTokenizer.from_pretrained(str(default_backbone_path())).save_pretrained(path)
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["model_input_names"] = ["input_ids", "attention_mask"]
    cfg_file.write_text(json.dumps(cfg))
    return AutoTokenizer.from_pretrained(str(path))


def read_threshold(path) -> float:
    """The default threshold stored in a checkpoint or export folder's config.json."""
    from pathlib import Path

    return float(json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))["threshold"])


def tiny_config(kind: str = "bert", **kwargs) -> PrunerConfig:
    if kind == "bert":
        enc = BertConfig(
            vocab_size=30522,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
    else:
        enc = DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
    kwargs.setdefault("max_length", 128)
    kwargs.setdefault("stride", 16)
    kwargs.setdefault("max_query_length", 32)
    kwargs.setdefault("sep_token_id", 102)
    return PrunerConfig(encoder_config=enc, **kwargs)


@pytest.fixture(scope="session")
def _tiny_bert():
    torch.manual_seed(0)
    return PrunerModel(tiny_config("bert")).eval()


@pytest.fixture
def tiny_model(_tiny_bert):
    """A fresh copy of a tiny random BERT pruner (hidden 32, 2 layers) for each test."""
    return copy.deepcopy(_tiny_bert)


@pytest.fixture
def tiny_checkpoint(tmp_path, tiny_model, bert_tokenizer):
    """A saved checkpoint folder of the tiny model with its tokenizer."""
    path = tmp_path / "ckpt"
    tiny_model.save_pretrained(path)
    bert_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, _tiny_bert, bert_tokenizer):
    """A tiny saved checkpoint shared by one test module (its live server, its CLI runs, its adapters)."""
    path = tmp_path_factory.mktemp("module") / "ckpt"
    _tiny_bert.save_pretrained(path)
    bert_tokenizer.save_pretrained(path)
    return path
