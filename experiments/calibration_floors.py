"""How each relative floor's calibrated threshold carries over to unseen dev groups.

    python experiments/calibration_floors.py --model runs/reference [--data data/qa/dev.jsonl]
        [--exponents 0,0.25,0.5,1] [--calibration-groups 4000] [--report-start 6000]

Scores the calibration slice and the report slice that ``pruner train`` uses (same seeded
permutation of the dev groups), calibrates a threshold on the calibration slice for absolute
scores and for each floor (times passage relevance ** e for each ``--exponents`` e), and prints its 5-fold cross-validated evidence / compression inside the
calibration slice (what ``pruner train`` chooses the floor by), then evidence preserved /
compression on the report slice next to the best compression reachable there in-sample. A
diagnostic for choosing ``calibration.relative_floors``: do not pick a floor from the report-slice
columns and report it as held-out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder")
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--target", type=float, default=0.97)
    ap.add_argument("--calibration-groups", type=int, default=2000)
    ap.add_argument("--report-groups", type=int, default=2000)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--floors", default="0.01,0.02,0.05,0.1,0.2")
    ap.add_argument("--exponents", default="0", help="relevance exponents to try (0 = token head alone)")
    ap.add_argument(
        "--report-start",
        type=int,
        default=None,
        help="first report group (default: after the calibration ones)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the training config's data.seed")
    args = ap.parse_args()
    from pruner_model.core.score_rules import check_relevance_exponent

    if not (Path(args.model) / "config.json").is_file():
        ap.error(f"no checkpoint at {args.model} (config.json missing)")
    if not Path(args.data).is_file():
        ap.error(f"no dev records at {args.data} (build them with 'pruner data squad')")
    if not 2 <= args.folds <= args.calibration_groups:
        ap.error(f"--folds must be between 2 and --calibration-groups, got {args.folds}")
    if args.report_start is not None and args.report_start < args.calibration_groups:
        ap.error("--report-start must not overlap the calibration groups")
    try:
        floors = [None] + [float(x) for x in args.floors.split(",") if x]
        exponents = [float(x) for x in args.exponents.split(",") if x] or [0.0]
        for e in exponents:
            check_relevance_exponent(e)
    except ValueError as exc:
        ap.error(f"--floors / --exponents: {exc}")

    from pruner_model.evaluation.calibration import calibrate_operating_point, cross_validate
    from pruner_model.evaluation.groups import load_range
    from pruner_model.evaluation.metrics import metrics_at, relative_groups, weighted_groups
    from pruner_model.evaluation.scorer import score_groups
    from pruner_model.training.data import read_records
    from transformers import AutoTokenizer

    from pruner_model import PrunerModel

    model = PrunerModel.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    mc = model.config
    records, _ = read_records([args.data], None, True, args.seed)
    n_cal = args.calibration_groups
    start = n_cal if args.report_start is None else args.report_start
    slices = {"calibration": (0, n_cal), "report": (start, start + args.report_groups)}
    scored = {}
    for name, (a, b) in slices.items():
        groups = load_range(records, args.seed, a, b, mc.segmenter_language, mc.segmenter_structure)
        scored[name] = score_groups(model, groups, tok).groups
    print(
        f"target evidence {args.target}; threshold calibrated on groups 0-{n_cal - 1}, "
        f"measured on groups {start}-{start + args.report_groups - 1}"
    )
    print(
        f"{'exponent':>8} {'floor':>8} {'threshold':>10} {'cal comp':>9} {'cal cv evid':>12} {'cal cv comp':>12} "
        f"{'report evidence':>16} {'report comp':>12} {'in-sample':>10}"
    )
    for e in exponents:
        cal_groups = weighted_groups(scored["calibration"], e)
        rep_groups = weighted_groups(scored["report"], e)
        for floor in floors:
            _, t, cal = calibrate_operating_point(cal_groups, args.target, [floor])
            cv = cross_validate(cal_groups, args.target, floor, args.folds)
            rep = metrics_at(relative_groups(rep_groups, floor), t)
            best = calibrate_operating_point(rep_groups, args.target, [floor])[2]
            print(
                f"{e:>8} {'none' if floor is None else floor:>8} {t:10.4f} {cal['compression']:9.3f} "
                f"{cv['evidence_preserved']:12.3f} {cv['compression']:12.3f} "
                f"{rep['evidence_preserved']:16.3f} {rep['compression']:12.3f} {best['compression']:10.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
