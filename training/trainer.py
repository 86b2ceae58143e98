"""The training loop (``accelerate``) as a small :class:`Trainer`: set up, step, evaluate,
checkpoint and resume; then calibrate, report and publish (:mod:`pruner_model.training.publish`).

Output layout::

    OUT/                 the published checkpoint: config.json (calibrated threshold),
                         model.safetensors, tokenizer files, README.md (model card),
                         metrics.json, train_config.yaml
    OUT.trainer/last/    resumable state (model, optimizer, scheduler, RNG, data position, and the
                         relevance teacher's scores, so that a resumed run does not score again)
    OUT.trainer/best/    the best checkpoint so far by ``train.best_metric``

The state lives beside the published folder, so ``OUT`` can be uploaded to a model hub as is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from pruner_model.core.memory import fix_mmap_threshold, trim_heap
from pruner_model.core.precision import machine_info, resolve_precision
from pruner_model.evaluation.groups import load_range
from pruner_model.evaluation.scorer import encode_groups
from pruner_model.training.averaging import FILE as AVERAGE_FILE
from pruner_model.training.averaging import WeightAverage
from pruner_model.training.batching import build_loader
from pruner_model.training.checkpoints import check_replicas, recover, save_resumable, state_dir_of
from pruner_model.training.config import TrainConfig
from pruner_model.training.data import augment_noise, read_records, tokenize_records
from pruner_model.training.dev_eval import evaluate_step
from pruner_model.training.model_setup import build_model, forget_other_precision, param_groups
from pruner_model.training.publish import TrainingDiverged, publish_best
from pruner_model.training.teacher import (
    TEACHER_FILE,
    saved_teacher_scores,
    teacher_fingerprint,
    teacher_scores,
)
from tqdm.auto import tqdm

STATE_FILE = "trainer_state.json"


logger = logging.getLogger(__name__)


class Trainer:
    """One training run into ``output``; :meth:`fit` trains, :meth:`finalize` calibrates and
    publishes. ``model``/``tokenizer`` replace the configured backbone (tests pass a tiny one)."""

    def __init__(self, cfg: TrainConfig, output: str | Path, model=None, tokenizer=None, quiet: bool = False):
        self.teacher = None  # (scores, fingerprint) of the relevance teacher, when distilling
        self.cfg, self.out, self.quiet = cfg, Path(output), quiet
        self.model, self.tokenizer = model, tokenizer
        self.state_root = state_dir_of(self.out)
        self.state_dir, self.best_dir = self.state_root / "last", self.state_root / "best"
        self.state = {
            "step": 0,
            "epoch": 0,
            "batch_in_epoch": 0,
            "best": None,
            "best_step": None,
            "history": [],
        }

    def setup(self, resume: bool = False) -> None:
        """Model, data, loader, optimizer and scheduler, through accelerate (which wants them
        prepared together, in this order); the saved state on ``resume``."""
        from accelerate.utils import set_seed

        t = self.cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        fix_mmap_threshold(t.malloc_mmap_threshold)
        self._start_accelerator()
        set_seed(t.seed)
        self._check_run_folder(resume)
        if self.model is None:
            self.model, self.tokenizer = build_model(self.cfg)
        self.model.encoder_chunks = t.length_chunks
        if t.freeze_word_embeddings:
            self.model.encoder.get_input_embeddings().weight.requires_grad_(False)
        self._load_data(resume)
        loader, self.sampler = self._build_loader()
        # with N processes the loader is sharded: each optimizer step consumes N batches
        self.loader = self.accelerator.prepare(loader)
        steps_per_epoch = math.ceil(len(self.loader) / t.grad_accum)
        self.total_steps = t.max_steps or max(1, math.ceil(steps_per_epoch * t.epochs))
        self._prepare_optimizer()
        self.unwrapped = self.accelerator.unwrap_model(self.model)
        self.average = WeightAverage(self.unwrapped, t.ema_decay) if t.ema_decay else None
        if resume:
            self._load_state()
        trim_heap()  # what reading, tokenizing and the teacher's scoring freed goes back before training
        if self.is_main:  # the run folder appears only once the model and data are set up
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / "train_config.yaml", "w", encoding="utf-8") as fh:
                yaml.safe_dump(self.cfg.to_dict(), fh, sort_keys=False)

    def _start_accelerator(self) -> None:
        """The precision (auto: bf16 where it is native, GPU with bf16 or CPU with AVX-512 BF16 or
        AMX, else fp32) and the accelerator; CPU processes (gloo) when launched as several."""
        from accelerate import Accelerator

        t = self.cfg.train
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.precision = resolve_precision(t.mixed_precision, device, purpose="training")
        self.machine = machine_info(device)
        mixed = "no" if self.precision == "fp32" else self.precision
        forget_other_precision(mixed)
        self.accelerator = Accelerator(
            mixed_precision=mixed, gradient_accumulation_steps=t.grad_accum, cpu=device == "cpu"
        )

    def _check_run_folder(self, resume: bool) -> None:
        """A state to resume, or none to overwrite; half-swapped state folders recovered first."""
        for folder in (self.state_dir, self.best_dir):
            recover(folder)
        if resume and not (self.state_dir / STATE_FILE).is_file():
            raise FileNotFoundError(f"nothing to resume for {self.out} (no {self.state_dir / STATE_FILE})")
        if not resume and self.state_root.exists():
            raise FileExistsError(
                f"{self.out} already has a run ({self.state_root}): pass --resume to continue or choose "
                "another --output"
            )
        self.accelerator.wait_for_everyone()  # every rank checked before rank 0 creates anything

    def _prepare_optimizer(self) -> None:
        from transformers import get_scheduler

        t = self.cfg.train
        optimizer = torch.optim.AdamW(param_groups(self.model, self.cfg))
        n = self.accelerator.num_processes  # accelerate steps a prepared scheduler once per process
        scheduler = get_scheduler(
            t.scheduler,
            optimizer,
            num_warmup_steps=int(t.warmup_ratio * self.total_steps) * n,
            num_training_steps=self.total_steps * n,
        )
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(
            self.model, optimizer, scheduler
        )

    def _load_state(self) -> None:
        """The resumable state: weights, optimizer, scheduler, RNG, the weight average and the
        data position."""
        saved = (self.state_dir / AVERAGE_FILE).is_file()
        if saved != (self.average is not None):  # the average would be dropped, or is not there
            raise ValueError(
                f"{self.state_dir / AVERAGE_FILE} {'exists' if saved else 'is missing'}: the run was "
                f"started with{'' if saved else 'out'} train.ema_decay (resume it with the same setting)"
            )
        self.accelerator.load_state(str(self.state_dir))
        if self.average is not None:
            self.average.load(self.state_dir)
        self.state = json.loads((self.state_dir / STATE_FILE).read_text())
        if not self.quiet:
            s = self.state
            logger.info(f"resumed at step {s['step']} (epoch {s['epoch']}, batch {s['batch_in_epoch']})")

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def _load_data(self, resume: bool = False) -> None:
        d, mc = self.cfg.data, self.model.config
        for f in d.calibration_sources or []:  # read only after training: a missing one must stop it now
            if not Path(f).is_file():
                raise FileNotFoundError(
                    f"data.calibration_sources: {f}: no such file (build it with 'pruner data qa')"
                )
        train_records, train_report = read_records(
            d.train, d.max_train_groups, d.dedup, d.seed, d.low_overlap_share, d.mix
        )
        dev_records, dev_report = read_records(d.dev, None, d.dedup, d.seed)
        if not train_records:
            raise ValueError("no training records left after validation")
        if d.noise_augment:
            train_records = augment_noise(train_records, d.noise_augment, d.seed)
        teacher, self.teacher = None, None
        if mc.relevance_distill_weight > 0:
            fingerprint = teacher_fingerprint(self.cfg.model.relevance_teacher, train_records)
            saved = self.state_dir / TEACHER_FILE
            teacher = saved_teacher_scores(saved, fingerprint, len(train_records)) if resume else None
            if teacher is not None and not self.quiet and self.is_main:
                logger.info(f"relevance teacher: {len(teacher)} passage scores taken from the resumed state")
            if teacher is None:
                teacher = self._teacher_scores(train_records)
            self.teacher = teacher, fingerprint
        self.train_ds = tokenize_records(
            train_records,
            self.tokenizer,
            mc.max_length,
            mc.stride,
            mc.max_query_length,
            train_report,
            teacher=teacher,
        )
        self.dev_records = dev_records
        eval_groups = load_range(
            dev_records, d.seed, 0, d.max_dev_groups, mc.segmenter_language, mc.segmenter_structure
        )
        self.dev = encode_groups(eval_groups, self.tokenizer, mc) if eval_groups else None
        if not self.quiet and self.is_main:
            logger.info(
                f"precision: {self.precision} (train.mixed_precision: {self.cfg.train.mixed_precision}) "
                f"on {self.machine.describe()}, torch CPU capability {self.machine.cpu_capability}"
            )
            logger.info(train_report.line("train"))
            logger.info(dev_report.line("dev") + (f" (eval on {len(self.dev)} groups)" if self.dev else ""))

    def _teacher_scores(self, records: list[dict]) -> np.ndarray:
        return teacher_scores(
            self.accelerator,
            self.cfg.model.relevance_teacher,
            self.model.config,
            self.precision,
            records,
            log=not self.quiet and self.is_main,
        )

    def _build_loader(self):
        return build_loader(self.train_ds, self.tokenizer, self.cfg.train)

    def step(self, batch) -> torch.Tensor:
        """Forward, backward, clip, optimizer and scheduler step (under gradient accumulation)."""
        t = self.cfg.train
        with self.accelerator.accumulate(self.model):
            loss = self.model(**batch).loss
            if not torch.isfinite(loss.detach()):
                raise TrainingDiverged(
                    f"the loss is {loss.item()} at step {self.state['step'] + 1}: training diverged "
                    "(lower train.lr or raise train.max_grad_norm clipping); nothing from this step was saved"
                )
            self.accelerator.backward(loss)
            if self.accelerator.sync_gradients and t.max_grad_norm:
                self.accelerator.clip_grad_norm_(self.model.parameters(), t.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
        return loss

    def evaluate(self) -> dict | None:
        """Dev metrics at the current step (:func:`evaluate_step`; of the weight average when one
        is kept: it is what is judged and kept); a better (finite) ``best_metric`` saves
        ``best/``. Runs on the main process; the others wait."""
        if self.dev is None:
            return None
        try:
            if not self.is_main:
                return None
            averaged = self.average is not None
            with self.average.swapped_in(self.unwrapped) if averaged else contextlib.nullcontext():
                return evaluate_step(
                    self.unwrapped,
                    self.tokenizer,
                    self.dev,
                    self.precision,
                    self.cfg,
                    self.state,
                    self.best_dir,
                    averaged=averaged,
                    log=not self.quiet,
                )
        finally:
            self.accelerator.wait_for_everyone()

    def save_state(self) -> None:
        """Resumable state, swapped in whole (:func:`save_resumable`): the trainer's counters, the
        weight average and the teacher's scores beside accelerate's own state."""

        def extras(folder: Path) -> None:
            if self.average is not None:
                self.average.save(folder)
            if self.teacher is not None:
                np.savez(folder / TEACHER_FILE, scores=self.teacher[0], fingerprint=np.array(self.teacher[1]))
            (folder / STATE_FILE).write_text(json.dumps(self.state))

        save_resumable(self.accelerator, self.state_dir, extras)

    def _after_step(self, bar, loss, rate: float) -> None:
        """One optimizer step done: the weight average, the progress bar (loss, windows a second,
        learning rate), and evaluation and the resumable state when they are due."""
        t, state = self.cfg.train, self.state
        state["step"] += 1
        if self.average is not None:
            self.average.update(self.unwrapped)
        bar.update(1)
        if state["step"] % t.log_every == 0 or state["step"] == self.total_steps:
            lr = self.scheduler.get_last_lr()[0]
            bar.set_postfix(loss=f"{loss.item():.4f}", win_s=f"{rate:.1f}", lr=f"{lr:.2e}")
        if t.eval_every and state["step"] % t.eval_every == 0 and state["step"] < self.total_steps:
            self.evaluate()
        if t.save_every and state["step"] % t.save_every == 0:
            self.save_state()
        if t.malloc_trim_every and state["step"] % t.malloc_trim_every == 0:
            trim_heap()

    def fit(self, stop_after: int | None = None) -> bool:
        """Train to ``total_steps``; returns False when stopped early (Ctrl-C or ``stop_after``)
        with the resumable state saved."""
        state = self.state
        self.model.train()
        bar = tqdm(
            total=self.total_steps,
            initial=state["step"],
            desc="training",
            disable=self.quiet,
            dynamic_ncols=True,
        )
        interrupted = False
        t_start, seen = time.perf_counter(), 0
        try:
            while state["step"] < self.total_steps:
                self.sampler.for_epoch(state["epoch"])
                loader = self.loader
                if state["batch_in_epoch"]:
                    loader = self.accelerator.skip_first_batches(self.loader, state["batch_in_epoch"])
                for batch in loader:
                    loss = self.step(batch)
                    state["batch_in_epoch"] += 1
                    seen += batch["input_ids"].shape[0]
                    if not self.accelerator.sync_gradients:
                        continue
                    self._after_step(bar, loss, seen / max(time.perf_counter() - t_start, 1e-9))
                    if state["step"] >= self.total_steps:
                        break
                    if stop_after is not None and state["step"] >= stop_after:
                        raise KeyboardInterrupt
                else:
                    state["epoch"] += 1
                    state["batch_in_epoch"] = 0
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        self.save_state()
        if interrupted:
            if not self.is_main:
                return False
            logger.info(
                f"stopped at step {state['step']}/{self.total_steps}; state saved in {self.state_dir}; "
                "continue with --resume"
            )
            return False
        self.evaluate()
        self.save_state()
        digest = check_replicas(self.accelerator, self.unwrapped)
        if self.accelerator.num_processes > 1 and self.is_main and not self.quiet:
            logger.info(f"weights identical on {self.accelerator.num_processes} processes (sha256 {digest})")
        return True

    def finalize(self) -> dict:
        """Load the best checkpoint, calibrate its operating point, report on held-out groups,
        and publish it (weights, tokenizer, model card, metrics) into ``output``."""
        return publish_best(
            self.best_dir,
            self.tokenizer,
            self.cfg,
            self.dev_records,
            self.out,
            self.state,
            self.precision,
            self.machine,
            self.quiet,
        )


def train(
    cfg: TrainConfig,
    output: str | Path,
    resume: bool = False,
    stop_after: int | None = None,
    model=None,
    tokenizer=None,
    quiet: bool = False,
) -> dict:
    """Train per ``cfg`` into ``output``; returns the final metrics (``{"interrupted": True,
    "step": n}`` when stopped early).

    Raises:
        TrainingDiverged: a non-finite loss; FileExistsError / FileNotFoundError: a run is
        already there without ``resume`` / nothing to resume.
    """
    trainer = Trainer(cfg, output, model=model, tokenizer=tokenizer, quiet=quiet)
    trainer.setup(resume=resume)
    if not trainer.fit(stop_after=stop_after):
        return {"interrupted": True, "step": trainer.state["step"]}
    if not trainer.is_main:  # calibration, report and publishing happen once, on the main process
        return {"rank": trainer.accelerator.process_index}
    return trainer.finalize()
