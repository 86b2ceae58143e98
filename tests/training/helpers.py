"""Tiny labeled records and training configs shared by the training tests."""

import json

from pruner_model.training.config import load_config

SENTS = [
    "Paris is the capital of France.",
    "The Eiffel Tower was built in 1889.",
    "It is made of iron.",
    "Berlin is the capital of Germany.",
    "The river Spree flows through it.",
]


def make_records(n_groups=4, per_group=4):
    recs = []
    for g in range(n_groups):
        for p in range(per_group):
            ctx = " ".join(SENTS[(g + p + k) % len(SENTS)] for k in range(3))
            gold = p == 0
            start = ctx.index(SENTS[(g + p) % len(SENTS)])
            spans = [[start, start + len(SENTS[(g + p) % len(SENTS)])]] if gold else []
            recs.append(
                {
                    "id": f"q{g}/d{p}",
                    "query": f"question {g}?",
                    "context": ctx,
                    "relevant_spans": spans,
                    "source": "test",
                }
            )
    return recs


def tiny_cfg(data_files, **over):
    train_f, dev_f = data_files
    sets = [
        f"data.train=[{train_f}]",
        f"data.dev=[{dev_f}]",
        "train.batch_size=4",
        "train.max_steps=2",
        "train.eval_every=1",
        "train.save_every=1",
        "train.mixed_precision=no",
        "data.calibration_dev_groups=1",
        "data.report_dev_groups=1",
        "data.max_dev_groups=2",
        "model.max_length=128",
        "model.stride=16",
        "model.max_query_length=16",
    ]
    sets += [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def write_data_files(folder):
    """``(train.jsonl, dev.jsonl)`` of :func:`make_records` in ``folder``."""
    import json

    recs = make_records()
    train_f, dev_f = folder / "train.jsonl", folder / "dev.jsonl"
    train_f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    dev_f.write_text("".join(json.dumps(r) + "\n" for r in recs[:8]))
    return train_f, dev_f


def labeled_documents(tmp_path, n_groups=40, documents=12):
    """``(path, records)``: ``mine.jsonl`` of ``n_groups`` query groups about ``documents`` titled
    documents, as `pruner adapt --labeled` reads them."""
    recs = make_records(n_groups=n_groups, per_group=3)
    for r in recs:
        g = int(r["id"].split("/")[0][1:])
        r["title"] = f"doc{g % documents}"
        r["query"] = f"question {g} about doc{g % documents}?"
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path, recs


def write_labels_step(out, n_groups=40, documents=20):
    """The corpus steps' labels output under ``out``, as an endpoint would have written it:
    ``data/labeled.jsonl`` of ``n_groups`` groups about ``documents`` documents, and the labels
    step marked done in ``adapt.json``."""
    records = make_records(n_groups=n_groups, per_group=3)
    for r in records:
        g = int(r["id"].split("/")[0][1:])
        r["meta"] = {
            **r.get("meta", {}),
            "group": f"q{g}",
            "document": f"doc{g % documents}",
            "kind": "factoid",
        }
    (out / "data" / "labeled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    state = json.loads((out / "adapt.json").read_text())
    state["corpus"]["labels"] = {"groups rejected": 0, "confirmed": n_groups, "not answered by its chunk": 0,
                                 "kept as labeled": 0, "accounting": {"prompt_tokens": 100}, "seconds": 1.0}  # fmt: skip
    (out / "adapt.json").write_text(json.dumps(state))
