"""The one calibration: typed slices in, a frozen Calibration out, and the one writer of
calibrated values into a config (training, `pruner evaluate --write-*`, the int8 export)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pruner_model.core.configuration import PrunerConfig
from pruner_model.core.score_rules import relative_scores
from pruner_model.evaluation.calibrate import (
    MIN_POINT_QUERIES,
    Calibration,
    CalibrationRule,
    CalibrationSlice,
    calibrate,
)
from pruner_model.evaluation.metrics import ScoredGroup

rng = np.random.default_rng(0)


def groups(n, scale):  # one answer unit among four, its score scaled per source
    out = []
    for _ in range(n):
        scores = rng.uniform(0, 0.1, 4)
        scores[0] = scale * rng.uniform(0.2, 1.0)
        out.append(ScoredGroup(scores, np.array([True, False, False, False]), np.full(4, 5)))
    return out


def slice_of(name, kind, scored):
    return CalibrationSlice(name, kind, [], scored)


def test_a_source_with_few_calibration_queries_gets_no_named_point():
    slices = [
        slice_of("as_is", "dev", groups(300, 1.0)),
        slice_of("big", "source", groups(MIN_POINT_QUERIES, 0.5)),
        slice_of("small", "source", groups(MIN_POINT_QUERIES - 1, 0.5)),
        # passage labels only: no evidence to calibrate on
        slice_of("blogs", "source", [ScoredGroup(np.ones(2), np.zeros(2, bool), np.ones(2))] * 300),
    ]
    rule = CalibrationRule(target_evidence=0.95, relative_floors=(0.1,), per_request=False)
    result = calibrate(slices, rule, dev_name="squad")
    points = result.operating_points
    assert set(points) == {"squad", "big"}
    for name, s in (("squad", slices[0]), ("big", slices[1])):  # each keeps the target on its own slice
        floor, t = points[name]["relative_floor"], points[name]["threshold"]
        kept = [relative_scores(g.scores, floor)[0] >= t for g in s.scored]
        assert np.mean(kept) >= 0.95
    # the one threshold keeps the target on every slice with evidence, labelled as reports name them
    assert set(result.slice_thresholds) == {"as_is", "source:big", "source:small", "source:blogs"}
    assert result.threshold == pytest.approx(
        min(result.slice_thresholds[k] for k in ("as_is", "source:big", "source:small"))
    )


def test_the_result_is_frozen_and_a_full_calibration_replaces_every_calibrated_field():
    rule = CalibrationRule(target_evidence=0.9, per_request=False, summary_target=None, uncertain_share=0.0)
    result = calibrate([slice_of("as_is", "dev", groups(200, 1.0))], rule)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.threshold = 0.5
    cfg = PrunerConfig(
        threshold=0.3,
        operating_points={"old": {"threshold": 0.2, "relative_floor": None}},
        summary_threshold=0.01,
        uncertainty_threshold=0.02,
    )
    result.write(cfg)
    assert cfg.threshold == result.threshold and cfg.target_evidence == 0.9
    # one slice names no point and sets no summary or uncertainty threshold: the old ones go
    assert (
        cfg.operating_points is None and cfg.summary_threshold is None and cfg.uncertainty_threshold is None
    )


def test_partial_writes_touch_only_what_they_calibrated():
    from pruner_model.core.request_features import FEATURES

    n = len(FEATURES)
    model = {
        "features": list(FEATURES),
        "mean": [0.0] * n,
        "scale": [1.0] * n,
        "weights": [1.0] * n,
        "bias": 0.0,
        "edges": [0.0],
        "thresholds": [0.01, 0.1],
        "min_relevance": None,
    }
    points = {"mine": {"threshold": 0.2, "relative_floor": None}}
    cfg = PrunerConfig(threshold=0.05, threshold_model=model, operating_points=points)
    Calibration(int8_threshold=0.04).write(cfg)  # the int8 graph's own: fp32's default stands
    assert cfg.int8_threshold == 0.04 and cfg.threshold == 0.05 and cfg.threshold_model == model
    Calibration(operating_points={"yours": {"threshold": 0.3, "relative_floor": 0.1}}).write(cfg)
    assert set(cfg.operating_points) == {"mine", "yours"} and cfg.threshold_model == model
    # a new one threshold (calibrated on the user's own text) replaces the per-request bands
    Calibration(threshold=0.07, target_evidence=0.97).write(cfg)
    assert (cfg.threshold, cfg.target_evidence, cfg.threshold_model) == (0.07, 0.97, None)
    assert set(cfg.operating_points) == {"mine", "yours"}


def test_save_replaces_the_config_file_whole(tmp_path):
    PrunerConfig(threshold=0.05).save_pretrained(tmp_path)
    Calibration(threshold=0.2, target_evidence=0.9).save(tmp_path)
    cfg = PrunerConfig.from_pretrained(str(tmp_path))
    assert (cfg.threshold, cfg.target_evidence) == (0.2, 0.9)
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left


def test_the_rule_of_a_training_config_section():
    from pruner_model.training.config import CalibrationSection

    section = CalibrationSection(target_evidence=0.95, relative_floors=[0.1, 0.2], margin=0.01)
    rule = CalibrationRule.of(section)
    assert rule.relative_floors == (0.1, 0.2) and rule.aim == pytest.approx(0.96)
    assert rule.unfamiliar_gate == 0.02  # the fit's cap on unfamiliar requests' gate
    assert CalibrationRule.of(CalibrationSection(unfamiliar_gate=None)).unfamiliar_gate is None
