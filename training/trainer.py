"""The training loop (``accelerate``): AdamW + warm-up/decay, dev evaluation, best checkpoint,
exact resume, Ctrl-C saves, and threshold calibration at the end.

Output folder layout::

    OUT/                      the final (best) checkpoint: config.json (calibrated threshold),
                              model.safetensors, tokenizer files, metrics.json, train_config.yaml
    OUT/checkpoints/last/     resumable state (model, optimizer, scheduler, RNG, data position)
    OUT/checkpoints/best/     the best checkpoint so far by ``train.best_metric``
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from pruner_model import PrunerModel, sentence_scores
from pruner_model.records import write_json

from .config import TrainConfig
from .data import (
    Collator,
    DevSet,
    GroupedBatches,
    LengthGroupedBatches,
    build_dev_set,
    read_records,
    tokenize_records,
)
from .metrics import (
    ScoredGroup,
    calibrate_operating_point,
    calibrate_threshold,
    metrics_at,
    relative_groups,
    roc_auc,
    weighted_groups,
)

STATE_FILE = "trainer_state.json"


def log(msg: str) -> None:
    tqdm.write(msg, file=sys.stderr)


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def score_dev(
    model,
    dev: DevSet,
    batch_size: int = 32,
    device=None,
    pad_id: int = 0,
    groups: list[str] | None = None,
    bf16: bool = False,
) -> tuple[list[ScoredGroup], float]:
    """Sentence scores of every dev record, grouped by query, and the token AUC. Scores are the
    token head's; each group also carries its passages' relevance probabilities.

    ``bf16`` runs the encoder under bf16 autocast (in-training evaluation only: calibration and
    reported numbers use fp32, the precision of default inference)."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    w = dev.windows
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in w.features]
    probs: list[np.ndarray] = [None] * len(w)  # type: ignore[list-item]
    window_relevance = np.zeros(len(w))
    order = np.argsort(-w.lengths, kind="stable")
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        width = int(w.lengths[idx].max())
        batch = {}
        for name in names:
            arr = np.full((len(idx), width), pad_id if name == "input_ids" else 0, dtype=np.int64)
            for row, k in enumerate(idx):
                arr[row, : w.lengths[k]] = w.features[name][k]
            batch[name] = torch.from_numpy(arr).to(device)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            out = model(**batch)
        logits = out.token_logits.float().cpu().numpy()
        window_relevance[idx] = 1 / (1 + np.exp(-out.relevance_logits.float().cpu().numpy()))
        p = 1 / (1 + np.exp(-logits))
        for row, k in enumerate(idx):
            probs[k] = p[row, : w.lengths[k]]
    if was_training:
        model.train()
    lab = np.concatenate(dev.token_labels)
    allp = np.concatenate(probs)
    ctx = lab >= 0
    auc = roc_auc(allp[ctx], lab[ctx] == 1)
    by_record = {}
    for rec in range(len(dev.records)):
        ws = w.windows_of(rec)
        starts, ends, labels, words = dev.units[rec]
        s, n = sentence_scores([probs[k] for k in ws], [w.offsets[k] for k in ws], starts, ends)
        relevance = np.full(len(s), window_relevance[ws].max() if len(ws) else 0.0)  # as inference
        by_record[rec] = (s, labels, n, words, relevance)
    out = []
    for gid in groups if groups is not None else dev.groups:
        members = dev.groups[gid]
        out.append(
            ScoredGroup(
                scores=np.concatenate([by_record[i][0] for i in members]),
                labels=np.concatenate([by_record[i][1] for i in members]),
                tokens=np.concatenate([by_record[i][2] for i in members]),
                words=np.concatenate([by_record[i][3] for i in members]),
                relevance=np.concatenate([by_record[i][4] for i in members]),
            )
        )
    return out, auc


def dev_metrics(
    groups: list[ScoredGroup],
    auc: float,
    threshold: float,
    target: float,
    relative_floor: float | None = None,
    relevance_exponent: float = 0.0,
) -> dict:
    """Metrics at ``threshold`` (on relevance-weighted scores when ``relevance_exponent`` > 0, then
    relative ones when ``relative_floor`` is set), plus the best compression reachable at the
    evidence ``target`` on these groups (an in-sample figure)."""
    groups = relative_groups(weighted_groups(groups, relevance_exponent), relative_floor)
    m = metrics_at(groups, threshold)
    m["relative_floor"] = relative_floor
    m["relevance_exponent"] = relevance_exponent
    t = calibrate_threshold(groups, target)
    at_target = metrics_at(groups, t)
    m.update(
        token_auc=auc,
        calibrated_threshold=t,
        compression_at_target=at_target["compression"],
        evidence_at_target=at_target["evidence_preserved"],
    )
    return m


# ---------------------------------------------------------------------------- training
def _param_groups(model: PrunerModel, cfg: TrainConfig):
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


_MODEL_FIELDS = (
    "max_length",
    "stride",
    "max_query_length",
    "head_dropout",
    "relevance_loss_weight",
    "sentence_loss_weight",
)


def _build_model(cfg: TrainConfig):
    from transformers import AutoTokenizer

    from pruner_model import default_backbone_path

    m = cfg.model
    if m.init_from:
        model = PrunerModel.from_pretrained(m.init_from)
        tok = AutoTokenizer.from_pretrained(m.init_from)
        for k in _MODEL_FIELDS:
            setattr(model.config, k, getattr(m, k))
    else:
        path = m.backbone or str(default_backbone_path())
        model = PrunerModel.from_backbone(
            path,
            **{k: getattr(m, k) for k in _MODEL_FIELDS},
        )
        tok = AutoTokenizer.from_pretrained(path)
    if not getattr(tok, "is_fast", False):
        raise ValueError("the backbone needs a fast tokenizer (offset mapping)")
    return model, tok


def train(
    cfg: TrainConfig,
    output: str | Path,
    resume: bool = False,
    stop_after: int | None = None,
    model=None,
    tokenizer=None,
    quiet: bool = False,
) -> dict:
    """Train per ``cfg`` into ``output``; returns the final dev metrics.

    ``stop_after`` stops (saving resumable state, as on Ctrl-C) after that many optimizer steps.
    ``model``/``tokenizer`` replace the configured backbone (tests pass a tiny random model).
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_scheduler

    out = Path(output)
    state_dir = out / "checkpoints" / "last"
    best_dir = out / "checkpoints" / "best"
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    mp = t.mixed_precision
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    accelerator = Accelerator(mixed_precision=mp, gradient_accumulation_steps=t.grad_accum)
    set_seed(t.seed)
    if resume and not (state_dir / STATE_FILE).is_file():
        raise FileNotFoundError(f"nothing to resume in {out} (no {state_dir / STATE_FILE})")
    if not resume and (out / "checkpoints").exists():
        raise FileExistsError(
            f"{out} already holds a run: pass --resume to continue or choose another --output"
        )
    out.mkdir(parents=True, exist_ok=True)

    if model is None:
        model, tokenizer = _build_model(cfg)
    mc = model.config
    train_records, train_report = read_records(
        cfg.data.train, cfg.data.max_train_groups, cfg.data.dedup, cfg.data.seed
    )
    dev_records, dev_report = read_records(cfg.data.dev, None, cfg.data.dedup, cfg.data.seed)
    if not train_records:
        raise ValueError("no training records left after validation")
    train_ds = tokenize_records(
        train_records, tokenizer, mc.max_length, mc.stride, mc.max_query_length, train_report
    )
    eval_records = _dev_slice(dev_records, cfg.data.seed, 0, cfg.data.max_dev_groups)
    dev = (
        build_dev_set(eval_records, tokenizer, mc.max_length, mc.stride, mc.max_query_length)
        if eval_records
        else None
    )
    if not quiet:
        log(train_report.line("train"))
        log(dev_report.line("dev") + (f" (eval on {len(dev.groups)} groups)" if dev else ""))

    input_names = [n for n in tokenizer.model_input_names if n in train_ds.column_names]
    lengths = np.array([len(x) for x in train_ds["input_ids"]])
    if t.group_batches:
        sampler = GroupedBatches(lengths, np.array(train_ds["group"]), t.batch_size, t.seed)
    else:
        sampler = LengthGroupedBatches(lengths, t.batch_size, t.seed)
    loader = torch.utils.data.DataLoader(
        train_ds,
        batch_sampler=sampler,
        collate_fn=Collator(tokenizer.pad_token_id or 0, input_names, groups=t.group_batches),
        num_workers=t.num_workers,
        # its own generator: creating an iterator draws a seed, which must not shift the global
        # RNG (dropout) differently in a resumed run than in an uninterrupted one
        generator=torch.Generator().manual_seed(t.seed),
    )
    steps_per_epoch = math.ceil(len(sampler) / t.grad_accum)
    total_steps = t.max_steps or max(1, math.ceil(steps_per_epoch * t.epochs))
    optimizer = torch.optim.AdamW(_param_groups(model, cfg))
    scheduler = get_scheduler(
        t.scheduler,
        optimizer,
        num_warmup_steps=int(t.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best": None, "best_step": None, "history": []}
    if resume:
        accelerator.load_state(str(state_dir))
        state = json.loads((state_dir / STATE_FILE).read_text())
        if not quiet:
            log(f"resumed at step {state['step']} (epoch {state['epoch']}, batch {state['batch_in_epoch']})")
    with open(out / "train_config.yaml", "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg.to_dict(), fh, sort_keys=False)
    target = cfg.calibration.target_evidence
    unwrapped = accelerator.unwrap_model(model)

    def save_state() -> None:
        accelerator.save_state(str(state_dir))
        (state_dir / STATE_FILE).write_text(json.dumps(state))

    def evaluate() -> dict | None:
        if dev is None:
            return None
        groups, auc = score_dev(unwrapped, dev, pad_id=tokenizer.pad_token_id or 0, bf16=mp == "bf16")
        m = dev_metrics(groups, auc, mc.threshold, target)
        m["step"] = state["step"]
        # a resumed finished run evaluates its last step again: replace, do not repeat, that entry
        state["history"] = [h for h in state["history"] if h.get("step") != state["step"]] + [m]
        better = state["best"] is None or (m.get(t.best_metric, float("nan")) > state["best"])
        if better:
            state["best"], state["best_step"] = m.get(t.best_metric), state["step"]
            _save_checkpoint(unwrapped, tokenizer, best_dir)
        if not quiet:
            log(
                f"step {state['step']}: dev token AUC {auc:.4f}, {t.best_metric} {m.get(t.best_metric):.4f}, "
                f"evidence {m['evidence_preserved']:.3f} / compression {m['compression']:.3f} at "
                f"threshold {mc.threshold:.2f}" + (" (best)" if better else "")
            )
        return m

    model.train()
    bar = tqdm(total=total_steps, initial=state["step"], desc="training", disable=quiet, dynamic_ncols=True)
    interrupted = False
    t_start, seen = time.perf_counter(), 0
    try:
        while state["step"] < total_steps:
            sampler.for_epoch(state["epoch"])
            epoch_loader = loader
            if state["batch_in_epoch"]:
                epoch_loader = accelerator.skip_first_batches(loader, state["batch_in_epoch"])
            for batch in epoch_loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and t.max_grad_norm:
                        accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                state["batch_in_epoch"] += 1
                seen += batch["input_ids"].shape[0]
                if not accelerator.sync_gradients:
                    continue
                state["step"] += 1
                bar.update(1)
                if state["step"] % t.log_every == 0 or state["step"] == total_steps:
                    rate = seen / max(time.perf_counter() - t_start, 1e-9)
                    bar.set_postfix(
                        loss=f"{loss.item():.4f}", win_s=f"{rate:.1f}", lr=f"{scheduler.get_last_lr()[0]:.2e}"
                    )
                if t.eval_every and state["step"] % t.eval_every == 0 and state["step"] < total_steps:
                    evaluate()
                if t.save_every and state["step"] % t.save_every == 0:
                    save_state()
                if state["step"] >= total_steps:
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
    save_state()
    if interrupted:
        log(
            f"stopped at step {state['step']}/{total_steps}; state saved in {state_dir}; "
            f"continue with --resume"
        )
        return {"interrupted": True, "step": state["step"]}

    evaluate()
    save_state()
    return finalize(cfg, out, tokenizer, dev_records, state, quiet=quiet)


def _dev_slice(records: list[dict], seed: int, start: int, stop: int | None) -> list[dict]:
    """Records of the dev groups ``start:stop`` of a seeded permutation of the group ids.

    In-training evaluation and calibration use the head of the permutation; the reported
    metrics use groups after the calibration ones, so they are never calibrated on."""
    from .data import group_id

    gids = sorted({group_id(r["id"]) for r in records})
    perm = np.random.default_rng(seed).permutation(len(gids))
    keep = {gids[i] for i in perm[start:stop]}
    return [r for r in records if group_id(r["id"]) in keep]


def _save_checkpoint(model, tokenizer, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)


def finalize(
    cfg: TrainConfig, out: Path, tokenizer, dev_records: list[dict], state: dict, quiet: bool = False
) -> dict:
    """Load the best checkpoint, calibrate its threshold on the dev split, write it to ``out``."""
    best_dir = out / "checkpoints" / "best"
    model = PrunerModel.from_pretrained(str(best_dir))
    mc = model.config
    metrics: dict = {
        "best_step": state.get("best_step"),
        "best_metric": cfg.train.best_metric,
        "history": state.get("history", []),
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    pad = tokenizer.pad_token_id or 0
    target = cfg.calibration.target_evidence
    n_cal = cfg.data.calibration_dev_groups
    cal_records = _dev_slice(dev_records, cfg.data.seed, 0, n_cal)
    if cal_records and cfg.calibration.enabled:
        dev = build_dev_set(cal_records, tokenizer, mc.max_length, mc.stride, mc.max_query_length)
        groups, auc = score_dev(model, dev, pad_id=pad)
        aim = min(1.0, target + cfg.calibration.margin)  # what the threshold is calibrated for
        floors = [None, *cfg.calibration.relative_floors]
        exponents = [0.0, *cfg.calibration.relevance_exponents]
        mc.relative_floor, mc.threshold, chosen = calibrate_operating_point(
            groups, aim, floors, cfg.calibration.folds, exponents
        )
        mc.relevance_exponent = chosen["relevance_exponent"]
        # floors[0] is None and exponents[0] is 0: candidates[0] is the plain token-head score
        absolute_threshold = chosen["candidates"][0]["threshold"]
        metrics["calibration"] = dev_metrics(
            groups, auc, mc.threshold, target, mc.relative_floor, mc.relevance_exponent
        )
        metrics["calibration"].update(
            absolute_threshold=absolute_threshold, calibrated_for=aim, candidates=chosen["candidates"]
        )
        if not quiet:
            if len(floors) * len(exponents) > 1:
                for row in chosen["candidates"]:
                    cv = (
                        f", {cfg.calibration.folds}-fold held-out evidence {row['cv_evidence_preserved']:.3f} "
                        f"/ compression {row['cv_compression']:.3f}"
                        if "cv_compression" in row
                        else ""
                    )
                    exp = f"relevance^{row['relevance_exponent']} " if len(exponents) > 1 else ""
                    log(
                        f"  {exp}floor {row['relative_floor']}: threshold {row['threshold']:.4f}, "
                        f"in-sample compression {row['compression']:.3f}{cv}"
                    )
            mode = "absolute scores" if mc.relative_floor is None else f"relative floor {mc.relative_floor}"
            if mc.relevance_exponent:
                mode += f", x relevance^{mc.relevance_exponent}"
            log(
                f"calibrated threshold {mc.threshold:.4f} ({mode}) on {len(groups)} dev groups "
                f"(evidence target {target}"
                + (f" + margin {cfg.calibration.margin}" if aim != target else "")
                + ")"
            )
    else:  # the checkpoint's threshold stands; it is relative when the checkpoint has a floor
        absolute_threshold = None
    report_start = cfg.data.report_dev_start if cfg.data.report_dev_start is not None else n_cal
    report_records = (
        _dev_slice(dev_records, cfg.data.seed, report_start, report_start + cfg.data.report_dev_groups)
        if n_cal is not None and cfg.data.report_dev_groups
        else []
    )
    if report_records:
        dev = build_dev_set(report_records, tokenizer, mc.max_length, mc.stride, mc.max_query_length)
        groups, auc = score_dev(model, dev, pad_id=pad)
        final = dev_metrics(groups, auc, mc.threshold, target, mc.relative_floor, mc.relevance_exponent)
        final["passages_per_group"] = float(np.mean([len(v) for v in dev.groups.values()]))
        metrics["dev"] = final
        if (mc.relative_floor is not None or mc.relevance_exponent) and absolute_threshold is not None:
            # the same slice with absolute scores, for comparison
            metrics["dev_absolute"] = dev_metrics(groups, auc, absolute_threshold, target)
        if not quiet:
            log(
                f"dev ({len(groups)} groups not used for calibration: {report_start}-"
                f"{report_start + len(groups) - 1} of the permutation) at threshold {mc.threshold:.4f}: "
                f"evidence preserved {final['evidence_preserved']:.3f}, compression {final['compression']:.3f}, "
                f"sentence F1 {final['f1']:.3f}, token AUC {auc:.4f}"
            )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(out / "metrics.json", metrics)
    return metrics
