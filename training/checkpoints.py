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


def check_replicas(accelerator, model) -> str:
    """A digest of the weights, checked equal on every process (data-parallel replicas must not
    drift); raises RuntimeError when they differ."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        h.update(p.detach().float().cpu().numpy().tobytes())
    digest = h.hexdigest()[:16]
    if accelerator.num_processes > 1:
        code = torch.tensor([int(digest, 16) % (2**62)], device=accelerator.device)
        every = accelerator.gather(code)
        if not bool((every == every[0]).all()):
            raise RuntimeError("the processes' weights differ: data-parallel training went out of sync")
    return digest


def state_dir_of(output: str | Path) -> Path:
    """Where the resumable state of the run published in ``output`` lives."""
    output = Path(output)
    return output.with_name(output.name + ".trainer")


def save_resumable(accelerator, state_dir: Path, extras) -> None:
    """accelerate's state (every process saves its part, its RNG state) and ``extras(folder)``
    (written by the main process) into a folder swapped in whole as ``state_dir``: a crash while
    saving leaves the previous state."""
    tmp = state_dir.with_name(state_dir.name + ".tmp")
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        extras(tmp)
        swap_in(tmp, state_dir)
    accelerator.wait_for_everyone()
