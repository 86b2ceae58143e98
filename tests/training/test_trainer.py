"""The training loop end to end: checkpoints, resume, weight averaging, calibration and publishing."""

import copy
import json

import pytest
import torch
from pruner_model.core.records import RecordError
from pruner_model.training.config import ConfigError, load_config
from pruner_model.training.data import read_records
from pruner_model.training.trainer import train
from safetensors.torch import load_file

from pruner_model import PrunerModel
from tests.training.helpers import SENTS, tiny_cfg


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
    assert "`pruner calibrate --model DIR --data mine.jsonl`" in card  # the way to a point for your text
    assert not (out / "checkpoints").exists() and (tmp_path / "run.trainer" / "last").is_dir()
    from pruner_model.inference import ContextPruner

    r = ContextPruner.from_pretrained(out).prune("question 1?", [SENTS[0] + " " + SENTS[1]])
    assert r.stats.sentences_in == 2


def test_calibration_names_an_operating_point_per_source(
    tmp_path, data_files, tiny_model, bert_tokenizer, monkeypatch
):
    from pruner_model.evaluation import calibrate
    from pruner_model.inference import ContextPruner

    monkeypatch.setattr(calibrate, "MIN_POINT_QUERIES", 1)  # the tiny source counts as enough

    from tests.training.helpers import make_records

    blogs = make_records(n_groups=6)
    for r in blogs:  # another source: its own slice, its own named threshold
        r["source"], r["id"] = "blogs", "blogs:" + r["id"]
    src = tmp_path / "sources.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in blogs))
    over = {"data.calibration_sources": f"[{src}]", "data.calibration_source_groups": 6}
    out = tmp_path / "run"
    train(tiny_cfg(data_files, **over), out, model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    saved = json.loads((out / "metrics.json").read_text())["calibration"]
    slices = saved["slice_thresholds"]
    assert set(slices) == {"as_is", "source:blogs"}
    config = PrunerModel.from_pretrained(str(out)).config
    points = config.operating_points  # the dev data's under its records' source
    assert set(points) == {"test", "blogs"} and saved["operating_points"] == points
    assert config.threshold == pytest.approx(min(slices.values()))
    # each point: its slice alone keeps the target; where it shares the checkpoint's floor, its
    # threshold is that slice's own under the checkpoint's rule
    for name, key in (("test", "as_is"), ("blogs", "source:blogs")):
        if points[name]["relative_floor"] == config.relative_floor:
            assert points[name]["threshold"] == pytest.approx(slices[key])
    assert "| `blogs` |" in (out / "README.md").read_text()
    pruner = ContextPruner.from_pretrained(out)
    passages = [SENTS[0] + " " + SENTS[1]]
    for name, point in points.items():
        params = pruner.selection_params(operating_point=name)
        assert (params.threshold, params.relative_floor) == (
            pytest.approx(point["threshold"]),
            point["relative_floor"],
        )
        assert pruner.prune("question 1?", passages, operating_point=name).threshold == pytest.approx(
            point["threshold"]
        )
        # tiered compression's middle tier: the calibrated edge (set here) is on the checkpoint's own scale
        assert config.summary_threshold is not None
        tiered = pruner.selection_params(operating_point=name, summarize=True)
        assert tiered.summary_threshold == pytest.approx(point["threshold"] / 4)
    assert pruner.prune("question 1?", passages).threshold == pytest.approx(config.threshold)
    with pytest.raises(ValueError, match="'nq' is not one of .* it has: blogs, test"):
        pruner.prune("question 1?", passages, operating_point="nq")
    with pytest.raises(ValueError, match="threshold or operating_point, not both"):
        pruner.prune("question 1?", passages, operating_point="blogs", threshold=0.99)
    other = 0.5 if points["blogs"]["relative_floor"] != 0.5 else 0.2
    with pytest.raises(ValueError, match="leave relative_floor out"):
        pruner.prune("question 1?", passages, operating_point="blogs", relative_floor=other)


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


def test_relevance_distillation_trains_on_the_bundled_bi_encoders_passage_scores(
    tmp_path, data_files, tiny_model, bert_tokenizer, monkeypatch
):
    from pruner_model.training import trainer as trainer_module

    seen = {}
    original = trainer_module.tokenize_records

    def spy(records, *args, teacher=None, **kwargs):
        seen.setdefault("teacher", teacher)
        seen.setdefault("records", records)
        return original(records, *args, teacher=teacher, **kwargs)

    monkeypatch.setattr(trainer_module, "tokenize_records", spy)
    tiny_model.config.relevance_distill_weight = 1.0  # a given model keeps its own config
    over = {
        "train.group_batches": "true",
        "model.relevance_distill_weight": 1.0,
        "calibration.enabled": "false",
    }
    train(
        tiny_cfg(data_files, **over), tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True
    )
    teacher, records = seen["teacher"], seen["records"]
    assert teacher is not None and len(teacher) == len(records) and ((-1 <= teacher) & (teacher <= 1)).all()
    # one score per passage: passages with other sentences score differently
    by_context = dict(zip((r["context"] for r in records), teacher))
    assert len(set(by_context.values())) > 1
    assert json.loads((tmp_path / "r" / "config.json").read_text())["relevance_distill_weight"] == 1.0
    card = (tmp_path / "r" / "README.md").read_text()
    assert "relevance distillation (weight 1.0" in card and "the the " not in card


def test_a_resumed_distilled_run_takes_the_teachers_scores_from_its_state(
    tmp_path, data_files, tiny_model, bert_tokenizer, monkeypatch
):
    from pruner_model.training import trainer as trainer_module

    calls = []
    original = trainer_module.Trainer._teacher_scores

    def counted(self, records):
        calls.append(len(records))
        return original(self, records)

    monkeypatch.setattr(trainer_module.Trainer, "_teacher_scores", counted)
    tiny_model.config.relevance_distill_weight = 1.0
    over = {
        "train.group_batches": "true",
        "model.relevance_distill_weight": 1.0,
        "calibration.enabled": "false",
        "train.max_steps": 6,
        "train.eval_every": 0,
        "train.save_every": 0,
    }
    cfg = tiny_cfg(data_files, **over)

    def run(config, out, **kw):
        model = copy.deepcopy(tiny_model)
        return train(config, tmp_path / out, model=model, tokenizer=bert_tokenizer, quiet=True, **kw)

    run(cfg, "full")
    assert run(cfg, "cut", stop_after=3) == {"interrupted": True, "step": 3} and len(calls) == 2
    run(cfg, "cut", resume=True)
    assert len(calls) == 2  # the resumed run scored nothing again
    wa = load_file(str(tmp_path / "full" / "model.safetensors"))
    wb = load_file(str(tmp_path / "cut" / "model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    # scores saved for other records are not used: resumed on other training data, it scores again
    run(tiny_cfg(data_files, **over, **{"data.max_train_groups": 2}), "cut", resume=True)
    assert len(calls) == 3


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


def test_bad_training_data_leaves_no_run_folder(tmp_path, data_files, tiny_model, bert_tokenizer):
    cfg = tiny_cfg(data_files, **{"data.max_train_groups": 4, "data.mix": "{blogs: 1}"})
    with pytest.raises(RecordError, match="data.mix names source 'blogs'"):
        train(cfg, tmp_path / "r", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    assert not (tmp_path / "r").exists() and not (tmp_path / "r.trainer").exists()


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
    first = {g.id: g.labels[0].tolist() for g in calibration._range_groups(tiny_model, dev, 0, 0, None)}
    every = calibration._range_groups(tiny_model, dev, 0, 0, None, every_answer=True)
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
    shifted = {s.name: s for s in calibration._score_shifts(tiny_model, None, cfg, dev, every, scored)}
    assert {k: s.scored for k, s in shifted.items()} == {
        "noisy": [f"noisy scores of {every[0].id}"],
        "low_overlap": ["scores of qb"],
    }
    assert [g.id for g in shifted["low_overlap"].groups] == ["qb"]  # each slice keeps its labeled groups
    # a combined slice of low-overlap questions is built from every calibration group, not only the
    # first shift_groups ones: it scores just their low-overlap subset
    seen = []

    def record(model, tokenizer, groups, bf16=False):
        seen.append(sorted(g.id for g in groups))
        return [f"copy of {g.id}" for g in groups], 0.5

    monkeypatch.setattr(calibration, "_score", record)
    cfg = load_config(None, ["calibration.shifts=[noisy,low_overlap+noisy]", "calibration.shift_groups=1"])
    shifted = {s.name: s for s in calibration._score_shifts(tiny_model, None, cfg, dev, every, scored)}
    assert seen == [[every[0].id], ["qb"]] and shifted["low_overlap+noisy"].scored == ["copy of qb"]


def test_a_missing_calibration_source_stops_the_run_before_training(
    tmp_path, data_files, tiny_model, bert_tokenizer
):
    over = {"data.calibration_sources": f"[{tmp_path / 'none.jsonl'}]"}
    with pytest.raises(FileNotFoundError, match="calibration_sources"):
        train(
            tiny_cfg(data_files, **over),
            tmp_path / "run",
            model=tiny_model,
            tokenizer=bert_tokenizer,
            quiet=True,
        )
    assert not (tmp_path / "run" / "model.safetensors").exists()
