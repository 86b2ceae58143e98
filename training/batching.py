"""Batches for training: windows of similar length (of whole groups with ``train.group_batches``)
drawn in a seeded order per epoch, padded by :class:`Collator`; :func:`build_loader` puts them
together."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pruner_model.core.alignment import IGNORE_INDEX
from pruner_model.core.scoring import pad_rows, pad_value


def window_lengths(ds) -> np.ndarray:
    """Tokens per window of a tokenized set, read from Arrow offsets (no Python lists)."""
    import pyarrow.compute as pc

    return pc.list_value_length(ds.data.column("input_ids")).to_numpy()


class LengthGroupedBatches:
    """Deterministic batches of similar lengths: shuffle (seeded by epoch), sort inside chunks of
    ``50 * batch_size`` by length, cut into batches, shuffle the batches. Less padding, same
    order for the same (seed, epoch), which makes resuming exact."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, mega: int = 50):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.mega = mega
        self.epoch = 0

    def for_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (not named set_epoch: accelerate would call that with its own
        per-loader counter, which restarts at 0 in a resumed run)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return (len(self.lengths) + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng(self.seed + 1000 * self.epoch)
        perm = rng.permutation(len(self.lengths))
        chunk = self.batch_size * self.mega
        batches = []
        for c in range(0, len(perm), chunk):
            part = perm[c : c + chunk]
            part = part[np.argsort(-self.lengths[part], kind="stable")]
            batches += [part[i : i + self.batch_size].tolist() for i in range(0, len(part), self.batch_size)]
        order = rng.permutation(len(batches))
        return iter([batches[i] for i in order])


class GroupedBatches(LengthGroupedBatches):
    """Batches of whole query groups (every window of a group's passages in one batch), so the
    sentence ranking loss can rank an answer sentence against the distractor passages of its
    query. Groups are shuffled (seeded by epoch), sorted by length inside chunks of about
    ``mega`` batches, and packed in that order into batches of at most ``batch_size`` windows;
    a group with more windows than that is cut. Deterministic per (seed, epoch) like its parent."""

    def __init__(self, lengths: np.ndarray, groups: np.ndarray, batch_size: int, seed: int, mega: int = 50):
        super().__init__(lengths, batch_size, seed, mega)
        groups = np.asarray(groups)
        order = np.argsort(groups, kind="stable")
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        self.members = np.split(order, cuts) if len(order) else []  # window indices of each group
        self.group_length = np.array([self.lengths[m].max() for m in self.members], dtype=np.int64)

    def __len__(self) -> int:  # packing depends on the order: count this epoch's batches
        return len(self._batches())

    def _pack(self, group_order: np.ndarray) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        for g in group_order:
            m = self.members[g].tolist()
            if current and len(current) + len(m) > self.batch_size:
                batches.append(current)
                current = []
            while len(m) > self.batch_size:  # a group larger than a batch: cut it
                batches.append(m[: self.batch_size])
                m = m[self.batch_size :]
            current += m
        if current:
            batches.append(current)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng(self.seed + 1000 * self.epoch)
        perm = rng.permutation(len(self.members))
        per_chunk = max(1, self.mega * self.batch_size * len(self.members) // max(1, len(self.lengths)))
        ordered = []
        for c in range(0, len(perm), per_chunk):
            part = perm[c : c + per_chunk]
            ordered.append(part[np.argsort(-self.group_length[part], kind="stable")])
        batches = self._pack(np.concatenate(ordered) if ordered else perm)
        order = rng.permutation(len(batches))
        return [batches[i] for i in order]


class Collator:
    """Pads a list of windows to the longest one; labels pad with IGNORE_INDEX. With ``groups``,
    the batch also carries each window's query group (for the group-wide ranking loss)."""

    def __init__(self, pad_token_id: int, input_names: list[str], groups: bool = False):
        self.pad = pad_token_id
        self.input_names = input_names
        self.groups = groups

    def __call__(self, rows: list[dict]):
        import torch

        width = max(len(r["input_ids"]) for r in rows)
        out = {}
        for name in [*self.input_names, "labels", "sentence_ids"]:
            if name not in rows[0]:
                continue
            fill = {"labels": IGNORE_INDEX, "sentence_ids": -1}.get(name, pad_value(name, self.pad))
            out[name] = torch.from_numpy(pad_rows([r[name] for r in rows], fill, width))
        out["relevance_labels"] = torch.tensor([r["relevance"] for r in rows], dtype=torch.float32)
        if self.groups:
            out["groups"] = torch.tensor([r["group"] for r in rows], dtype=torch.int64)
        if "teacher" in rows[0]:
            out["teacher_scores"] = torch.tensor([r["teacher"] for r in rows], dtype=torch.float32)
        return out


def build_loader(ds, tokenizer, t):
    """The training loader over the tokenized windows ``ds`` (``t``: the ``train:`` section):
    batches of similar length (of whole groups with ``group_batches``); returns it and its batch
    sampler (reseeded each epoch)."""
    import torch

    input_names = [n for n in tokenizer.model_input_names if n in ds.column_names]
    lengths = window_lengths(ds)
    if t.group_batches:
        sampler = GroupedBatches(lengths, ds.data.column("group").to_numpy(), t.batch_size, t.seed)
    else:
        sampler = LengthGroupedBatches(lengths, t.batch_size, t.seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_sampler=sampler,
        collate_fn=Collator(tokenizer.pad_token_id or 0, input_names, groups=t.group_batches),
        num_workers=t.num_workers,
        # its own generator: creating an iterator draws a seed, which must not shift the global
        # RNG (dropout) differently in a resumed run than in an uninterrupted one
        generator=torch.Generator().manual_seed(t.seed),
    )
    return loader, sampler
