"""Does a weight-space blend toward the starting encoder (WiSE-FT, Wortsman et al., 2022) order
sentences better on text a model never saw? ``blend`` writes a checkpoint whose encoder is
``share`` of the trained one and the rest of the bundled all-MiniLM-L6-v2 it started from (the
heads stay as trained); ``compare`` scores checkpoints on the same groups and prints each one's
compression at 95% kept (threshold swept on the very groups: what the scores can give, whatever
the calibration) against the first's, with a paired bootstrap interval of the difference (1,000
resamples of the groups). Chosen on the leave-out model's never-seen sets (experiments/leave_out.yaml)
and its training sets' dev documents, never on a reported set:

    python experiments/wise_ft.py blend runs/leave_out 0.9 runs/lo_wise0.9
    python experiments/wise_ft.py blend runs/leave_out 0.75 runs/lo_wise0.75
    python experiments/wise_ft.py compare --data data/qa_leave_out/heldout.jsonl \
        runs/leave_out runs/lo_wise0.9 runs/lo_wise0.75
    python experiments/wise_ft.py compare --data data/qa_leave_out/dev.jsonl \
        runs/leave_out runs/lo_wise0.9 runs/lo_wise0.75
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

TARGET = 0.95


def blend(args) -> None:
    """``args.model``'s encoder at ``args.share``, the starting encoder's at the rest."""
    from pruner_model.core.modeling import PrunerModel, default_backbone_path
    from pruner_model.training.interpolation import interpolated

    tuned = PrunerModel.from_pretrained(args.model)
    start = PrunerModel.from_backbone(str(default_backbone_path()))
    state = tuned.state_dict()
    encoder = {k: v for k, v in state.items() if k.startswith("encoder.")}
    begun = {k: v for k, v in start.state_dict().items() if k in encoder}
    tuned.load_state_dict({**state, **interpolated(begun, encoder, args.share)})
    out = Path(args.output)
    tuned.save_pretrained(out)
    for f in Path(args.model).iterdir():  # the calibration, the tokenizer: as the trained model's
        if f.name == "config.json" or f.name.startswith("tokenizer"):
            shutil.copy(f, out / f.name)
    print(f"{out}: encoder {args.share} trained, {1 - args.share:.2f} starting weights")


def _scored(models: list[str], data: str, groups: int) -> dict:
    """``{(model, source): rule-scored groups}``: groups 0..N-1 of each source with answer sentences."""
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.groups import load_range, records_by_source
    from pruner_model.evaluation.scorer import score_groups
    from pruner_model.evaluation.sources import with_roles

    from pruner_model import ContextPruner

    by_source = records_by_source(with_roles(read_jsonl(data)))
    out = {}
    for model in models:
        pruner = ContextPruner.from_pretrained(model, dtype="auto")
        c = pruner.config
        for src, records in sorted(by_source.items()):
            gs = load_range(records, 0, 0, groups)
            if any(g.has_evidence for g in gs):
                raw = score_groups(pruner, gs).groups
                out[(model, src)] = with_score_rules(
                    raw, c.relevance_exponent, c.relative_floor, c.relevance_contrast
                )
    return out


def swept(groups, weights: np.ndarray) -> float:
    """Compression at the highest threshold that keeps every answer sentence of ``TARGET`` of the
    (weighted) questions: what ``best_compression_at(sweep(groups), TARGET)`` gives, in closed form."""
    crit = np.array([g.critical if g.has_evidence else np.nan for g in groups])
    has = ~np.isnan(crit)
    order = np.argsort(-crit[has])
    kept_share = np.cumsum(weights[has][order]) / weights[has].sum()
    t = crit[has][order][min(np.searchsorted(kept_share, TARGET - 1e-12), has.sum() - 1)]
    kept = sum(w * g.tokens[g.scores >= t].sum() for w, g in zip(weights, groups))
    return 1.0 - kept / sum(w * g.tokens.sum() for w, g in zip(weights, groups))


def compare(args) -> None:
    scored = _scored(args.models, args.data, args.groups)
    rng = np.random.default_rng(0)
    first = args.models[0]
    for src in sorted({s for _, s in scored}):
        base = scored[(first, src)]
        n = len(base)
        resamples = [np.bincount(rng.integers(0, n, n), minlength=n).astype(float) for _ in range(1000)]
        print(f"{src} ({n} groups): {first} {swept(base, np.ones(n)):.3f}")
        for model in args.models[1:]:
            other = scored[(model, src)]
            diff = swept(other, np.ones(n)) - swept(base, np.ones(n))
            boot = np.array([swept(other, w) - swept(base, w) for w in resamples])
            print(
                f"  {model}: {swept(other, np.ones(n)):.3f} ({diff:+.3f}, 95% interval "
                f"[{np.quantile(boot, 0.025):+.3f}, {np.quantile(boot, 0.975):+.3f}])"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("blend")
    b.add_argument("model")
    b.add_argument("share", type=float, help="share of the trained encoder's weights, in [0, 1]")
    b.add_argument("output")
    c = sub.add_parser("compare")
    c.add_argument("models", nargs="+", help="checkpoints; each compared with the first")
    c.add_argument("--data", required=True)
    c.add_argument("--groups", type=int, default=300, help="groups of each source (default: 300)")
    args = p.parse_args()
    {"blend": blend, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
