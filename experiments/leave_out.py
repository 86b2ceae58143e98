"""What `pruner adapt` buys on text the checkpoint never saw: the quickstart recipe trained and
calibrated without some of the offline corpus's sources, then adapted to each of them in turn.

    python experiments/leave_out.py --output /tmp/lo            # writes the recipe and the files
    pruner train --config /tmp/lo/quickstart-lo.yaml --output /tmp/lo/run
    pruner adapt --labeled /tmp/lo/nq_1700.jsonl --model /tmp/lo/run --output /tmp/lo/adapt_nq \\
        --general-dev data/squad/dev.jsonl                      # and the same for each left-out source

It writes ``quickstart-lo.yaml`` (configs/quickstart.yaml with the left-out sources out of its mix
and its calibration sources), ``calibration.jsonl`` (data/mix/calibration.jsonl without them) and,
for each left-out source, ``<source>_<N>.jsonl``: N of its training-pool groups (seeded draw),
the labeled sample a user would bring; `pruner adapt` splits it 0.6 / 0.2 / 0.2 by document.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import yaml
from pruner_model.evaluation.groups import group_of


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--sources", default="nq,multirc,quoref", help="the sources left out")
    p.add_argument("--groups", type=int, default=1700, help="groups of each left-out source (default 1700)")
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--mix", default="data/mix")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out, left = args.output, set(args.sources.split(","))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "calibration.jsonl", "w", encoding="utf-8") as f:
        for line in open(f"{args.mix}/calibration.jsonl", encoding="utf-8"):
            if json.loads(line)["source"] not in left:
                f.write(line)
    cfg = yaml.safe_load(open(args.config, encoding="utf-8"))
    cfg["data"]["mix"] = {k: v for k, v in cfg["data"]["mix"].items() if k not in left}
    cfg["data"]["calibration_sources"] = [str(out / "calibration.jsonl")]
    (out / "quickstart-lo.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    by: dict[str, dict[str, list[str]]] = {s: {} for s in left}
    for line in open(f"{args.mix}/train.jsonl", encoding="utf-8"):
        r = json.loads(line)
        if r["source"] in left:
            by[r["source"]].setdefault(group_of(r), []).append(line)
    for s, groups in sorted(by.items()):
        keys = sorted(groups)
        random.Random(args.seed).shuffle(keys)
        with open(out / f"{s}_{args.groups}.jsonl", "w", encoding="utf-8") as f:
            for k in keys[: args.groups]:
                f.writelines(groups[k])
        print(
            f"{s}: {min(args.groups, len(keys))} of {len(keys)} groups -> {out / f'{s}_{args.groups}.jsonl'}"
        )


if __name__ == "__main__":
    main()
