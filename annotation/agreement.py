"""How far LLM labels agree with gold labels (``pruner annotate --compare-gold``)."""

from __future__ import annotations


def compare_with_gold(llm_records: list[dict], gold_records: list[dict]) -> dict:
    """Agreement of LLM labels with gold labels on the passages both label.

    Sentence precision/recall/F1 over units (a unit is relevant when it overlaps a relevant span),
    and the share of passages where the relevant/irrelevant call agrees."""
    from pruner_model.core.alignment import unit_labels
    from pruner_model.core.segmentation import segment

    gold = {r["id"]: r for r in gold_records}
    tp = fp = fn = 0
    agree = n = 0
    for r in llm_records:
        g = gold.get(r["id"])
        if g is None or g["context"] != r["context"]:
            continue
        n += 1
        units = segment(r["context"])

        a, b = (
            unit_labels(units, r["relevant_spans"]).tolist(),
            unit_labels(units, g["relevant_spans"]).tolist(),
        )
        tp += sum(x and y for x, y in zip(a, b))
        fp += sum(x and not y for x, y in zip(a, b))
        fn += sum(y and not x for x, y in zip(a, b))
        agree += int(any(a) == any(b))
    p = tp / (tp + fp) if tp + fp else 0.0
    rc = tp / (tp + fn) if tp + fn else 0.0
    return {
        "passages_compared": n,
        "sentence_precision": p,
        "sentence_recall": rc,
        "sentence_f1": 2 * p * rc / (p + rc) if p + rc else 0.0,
        "relevance_agreement": agree / n if n else float("nan"),
    }
