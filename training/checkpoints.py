"""Folders swapped in whole: a crash while saving leaves the previous complete version."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def swap_in(tmp: Path, path: Path) -> None:
    """Replace the folder ``path`` by ``tmp``; at every moment one complete version exists
    (``path`` or ``path.old``)."""
    old = path.with_name(path.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    if old.exists():
        shutil.rmtree(old)


def recover(path: Path) -> None:
    """After a crash inside :func:`swap_in`: bring back the complete previous version."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.exists():
        os.replace(old, path)


def save_checkpoint(model, tokenizer, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    swap_in(tmp, path)
