"""Metrics and threshold calibration on scored groups."""

import numpy as np
import pytest
from pruner_model.evaluation.calibration import calibrate_operating_point, calibrate_threshold, cross_validate
from pruner_model.evaluation.metrics import ScoredGroup, metrics_at, relative_groups, roc_auc
from pruner_model.training.config import ConfigError, load_config


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


def test_slice_tolerance_lets_the_pool_not_the_hardest_slice_set_the_threshold():
    # slice "easy": every critical score high; slice "hard": one query in ten has its evidence at
    # 0.05. At target 0.95 with no tolerance the hard slice alone sets 0.05; with tolerance 0.1 the
    # hard slice may keep 0.9 and the pool must keep 0.95, so the threshold rises.
    tok = np.array([10, 10])
    easy = [ScoredGroup(np.array([0.8, 0.1]), np.array([True, False]), tok) for _ in range(30)]
    hard = [
        ScoredGroup(np.array([0.05 if i == 0 else 0.6, 0.1]), np.array([True, False]), tok) for i in range(10)
    ]
    slices = {"easy": easy, "hard": hard}
    _, strict, _ = calibrate_operating_point(slices, 0.95, [None])
    assert strict == pytest.approx(0.05)
    _, loose, m = calibrate_operating_point(slices, 0.95, [None], tolerance=0.1)
    assert loose == pytest.approx(0.6)
    assert metrics_at(hard, loose)["evidence_preserved"] == pytest.approx(0.9)
    assert m["evidence_preserved"] >= 0.95  # the pool keeps the target
    # a tolerance the pool cannot afford does not lower what each slice keeps below target - tolerance
    _, t, _ = calibrate_operating_point({"hard": hard}, 0.95, [None], tolerance=0.1)
    assert t == pytest.approx(0.05)  # alone, the hard slice is the pool: it must keep 0.95
    with pytest.raises(ConfigError, match="slice_tolerance"):
        load_config(None, ["calibration.slice_tolerance=0.7"])


def test_relevance_contrast_sets_each_group_against_its_best_passage():
    # The distractor's relevance (0.4) is too close to the gold passage's (0.6) for relevance
    # weighting alone to drop it at full evidence (0.8 x 0.4 > 0.5 x 0.6); set against the best
    # passage it falls to 0.23 (0.8 x 0.23 < 0.30).
    from pruner_model.core.score_rules import contrasted_relevance

    tok = np.array([10, 10])
    groups = [
        ScoredGroup(np.array([0.5, 0.8]), np.array([True, False]), tok, relevance=np.array([0.6, 0.4]))
        for _ in range(10)
    ]
    _, t0, plain = calibrate_operating_point(groups, 1.0, [None], exponents=[1.0])
    _, t1, contrasted = calibrate_operating_point(groups, 1.0, [None], exponents=[1.0], contrast=1.0)
    assert plain["compression"] == 0.0 and contrasted["compression"] == pytest.approx(0.5)
    assert contrasted_relevance(np.array([0.6, 0.4]), 1.0)[1] == pytest.approx(0.2286, abs=1e-4)
    assert contrasted_relevance(np.array([0.6, 0.4]), 1.0)[0] == pytest.approx(0.6)  # the best keeps its own
    assert contrasted_relevance(np.array([0.3]), 4.0).tolist() == pytest.approx(
        [0.3]
    )  # one passage: unchanged
    for bad in (-1.0, 9.0, True, "1"):
        with pytest.raises(ValueError, match="relevance_contrast"):
            contrasted_relevance(np.array([0.5]), bad)
    with pytest.raises(ConfigError, match="relevance_contrast acts on relevance-weighted scores"):
        load_config(None, ["calibration.relevance_contrast=1.0"])
    cfg = load_config(None, ["calibration.relevance_contrast=1.0", "calibration.relevance_exponents=[1.0]"])
    assert cfg.calibration.relevance_contrast == 1.0


def test_choose_by_curve_takes_the_rule_under_which_each_slice_compresses_most_at_its_own_threshold():
    from pruner_model.evaluation.calibration import curve_compression

    tok = np.full(4, 10)
    gold = np.array([True, False, False, False])
    # slice a: two score scales (1 and 0.1), distractors at 0.4 of the gold; slice b: a distractor
    # above the gold. Absolute scores: one threshold (0.09) compresses both slices more than the
    # relative one (0.35, set by b) does, but within a, relative scores drop every distractor
    a = [ScoredGroup(s * np.array([0.9, 0.36, 0.36, 0.36]), gold, tok) for s in (1.0, 0.1) * 10]
    b = [ScoredGroup(np.array([0.35, 1.0, 0.01, 0.01]), gold, tok)] * 20
    slices = {"as_is": a, "source:b": b}
    floor, _, by_threshold = calibrate_operating_point(slices, 1.0, [None, 0.01])
    assert floor is None and by_threshold["compression"] == pytest.approx(0.4375)
    floor, t, by_curve = calibrate_operating_point(slices, 1.0, [None, 0.01], choose_by="curve")
    assert floor == 0.01 and t == pytest.approx(0.35)
    rows = {r["relative_floor"]: r for r in by_curve["candidates"]}
    assert rows[None]["curve_compression"] == pytest.approx((0.375 + 0.5) / 2)
    assert rows[0.01]["curve_compression"] == pytest.approx((0.75 + 0.5) / 2)
    assert rows[0.01]["curve_compression"] == pytest.approx(
        curve_compression([relative_groups(gs, 0.01) for gs in slices.values()], 1.0)
    )
    assert "curve_compression" not in by_threshold["candidates"][0]
    with pytest.raises(ValueError, match="choose_by"):
        calibrate_operating_point(slices, 0.9, [None], choose_by="best")
    with pytest.raises(ConfigError, match="calibration.choose_by must be one of threshold, curve"):
        load_config(None, ["calibration.choose_by=best"])
