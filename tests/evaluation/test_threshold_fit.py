"""The per-request threshold: fitted on slices that need thresholds far apart, it keeps the target
on every slice and compresses the easy one as its own threshold would; the same model, written
into a checkpoint's config, thresholds each request of the Python API by its band."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from pruner_model.core.request_features import FEATURES
from pruner_model.core.threshold_model import ThresholdModel
from pruner_model.evaluation.calibration import calibrate_threshold
from pruner_model.evaluation.metrics import ScoredGroup, metrics_at
from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, fit_threshold_model

TELL = FEATURES.index("pronoun_share")  # the feature that tells the two kinds of text apart here


NUMBERS = FEATURES.index("digit_share")
KINDS = {  # evidence score range, noise range (log10), and the two telling features' means
    "easy": ((-0.8, 0.0), (-2.6, -1.4), 0.0, 0.0),  # evidence near the best unit
    "numbers": ((-1.9, -1.6), (-3.6, -2.2), 3.0, 3.0),  # looks like hard text on one feature
    "hard": ((-3.4, -2.7), (-2.6, -1.4), 3.0, 0.0),  # evidence around 1e-3, under the noise
}


def _kind(kind: str, n: int, seed: int, name: str | None = None) -> FitSlice:
    """``n`` groups of 10 units of one of :data:`KINDS`: the best unit 1.0, one evidence unit,
    noise units; the telling features tell the kinds apart."""
    evidence, noise, tell, numbers = KINDS[kind]
    rng = np.random.default_rng(seed)
    groups, feats = [], rng.normal(size=(n, len(FEATURES)))
    for i in range(n):
        scores = 10 ** rng.uniform(*noise, 10)
        scores[0] = 1.0
        labels = np.zeros(10, bool)
        labels[1] = True
        scores[1] = 10 ** rng.uniform(*evidence)
        groups.append(ScoredGroup(scores, labels, np.full(10, 20), relevance=np.full(10, 0.9)))
        feats[i, TELL], feats[i, NUMBERS] = rng.normal(tell, 0.5), rng.normal(numbers, 0.5)
    return FitSlice(name or kind, groups, feats)


def _slice(name: str, n: int, evidence_low: bool, seed: int) -> FitSlice:
    """Easy or hard text (:func:`_kind`) named ``name``."""
    return _kind("hard" if evidence_low else "easy", n, seed, name)


def test_every_slice_keeps_the_target_and_easy_text_compresses_as_its_own_threshold_would():
    fit = [_slice("easy", 400, False, 0), _slice("hard", 400, True, 1)]
    model = fit_threshold_model(fit, 0.95, bands=4)
    assert model is not None
    one = min(calibrate_threshold(s.groups, 0.95) for s in fit)
    for s in (_slice("easy", 400, False, 2), _slice("hard", 400, True, 3)):  # new groups of each kind
        default = RequestDefault(model.thresholds_of(s.features), model.min_relevance)
        m = metrics_at(s.groups, float("nan"), default.masks(s.groups))
        assert m["evidence_preserved"] >= 0.92, (s.name, m["evidence_preserved"])
        single = metrics_at(s.groups, one)["compression"]
        own = metrics_at(s.groups, calibrate_threshold(s.groups, 0.95))["compression"]
        if s.name == "easy":  # one threshold keeps the easy text's noise; its band drops it
            assert single < 0.5 and m["compression"] >= 0.85 * own, (single, m["compression"], own)


ANSWER = FEATURES.index("best_relevance")  # the feature that tells answer-less requests apart here


def _with_answerless(s: FitSlice, share: float, seed: int) -> FitSlice:
    """``s`` with ``share`` of its groups' evidence taken away (the retriever found nothing) and
    the answer feature low on those groups only."""
    rng = np.random.default_rng(seed)
    groups, feats = list(s.groups), s.features.copy()
    feats[:, ANSWER] = rng.normal(0.0, 0.5, len(groups))
    for i in rng.choice(len(groups), int(share * len(groups)), replace=False):
        g = groups[i]
        groups[i] = ScoredGroup(g.scores, np.zeros_like(g.labels), g.tokens, relevance=g.relevance)
        feats[i, ANSWER] = rng.normal(-3.0, 0.5)
    return FitSlice(s.name, groups, feats)


def _answerless_kept(model: ThresholdModel, s: FitSlice) -> tuple[float, float]:
    """Share of the answer-less groups' tokens kept, and evidence kept, at the model's default."""
    default = RequestDefault(model.thresholds_of(s.features), model.min_relevance)
    masks = default.masks(s.groups)
    none = [k for k, g in enumerate(s.groups) if not g.has_evidence]
    kept = sum(int(s.groups[k].tokens[masks[k]].sum()) for k in none) / sum(
        int(s.groups[k].tokens.sum()) for k in none
    )
    return kept, metrics_at(s.groups, float("nan"), masks)["evidence_preserved"]


def test_requests_unlikely_to_hold_an_answer_are_handed_on_nearly_empty():
    fit = [_with_answerless(_slice("easy", 400, False, 0), 0.2, 10), _slice("hard", 400, True, 1)]
    fit[1] = _with_answerless(fit[1], 0.2, 11)
    split = fit_threshold_model(fit, 0.95, bands=4, answer_shares=(0.1, 0.2, 0.3), novelty=None)
    plain = fit_threshold_model(fit, 0.95, bands=4, novelty=None)
    assert split.unlikely_thresholds is not None and plain.unlikely_thresholds is None
    for k, s in enumerate((_slice("easy", 400, False, 2), _slice("hard", 400, True, 3))):  # new groups
        s = _with_answerless(s, 0.2, 12 + k)
        kept, evidence = _answerless_kept(split, s)
        kept_plain, _ = _answerless_kept(plain, s)
        assert evidence >= 0.92, (s.name, evidence)
        assert kept <= 0.25, (s.name, kept)
        if s.name == "hard":  # without the split, its band's low threshold keeps their noise
            assert kept_plain > 0.5, kept_plain
    assert ThresholdModel.from_dict(json.loads(json.dumps(split.to_dict()))) == split


def test_a_request_unlike_every_calibration_slice_falls_back_to_the_safest_threshold():
    """Text unlike all calibration text (one feature far outside what calibration saw) that reads
    as easy text on the band score, and whose evidence needs a threshold as low as the hard text's:
    the bands alone drop its evidence; the fallback keeps it, while familiar text stays banded."""
    fit = [_slice("easy", 400, False, 0), _slice("hard", 400, True, 1)]
    banded = fit_threshold_model(fit, 0.95, bands=4, novelty=None)
    model = fit_threshold_model(fit, 0.95, bands=4)
    assert banded.novelty_precision is None and model.novelty_cutoff > 0
    assert model.novelty_threshold <= min(calibrate_threshold(s.groups, 0.99) for s in fit) + 1e-12
    alien = _kind("hard", 300, 5, "alien")  # hard text's evidence ...
    alien.features[:, TELL] = np.random.default_rng(6).normal(0.0, 0.5, 300)  # ... looking easy
    alien.features[:, FEATURES.index("quote_share")] += 8.0  # and like nothing calibration saw
    kept = {}
    for name, m in (("bands", banded), ("fallback", model)):
        default = RequestDefault(m.thresholds_of(alien.features), m.min_relevance)
        kept[name] = metrics_at(alien.groups, float("nan"), default.masks(alien.groups))["evidence_preserved"]
    assert model.unfamiliar(alien.features).mean() > 0.95
    assert kept["bands"] < 0.5 and kept["fallback"] >= 0.95, kept
    easy = _slice("easy", 400, False, 2)  # new groups of familiar text
    assert model.unfamiliar(easy.features).mean() < 0.15
    own = metrics_at(easy.groups, calibrate_threshold(easy.groups, 0.95))["compression"]
    m = metrics_at(
        easy.groups, float("nan"), RequestDefault(model.thresholds_of(easy.features), None).masks(easy.groups)
    )
    assert m["compression"] >= 0.8 * own, (m["compression"], own)
    assert ThresholdModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_unfamiliar_requests_face_their_own_relevance_gate():
    """With ``novelty_min_relevance``, passages the relevance head rates between the two gates are
    dropped from unfamiliar requests only; the field round-trips, and a file without it reads as
    before (the familiar gate for every request)."""
    fit = [_slice("easy", 300, False, 0), _slice("hard", 300, True, 1)]
    model = dataclasses.replace(fit_threshold_model(fit, 0.95, bands=3), min_relevance=0.02)
    gated = dataclasses.replace(model, novelty_min_relevance=0.5)
    alien = _kind("hard", 60, 5, "alien")
    alien.features[:, FEATURES.index("quote_share")] += 8.0  # like nothing calibration saw
    easy = _slice("easy", 60, False, 2)
    for s in (alien, easy):  # every passage rated 0.3: over the familiar gate, under the unfamiliar one
        s.groups[:] = [dataclasses.replace(g, relevance=np.full(len(g.scores), 0.3)) for g in s.groups]
    far = gated.unfamiliar(alien.features)
    assert far.all() and gated.unfamiliar(easy.features).mean() < 0.15
    assert np.all(gated.gates_of(alien.features) == 0.5) and np.all(model.gates_of(alien.features) == 0.02)
    kept = lambda m, s: [k.any() for k in RequestDefault.of(m, s.features).masks(s.groups)]  # noqa: E731
    assert not any(kept(gated, alien)) and all(kept(model, alien))
    familiar = ~gated.unfamiliar(easy.features)
    assert np.array_equal(np.asarray(kept(gated, easy))[familiar], np.asarray(kept(model, easy))[familiar])
    assert all(np.asarray(kept(gated, easy))[familiar])
    d = gated.to_dict()
    assert ThresholdModel.from_dict(json.loads(json.dumps(d))) == gated
    assert "novelty_min_relevance" not in model.to_dict()  # files without it read as before
    for key, value, message in (
        ("novelty_min_relevance", 1.5, "novelty_min_relevance must be"),
        ("novelty_cutoff", None, "all of"),
    ):
        with pytest.raises(ValueError, match=message):
            ThresholdModel.from_dict({**d, key: value})
    plain = {k: v for k, v in d.items() if not k.startswith("novelty") or k == "novelty_min_relevance"}
    with pytest.raises(ValueError, match="novelty_min_relevance needs"):
        ThresholdModel.from_dict(plain)


def test_a_fit_whose_gate_is_higher_caps_the_unfamiliar_requests_gate():
    fit = [_slice("easy", 300, False, 0), _slice("hard", 300, True, 1)]
    capped = fit_threshold_model(fit, 0.95, bands=3, gates=(0.05,))
    assert capped.min_relevance == 0.05 and capped.novelty_min_relevance == 0.02
    assert (
        fit_threshold_model(fit, 0.95, bands=3, gates=(0.05,), unfamiliar_gate=None).novelty_min_relevance
        is None
    )
    assert (
        fit_threshold_model(fit, 0.95, bands=3, gates=(0.01,)).novelty_min_relevance is None
    )  # already lower
    assert fit_threshold_model(fit, 0.95, bands=3, gates=(0.05,), novelty=None).novelty_min_relevance is None


def test_slices_that_need_the_same_threshold_get_no_model():
    assert fit_threshold_model([_slice("a", 200, False, 0), _slice("b", 200, False, 1)], 0.95) is None


def test_the_model_round_trips_and_a_damaged_one_is_refused():
    model = fit_threshold_model([_slice("easy", 300, False, 0), _slice("hard", 300, True, 1)], 0.95, bands=3)
    again = ThresholdModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again == model
    bad = model.to_dict()
    for key, value, message in (
        ("features", ["x"], "other request features"),
        ("thresholds", [0.1], "one threshold more"),
        ("edges", sorted(model.edges, reverse=True), "ascending"),
        ("source_bias", [float("nan")] * len(model.sources), "finite"),
        ("source_weights", [[0.0]] * len(model.sources), "weights for each named source"),
        ("source_log_thresholds", [-1.0], "for each source"),
        ("min_relevance", 2.0, "min_relevance"),
        ("weights", [0.0] * len(FEATURES), "either weights and bias or all of"),  # two score forms
    ):
        with pytest.raises(ValueError, match=message):
            ThresholdModel.from_dict({**bad, key: value})
    linear = {k: v for k, v in bad.items() if not k.startswith("source")}  # the linear score form
    linear.update(weights=[0.0] * len(FEATURES), bias=0.0)
    assert ThresholdModel.from_dict(linear).weights is not None
    with pytest.raises(ValueError, match="finite"):
        ThresholdModel.from_dict({**linear, "bias": float("nan")})
    with pytest.raises(ValueError, match="unknown"):
        ThresholdModel.from_dict({**bad, "shift": 1.0})
    with pytest.raises(ValueError, match="all of"):  # half an answer split
        ThresholdModel.from_dict({**bad, "answer_edge": 0.0})
    assert model.novelty_precision is not None  # the fit's default: the unfamiliar-request fallback
    for key, value, message in (
        ("novelty_cutoff", None, "all of"),
        ("novelty_precision", [[0.0]], "must be"),
        ("novelty_threshold", 1.5, "novelty_threshold in"),
        ("novelty_cutoff", float("inf"), "finite"),
    ):
        with pytest.raises(ValueError, match=message):
            ThresholdModel.from_dict({**bad, key: value})
    plain = {k: v for k, v in bad.items() if not k.startswith("novelty")}  # a file written before it
    assert not ThresholdModel.from_dict(plain).unfamiliar(np.zeros((2, len(FEATURES)))).any()


def _banded_checkpoint(path, **novelty):
    """A checkpoint whose threshold model keeps every unit of a request without a question mark
    and only the best unit of one with a question mark (``novelty``: its ``novelty_*`` fields)."""
    config = json.loads((path / "config.json").read_text())
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("question_mark")] = 1.0
    model = ThresholdModel(
        features=FEATURES,
        mean=(0.0,) * len(FEATURES),
        scale=(1.0,) * len(FEATURES),
        weights=tuple(weights),
        bias=0.0,
        edges=(0.5,),
        thresholds=(0.0, 1.0),
        min_relevance=None,
        **novelty,
    )
    config.update(threshold_model=model.to_dict(), relative_floor=0.001, threshold=0.0)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_the_python_api_thresholds_each_request_by_its_band(tiny_checkpoint):
    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(_banded_checkpoint(tiny_checkpoint))
    passages = ["Paris is the capital of France. The tower was built in 1889. It is made of iron."]
    statement = pruner.prune("tower built", passages)
    question = pruner.prune("when was the tower built?", passages)
    assert statement.threshold == 0.0 and statement.stats.sentences_out == 3
    assert question.threshold == 1.0 and question.stats.sentences_out == 1  # the best unit alone
    # a threshold or an operating point given by the request takes the place of the model's
    assert pruner.prune("when was the tower built?", passages, threshold=0.0).stats.sentences_out == 3


def test_a_request_the_model_reads_as_unfamiliar_gets_the_fallback_and_says_so(tiny_checkpoint):
    from pruner_model import ContextPruner

    n, mark = len(FEATURES), FEATURES.index("question_mark")
    precision = tuple(tuple(1.0 if i == j == mark else 0.0 for j in range(n)) for i in range(n))
    # a question mark is "unlike the calibration text" here: distance 1 past the cutoff 0.5
    path = _banded_checkpoint(
        tiny_checkpoint, novelty_precision=precision, novelty_cutoff=0.5, novelty_threshold=0.0
    )
    pruner = ContextPruner.from_pretrained(path)
    passages = ["Paris is the capital of France. The tower was built in 1889. It is made of iron."]
    question = pruner.prune("when was the tower built?", passages)
    statement = pruner.prune("tower built", passages)
    assert question.stats.unfamiliar and question.threshold == 0.0 and question.stats.sentences_out == 3
    assert not statement.stats.unfamiliar and statement.to_dict()["stats"]["unfamiliar"] is False
    assert not pruner.prune("when was the tower built?", passages, threshold=1.0).stats.unfamiliar


def test_an_unfamiliar_request_faces_the_unfamiliar_gate_in_the_python_api(tiny_checkpoint):
    from pruner_model import ContextPruner

    n, mark = len(FEATURES), FEATURES.index("question_mark")
    precision = tuple(tuple(1.0 if i == j == mark else 0.0 for j in range(n)) for i in range(n))
    path = _banded_checkpoint(
        tiny_checkpoint,
        novelty_precision=precision,
        novelty_cutoff=0.5,
        novelty_threshold=0.0,
        novelty_min_relevance=1.0,  # no passage passes it
    )
    pruner = ContextPruner.from_pretrained(path)
    passages = ["Paris is the capital of France. The tower was built in 1889. It is made of iron."]
    question = pruner.prune("when was the tower built?", passages)
    assert question.stats.unfamiliar and question.stats.sentences_out == 0 and question.text == ""
    assert pruner.prune("tower built", passages).stats.sentences_out == 3  # familiar: no gate
    # a gate the request sets takes the place of the model's
    assert pruner.prune("when was the tower built?", passages, min_relevance=0.0).stats.sentences_out == 3


def test_a_damaged_threshold_model_is_refused_at_load(tiny_checkpoint):
    from pruner_model import ContextPruner

    path = _banded_checkpoint(tiny_checkpoint)
    config = json.loads((path / "config.json").read_text())
    config["threshold_model"]["thresholds"] = [0.0]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="threshold_model"):
        ContextPruner.from_pretrained(path)


def test_an_onnx_export_carries_the_per_request_threshold(tiny_checkpoint, tmp_path):
    from pruner_model.export.onnx import export_onnx

    from pruner_model import ContextPruner

    export_onnx(_banded_checkpoint(tiny_checkpoint), tmp_path / "onnx")
    pruner = ContextPruner.from_pretrained(tmp_path / "onnx")
    assert pruner.backend.__class__.__name__.startswith("Onnx")
    passages = ["Paris is the capital of France. The tower was built in 1889. It is made of iron."]
    assert pruner.prune("tower built", passages).threshold == 0.0
    assert pruner.prune("when was the tower built?", passages).threshold == 1.0


def test_a_threshold_written_from_the_users_own_data_replaces_the_per_request_one(tiny_checkpoint, capsys):
    from types import SimpleNamespace

    from pruner_model.evaluation.calibrate import write_threshold as _write_threshold

    path = _banded_checkpoint(tiny_checkpoint)
    _write_threshold(path, SimpleNamespace(precision="fp32"), 0.25, 0.9)
    config = json.loads((path / "config.json").read_text())
    assert config["threshold"] == 0.25 and config.get("threshold_model") is None
    assert "replaced" in capsys.readouterr().err


def test_int8_with_labeled_data_is_judged_at_the_per_request_default(tiny_checkpoint, tmp_path):
    """A checkpoint with a per-request threshold: int8 is measured at it, as fp32 is, and keeps the
    bands (no int8 threshold of its own, which would replace them with one threshold)."""
    from pruner_model.export.onnx import export_onnx

    from tests.evaluation.test_evaluate import records

    report = export_onnx(
        _banded_checkpoint(tiny_checkpoint), tmp_path / "onnx", quantize="int8", calibration_records=records()
    )
    assert report["int8_judged_at"] == "the per-request default" and report["int8_threshold"] is None
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert config.get("int8_threshold") is None and config["threshold_model"] is not None


def test_an_int8_threshold_written_from_the_users_data_leaves_the_fp32_promise(tiny_checkpoint):
    """`pruner evaluate --quantized --write-threshold --target-evidence 0.8` stores the int8
    threshold; the fp32 threshold's target and the per-request bands stay as they were."""
    from types import SimpleNamespace

    from pruner_model.evaluation.calibrate import write_threshold as _write_threshold

    path = _banded_checkpoint(tiny_checkpoint)
    before = json.loads((path / "config.json").read_text())
    _write_threshold(path, SimpleNamespace(precision="int8"), 0.3, 0.8)
    after = json.loads((path / "config.json").read_text())
    assert after["int8_threshold"] == 0.3
    assert (
        after.get("target_evidence") == before.get("target_evidence")
        and after["threshold"] == before["threshold"]
    )
    assert after["threshold_model"] == before["threshold_model"]


def test_a_slice_needing_a_middle_threshold_gets_its_own_bands_from_the_sources_score():
    """Three kinds of text whose own thresholds lie 10x apart, the middle one sharing a feature
    with the hard one: the sources score gives each kind its own bands; one classifier of hard
    against the rest mixes the easy text into the middle kind's bands."""
    fit = [_kind(k, 400, i) for i, k in enumerate(KINDS)]
    ratio = {}
    for score in ("sources", "hard_easy"):
        model = fit_threshold_model(fit, 0.95, bands=6, score=score)
        for i, name in enumerate(KINDS):
            s = _kind(name, 400, 10 + i)
            default = RequestDefault(model.thresholds_of(s.features), model.min_relevance)
            m = metrics_at(s.groups, float("nan"), default.masks(s.groups))
            own = metrics_at(s.groups, calibrate_threshold(s.groups, 0.95))["compression"]
            assert m["evidence_preserved"] >= 0.92, (score, name, m["evidence_preserved"])
            ratio[score, name] = m["compression"] / own
    assert ratio["sources", "easy"] >= 0.85 and ratio["sources", "numbers"] >= 0.85, ratio
    assert ratio["hard_easy", "easy"] < 0.75, ratio


def test_pruner_evaluate_reports_the_per_request_default_as_the_checkpoints_threshold(tiny_checkpoint):
    """`pruner evaluate` judges the promise where `prune()` applies it: at the per-request
    thresholds (each question thresholded by its band), with the one threshold beside it."""
    from pruner_model.evaluation.evaluator import evaluate
    from pruner_model.evaluation.report import write_markdown

    from pruner_model import ContextPruner
    from tests.evaluation.test_evaluate import records

    pruner = ContextPruner.from_pretrained(_banded_checkpoint(tiny_checkpoint))
    report = evaluate(pruner, records(), baselines=(), pipeline=False)
    op = report["operating_point"]
    assert op["checkpoint_default"] == "per-request" and op["checkpoint_threshold"] == 1.0
    one, default = op["at_one_threshold"], op["at_checkpoint_threshold"]
    assert one["compression"] == 0.0  # the one threshold (0.0) keeps every unit
    # every query has a question mark: the best unit of each request alone
    assert default["compression"] > 0.5 and default["promise"]["queries"] == 3
    assert (
        default["threshold"] == 1.0
    )  # the median of the requests' thresholds: report.json stays strict JSON
    write_markdown(report, tiny_checkpoint / "report.md")
    text = (tiny_checkpoint / "report.md").read_text()
    assert "At its per-request thresholds" in text and "checkpoint default per-request, median 1.0000" in text
