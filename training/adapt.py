"""`pruner adapt --labeled`: a shipped checkpoint adapted to labeled records of the user's own text,
in resumable steps under one output folder:

1. ``split``: the records' query groups cut by document (a group goes where its answer passage's
   title, or without titles its text, hashes) into ``data/train.jsonl``, ``data/calibration.jsonl`` and
   ``data/report.jsonl``, so that questions about one document never sit on both sides;
2. ``train``: fine-tuning from the checkpoint (``model.init_from``) on the train split, with a
   share of the checkpoint's own training data replayed so that it keeps what it knew;
3. ``mix``: the published weights blended with the checkpoint's, the share of fine-tuned weights
   chosen on the calibration split and on general text the report does not use, so that general
   text loses at most ``forget_allowance`` of its compression at the promise
   (:mod:`pruner_model.adaptation.mix`);
4. ``calibrate``: the adapted model's default calibrated on the calibration split beside the
   checkpoint's own calibration slices (its recipe's dev groups, shifted copies and sources), so
   the promise holds on both kinds of text (``calibrate_on="both"``), or on the user's split alone
   (``"yours"``: one threshold, for text that is all the user serves);
5. ``report``: on the report split, never trained or calibrated on: the checkpoint's default,
   the checkpoint recalibrated on the calibration split alone, and the adapted model; with
   ``general_dev``, compression at the promise on general text before and after (what it forgot).

Without a checkpoint (``model=None``) it starts from the bundled encoder with new heads: the
training recipe is :data:`ENCODER_RECIPE` (the default model's), nothing is replayed or blended, the
calibration is that recipe's (relative floor, relevance exponent, shifted copies) on the user's
calibration split alone, and the report measures the trained model.

Each step writes its result into ``adapt.json``; a step whose result is there is not run again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml
from pruner_model.core.memory import TRAINING_MMAP_THRESHOLD
from pruner_model.core.records import iter_jsonl, validate_labeled
from pruner_model.evaluation.groups import group_of

SPLITS = ("train", "calibration", "report")
USER = "user"  # the source name the user's records train under
CALIBRATE_ON = ("both", "yours")
ADAPT_ATTENTION_DROPOUT = 0.0
ENCODER = "the bundled encoder"  # what a run without a checkpoint starts from, as reports name it

# The recipe of a run without a checkpoint: configs/default.yaml's model, train and calibration
# sections (a test holds them equal), its data sections replaced by the user's splits.
ENCODER_RECIPE = {
    "model": {
        "backbone": None,
        "max_length": 256,
        "stride": 64,
        "max_query_length": 48,
        "relevance_loss_weight": 1.0,
        "sentence_loss_weight": 0.5,
        "relevance_distill_weight": 1.0,
    },
    "train": {
        "epochs": 1,
        "batch_size": 16,
        "lr": 8.0e-5,
        "head_lr": 1.0e-3,
        "warmup_ratio": 0.06,
        "scheduler": "linear",
        "mixed_precision": "auto",
        "eval_every": 0,
        "save_every": 100,
        "best_metric": "compression_at_target",
        "group_batches": True,
    },
    "calibration": {
        "target_evidence": 0.95,
        "relative_floors": [0.01, 0.02, 0.05, 0.1, 0.2],
        "relevance_exponents": [0.25, 0.5, 1.0],
        "choose_by": "curve",
        "folds": 5,
        "shifts": ["noisy", "mined", "low_overlap", "low_overlap+noisy"],
        "shift_groups": 300,
        "bf16": "auto",
    },
}


@dataclass
class AdaptSettings:
    labeled: list[str]
    model: str | None  # the checkpoint to adapt; None: the bundled encoder with new heads
    output: str
    shares: tuple[float, float, float] = (0.6, 0.2, 0.2)
    replay_share: float = 0.3  # of the training groups, drawn from the checkpoint's own training data
    replay: list[str] | None = None  # None: the checkpoint's train_config data.train files that exist
    epochs: int = 2
    target: float | None = None  # None: the checkpoint's promise
    confidence: float = 0.8
    general_dev: str | None = None  # labeled general text: what the adaptation forgot
    general_groups: int = 400
    max_train_groups: int | None = None  # of the train split (seeded); None: all of them
    seed: int = 0
    overrides: list[str] = field(default_factory=list)  # key=value of the training config
    corpus: dict | None = None  # `--corpus`: the corpus steps' settings (labeled: what they write)
    calibrate_on: str = "both"  # "both": your split beside the checkpoint's own slices; "yours": yours alone
    # the most compression at the promise general text may lose: the mix step blends the fine-tuned
    # weights with the checkpoint's to stay within it (None: the fine-tuned weights as trained)
    forget_allowance: float | None = 0.02
    # the calibrate, mix and report steps score at most this many query groups of each split (a
    # seeded draw) and the encoder recipe calibrates on as many; None: every group
    sample_groups: int | None = 1000

    def check(self) -> None:
        if len(self.shares) != 3 or any(s <= 0 for s in self.shares):
            raise ValueError("--split needs three shares > 0 (train, calibration, report)")
        if not 0 <= self.replay_share < 1:
            raise ValueError(f"--replay-share must be in [0, 1), got {self.replay_share}")
        if self.max_train_groups is not None and self.max_train_groups < 1:
            raise ValueError(f"--max-train-groups must be >= 1, got {self.max_train_groups}")
        if self.calibrate_on not in CALIBRATE_ON:
            raise ValueError(
                f"--calibrate-on must be one of {', '.join(CALIBRATE_ON)}, got {self.calibrate_on!r}"
            )
        if self.forget_allowance is not None and not 0 <= self.forget_allowance <= 1:
            raise ValueError(f"--forget-allowance must be in [0, 1] (or none), got {self.forget_allowance}")
        if self.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {self.epochs}")
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError("--target-evidence must be in (0, 1]")
        for f in [] if self.corpus else self.labeled:
            if not Path(f).is_file():
                raise ValueError(f"{f}: no such labeled records file")
        if (
            self.general_dev is not None and not Path(self.general_dev).is_file()
        ):  # before training, not after
            raise ValueError(f"--general-dev {self.general_dev}: no such labeled records file")
        if self.general_groups < 1:
            raise ValueError(f"--general-groups must be >= 1, got {self.general_groups}")
        if self.sample_groups is not None and self.sample_groups < 1:
            raise ValueError(f"--sample-groups must be >= 1 (0: all), got {self.sample_groups}")


def sample_of(records: list[dict], groups: int | None, seed: int) -> list[dict]:
    """The records of at most ``groups`` query groups (the first of the seeded permutation), in
    file order; all of them when there are no more groups than that or ``groups`` is None."""
    from pruner_model.evaluation.groups import range_records

    return records if groups is None else range_records(records, seed, 0, groups)


def document_of(records: list[dict]) -> str:
    """The document a query group is about: ``meta.document`` where the records name it (the
    corpus steps do: the document a question was written for), else its answer passage's title,
    else its first passage's; without titles, the text of its answer passage (else its first
    passage), so that questions about one passage stay together."""
    for r in records:
        doc = (r.get("meta") or {}).get("document")
        if isinstance(doc, str) and doc:
            return "document:" + doc
    answered = [r for r in records if r.get("relevant_spans")]
    for r in answered + records:
        if (r.get("title") or "").strip():
            return r["title"].strip()
    return "text:" + (answered or records)[0]["context"]


def split_of(document: str, shares, seed: int) -> str:
    """``train`` / ``calibration`` / ``report`` for a document, by a seeded hash (stable across
    runs and machines)."""
    h = int(hashlib.sha256(f"{seed}\x00{document}".encode()).hexdigest()[:12], 16) / 16**12
    total, edge = sum(shares), 0.0
    for name, share in zip(SPLITS, shares):
        edge += share / total
        if h < edge:
            return name
    return SPLITS[-1]


def split_records(settings: AdaptSettings, out: Path) -> dict:
    """The labeled records cut by document into ``out/data/<split>.jsonl`` (each record's source
    set to ``user``); returns the groups and documents of each split."""
    groups: dict[str, list[dict]] = {}
    for path in settings.labeled:
        for i, rec in enumerate(iter_jsonl(path), 1):
            validate_labeled(rec, f"{path}:{i}")
            groups.setdefault(group_of(rec), []).append(rec)
    if not groups:
        raise ValueError(f"no labeled records in {', '.join(settings.labeled)}")
    counts = {s: {"groups": 0, "documents": set(), "with_answer": 0} for s in SPLITS}
    where: dict[str, str] = {}
    for gid, recs in groups.items():
        doc = document_of(recs)
        s = where[gid] = split_of(doc, settings.shares, settings.seed)
        counts[s]["groups"] += 1
        counts[s]["documents"].add(doc)
        counts[s]["with_answer"] += any(r.get("relevant_spans") for r in recs)
    for s in SPLITS:  # checked before anything is written
        if not counts[s]["with_answer"]:
            raise ValueError(
                f"the {s} split has no question with an answer ({len(groups)} groups in all): "
                "label more questions, or change --split"
            )
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    files = {s: open(data / f"{s}.jsonl.tmp", "w", encoding="utf-8") for s in SPLITS}
    try:
        for gid, recs in groups.items():
            for r in recs:
                meta = dict(r.get("meta") or {}, group=gid, source=USER)
                line = json.dumps({**r, "source": USER, "meta": meta}, ensure_ascii=False)
                files[where[gid]].write(line + "\n")
    finally:
        for f in files.values():
            f.close()
    for s in SPLITS:
        os.replace(data / f"{s}.jsonl.tmp", data / f"{s}.jsonl")
    return {s: {**c, "documents": len(c["documents"])} for s, c in counts.items()}


def _base_train_config(model: str | None) -> dict:
    """The recipe a run starts from: the checkpoint's ``train_config.yaml`` (``{}`` without one),
    or :data:`ENCODER_RECIPE` without a checkpoint."""
    if model is None:
        return copy.deepcopy(ENCODER_RECIPE)
    path = Path(model) / "train_config.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _sources_of(files: list[str]) -> list[str]:
    """The sources of the records of ``files``, in order of first appearance."""
    from pruner_model.evaluation.groups import source_of

    seen: dict[str, None] = {}
    for f in files:
        for rec in iter_jsonl(f):
            seen.setdefault(source_of(rec), None)
    return list(seen)


def replay_files(settings: AdaptSettings) -> list[str]:
    """The general training records replayed: ``settings.replay``, else the checkpoint recipe's
    training files that are on this machine (none: nothing is replayed)."""
    if settings.replay is not None:
        return list(settings.replay)
    train = (_base_train_config(settings.model).get("data") or {}).get("train") or []
    return [f for f in train if Path(f).is_file()]


def training_config(settings: AdaptSettings, out: Path, train_groups: int) -> dict:
    """The fine-tuning config: the checkpoint's own recipe (its ``train_config.yaml``) started from
    the checkpoint, on the train split and a replayed share of the checkpoint's training data, no
    calibration (the calibrate step does it on the user's split). ``train_groups``: the groups of
    the train split; ``settings.max_train_groups`` of them are drawn when it is smaller."""
    if settings.max_train_groups is not None:
        train_groups = min(train_groups, settings.max_train_groups)
    base = _base_train_config(settings.model)
    replay = replay_files(settings)
    share = settings.replay_share if replay else 0.0
    mix = {USER: 1.0 - share}
    if share:
        weights = (base.get("data") or {}).get("mix") or {}
        sources = [s for s in _sources_of(replay) if s != USER]
        known = {s: float(weights.get(s, 0)) for s in sources if weights.get(s)}
        if not known:  # no weights in the recipe: the replayed sources share alike
            known = dict.fromkeys(sources, 1.0)
        total = sum(known.values())
        mix.update({s: share * w / total for s, w in known.items()})
    model = {k: v for k, v in (base.get("model") or {}).items() if v is not None}
    if settings.model is not None:  # else new heads on the recipe's backbone (--set model.backbone=DIR)
        model.update(backbone=None, init_from=str(settings.model))
    # no attention dropout, so that the fused attention kernel runs on a CPU: a third less memory at
    # the peak of a real fine-tuning run (docs/scale-out.md; --set model.attention_dropout=0.1 for the backbone's)
    model["attention_dropout"] = ADAPT_ATTENTION_DROPOUT
    train = {k: v for k, v in (base.get("train") or {}).items() if v is not None}
    train.update(epochs=settings.epochs, max_steps=None, eval_every=0, seed=settings.seed)
    # training's allocator setting whatever the checkpoint was trained with (--set train.malloc_mmap_threshold=N)
    train["malloc_mmap_threshold"] = TRAINING_MMAP_THRESHOLD
    return {
        "model": model,
        "data": {
            "train": [str(out / "data" / "train.jsonl"), *replay],
            "dev": [str(out / "data" / "calibration.jsonl")],
            "max_train_groups": max(1, round(train_groups / (1.0 - share))),
            "mix": mix,
            "max_dev_groups": 200,
            "calibration_dev_groups": 0,
            "report_dev_groups": 0,
            "low_overlap_share": None,
            "calibration_sources": [],
            "seed": settings.seed,
        },
        "train": train,
        "calibration": {"enabled": False},
    }


def general_calibration_config(settings: AdaptSettings, out: Path) -> dict | None:
    """The calibration config of ``calibrate_on="both"``: the checkpoint's own calibration recipe
    (its ``train_config.yaml``: dev groups, their shifted copies, calibration sources, rule) with
    the user's calibration split as one more source (``user``), so that the default keeps the
    promise on the user's text and on what the checkpoint was calibrated on. None when the
    checkpoint has no such recipe, it calibrated nothing, or its files are not on this machine.
    Without a checkpoint: :func:`encoder_calibration_config`."""
    if settings.model is None:
        return encoder_calibration_config(settings, out)
    base = _base_train_config(settings.model)
    data, section = base.get("data") or {}, base.get("calibration") or {}
    dev, sources = data.get("dev") or [], data.get("calibration_sources") or []
    if not dev or section.get("enabled") is False or data.get("calibration_dev_groups") == 0:
        return None
    if not all(Path(f).is_file() for f in [*dev, *sources]):
        return None
    cfg = training_config(replace(settings, replay=[]), out, 1)  # its model and train sections
    del cfg["data"]["seed"]  # the recipe's seed: the same calibration groups as the checkpoint's
    keep = (
        "dev",
        "seed",
        "dedup",
        "calibration_dev_groups",
        "calibration_source_groups",
        "low_overlap_share",
    )
    cfg["data"].update({k: data[k] for k in keep if k in data})
    cfg["data"]["calibration_sources"] = [*sources, str(out / "data" / "calibration.jsonl")]
    cfg["calibration"] = {**section, "enabled": True}
    if settings.target is not None:
        cfg["calibration"]["target_evidence"] = settings.target
    return cfg


def encoder_calibration_config(settings: AdaptSettings, out: Path) -> dict:
    """The calibration config of a run without a checkpoint: :data:`ENCODER_RECIPE`'s calibration
    (relative floor and relevance exponent chosen, the threshold held on shifted copies) on the
    user's calibration split (``sample_groups`` of its groups), nothing else beside it."""
    cfg = training_config(replace(settings, replay=[]), out, 1)  # its model and train sections
    cfg["data"].update(
        dev=[str(out / "data" / "calibration.jsonl")],
        calibration_dev_groups=settings.sample_groups,  # None: every group of the split
        report_dev_groups=0,  # the report step measures the report split
    )
    cfg["calibration"] = {**ENCODER_RECIPE["calibration"], "enabled": True}
    if settings.target is not None:
        cfg["calibration"]["target_evidence"] = settings.target
    return cfg


def _compared(settings: dict, key: str):
    """A setting as a resumed adaptation must match it (the LLM of the corpus steps may change
    between runs: what it wrote is kept)."""
    value = settings.get(key)
    if key == "calibrate_on" and value is None:  # written before the option: calibrated on yours alone
        return "yours"
    if key == "corpus" and value:
        return {k: v for k, v in value.items() if k != "llm_model"}
    return value


@dataclass
class AdaptState:
    """What ``adapt.json`` holds: each finished step's result."""

    settings: dict
    corpus: dict | None = None  # the corpus steps' results, by step
    split: dict | None = None
    train: dict | None = None
    mix: dict | None = None
    calibrate: dict | None = None
    report: dict | None = None

    @classmethod
    def load(cls, out: Path, settings: AdaptSettings) -> AdaptState:
        path = out / "adapt.json"
        mine = asdict(settings)
        if not path.is_file():
            return cls(settings=mine)
        state = cls(**json.loads(path.read_text(encoding="utf-8")))
        keys = (
            "labeled", "model", "shares", "seed", "replay_share", "epochs", "max_train_groups", "corpus",
            "calibrate_on", "forget_allowance",
        )  # fmt: skip
        for key in keys:
            if key == "forget_allowance" and key not in state.settings:  # written before the mix step
                continue
            if json.dumps(_compared(state.settings, key)) != json.dumps(_compared(mine, key)):
                raise ValueError(
                    f"{out} holds an adaptation with another {key} ({state.settings.get(key)!r}): "
                    "use a new --output, or delete it"
                )
        state.settings = mine
        return state

    def save(self, out: Path) -> None:
        tmp = out / "adapt.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")
        os.replace(tmp, out / "adapt.json")
