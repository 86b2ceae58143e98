"""The XQuAD records whose English article a build never trained or calibrated on.

XQuAD's paragraphs are SQuAD v1.1 dev's, translated into 11 languages; `pruner data qa` splits
SQuAD by article, so most XQuAD questions ask about an article whose English text a model built
from that split has trained on. This keeps the XQuAD records (of a `--heldout xquad_*` build) whose
article went to the ``dev`` split under the same seed and shares, the only ones that are unseen in
every language, and passes every other record through:

    pruner data qa --output data/qa-xq --sets squad --max-dev-questions 0 \
        --heldout xquad_en,xquad_ar,...,korquad,persianqa
    python experiments/xquad_unseen.py data/qa-xq/heldout.jsonl --output data/qa-xq/unseen.jsonl

Prints how many articles are kept and the records per set.
"""

from __future__ import annotations

import argparse
import collections
import json

from pruner_model.annotation.mix import MixSettings, family, split_of
from pruner_model.annotation.public_qa import load_set


def unseen_question_ids(seed: int = 0) -> tuple[set[str], int]:
    """SQuAD question ids of the articles in the ``dev`` split, and how many articles those are."""
    shares = (MixSettings.calibration_share, MixSettings.dev_share)
    examples, _ = load_set("squad")
    split = {ex.document: split_of(family(ex.document), seed, shares) for ex in examples}
    qids = {ex.qid.split(":", 1)[1] for ex in examples if split[ex.document] == "dev"}
    return qids, sum(s == "dev" for s in split.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="records of a --heldout xquad_* build (heldout.jsonl)")
    ap.add_argument("--output", required=True)
    ap.add_argument("--seed", type=int, default=0, help="the build's --seed")
    args = ap.parse_args()
    qids, articles = unseen_question_ids(args.seed)
    print(f"{articles} of SQuAD dev's articles in the dev split: {len(qids)} questions")
    counts: collections.Counter = collections.Counter()
    with open(args.records, encoding="utf-8") as f, open(args.output, "w", encoding="utf-8") as out:
        for line in f:
            rec = json.loads(line)
            group = rec["id"].split("/", 1)[0]
            source, _, qid = group.partition(":")
            if source.startswith("xquad_") and qid not in qids:
                continue
            counts[source] += 1
            out.write(line)
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
