"""The per-request threshold (docs/design.md) against one threshold: fitted on a checkpoint's
calibration slices, measured on the held-back splits, from one cache of scored groups.

    python experiments/request_thresholds.py score --model runs/default --cache /tmp/rt.pkl
    python experiments/request_thresholds.py folds --cache /tmp/rt.pkl   # the choice, calibration only
    python experiments/request_thresholds.py leave_out --cache /tmp/rt.pkl  # unseen text, simulated
    python experiments/request_thresholds.py fit --cache /tmp/rt.pkl
    python experiments/request_thresholds.py gate --cache /tmp/rt.pkl --model runs/default  # its gate's cost
    python experiments/request_thresholds.py novelty --cache /tmp/rt.pkl --model runs/default [--write]
    python experiments/request_thresholds.py proxy --cache /tmp/lo.pkl --model runs/leave_out  # the fallback's settings
    python experiments/request_thresholds.py cosines --cache /tmp/rt.pkl --cosines /tmp/cos.pkl
    python experiments/request_thresholds.py folds --cache /tmp/rt.pkl --cosines /tmp/cos.pkl --fuse 1:0.1:abs

``cosines`` caches the bundled bi-encoder's cosine of each query with each sentence of the cached
groups (the same for every checkpoint scored on the same slices); ``folds --fuse W:TAU:FORM`` then
measures the threshold model with each passage's relevance fused with its best sentence cosine,
sigmoid(logit(relevance) + W * term / TAU), term = cosine - 0.3 (``abs``) or cosine - the request's
best passage's (``rel``), with relevance gates up to 0.3 tried.

Calibration slices: every source of ``data/qa/calibration.jsonl`` (groups 0-299 of each source's
permutation), the noisy, mined and low-overlap+noisy copies of the file's first 300 groups and the
low-overlap questions of its first 1,000 (the copies the training calibration builds). Report
slices: the same of ``data/qa/dev.jsonl`` (the training sets' held-back documents). ``score``
writes the cache; the other commands print their tables.
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np
from pruner_model.evaluation.threshold_fit import NOVELTY


def score(args) -> None:
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import group_of, load_groups, load_range, range_ids, records_by_source
    from pruner_model.evaluation.scorer import score_groups
    from pruner_model.evaluation.shifts import build_shift
    from pruner_model.evaluation.sources import with_roles

    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(args.model, dtype="auto")
    cfg = pruner.config

    def slices(path, per_source, shifted, n_low, part):
        """Each source's first ``per_source`` groups, and shifted copies of the file's first
        ``shifted`` groups (its seeded permutation; low-overlap questions of the first ``n_low``)."""
        records = read_jsonl(path)
        keys = [group_of(r) for r in records]
        ids, low_ids = range_ids(keys, 0, 0, shifted), range_ids(keys, 0, 0, n_low)
        out = {f"{part} {kind}": build_shift(kind, records, 0, ids) for kind in ("noisy", "mined")}
        out[f"{part} low_overlap"] = build_shift("low_overlap", records, 0, low_ids)
        if part == "cal":
            out["cal low_overlap+noisy"] = build_shift("low_overlap+noisy", records, 0, ids)
        groups = {k: load_groups(with_roles(v)) for k, v in out.items()}
        for src, recs in sorted(records_by_source(with_roles(records)).items()):
            groups[src] = load_range(recs, 0, 0, per_source)
        return groups

    cache = {
        "rule": {k: getattr(cfg, k) for k in ("relative_floor", "relevance_exponent", "relevance_contrast")}
    }
    cache["threshold"] = cfg.threshold
    cache["operating_points"] = getattr(cfg, "operating_points", None)
    d = args.data
    parts = [("cal", f"{d}/calibration.jsonl", 300, 1000), ("report", f"{d}/dev.jsonl", 300, 1000)]
    if args.heldout:  # the never-trained sets: measured, never chosen on
        parts.append(("heldout", f"{d}/heldout.jsonl", 300, 0))
    for part, path, per_source, shifted in parts:
        out = {}
        if shifted:
            named = slices(path, per_source, min(per_source, 300), shifted, part)
        else:
            by_source = records_by_source(with_roles(read_jsonl(path)))
            named = {src: load_range(recs, 0, 0, per_source) for src, recs in sorted(by_source.items())}
        for name, groups in named.items():
            scored = score_groups(pruner, groups).groups
            out[name] = (groups, scored)
            print(part, name, len(groups), flush=True)
        cache[part] = out
    with open(args.cache, "wb") as f:
        pickle.dump(cache, f)


def cosines(args) -> None:
    from pruner_model.core.biencoder import BiEncoder

    with open(args.cache, "rb") as f:
        cache = pickle.load(f)
    encoder, out = BiEncoder(), {}
    for part in [p for p in ("cal", "report", "heldout") if p in cache]:
        out[part] = {}
        for name, (groups, _) in cache[part].items():
            texts = [[u.text_of(p["text"]) for p, us in zip(g.passages, g.units) for u in us] for g in groups]
            cos = encoder.sentence_cosines([g.query for g in groups], texts)
            out[part][name] = [(c, [len(us) for us in g.units]) for c, g in zip(cos, groups)]
            print(part, name, len(groups), flush=True)
    with open(args.cosines, "wb") as f:
        pickle.dump(out, f)


def _fused(cache, cos, spec: str):
    """``cache`` with each passage's relevance fused with its best sentence cosine (``W:TAU:FORM``)."""
    import dataclasses

    w, tau, form = float(spec.split(":")[0]), float(spec.split(":")[1]), spec.split(":")[2]
    out = dict(cache)
    for part in [p for p in ("cal", "report", "heldout") if p in cos]:
        out[part] = {}
        for name, (groups, raw) in cache[part].items():
            fused = []
            for s, (c, sizes) in zip(raw, cos[part][name]):
                best = np.array([p.max() if len(p) else -1.0 for p in np.split(c, np.cumsum(sizes)[:-1])])
                term = np.repeat(best - (best.max() if form == "rel" else 0.3), sizes) / tau
                if s.relevance is not None:
                    r = np.clip(s.relevance, 1e-6, 1 - 1e-6)
                    s = dataclasses.replace(s, relevance=1 / (1 + np.exp(-(np.log(r / (1 - r)) + w * term))))
                fused.append(s)
            out[part][name] = (groups, fused)
    return out


def _weighted(s, rule):
    from pruner_model.core.score_rules import contrasted_relevance, relevance_weighted

    return relevance_weighted(
        s.scores, contrasted_relevance(s.relevance, rule["relevance_contrast"]), rule["relevance_exponent"]
    )


def _prepare(cache, rule=None):
    """Per slice: X (features), y (log10 critical, nan without evidence), rule-scored groups."""
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.threshold_fit import group_features

    rule = rule or cache["rule"]
    e, f, c = rule["relevance_exponent"], rule["relative_floor"], rule["relevance_contrast"]
    out = {}
    for part in [p for p in ("cal", "report", "heldout") if p in cache]:
        out[part] = {}
        for name, (groups, raw) in cache[part].items():
            X = group_features(groups, raw, e, f, c)
            gs = with_score_rules(raw, e, f, c)
            y = np.asarray([np.log10(max(g.critical, 1e-9)) if g.has_evidence else np.nan for g in gs])
            out[part][name] = (X, y, gs, groups)
    return out


def _evaluate(data, default_of, label, target=0.95, part="report"):
    """Each slice of ``part`` at a default (``default_of(X)``: a RequestDefault, or a threshold)."""
    from pruner_model.evaluation.metrics import best_compression_at, metrics_at, sweep

    rows = []
    for name, (X, _, gs, _) in data[part].items():
        if not any(g.has_evidence for g in gs):
            continue
        d = default_of(X)
        m = metrics_at(gs, d) if isinstance(d, float) else metrics_at(gs, float("nan"), d.masks(gs))
        own = best_compression_at(sweep(gs), target)["compression"]
        rows.append((name, m["evidence_preserved"], m["compression"], own, m["negative_tokens_kept"]))
    print(f"--- {label}")
    for r in rows:
        print(
            f"  {r[0]:22s} kept {r[1]:.3f} comp {r[2]:.3f} own {r[3]:.3f} ratio {r[2] / r[3]:.2f} "
            f"answerless kept {r[4]:.3f}"
        )
    ratios = [r[2] / r[3] for r in rows]
    print(
        f"  mean ratio {np.mean(ratios):.3f}  min ratio {min(ratios):.3f}  min kept {min(r[1] for r in rows):.3f}"
    )


def fit(args) -> None:
    from pruner_model.evaluation.calibration import calibrate_threshold
    from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, fit_threshold_model

    with open(args.cache, "rb") as f:
        cache = pickle.load(f)
    data = _prepare(cache)
    target = args.target
    cal = {k: v for k, v in data["cal"].items() if not np.all(np.isnan(v[1]))}
    t0 = min(calibrate_threshold(v[2], target) for v in cal.values())
    print("one threshold", t0, {k: round(calibrate_threshold(v[2], target), 4) for k, v in cal.items()})
    _evaluate(data, lambda X: float(t0), "one threshold", target)
    slices = [FitSlice(k, v[2], v[0]) for k, v in data["cal"].items()]
    for bands in args.bands:
        for score, shares, criterion in (
            ("sources", (), "gain"),
            ("hard_easy", (), "gain"),
            ("sources", (0.1, 0.2, 0.3), "gain"),
            ("hard_easy", (0.1, 0.2, 0.3), "ratio"),
        ):
            model = fit_threshold_model(
                slices, target, bands=bands, criterion=criterion, answer_shares=shares, score=score
            )
            unlikely = model.unlikely_thresholds
            label = f"{score}, {bands} bands, {criterion}" + (", answer split" if shares else "")
            print(
                f"{label}: thresholds {[round(t, 4) for t in model.thresholds]}, gate {model.min_relevance}"
                + ("" if unlikely is None else f", unlikely {[round(t, 4) for t in unlikely]}")
            )
            _evaluate(
                data, lambda X, m=model: RequestDefault(m.thresholds_of(X), m.min_relevance), label, target
            )


def fused_proxy(args) -> None:
    """Passage evidence from the bundled bi-encoder on unfamiliar text: for no fusion and each
    ``--fuse`` setting, the per-request threshold fitted on the cache's calibration slices (gates up
    to 0.3) and measured on its report slices and never-seen (``heldout``) sets; kept / compression /
    answer-less groups' tokens kept."""
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.threshold_fit import GATES, FitSlice, RequestDefault, fit_threshold_model

    with open(args.cache, "rb") as f:
        cache = pickle.load(f)
    with open(args.cosines, "rb") as f:
        cos = pickle.load(f)
    for spec in [None, *args.fuse]:
        data = _prepare(cache if spec is None else _fused(cache, cos, spec))
        slices = [FitSlice(n, v[2], v[0]) for n, v in data["cal"].items()]
        model = fit_threshold_model(slices, args.target, gates=(*GATES, 0.1, 0.2, 0.3))
        line = []
        for part in [p for p in ("heldout", "report") if p in data]:
            for name, (X, _, gs, _) in data[part].items():
                if any(g.has_evidence for g in gs) and not name.startswith("report "):
                    r = metrics_at(gs, float("nan"), RequestDefault.of(model, X).masks(gs))
                    k, c, a = r["evidence_preserved"], r["compression"], r["negative_tokens_kept"]
                    line.append(f"{name} {k:.3f}/{c:.3f}/{a:.3f}")
        print(f"fused {spec} (gate {model.min_relevance}): " + ", ".join(line), flush=True)


def folds(args) -> None:
    """The band score chosen on the calibration slices alone: fit on the even groups of every slice,
    measure on the odd ones, and the other way round; each slice's kept share and its compression
    against its own threshold's on the measured half (mean of the two folds)."""

    with open(args.cache, "rb") as f:
        cache = pickle.load(f)
    if args.fuse:
        if not args.cosines:
            raise SystemExit("--fuse needs --cosines FILE (written by the cosines subcommand)")
        with open(args.cosines, "rb") as f:
            cos = pickle.load(f)
    for spec in args.fuse or [None]:
        _folds(args, _prepare(cache if spec is None else _fused(cache, cos, spec))["cal"], spec)


def _folds(args, cal, spec) -> None:
    from pruner_model.evaluation.metrics import best_compression_at, metrics_at, sweep
    from pruner_model.evaluation.threshold_fit import GATES, FitSlice, RequestDefault, fit_threshold_model

    gates = GATES if spec is None else (*GATES, 0.1, 0.2, 0.3)
    halves = [{n: (v[0][k::2], v[2][k::2]) for n, v in cal.items()} for k in (0, 1)]
    for score in ("hard_easy", "sources") if spec is None else ("sources",):
        for bands in args.bands:
            rows: dict[str, list] = {}
            for k in (0, 1):
                fitted, measured = halves[k], halves[1 - k]
                slices = [FitSlice(n, gs, X) for n, (X, gs) in fitted.items()]
                m = fit_threshold_model(slices, args.target, bands=bands, score=score, gates=gates)
                for n, (X, gs) in measured.items():
                    if any(g.has_evidence for g in gs):
                        d = RequestDefault(m.thresholds_of(X), m.min_relevance)
                        at = metrics_at(gs, float("nan"), d.masks(gs))
                        own = best_compression_at(sweep(gs), args.target)["compression"]
                        rows.setdefault(n, []).append(
                            (
                                at["evidence_preserved"],
                                at["compression"] / own,
                                own,
                                at["negative_tokens_kept"],
                            )
                        )
            mean = {n: np.nanmean(np.array(v, float), axis=0) for n, v in rows.items()}
            print(f"--- {score}, {bands} bands" + ("" if spec is None else f", relevance fused {spec}"))
            for n, (kept, ratio, own, answerless) in mean.items():
                print(
                    f"  {n:22s} kept {kept:.3f} ratio {ratio:.2f} own {own:.3f} answer-less kept {answerless:.3f}"
                )
            a = np.array(list(mean.values()))
            print(
                f"  mean ratio {a[:, 1].mean():.3f}  min ratio {a[:, 1].min():.3f}  min kept {a[:, 0].min():.3f}"
                f"  mean own {a[:, 2].mean():.3f}  mean answer-less kept {np.nanmean(a[:, 3]):.3f}"
            )


def leave_out(args) -> None:
    """Text the calibration never saw, simulated on the calibration slices alone: for each source
    slice, the threshold model fitted on every other calibration slice and measured on it, with its
    band thresholds scaled by each of ``--scales`` (a margin towards lower thresholds). The scale
    chosen is the largest whose left-out sources all keep ``--target``; the model fitted on every
    slice with that scale is then measured on the report slices (and the never-trained sets when
    the cache holds them): nothing of them chooses."""
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, fit_threshold_model

    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    cal = data["cal"]
    sources = [n for n, v in cal.items() if not n.startswith("cal ") and any(g.has_evidence for g in v[2])]
    from pruner_model.evaluation.calibration import calibrate_threshold

    def fitted(names):
        """``X -> (thresholds, gate)``: the threshold model of the named slices, or their one
        threshold where their own thresholds lie too close for bands."""
        slices = [FitSlice(n, cal[n][2], cal[n][0]) for n in names]
        m = fit_threshold_model(slices, args.target, bands=args.bands[0])
        if m is not None:
            return lambda X: (m.thresholds_of(X), m.min_relevance)
        one = min(
            calibrate_threshold(cal[n][2], args.target)
            for n in names
            if any(g.has_evidence for g in cal[n][2])
        )
        return lambda X: (np.full(len(X), one), None)

    kept = {scale: {} for scale in args.scales}
    for left in sources:
        model = fitted([n for n in cal if n != left])
        X, _, gs, _ = cal[left]
        th, gate_ = model(X)
        for scale in args.scales:
            d = RequestDefault(th * scale, gate_)
            kept[scale][left] = metrics_at(gs, float("nan"), d.masks(gs))["evidence_preserved"]
    for scale, row in kept.items():
        print(
            f"scale {scale:g}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in row.items())
            + f"; min {min(row.values()):.3f}"
        )
    holding = [s for s, row in kept.items() if min(row.values()) >= args.target]
    chosen = max(holding) if holding else min(args.scales)
    print(
        f"chosen scale {chosen:g} ("
        + ("every left-out source keeps the target" if holding else "none held: the lowest")
        + ")"
    )
    model = fit_threshold_model(
        [FitSlice(n, v[2], v[0]) for n, v in cal.items()], args.target, bands=args.bands[0]
    )
    for scale in sorted({1.0, chosen}, reverse=True):
        for part in [p for p in ("report", "heldout") if p in data]:
            _evaluate(
                data,
                lambda X, s=scale: RequestDefault(model.thresholds_of(X) * s, model.min_relevance),
                f"{part}: every calibration slice, thresholds x {scale:g}",
                args.target,
                part,
            )


def gate(args) -> None:
    """The checkpoint's own default on the cached report slices, with its relevance gate and
    without it: what the gate costs in answers kept and takes off answer-less groups."""
    import json
    from pathlib import Path

    from pruner_model.core.threshold_model import ThresholdModel
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.threshold_fit import RequestDefault

    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    tm = ThresholdModel.from_dict(
        json.loads((Path(args.model) / "config.json").read_text())["threshold_model"]
    )
    for name, (X, _, gs, _) in data["report"].items():
        if not any(g.has_evidence for g in gs):
            continue
        th = tm.thresholds_of(X)
        row = []
        for g in (tm.min_relevance, None):
            m = metrics_at(gs, float("nan"), RequestDefault(th, g).masks(gs))
            row.append(
                f"{m['evidence_preserved']:.3f} / {m['compression']:.3f} / {m['negative_tokens_kept']:.3f}"
            )
        print(
            f"  {name:22s} gate {tm.min_relevance}: {row[0]}   no gate: {row[1]}   (kept / compression / answer-less kept)"
        )


def novelty(args) -> None:
    """The checkpoint's own default on the cached report (and never-trained) slices without and
    with the unfamiliar-request fallback fitted on the cached calibration slices (``--quantile``,
    ``--tail``: ``calibration.per_request_novelty``); ``--write`` adds that fallback to the
    checkpoint's threshold model, its bands left as they are."""
    import dataclasses
    import json
    from pathlib import Path

    from pruner_model.core.threshold_model import ThresholdModel
    from pruner_model.evaluation.metrics import best_compression_at, metrics_at, sweep
    from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, novelty_fields

    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    path = Path(args.model) / "config.json"
    config = json.loads(path.read_text())
    base = ThresholdModel.from_dict(config["threshold_model"])
    base = dataclasses.replace(
        base, novelty_precision=None, novelty_cutoff=None, novelty_threshold=None, novelty_min_relevance=None
    )
    slices = [FitSlice(n, v[2], v[0]) for n, v in data["cal"].items()]
    fields = novelty_fields(
        slices,
        np.asarray(base.mean),
        np.asarray(base.scale),
        (args.quantile, args.tail),
        gate=base.min_relevance,
    )
    model = dataclasses.replace(base, **fields)
    print(
        f"cutoff {fields['novelty_cutoff']:.2f} (quantile {args.quantile} of {sum(len(s.features) for s in slices)} "
        f"calibration requests); fallback threshold {fields['novelty_threshold']:.5f} (every calibration slice "
        f"keeps {args.tail})"
    )
    print("kept / compression / answer-less tokens kept; own: compression at the target, threshold swept")
    for part in [p for p in ("report", "heldout") if p in data]:
        for name, (X, _, gs, _) in data[part].items():
            if not any(g.has_evidence for g in gs):
                continue
            row = []
            for m in (base, model):
                r = metrics_at(
                    gs, float("nan"), RequestDefault(m.thresholds_of(X), m.min_relevance).masks(gs)
                )
                row.append(
                    f"{r['evidence_preserved']:.3f} / {r['compression']:.3f} / {r['negative_tokens_kept']:.3f}"
                )
            own = best_compression_at(sweep(gs), args.target)["compression"]
            print(
                f"  {part:8s} {name:20s} unfamiliar {model.unfamiliar(X).mean():.2f}  own {own:.3f}  "
                f"bands {row[0]}  with fallback {row[1]}"
            )
    if args.write:
        from pruner_model.core.records import atomic_open

        config["threshold_model"] = model.to_dict()
        with atomic_open(path) as fh:
            fh.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
        print(f"wrote the fallback into {path}")


def proxy(args) -> None:
    """The fallback's two settings chosen on unfamiliar text no reported model saw: a model trained
    with whole sets left out (``pruner data qa --heldout``) is the cache's checkpoint, its held-out
    sets the proxies. For each ``--quantiles`` x ``--tails`` pair, the fallback is fitted on the
    cache's calibration slices and each proxy set measured at the checkpoint's default; chosen:
    the pair whose proxies all keep ``--target`` at the highest mean compression (else the one
    whose worst proxy keeps most). The report slices show its cost on familiar text. Each proxy:
    kept / compression / answer-less groups' tokens kept (share of its requests flagged)."""
    import dataclasses
    import json
    from pathlib import Path

    from pruner_model.core.threshold_model import ThresholdModel
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, novelty_fields

    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    config = json.loads((Path(args.model) / "config.json").read_text())
    base = ThresholdModel.from_dict(config["threshold_model"])
    slices = [FitSlice(n, v[2], v[0]) for n, v in data["cal"].items()]

    def measured(model, part):
        out = {}
        for name, (X, _, gs, _) in data[part].items():
            if any(g.has_evidence for g in gs) and not name.startswith("report "):
                r = metrics_at(gs, float("nan"), RequestDefault.of(model, X).masks(gs))
                out[name] = (
                    r["evidence_preserved"],
                    r["compression"],
                    model.unfamiliar(X).mean(),
                    r["negative_tokens_kept"],
                )
        return out

    rows = []
    for q in args.quantiles:
        for t in args.tails:
            fields = novelty_fields(
                slices, np.asarray(base.mean), np.asarray(base.scale), (q, t), gate=base.min_relevance
            )
            model = dataclasses.replace(base, **fields)
            held, report = measured(model, "heldout"), measured(model, "report")
            rows.append((q, t, held, report))
            print(
                f"quantile {q:.2f} tail {t:.3f} threshold {fields['novelty_threshold']:.5f}: "
                + ", ".join(f"{n} {k:.3f}/{c:.3f}/{a:.3f} ({u:.2f} unf.)" for n, (k, c, u, a) in held.items())
                + f" | report min kept {min(v[0] for v in report.values()):.3f}, "
                f"mean comp {np.mean([v[1] for v in report.values()]):.3f}"
            )
    holding = [r for r in rows if min(v[0] for v in r[2].values()) >= args.target]
    if holding:
        q, t, *_ = max(holding, key=lambda r: np.mean([v[1] for v in r[2].values()]))
        print(f"chosen: quantile {q} tail {t} (every proxy keeps {args.target})")
    else:
        q, t, *_ = max(rows, key=lambda r: min(v[0] for v in r[2].values()))
        print(f"none held {args.target}: quantile {q} tail {t} keeps the worst proxy most")


def unfamiliar_gate(args) -> None:
    """A passage relevance gate for unfamiliar requests alone (familiar ones keep the checkpoint's
    gate), chosen on the proxies of ``proxy`` (a leave-out model's never-seen sets): for each
    ``--gates`` value, each proxy and report slice at the checkpoint's default with that gate on
    its unfamiliar requests; chosen: the gate whose proxies all keep ``--target`` with the fewest
    answer-less tokens kept. Rows: kept / compression / answer-less groups' tokens kept."""
    import json
    from pathlib import Path

    from pruner_model.core.threshold_model import ThresholdModel
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.threshold_fit import RequestDefault

    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    tm = ThresholdModel.from_dict(
        json.loads((Path(args.model) / "config.json").read_text())["threshold_model"]
    )

    rows = []
    for gate in [None if x < 0 else x for x in args.gates]:
        line = {}
        for part in [p for p in ("heldout", "report") if p in data]:
            for name, (X, _, gs, _) in data[part].items():
                if not any(g.has_evidence for g in gs) or name.startswith("report "):
                    continue
                gates = np.where(tm.unfamiliar(X), np.nan if gate is None else gate, tm.gates_of(X))
                r = metrics_at(gs, float("nan"), RequestDefault(tm.thresholds_of(X), gates).masks(gs))
                line[(part, name)] = (r["evidence_preserved"], r["compression"], r["negative_tokens_kept"])
        rows.append((gate, line))
        print(
            f"gate {gate}: " + ", ".join(f"{n} {k:.3f}/{c:.3f}/{a:.3f}" for (p, n), (k, c, a) in line.items())
        )
    proxies = lambda line: [v for (p, _), v in line.items() if p == "heldout"]  # noqa: E731
    holding = [r for r in rows if min(v[0] for v in proxies(r[1])) >= args.target]
    if holding:
        gate = min(holding, key=lambda r: np.mean([v[2] for v in proxies(r[1])]))[0]
        print(f"chosen: gate {gate} (every proxy keeps {args.target}, fewest answer-less tokens)")
    else:
        print(f"no gate keeps {args.target} on every proxy")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    s.add_argument("--model", required=True)
    s.add_argument("--cache", required=True)
    s.add_argument("--heldout", action="store_true", help="also score DATA/heldout.jsonl (measured only)")
    s.add_argument("--data", default="data/qa", help="the folder of pruner data qa (default: data/qa)")
    pr = sub.add_parser("proxy")
    pr.add_argument(
        "--cache", required=True, help="a leave-out model's cache: its held-out sets are the proxies"
    )
    pr.add_argument("--model", required=True, help="the checkpoint the cache was scored with")
    pr.add_argument("--quantiles", type=float, nargs="+", default=[0.5, 0.7, 0.8, 0.9, 0.95])
    pr.add_argument("--tails", type=float, nargs="+", default=[0.99, 0.995, 0.999, 1.0])
    pr.add_argument("--target", type=float, default=0.95)
    lo = sub.add_parser("leave_out")
    lo.add_argument("--cache", required=True)
    lo.add_argument("--bands", type=int, nargs="+", default=[8])
    lo.add_argument("--target", type=float, default=0.95)
    lo.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.7, 0.5, 0.35, 0.25, 0.15, 0.1])
    for name in ("fit", "folds"):
        f = sub.add_parser(name)
        f.add_argument("--cache", required=True)
        f.add_argument("--bands", type=int, nargs="+", default=[8])
        f.add_argument("--target", type=float, default=0.95, help="0.975 for the reference (0.97 + margin)")
    f.add_argument("--cosines", help="the file of `cosines` (with --fuse)")
    f.add_argument("--fuse", nargs="+", help="W:TAU:FORM settings of the fused relevance, e.g. 1:0.1:abs")
    c = sub.add_parser("cosines")
    c.add_argument("--cache", required=True)
    c.add_argument("--cosines", required=True)
    fp = sub.add_parser("fused_proxy")
    fp.add_argument("--cache", required=True)
    fp.add_argument("--cosines", required=True, help="the file of `cosines`")
    fp.add_argument("--fuse", nargs="+", default=["1:0.1:abs", "2:0.1:abs", "1:0.1:rel", "2:0.1:rel"])
    fp.add_argument("--target", type=float, default=0.95)
    ug = sub.add_parser("unfamiliar_gate")
    ug.add_argument("--cache", required=True)
    ug.add_argument("--model", required=True, help="the checkpoint the cache was scored with")
    ug.add_argument("--gates", type=float, nargs="+", default=[-1, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5])
    ug.add_argument("--target", type=float, default=0.95)
    g = sub.add_parser("gate")
    g.add_argument("--cache", required=True)
    g.add_argument("--model", required=True, help="the checkpoint the cache was scored with")
    n = sub.add_parser("novelty")
    n.add_argument("--cache", required=True)
    n.add_argument("--model", required=True, help="the checkpoint the cache was scored with")
    n.add_argument("--quantile", type=float, default=NOVELTY[0])
    n.add_argument("--tail", type=float, default=NOVELTY[1])
    n.add_argument("--target", type=float, default=0.95)
    n.add_argument("--write", action="store_true", help="add the fallback to the checkpoint's config.json")
    args = p.parse_args()
    commands = {
        "novelty": novelty,
        "score": score,
        "fit": fit,
        "folds": folds,
        "gate": gate,
        "cosines": cosines,
        "leave_out": leave_out,
        "proxy": proxy,
        "unfamiliar_gate": unfamiliar_gate,
        "fused_proxy": fused_proxy,
    }
    commands[args.cmd](args)


if __name__ == "__main__":
    main()
