"""Which calibration rule keeps its promise on shifted slices: a checkpoint's scores calibrated
under each rule, judged on choice groups that neither calibration nor reported numbers use.

    python3 experiments/calibration_rules.py --model runs/reference --target 0.97 \
        --calibration 0:2000 --choice 4000:5000 --low-overlap-choice 4000:6000 \
        --cache reports/rules-reference.pkl

Rules: the calibration slices (``as_is`` nyt groups with every annotator's answer labeled, their
``noisy`` and ``mined`` copies, optionally the ``low_overlap`` subset of them) and K confidence
bins (a query's confidence is its best relevance-weighted sentence score; bins are quantiles of the
calibration queries' confidence, each with its own threshold, the lowest that meets the target on
every slice with at least 20 queries of that bin). K = 1 is one threshold: what ``pruner train``
calibrates. ``--overlap-cuts`` also tries two bins by lexical overlap: the content words a query
shares with its best-scoring sentence, at most the cut or more. ``--neighbor-weights`` also tries
one threshold on propagated scores: each sentence's score raised to W times its best neighbour's
in the same paragraph (an answer next to a sentence the model likes survives a higher
threshold). The checkpoint's relative floor
and relevance exponent are kept. Prints, per rule and choice slice, evidence kept / compression
at the rule's threshold(s). Scores are cached (``--cache``) so that rules can be compared again
without the encoder.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import sys
from pathlib import Path

import numpy as np

SLICES = ("as_is", "mined", "noisy", "low_overlap")


def _range(text: str) -> tuple[int, int]:
    a, b = (int(x) for x in text.split(":"))
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"expected START:STOP with START < STOP, got {text!r}")
    return a, b


def range_groups(records: list[dict], name: str, a: int, b: int, seed: int, cfg) -> list:
    """Groups ``a``..``b`` of the seeded permutation built as slice ``name``, segmented as the model scores."""
    from pruner_model.evaluation.groups import group_of, load_groups, range_ids
    from pruner_model.evaluation.shifts import build_shift

    keep = range_ids((group_of(r) for r in records), seed, a, b)
    return load_groups(
        build_shift(name, records, seed, keep), cfg.segmenter_language, cfg.segmenter_structure
    )


def score_slices(
    model: str, records: list[dict], plan: list[tuple[str, str, int, int]], seed: int, dtype
) -> dict:
    """``{(part, slice): [ScoredGroup]}`` with relevance-weighted (not yet relative) scores."""
    from pruner_model.evaluation.metrics import weighted_groups
    from pruner_model.evaluation.scorer import score_groups

    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(model, **({"dtype": dtype} if dtype else {}))
    print(f"scoring in {pruner.precision} (--dtype {dtype})", file=sys.stderr)
    out = {}
    for part, name, a, b in plan:
        groups = range_groups(records, name, a, b, seed, pruner.config)
        exponent = pruner.config.relevance_exponent
        out[(part, name)] = weighted_groups(score_groups(pruner, groups).groups, exponent)
        print(f"scored {part} {name}: {len(groups)} groups", file=sys.stderr)
    return out


def top_overlap(records: list[dict], plan, seed: int, cfg, scores: dict) -> dict:
    """``{(part, slice): array}``: content words each query shares with its best-scoring sentence
    (known at inference time, unlike the answer's overlap that defines the low-overlap slice)."""
    from pruner_model.core.text import content_words

    out = {}
    for part, name, a, b in plan:
        feats = []
        for g, sg in zip(range_groups(records, name, a, b, seed, cfg), scores[(part, name)], strict=True):
            texts = [p["text"][u.start : u.end] for p, us in zip(g.passages, g.units) for u in us]
            best = texts[int(np.argmax(sg.scores))] if texts else ""
            feats.append(len(content_words(g.query) & content_words(best)))
        out[(part, name)] = np.array(feats)
    return out


def paragraph_keys(records: list[dict], plan, seed: int, cfg) -> dict:
    """``{(part, slice): [array]}``: per group, each unit's passage and paragraph as one key."""
    return {
        (part, name): [
            np.array([i * 1_000_000 + u.paragraph for i, us in enumerate(g.units) for u in us], np.int64)
            for g in range_groups(records, name, a, b, seed, cfg)
        ]
        for part, name, a, b in plan
    }


def propagate(groups: list, keys: list, weight: float) -> list:
    """Each unit's score raised to ``weight`` times its best neighbour's in the same paragraph."""
    out = []
    for g, k in zip(groups, keys, strict=True):
        s, same = g.scores, k[1:] == k[:-1]
        near = np.zeros_like(s)
        near[1:] = np.where(same, s[:-1], 0.0)
        near[:-1] = np.maximum(near[:-1], np.where(same, s[1:], 0.0))
        out.append(dataclasses.replace(g, scores=np.maximum(s, weight * near)))
    return out


def confidence(g) -> float:
    return float(g.scores.max()) if len(g.scores) else 0.0


def confidence_bins(cal: dict, bins: int):
    """A function giving each group its quantile bin of the pooled calibration queries' confidence."""
    pool = np.array([confidence(g) for gs in cal.values() for g in gs if g.has_evidence])
    edges = np.quantile(pool, np.linspace(0, 1, bins + 1)[1:-1]) if bins > 1 else np.zeros(0)
    return lambda groups: np.array([np.searchsorted(edges, confidence(g), side="right") for g in groups], int)


def fit(cal: dict, cal_bins: dict, floor, aim: float, bins: int, min_queries: int = 20) -> np.ndarray:
    """Each bin's threshold: the lowest that meets the target on every calibration slice with at
    least ``min_queries`` queries of that bin (the all-slices threshold where none has)."""
    from pruner_model.evaluation.calibration import slices_threshold
    from pruner_model.evaluation.metrics import relative_groups

    overall = slices_threshold([relative_groups(gs, floor) for gs in cal.values()], aim)
    out = []
    for b in range(bins):
        subs = [[g for g, k in zip(gs, cal_bins[n]) if k == b] for n, gs in cal.items()]
        subs = [
            relative_groups(sub, floor) for sub in subs if sum(g.has_evidence for g in sub) >= min_queries
        ]
        out.append(slices_threshold(subs, aim) if subs else overall)
    return np.array(out)


def judge(groups, bins: np.ndarray, floor, thresholds: np.ndarray) -> tuple[float, float]:
    from pruner_model.evaluation.metrics import metrics_at, relative_groups

    rel = relative_groups(groups, floor)
    m = metrics_at(rel, float("nan"), [r.scores >= thresholds[k] for r, k in zip(rel, bins)])
    return m["evidence_preserved"], m["compression"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (its floor and exponent are kept)")
    ap.add_argument("--data", default="data/squad/dev.jsonl")
    ap.add_argument("--target", type=float, default=None, help="default: the checkpoint's")
    ap.add_argument("--margin", type=float, default=0.005, help="calibrate for target + margin")
    ap.add_argument("--calibration", type=_range, default=(0, 2000), help="START:STOP groups")
    ap.add_argument("--choice", type=_range, default=(4000, 5000), help="START:STOP groups")
    ap.add_argument("--low-overlap-choice", type=_range, default=(4000, 6000), help="START:STOP groups")
    ap.add_argument("--bins", default="1,2,3,4", help="confidence bin counts to try")
    ap.add_argument(
        "--overlap-cuts",
        default="",
        help="also try two bins by the content words a query shares with its best sentence: <= cut or more (e.g. 0,1,2)",
    )
    ap.add_argument(
        "--neighbor-weights",
        default="",
        help="also try one threshold on scores raised to W x the best neighbour's (e.g. 0.05,0.2)",
    )
    ap.add_argument(
        "--thresholds",
        default="",
        help="also judge these fixed thresholds (e.g. 0.007,0.005): the trade-off line",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="encoder precision for scoring (auto: bf16 where it is native, else fp32)",
    )
    ap.add_argument("--cache", default=None, help="pickle of the scores: read if present, else written")
    args = ap.parse_args(argv)
    if not (Path(args.model) / "config.json").is_file():
        ap.error(f"no checkpoint at {args.model} (config.json missing)")
    c, ch = args.calibration, args.choice
    if max(c) > min(ch[0], args.low_overlap_choice[0]):
        ap.error("the choice groups must come after the calibration groups")
    from pruner_model.core.records import read_jsonl

    from pruner_model import PrunerConfig

    cfg = PrunerConfig.from_pretrained(args.model)
    floor, target = cfg.relative_floor, args.target or cfg.target_evidence or 0.95
    records = read_jsonl(args.data)
    plan = [("cal", s, *c) for s in ("as_is", "noisy", "mined", "low_overlap")]
    plan += [("choice", s, *ch) for s in ("as_is", "mined", "noisy")]
    plan += [("choice", "low_overlap", *args.low_overlap_choice)]
    if args.cache and Path(args.cache).is_file():
        scores = pickle.loads(Path(args.cache).read_bytes())
    else:
        scores = score_slices(args.model, records, plan, args.seed, args.dtype)
        if args.cache:
            Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
            Path(args.cache).write_bytes(pickle.dumps(scores))
    aim = min(1.0, target + args.margin)
    cuts = [int(x) for x in args.overlap_cuts.split(",") if x]
    overlap = top_overlap(records, plan, args.seed, cfg, scores) if cuts else {}
    print(f"| calibration slices | bins | {' | '.join(SLICES)} | thresholds |")
    print("|---|---|" + "---|" * (len(SLICES) + 1))

    def row(names, label, bins_of, nbins, sc=scores):
        cal = {n: sc[("cal", n)] for n in names}
        ts = fit(cal, {n: bins_of("cal", n) for n in names}, floor, aim, nbins)
        cells = [
            "{:.3f} / {:.3f}".format(*judge(sc[("choice", s)], bins_of("choice", s), floor, ts))
            for s in SLICES
        ]
        print(f"| {', '.join(names)} | {label} | {' | '.join(cells)} | {', '.join(f'{t:.4f}' for t in ts)} |")

    for names in (("as_is", "noisy", "mined"), ("as_is", "noisy", "mined", "low_overlap")):
        for k in (int(x) for x in args.bins.split(",")):
            assign = confidence_bins({n: scores[("cal", n)] for n in names}, k)
            row(names, str(k), lambda part, n, a=assign: a(scores[(part, n)]), k)
        for cut in cuts:
            row(
                names, f"overlap <= {cut}", lambda part, n, cut=cut: (overlap[(part, n)] > cut).astype(int), 2
            )
    weights = [float(x) for x in args.neighbor_weights.split(",") if x]
    keys = paragraph_keys(records, plan, args.seed, cfg) if weights else {}
    for w in weights:
        sc = {k: propagate(gs, keys[k], w) for k, gs in scores.items()}
        one = lambda part, n, sc=sc: np.zeros(len(sc[(part, n)]), int)  # noqa: E731
        row(("as_is", "noisy", "mined", "low_overlap"), f"neighbours x {w}", one, 1, sc)
    for t in (float(x) for x in args.thresholds.split(",") if x):
        cells = [
            "{:.3f} / {:.3f}".format(
                *judge(scores[("choice", s)], np.zeros(len(scores[("choice", s)]), int), floor, np.array([t]))
            )
            for s in SLICES
        ]
        print(f"| (fixed threshold) | 1 | {' | '.join(cells)} | {t:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
