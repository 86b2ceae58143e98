"""model.attention_dropout: the encoder's attention dropout set for training, its weights kept, and at
0 PyTorch's fused attention kernel (which takes no dropout) runs a training step on the CPU."""

from __future__ import annotations

import pytest
import torch
from pruner_model.core.configuration import PrunerConfig
from pruner_model.core.modeling import PrunerModel
from pruner_model.training import model_setup
from pruner_model.training.config import ConfigError, ModelSection, TrainConfig
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import BertConfig


def _tiny() -> PrunerModel:
    torch.manual_seed(0)
    encoder = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=200
    )
    return PrunerModel(PrunerConfig(encoder_config=encoder, sep_token_id=102))


def _dropouts(model: PrunerModel) -> dict[str, float]:
    return {n: m.p for n, m in model.encoder.named_modules() if isinstance(m, torch.nn.Dropout)}


def _train_step(model: PrunerModel) -> None:
    model.train()
    ids = torch.randint(103, 200, (3, 40))
    ids[:, 0], ids[:, 8] = 101, 102
    mask = torch.ones_like(ids)
    mask[2, 30:] = 0  # a padded row: the kernel must take the mask too
    out = model(input_ids=ids, attention_mask=mask)
    (out.token_logits.sum() + out.relevance_logits.sum()).backward()


def test_it_sets_the_attention_dropout_alone_and_keeps_the_weights():
    model = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model_setup.set_attention_dropout(model, 0.0)
    dropouts = _dropouts(model)
    assert {p for n, p in dropouts.items() if n.endswith("attention.self.dropout")} == {0.0}
    assert {p for n, p in dropouts.items() if not n.endswith("attention.self.dropout")} == {0.1}
    assert model.config.encoder_config.attention_probs_dropout_prob == 0.0  # saved with the checkpoint
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_at_zero_a_training_step_runs_on_the_fused_kernel():
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # only the fused kernel may run
        with pytest.raises(RuntimeError, match="No available kernel"):
            _train_step(_tiny())  # the backbone's 0.1: the fused kernel takes no dropout
        model = _tiny()
        model_setup.set_attention_dropout(model, 0.0)
        _train_step(model)
    assert all(p.grad is not None for p in model.encoder.parameters() if p.requires_grad)


def test_build_model_applies_it_to_the_bundled_backbone():
    cfg = TrainConfig()
    cfg.model = ModelSection(attention_dropout=0.0)
    model, _ = model_setup.build_model(cfg)
    assert model.config.encoder_config.attention_probs_dropout_prob == 0.0
    assert {p for n, p in _dropouts(model).items() if n.endswith("attention.self.dropout")} == {0.0}


def test_bad_values_and_encoders_without_it_are_one_line_errors(monkeypatch):
    with pytest.raises(ConfigError, match=r"model.attention_dropout must be in \[0, 1\), got 1.5"):
        ModelSection(attention_dropout=1.5)
    monkeypatch.setattr(model_setup, "ATTENTION_DROPOUT_KEYS", ("no_such_key",))
    with pytest.raises(ValueError, match="the bert encoder has no attention dropout to set"):
        model_setup.set_attention_dropout(_tiny(), 0.0)
