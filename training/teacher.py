"""The relevance distillation teacher (``model.relevance_distill_weight``): the bundled
bi-encoder's passage score of every training record, and those scores saved with the resumable
state so that a resumed run on the same records does not score them again."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np

TEACHER_FILE = "teacher_scores.npz"  # the relevance teacher's scores, beside the resumable state

logger = logging.getLogger(__name__)


def teacher_fingerprint(teacher: str | None, records: list[dict]) -> str:
    """What the teacher's scores depend on: the teacher and every record's query and passage."""
    h = hashlib.sha256(str(teacher).encode())
    for r in records:
        h.update(f"\x00{r['query']}\x01{r['context']}".encode())
    return h.hexdigest()


def saved_teacher_scores(path: Path, fingerprint: str, n: int) -> np.ndarray | None:
    """The teacher's scores saved at ``path``, when they were computed for exactly these ``n``
    records (their ``fingerprint``); else None: they are computed again."""
    if not path.is_file():
        return None
    with np.load(path) as saved:
        scores, saved_fingerprint = saved["scores"], str(saved["fingerprint"])
    if len(scores) != n or saved_fingerprint != fingerprint:
        return None
    return scores.astype(np.float32)


def teacher_scores(
    accelerator, teacher: str | None, config, precision, records: list[dict], log: bool
) -> np.ndarray:
    """The bi-encoder's passage score (best sentence cosine) of every training record, segmented
    as ``config`` (the model's) says. Launched as several processes, each scores a contiguous
    share of the records and every process gathers all."""
    from accelerate.utils import gather_object
    from pruner_model.core.biencoder import passage_cosines
    from pruner_model.training.backbones import load_teacher

    t0 = time.perf_counter()
    n, rank = accelerator.num_processes, accelerator.process_index
    share = np.array_split(np.arange(len(records)), n)[rank]
    mine = [records[i] for i in share]
    encoder = load_teacher(teacher, precision=precision, device=str(accelerator.device))
    scores = passage_cosines(
        encoder,
        [r["query"] for r in mine],
        [r["context"] for r in mine],
        config.segmenter_language,
        config.segmenter_structure,
    )
    if n > 1:  # every rank's share, in rank order: the records' order
        scores = np.concatenate(gather_object([scores])).astype(np.float32)
    if log:
        split = f" (split over {n} processes)" if n > 1 else ""
        logger.info(
            f"relevance teacher: the {teacher or 'bundled all-MiniLM-L6-v2'} bi-encoder scored {len(records)} passages "
            f"in {time.perf_counter() - t0:.0f} s{split}"
        )
    return scores
