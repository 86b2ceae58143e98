import copy
import json

import numpy as np
import pytest
import torch
from pruner_model.training.config import ConfigError, load_config
from pruner_model.training.data import GroupedBatches, LengthGroupedBatches, read_records, tokenize_records
from pruner_model.training.metrics import (
    ScoredGroup,
    calibrate_operating_point,
    calibrate_threshold,
    cross_validate,
    metrics_at,
    relative_groups,
    roc_auc,
)
from pruner_model.training.trainer import train
from safetensors.torch import load_file

from pruner_model import IGNORE_INDEX, PrunerModel
from pruner_model.cli import main
from pruner_model.shifts import low_overlap_groups

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


@pytest.fixture
def data_files(tmp_path):
    recs = make_records()
    train_f, dev_f = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train_f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    dev_f.write_text("".join(json.dumps(r) + "\n" for r in recs[:8]))
    return train_f, dev_f


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


def test_two_step_run_writes_loadable_checkpoint(tmp_path, data_files, tiny_model, bert_tokenizer):
    out = tmp_path / "run"
    cfg = tiny_cfg(  # sentence ids reach the loss; calibration tries a relevance exponent and a shift
        data_files,
        **{
            "model.sentence_loss_weight": 0.5,
            "calibration.relevance_exponents": "[1.0]",
            "calibration.shifts": "[noisy]",
        },
    )
    tiny_model.config.sentence_loss_weight = 0.5
    metrics = train(cfg, out, model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["best_step"] in (1, 2) and len(saved["history"]) == 2
    assert "evidence_preserved" in metrics["dev"] and 0 <= metrics["dev"]["compression"] <= 1
    loaded = PrunerModel.from_pretrained(str(out))
    assert loaded.config.threshold == pytest.approx(saved["calibration"]["threshold"])
    assert loaded.config.relative_floor == saved["calibration"]["relative_floor"]
    assert loaded.config.relevance_exponent == saved["calibration"]["relevance_exponent"]
    assert {r["relevance_exponent"] for r in saved["calibration"]["candidates"]} == {0.0, 1.0}
    # the threshold meets the target on the noisy slice too: it is the lower of the two slices'
    slices = saved["calibration"]["slice_thresholds"]
    assert set(slices) == {"as_is", "noisy"} and loaded.config.threshold == pytest.approx(
        min(slices.values())
    )
    assert loaded.config.uncertainty_threshold == saved["calibration"]["uncertainty_threshold"]
    # the published folder carries a model card; the resumable state lives beside it
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "base_model:" in card and f"{loaded.config.threshold:.4f}" in card
    assert "calibration groups and their noisy slices" in card
    promise = saved["dev"]["promise"]  # the report group (held out) tests the calibrated promise
    assert promise["queries"] == 1 and promise["kept"] == round(saved["dev"]["evidence_preserved"])
    assert f"promise **{promise['verdict']}**" in card
    assert not (out / "checkpoints").exists() and (tmp_path / "run.trainer" / "last").is_dir()
    from pruner_model.inference import ContextPruner

    r = ContextPruner.from_pretrained(out).prune("question 1?", [SENTS[0] + " " + SENTS[1]])
    assert r.stats.sentences_in == 2


def test_calibration_bf16_scores_calibration_and_report_under_autocast(
    tmp_path, data_files, tiny_model, bert_tokenizer, monkeypatch
):
    from pruner_model import PrunerModel

    seen = []
    real = PrunerModel.predict

    def predict(self, batch, dtype=None):  # the model's own forward, recording the precision asked for
        seen.append(dtype)
        return real(self, batch, dtype)

    cfg = tiny_cfg(data_files, **{"train.eval_every": 0, "calibration.bf16": "true"})
    monkeypatch.setattr(PrunerModel, "predict", predict)
    metrics = train(cfg, tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    # the in-training evaluation follows train.mixed_precision (no); calibration and report: bf16
    assert seen[0] is None and "bf16" in seen and set(seen[seen.index("bf16") :]) == {"bf16"}
    assert 0 <= metrics["dev"]["compression"] <= 1


@pytest.mark.parametrize("frozen", [False, True], ids=["all-weights", "frozen-word-embeddings"])
def test_training_changes_weights_and_lowers_loss(tmp_path, data_files, tiny_model, bert_tokenizer, frozen):
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    over = {"train.max_steps": 30, "train.eval_every": 0, "train.lr": 1e-3, "train.save_every": 0}
    cfg = tiny_cfg(data_files, **over, **{"train.freeze_word_embeddings": str(frozen).lower()})
    train(cfg, tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    after = load_file(str(tmp_path / "r" / "model.safetensors"))
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any(k.startswith("token_head") for k in changed) and any(
        k.startswith("encoder.encoder") for k in changed
    )
    assert ("encoder.embeddings.word_embeddings.weight" in changed) is not frozen


@pytest.mark.parametrize(
    "grouped, averaged",
    [(False, False), (True, False), (False, True)],
    ids=["length-batches", "group-batches", "weight-average"],
)
def test_resume_matches_uninterrupted(tmp_path, data_files, tiny_model, bert_tokenizer, grouped, averaged):
    over = {"train.max_steps": 6, "train.eval_every": 0, "train.save_every": 0}
    if grouped:  # whole query groups per batch, the ranking loss pooled over each group
        over.update({"train.group_batches": "true", "model.sentence_loss_weight": 0.5})
        tiny_model.config.sentence_loss_weight = 0.5
    if averaged:  # the moving average is saved with the state and continued, not restarted
        over.update({"train.ema_decay": 0.8, "train.lr": 1e-3})
    cfg = tiny_cfg(data_files, **over)
    a, b = copy.deepcopy(tiny_model), copy.deepcopy(tiny_model)
    train(cfg, tmp_path / "full", model=a, tokenizer=bert_tokenizer, quiet=True)
    res = train(cfg, tmp_path / "cut", model=b, tokenizer=bert_tokenizer, quiet=True, stop_after=3)
    assert res == {"interrupted": True, "step": 3}
    c = copy.deepcopy(tiny_model)  # a fresh process would rebuild the model; the state restores weights
    train(cfg, tmp_path / "cut", model=c, tokenizer=bert_tokenizer, quiet=True, resume=True)
    wa = load_file(str(tmp_path / "full" / "model.safetensors"))
    wb = load_file(str(tmp_path / "cut" / "model.safetensors"))
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6), k
    # resuming a finished run re-evaluates and re-finalizes; its history keeps one entry per step
    before = json.loads((tmp_path / "full" / "metrics.json").read_text())["history"]
    train(
        cfg,
        tmp_path / "full",
        model=copy.deepcopy(tiny_model),
        tokenizer=bert_tokenizer,
        quiet=True,
        resume=True,
    )
    after = json.loads((tmp_path / "full" / "metrics.json").read_text())["history"]
    assert [h["step"] for h in after] == [h["step"] for h in before] == [6]


def test_weight_average_is_the_bias_corrected_mean_and_swaps_back():
    from pruner_model.training.averaging import WeightAverage

    model = torch.nn.Linear(2, 1)
    avg, d = WeightAverage(model, 0.5), 0.5
    visited = []
    for v in (1.0, 2.0, 4.0):
        with torch.no_grad():
            model.weight.fill_(v)
        visited.append(v)
        avg.update(model)
    w = [d ** (len(visited) - 1 - i) for i in range(len(visited))]  # the newest weighs most
    expected = sum(wi * v for wi, v in zip(w, visited)) / sum(w)  # (1 + 2*2 + 4*4) / 7 = 3
    assert avg.shadow["weight"] == pytest.approx(torch.full((1, 2), expected))
    with avg.swapped_in(model):
        assert torch.allclose(model.weight, torch.full((1, 2), expected))
    assert torch.equal(model.weight, torch.full((1, 2), 4.0))  # its own weights are back
    with pytest.raises(ValueError, match="decay"):
        WeightAverage(model, 1.0)


def test_weight_average_is_what_is_evaluated_and_published(tmp_path, data_files, tiny_model, bert_tokenizer):
    over = {"train.max_steps": 8, "train.lr": 1e-3, "train.eval_every": 0, "train.ema_decay": 0.9}
    train(
        tiny_cfg(data_files, **over), tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True
    )
    published = load_file(str(tmp_path / "r" / "model.safetensors"))
    last = load_file(str(tmp_path / "r.trainer" / "last" / "model.safetensors"))  # the last step's
    saved = load_file(str(tmp_path / "r.trainer" / "last" / "weight_average.safetensors"))
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["best_step"] == 8
    assert set(saved) <= set(published)
    for name in ("token_head.weight", "encoder.encoder.layer.0.attention.self.query.weight"):
        assert not torch.allclose(published[name], last[name])  # not the last step's weights ...
        assert torch.equal(published[name], saved[name])  # ... but their average
    with pytest.raises(ConfigError, match="ema_decay"):
        tiny_cfg(data_files, **{"train.ema_decay": 1.0})


def test_resume_must_keep_the_weight_average_setting(tmp_path, data_files, tiny_model, bert_tokenizer):
    plain = {"train.max_steps": 4, "train.eval_every": 0, "train.save_every": 0}
    averaged = {**plain, "train.ema_decay": 0.8}
    for name, started, resumed, message in (
        ("averaged", averaged, plain, "started with train.ema_decay"),  # its average would be lost
        ("plain", plain, averaged, "started without train.ema_decay"),  # no average to continue
    ):
        out = tmp_path / name
        cut = train(
            tiny_cfg(data_files, **started),
            out,
            model=copy.deepcopy(tiny_model),
            tokenizer=bert_tokenizer,
            quiet=True,
            stop_after=2,
        )
        assert cut == {"interrupted": True, "step": 2}
        with pytest.raises(ValueError, match=message):
            train(
                tiny_cfg(data_files, **resumed),
                out,
                model=copy.deepcopy(tiny_model),
                tokenizer=bert_tokenizer,
                quiet=True,
                resume=True,
            )
        assert not (out / "model.safetensors").exists()  # nothing was published from the refused run


def test_refuses_to_overwrite_a_run(tmp_path, data_files, tiny_model, bert_tokenizer):
    cfg = tiny_cfg(data_files, **{"train.max_steps": 1, "train.eval_every": 0})
    train(cfg, tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    with pytest.raises(FileExistsError):
        train(cfg, tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)


def test_unknown_config_key_fails_clearly(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  warmup_steps: 100\n")
    with pytest.raises(ConfigError, match="unknown key train.warmup_steps"):
        load_config(bad)
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key train.warmup_steps" in err[0]
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(None, ["nope.x=1"])
    with pytest.raises(ConfigError, match="train.lr"):
        load_config(None, ["train.lr=fast"])
    with pytest.raises(ConfigError, match="calibration.relative_floors"):
        load_config(None, ["calibration.relative_floors=[0.1,0]"])


def test_overrides_parse_types():
    cfg = load_config(None, ["train.lr=3e-5", "train.max_steps=7", "data.train=[a.jsonl,b.jsonl]"])
    assert cfg.train.lr == 3e-5 and cfg.train.max_steps == 7 and cfg.data.train == ["a.jsonl", "b.jsonl"]


def test_shipped_configs_load():
    for name in ("quickstart", "reference", "gpu"):
        load_config(f"configs/{name}.yaml")


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


def test_report_slice_must_not_overlap_calibration():
    with pytest.raises(ConfigError, match="overlaps the calibration groups"):
        load_config(overrides=["data.calibration_dev_groups=2000", "data.report_dev_start=1500"])
    cfg = load_config(overrides=["data.report_dev_start=4000", "train.group_batches=true"])
    assert cfg.data.report_dev_start == 4000 and cfg.train.group_batches is True


def test_metrics_and_calibration():
    assert roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    groups = [
        ScoredGroup(np.array([0.9, 0.2, 0.1]), np.array([True, False, False]), np.array([10, 10, 10])),
        ScoredGroup(np.array([0.4, 0.6]), np.array([True, False]), np.array([5, 5])),
        ScoredGroup(np.array([0.3, 0.2]), np.array([False, False]), np.array([5, 5])),
    ]
    t = calibrate_threshold(groups, 1.0)
    assert t == pytest.approx(0.4)
    m = metrics_at(groups, t)
    assert m["evidence_preserved"] == 1.0
    assert m["compression"] == pytest.approx(1 - 20 / 50)
    assert m["negative_tokens_kept"] == 0.0
    assert metrics_at(groups, calibrate_threshold(groups, 0.5))["evidence_preserved"] >= 0.5


def test_relative_floor_calibration_beats_absolute_when_confidence_varies():
    # group A: the model is unsure everywhere (gold 0.02); group B: sure of the gold (0.9) with
    # middling distractors (0.3). One absolute threshold must go down to 0.02 and keeps B's
    # distractors; relative to each group's best (floor 0.05), 0.4 keeps exactly the gold units.
    tok = np.array([10, 10, 10])
    a = ScoredGroup(np.array([0.02, 0.01, 0.01]), np.array([True, False, False]), tok)
    b = ScoredGroup(np.array([0.9, 0.3, 0.3]), np.array([True, False, False]), tok)
    groups = [a, b]
    absolute = metrics_at(groups, calibrate_threshold(groups, 1.0))
    assert absolute["evidence_preserved"] == 1.0 and absolute["compression"] == pytest.approx(2 / 6)
    floor, t, m = calibrate_operating_point(groups, 1.0, [None, 0.05, 0.5])
    assert floor == 0.05 and t == pytest.approx(0.4)
    assert m["evidence_preserved"] == 1.0 and m["compression"] == pytest.approx(4 / 6)
    assert metrics_at(relative_groups(groups, floor), t)["compression"] == pytest.approx(4 / 6)
    # absolute scores win when they are enough: None is picked first on ties
    assert calibrate_operating_point([b], 1.0, [None, 0.05])[0] is None


def test_cross_validated_floor_choice_prefers_what_carries_over():
    # Half the queries are sure of their gold (0.9, distractors 0.3), half unsure everywhere (gold
    # 0.02, distractors 0.01-0.015). Relative to each query's best (floor 0.05), one threshold
    # separates gold from distractors in both kinds, so it wins in-sample and held out.
    rng = np.random.default_rng(0)
    tok = np.array([10, 10, 10, 10])
    groups = []
    for i in range(40):
        sure = i % 2 == 0
        gold = 0.9 if sure else 0.02
        other = rng.uniform(0.2, 0.35, 3) if sure else rng.uniform(0.01, 0.015, 3)
        groups.append(ScoredGroup(np.r_[gold, other], np.array([True, False, False, False]), tok))
    cv = cross_validate(groups, 1.0, 0.05, folds=4)
    assert cv["evidence_preserved"] == 1.0 and cv["compression"] == pytest.approx(0.75)
    assert cross_validate(groups, 1.0, None, folds=4)["compression"] < 0.5
    floor, t, m = calibrate_operating_point(groups, 1.0, [None, 0.05], folds=4)
    assert floor == 0.05 and m["evidence_preserved"] == 1.0
    rows = {r["relative_floor"]: r for r in m["candidates"]}
    assert rows[0.05]["cv_compression"] > rows[None]["cv_compression"]
    with pytest.raises(ValueError, match="folds"):
        cross_validate(groups[:3], 1.0, None, folds=5)


def test_operating_point_over_slices_meets_the_target_on_each_and_compresses_most():
    # Slice "as_is" (45 queries): the relevance head separates a high-scoring distractor passage,
    # so x relevance compresses more. Slice "shifted" (5 queries): the relevance head doubts the
    # gold passage, so x relevance needs a tiny threshold there. Pooled at target 0.9, x relevance
    # wins and loses every shifted answer; over slices, the token head alone is chosen.
    tok = np.array([10, 10, 10])
    labels = np.array([True, False, False])
    as_is = [
        ScoredGroup(np.array([0.6, 0.65, 0.05]), labels, tok, relevance=np.array([0.9, 0.1, 0.9]))
        for _ in range(45)
    ]
    shifted = [
        ScoredGroup(np.array([0.6, 0.3, 0.05]), labels, tok, relevance=np.array([0.01, 0.9, 0.9]))
        for _ in range(5)
    ]
    pooled = calibrate_operating_point(as_is + shifted, 0.9, [None], exponents=[0.0, 1.0])[2]
    assert pooled["relevance_exponent"] == 1.0
    for folds in (0, 5):
        floor, t, m = calibrate_operating_point(
            {"as_is": as_is, "shifted": shifted}, 0.9, [None], folds=folds, exponents=[0.0, 1.0]
        )
        assert m["relevance_exponent"] == 0.0 and t == pytest.approx(0.6)
        assert m["slice_thresholds"] == {"as_is": pytest.approx(0.6), "shifted": pytest.approx(0.6)}
        for gs in (as_is, shifted):
            assert metrics_at(gs, t)["evidence_preserved"] == 1.0
    rows = {r["relevance_exponent"]: r for r in m["candidates"]}
    assert rows[1.0]["threshold"] == pytest.approx(0.006) and rows[1.0]["cv_compression"] == 0.0


def test_relevance_exponent_is_chosen_when_the_relevance_head_separates():
    # Each query: a gold sentence (0.6) in a passage the relevance head trusts (0.9), and a
    # distractor passage whose sentence scores as high (0.6-0.7) but whose relevance is low (0.1).
    # The token head alone cannot drop the distractor; times relevance it can.
    rng = np.random.default_rng(1)
    tok = np.array([10, 10, 10])
    groups = []
    for _ in range(20):
        s = np.array([0.6, 0.05, rng.uniform(0.6, 0.7)])
        groups.append(
            ScoredGroup(s, np.array([True, False, False]), tok, relevance=np.array([0.9, 0.9, 0.1]))
        )
    floor, t, m = calibrate_operating_point(groups, 1.0, [None], folds=4, exponents=[0.0, 1.0])
    assert m["relevance_exponent"] == 1.0 and m["evidence_preserved"] == 1.0
    assert m["compression"] == pytest.approx(2 / 3)
    rows = {r["relevance_exponent"]: r for r in m["candidates"]}
    assert rows[1.0]["cv_compression"] > rows[0.0]["cv_compression"]
    assert calibrate_operating_point(groups, 1.0, [None])[2]["relevance_exponent"] == 0.0
    with pytest.raises(ValueError, match="relevance"):  # groups scored without relevance
        calibrate_operating_point(
            [ScoredGroup(groups[0].scores, groups[0].labels, tok)], 1.0, [None], exponents=[1.0]
        )
    with pytest.raises(ConfigError, match="relevance_exponents"):
        load_config(None, ["calibration.relevance_exponents=[-1]"])


def test_required_kept_is_the_exact_binomial_bound():
    from scipy.stats import binom

    from pruner_model.metrics import required_kept

    for n, target, conf in [(97, 0.95, 0.8), (240, 0.95, 0.9), (900, 0.97, 0.8), (30, 0.9, 0.95)]:
        k = required_kept(n, target, conf)
        assert binom.sf(k - 1, n, target) <= 1 - conf < binom.sf(k - 2, n, target)  # the fewest such k
    assert required_kept(240, 0.95) == 228  # ceil(0.95 * 240): the sample meets the target
    # the headroom shrinks as the slice grows, and keeps all that was seen when n is too small
    shares = [required_kept(n, 0.95, 0.8) / n for n in (120, 240, 900, 4000)]
    assert shares == sorted(shares, reverse=True) and 0.95 < shares[-1] < 0.955
    assert required_kept(20, 0.99, 0.9) == 20 and required_kept(0, 0.95, 0.9) == 0


def test_kept_interval_is_the_exact_interval_and_the_promise_check_tells_a_miss_from_luck():
    from scipy.stats import beta, binom

    from pruner_model.metrics import kept_interval, promise_check

    for k, n in [(88, 97), (454, 478), (3, 40), (199, 200)]:
        lo, hi = kept_interval(k, n)  # Clopper-Pearson: quantiles of beta distributions
        assert lo == pytest.approx(beta.ppf(0.025, k, n - k + 1), abs=1e-9)
        assert hi == pytest.approx(beta.ppf(0.975, k + 1, n - k), abs=1e-9)
    assert kept_interval(0, 10)[0] == 0.0 and kept_interval(10, 10)[1] == 1.0
    assert kept_interval(10, 10)[0] == pytest.approx(0.025 ** (1 / 10))
    for bad in [(5, 4), (-1, 4), (0, 0)]:
        with pytest.raises(ValueError, match="kept must be in"):
            kept_interval(*bad)
    # 97 report queries keeping 0.907 cannot tell a 0.95 promise from a miss; 478 keeping 0.900 can
    small, large = promise_check(88, 97, 0.95), promise_check(430, 478, 0.95)
    assert (small["verdict"], large["verdict"], promise_check(96, 100, 0.95)["verdict"]) == (
        "within chance",
        "missed",
        "met",
    )
    assert small["p_under_target"] == pytest.approx(binom.cdf(88, 97, 0.95))
    assert large["p_under_target"] < 1e-4 and large["interval"][1] < 0.95 < small["interval"][1]


def test_confidence_keeps_the_promise_on_new_queries():
    # Critical scores uniform on [0, 1]: a threshold t keeps 1 - t of new queries. Calibrated on
    # 200 queries for 0.95, the plain threshold keeps >= 0.95 of new ones about half the time;
    # with confidence 0.9, in about 9 draws of 10.
    rng = np.random.default_rng(0)
    tok, held = np.array([10]), {None: [], 0.9: []}
    for _ in range(300):
        groups = [ScoredGroup(np.array([c]), np.array([True]), tok) for c in rng.uniform(size=200)]
        for conf in held:
            held[conf].append(1 - calibrate_threshold(groups, 0.95, conf) >= 0.95)
    assert 0.35 < np.mean(held[None]) < 0.65
    assert 0.85 < np.mean(held[0.9]) < 0.95
    # over slices, each slice's threshold gets the headroom of its own size
    small = [ScoredGroup(np.array([c]), np.array([True]), tok) for c in rng.uniform(size=60)]
    large = [ScoredGroup(np.array([c]), np.array([True]), tok) for c in rng.uniform(size=2000)]
    plain = calibrate_operating_point({"small": small, "large": large}, 0.9, [None])[2]["slice_thresholds"]
    sure = calibrate_operating_point({"small": small, "large": large}, 0.9, [None], confidence=0.9)
    assert sure[1] == min(sure[2]["slice_thresholds"].values())
    assert 1 - metrics_at(small, sure[1])["evidence_preserved"] <= 0.1 - 0.05  # ~1.3 sd of 60
    for name in ("small", "large"):
        assert sure[2]["slice_thresholds"][name] < plain[name]
    assert metrics_at(large, sure[2]["slice_thresholds"]["large"])["evidence_preserved"] < 0.92
    with pytest.raises(ConfigError, match="calibration.confidence"):
        load_config(None, ["calibration.confidence=0.3"])
    assert load_config(None, ["calibration.confidence=0.9"]).calibration.confidence == 0.9


def test_calibration_margin_and_loss_weights_are_validated():
    with pytest.raises(ConfigError, match="model.sentence_loss_weight must be >= 0"):
        load_config(None, ["model.sentence_loss_weight=-0.5"])
    with pytest.raises(ConfigError, match="margin"):
        load_config(None, ["calibration.target_evidence=0.99", "calibration.margin=0.05"])
    assert load_config(None, ["calibration.margin=0.01"]).calibration.margin == 0.01


def test_allocator_threshold_and_shift_groups_are_validated():
    import sys

    from pruner_model.memory import fix_mmap_threshold

    with pytest.raises(ConfigError, match="train.malloc_mmap_threshold must be >= 0"):
        load_config(None, ["train.malloc_mmap_threshold=-1"])
    with pytest.raises(ConfigError, match="shift_groups"):
        load_config(None, ["calibration.shift_groups=0"])
    assert load_config(None, ["calibration.shifts=[noisy+mined]"]).calibration.shifts == ["noisy+mined"]
    for bad, error in [("[reddit]", "unknown slice 'reddit'"), ("[as_is]", "calibration groups themselves")]:
        with pytest.raises(ConfigError, match=error):
            load_config(None, [f"calibration.shifts={bad}"])
    assert fix_mmap_threshold(0) is False  # 0 leaves the allocator alone
    assert fix_mmap_threshold(65536) is (sys.platform.startswith("linux"))  # glibc here


def test_calibration_labels_every_answer_and_reuses_scores_for_low_overlap(tmp_path, tiny_model, monkeypatch):
    from pruner_model.training import calibration

    a = "The tower of Paris is famous. The tower of Paris was finished in 1889. Tourists visit it."
    b = "The harbour is old. Gustave built it with iron. Boats dock there."
    dev = [
        {  # two annotators: one marked the year, the other the tourists
            "id": "qa/d0",
            "query": "When was the tower of Paris finished?",
            "context": a,
            "relevant_spans": [[a.index("The tower of Paris was"), a.index(" Tourists")]],
            "meta": {"answers": [[a.index("1889"), a.index("1889") + 4], [a.index("Tourists"), len(a)]]},
        },
        {  # the answer sentence shares no content word with the question
            "id": "qb/d0",
            "query": "Who designed the harbour?",
            "context": b,
            "relevant_spans": [[b.index("Gustave"), b.index(" Boats")]],
            "meta": {"answers": [[b.index("Gustave"), b.index("Gustave") + 7]]},
        },
    ]
    path = tmp_path / "dev.jsonl"  # the trainer reads dev records through read_records: answers survive
    path.write_text("".join(json.dumps(r) + "\n" for r in dev))
    dev = read_records([str(path)])[0]
    assert dev[0]["meta"]["answers"] == [
        [a.index("1889"), a.index("1889") + 4],
        [a.index("Tourists"), len(a)],
    ]
    first = {g.id: g.labels[0].tolist() for g in calibration._slice(tiny_model, dev, 0, 0, None)}
    every = calibration._slice(tiny_model, dev, 0, 0, None, every_answer=True)
    assert first["qa"] == [False, True, False]
    assert {g.id: g.labels[0].tolist() for g in every} == {
        "qa": [False, True, True],
        "qb": [False, True, False],
    }

    def score_copies(model, tokenizer, groups, bf16=False):
        if {g.id for g in groups} != {every[0].id}:  # noisy copies of the first shift_groups groups only
            raise AssertionError("the low-overlap slice reuses the calibration groups' scores")
        return [f"noisy scores of {g.id}" for g in groups], 0.5

    monkeypatch.setattr(calibration, "_score", score_copies)
    scored = [f"scores of {g.id}" for g in every]
    # low_overlap after a rescored copy: it still picks from the calibration groups' own scores
    cfg = load_config(None, ["calibration.shifts=[noisy,low_overlap]", "calibration.shift_groups=1"])
    shifted = calibration._score_shifts(tiny_model, None, cfg, dev, every, scored)
    assert shifted == {"noisy": [f"noisy scores of {every[0].id}"], "low_overlap": ["scores of qb"]}
    # a combined slice of low-overlap questions is built from every calibration group, not only the
    # first shift_groups ones: it scores just their low-overlap subset
    seen = []

    def record(model, tokenizer, groups, bf16=False):
        seen.append(sorted(g.id for g in groups))
        return [f"copy of {g.id}" for g in groups], 0.5

    monkeypatch.setattr(calibration, "_score", record)
    cfg = load_config(None, ["calibration.shifts=[noisy,low_overlap+noisy]", "calibration.shift_groups=1"])
    shifted = calibration._score_shifts(tiny_model, None, cfg, dev, every, scored)
    assert seen == [[every[0].id], ["qb"]] and shifted["low_overlap+noisy"] == ["copy of qb"]
