"""Training data: windows and labels, record reading, sampling, batch samplers."""

import json

import numpy as np
import pytest
from pruner_model.core.records import RecordError
from pruner_model.evaluation.shifts import low_overlap_groups
from pruner_model.training.batching import GroupedBatches, LengthGroupedBatches
from pruner_model.training.config import ConfigError, load_config
from pruner_model.training.data import read_records, tokenize_records

from pruner_model import IGNORE_INDEX
from tests.training.helpers import make_records


def test_windows_carry_labels_of_long_contexts(bert_tokenizer):
    ctx = " ".join(f"Filler sentence number {i}." for i in range(60)) + " The answer is 42."
    s = ctx.index("The answer")
    recs = [{"id": "q/d", "query": "what?", "context": ctx, "relevant_spans": [[s, len(ctx)]]}]
    ds = tokenize_records(recs, bert_tokenizer, max_length=64, stride=8, max_query_length=8)
    assert len(ds) > 3
    rel = ds["relevance"]
    assert rel[-1] == 1.0 and sum(rel) == 1.0  # only the last window holds the answer
    last = np.array(ds["labels"][-1])
    ids = np.array(ds["input_ids"][-1])
    assert bert_tokenizer.decode(ids[last == 1]) == "the answer is 42."
    assert (np.array(ds["labels"][0]) != 1).all() and (np.array(ds["labels"][0]) == IGNORE_INDEX).any()
    # sentence ids: the last sentence (index 60) is exactly the labeled tokens; -1 off the context
    sid = np.array(ds["sentence_ids"][-1])
    assert (sid[last == 1] == 60).all() and ((sid == 60) == (last == 1)).all()
    assert ((sid == -1) == (last == IGNORE_INDEX)).all()
    # the set stays in memory for the whole run: integer columns are stored narrow
    assert ds.features["input_ids"].feature.dtype == "int32" and ds.features["labels"].feature.dtype == "int8"
    assert ds.features["attention_mask"].feature.dtype == "int8"


def test_read_records_dedups_and_reports(tmp_path):
    recs = make_records(2, 2)
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs + recs[:1]))
    out, report = read_records([str(f)])
    assert len(out) == 4 and report.duplicates_removed == 1 and report.positives == 2
    f.write_text(json.dumps({"id": "x", "query": "q", "context": "abc", "relevant_spans": [[0, 10]]}) + "\n")
    with pytest.raises(ValueError, match="bad span"):
        read_records([str(f)])


def test_low_overlap_share_draws_that_share_of_groups_from_paraphrased_questions(tmp_path):
    def group(i: int, low: bool) -> dict:
        answer = "Its capital is Paris." if low else "The capital of France is Paris."
        ctx = f"Filler sentence number {i}. {answer}"
        start = ctx.index(answer)
        query = "Which city hosts the French government?" if low else "What is the capital of France?"
        return {
            "id": f"g{i}",
            "query": f"{query} ({i})",
            "context": ctx,
            "relevant_spans": [[start, len(ctx)]],
        }

    recs = [group(i, low=i < 10) for i in range(40)]  # 10 of 40 groups share no content word
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert low_overlap_groups(recs) == {f"g{i}" for i in range(10)}
    plain, _ = read_records([str(f)], max_groups=20)
    drawn, report = read_records([str(f)], max_groups=20, low_overlap_share=0.5)
    assert report.groups == 20 and len(low_overlap_groups(drawn)) == 10
    assert "20 groups (10 low-overlap)" in report.line("train")
    assert len(low_overlap_groups(plain)) < 10
    # more asked than there are: all of them, the rest filled with the others
    drawn, report = read_records([str(f)], max_groups=20, low_overlap_share=0.9)
    assert report.groups == 20 and len(low_overlap_groups(drawn)) == 10
    # fewer others than asked for: low-overlap groups fill the rest
    drawn, report = read_records([str(f)], max_groups=35, low_overlap_share=0.0)
    assert report.groups == 35 and report.low_overlap_groups == len(low_overlap_groups(drawn)) == 5
    with pytest.raises(ConfigError, match="low_overlap_share"):
        load_config(None, ["data.max_train_groups=20", "data.low_overlap_share=1.5"])
    with pytest.raises(ConfigError, match="set both"):
        load_config(None, ["data.low_overlap_share=0.5"])


def test_mix_draws_groups_by_source_weight_and_leaves_unweighted_sources_out(tmp_path):
    recs = []
    for source, n in (("a", 40), ("b", 40), ("c", 10)):
        for r in make_records(n, 2):
            recs.append(r | {"id": f"{source}{r['id']}", "query": source + r["query"], "source": source})
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out, report = read_records([str(f)], max_groups=20, mix={"a": 3, "b": 1})
    groups = {r["meta"]["group"]: r["meta"]["source"] for r in out}
    assert sorted(groups.values()).count("a") == 15 and sorted(groups.values()).count("b") == 5
    assert report.groups == 20
    assert report.dropped == {"source not in data.mix": 20}  # source c's 10 groups of 2 records
    with pytest.raises(
        RecordError, match=r"data.mix names source 'nq', which no record .* \(sources there: a, b, c\)"
    ):
        read_records([str(f)], max_groups=20, mix={"a": 3, "nq": 1})
    with pytest.raises(ConfigError, match="data.mix.b must be a weight > 0"):
        load_config(None, ["data.max_train_groups=10", "data.mix={a: 1, b: 0}"])
    with pytest.raises(ConfigError, match="set both"):
        load_config(None, ["data.mix={a: 1}"])


def test_passage_only_records_train_the_relevance_head_alone(bert_tokenizer):
    ctx = "I saw both bands on Wednesday. They blew me away."
    recs = [
        {
            "id": "q/d",
            "query": "Will they go again?",
            "context": ctx,
            "relevant_spans": [],
            "meta": {"passage_only": True},
        },
        {"id": "q/e", "query": "Will they go again?", "context": ctx, "relevant_spans": []},
    ]
    ds = tokenize_records(recs, bert_tokenizer, max_length=64, stride=8, max_query_length=8)
    assert ds["relevance"] == [1.0, 0.0]
    assert (np.array(ds["labels"][0]) == IGNORE_INDEX).all()
    assert (np.array(ds["sentence_ids"][0]) == -1).all()  # no sentence is anyone's negative
    assert (np.array(ds["labels"][1]) == 0).any() and (np.array(ds["sentence_ids"][1]) >= 0).any()


def test_teacher_scores_reach_every_window_of_their_record_and_the_batch(bert_tokenizer):
    import torch
    from pruner_model.training.batching import Collator

    long = " ".join(f"Filler sentence number {i}." for i in range(40))
    recs = [
        {"id": "q/a", "query": "what?", "context": long, "relevant_spans": []},
        {"id": "q/b", "query": "what?", "context": "Short one.", "relevant_spans": []},
    ]
    ds = tokenize_records(recs, bert_tokenizer, 64, 8, 8, teacher=np.array([0.25, -0.5]))
    n_a = sum(1 for r in ds["record"] if r == 0)
    assert n_a > 1 and ds["teacher"] == [0.25] * n_a + [-0.5]
    batch = Collator(bert_tokenizer.pad_token_id, ["input_ids", "attention_mask"], groups=True)(list(ds))
    assert torch.equal(batch["teacher_scores"], torch.tensor([0.25] * n_a + [-0.5]))
    assert "teacher" not in tokenize_records(recs, bert_tokenizer, 64, 8, 8).column_names
    with pytest.raises(ConfigError, match="relevance_distill_weight ranks a query's passages together"):
        load_config(None, ["model.relevance_distill_weight=1.0"])


def test_batches_are_deterministic_and_complete():
    s = LengthGroupedBatches(np.arange(103), 8, seed=1)
    s.for_epoch(2)
    a, b = list(s), list(s)
    assert a == b and sorted(i for bt in a for i in bt) == list(range(103))
    s.for_epoch(3)
    assert list(s) != a


def test_group_batches_keep_query_groups_together():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), rng.integers(1, 7, 40))  # 40 groups of 1-6 windows
    groups = np.append(groups, [40] * 11)  # one group larger than a batch
    order = rng.permutation(len(groups))  # windows of a group need not be adjacent
    groups = groups[order]
    s = GroupedBatches(rng.integers(20, 256, len(groups)), groups, 8, seed=3)
    s.for_epoch(1)
    a = list(s)
    assert a == list(s) and len(a) == len(s)
    assert sorted(i for bt in a for i in bt) == list(range(len(groups)))  # every window once
    assert all(len(bt) <= 8 for bt in a)
    for g in range(40):  # every group that fits a batch lies in one batch
        where = {k for k, bt in enumerate(a) for i in bt if groups[i] == g}
        assert len(where) == 1, g
    assert len({k for k, bt in enumerate(a) for i in bt if groups[i] == 40}) == 2  # 11 windows: cut
    s.for_epoch(2)
    assert list(s) != a


@pytest.mark.parametrize(
    "line, message",
    [
        (
            '{"id": "b", "query": "q\\ud800?", "context": "Some text.", "relevant_spans": []}',
            "lone surrogate",
        ),
        (
            '{"id": "b", "query": "other?", "context": "Some text.", "relevant_spans": [], "meta": "x"}',
            "'meta'",
        ),
    ],
)
def test_a_bad_training_record_is_named_by_file_and_line(tmp_path, line, message):
    good = {"id": "a", "query": "q?", "context": "Some text. More.", "relevant_spans": [[0, 10]]}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(RecordError) as err:
        read_records([str(path)])
    assert (
        str(err.value).startswith(f"{path}:2:") and message in str(err.value) and "\n" not in str(err.value)
    )
