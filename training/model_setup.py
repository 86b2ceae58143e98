"""The model and optimizer groups a training run starts from."""

from __future__ import annotations

from pruner_model.core.configuration import check_fits, encoder_positions
from pruner_model.core.modeling import PrunerModel, build_encoder
from pruner_model.training.config import TrainConfig


def param_groups(model: PrunerModel, cfg: TrainConfig):
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")
    groups = {(False, True): [], (False, False): [], (True, True): [], (True, False): []}  # encoder first
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_head = not name.startswith("encoder.")
        decay = not any(name.endswith(nd) for nd in no_decay)
        groups[(is_head, decay)].append(p)
    t = cfg.train
    return [
        {"params": ps, "lr": t.head_lr if head else t.lr, "weight_decay": t.weight_decay if decay else 0.0}
        for (head, decay), ps in groups.items()
        if ps
    ]


def build_model(cfg: TrainConfig):
    from pruner_model.core.modeling import default_backbone_path
    from transformers import AutoTokenizer

    m = cfg.model
    if m.init_from:
        model = PrunerModel.from_pretrained(m.init_from)
        tok = AutoTokenizer.from_pretrained(m.init_from)
        for k, v in m.overrides().items():  # what the config sets; the checkpoint keeps the rest
            setattr(model.config, k, v)
    else:
        path = m.backbone or str(default_backbone_path())
        model = PrunerModel.from_backbone(path, **m.overrides())
        tok = AutoTokenizer.from_pretrained(path)
    if m.attention_dropout is not None:
        set_attention_dropout(model, m.attention_dropout)
    if not getattr(tok, "is_fast", False):
        raise ValueError("the backbone needs a fast tokenizer (offset mapping)")
    max_pos = encoder_positions(model.config.encoder_config)
    if max_pos is not None and model.config.max_length > max_pos:
        raise ValueError(
            f"model.max_length {model.config.max_length} is over the backbone's {max_pos} positions: every longer "
            "window would fail at inference"
        )
    check_fits(model.config, tok, "the backbone")
    return model, tok


# where encoders keep the dropout on their attention probabilities (BERT, XLM-R, DeBERTa, ...;
# DistilBERT, ModernBERT)
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout")


def set_attention_dropout(model: PrunerModel, p: float) -> None:
    """Set the encoder's attention dropout to ``p`` (``model.attention_dropout``): written into its
    config, which the encoder is rebuilt from (each architecture reads it when it builds its
    layers) with the same weights."""
    encoder_config = model.config.encoder_config
    keys = [k for k in ATTENTION_DROPOUT_KEYS if hasattr(encoder_config, k)]
    if not keys:
        raise ValueError(
            f"model.attention_dropout: the {encoder_config.model_type} encoder has no attention dropout to set"
        )
    for key in keys:
        setattr(encoder_config, key, p)
    weights = model.encoder.state_dict()
    model.encoder = build_encoder(model.config)
    model.encoder.load_state_dict(weights)


def forget_other_precision(mixed_precision: str) -> None:
    """accelerate keeps one process-wide state and refuses a second ``Accelerator`` with another
    mixed precision; a second run in the same process (a notebook, a test) may choose another.
    Only the precision part is dropped: the process group of a distributed launch stays."""
    from accelerate.state import AcceleratorState

    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") not in (None, mixed_precision):
        AcceleratorState._reset_state(reset_partial_state=False)
