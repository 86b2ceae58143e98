"""Exact binomial statistics of a threshold's promise."""

import numpy as np
import pytest
from pruner_model.evaluation.calibration import calibrate_operating_point, calibrate_threshold
from pruner_model.evaluation.metrics import ScoredGroup, metrics_at
from pruner_model.training.config import ConfigError, load_config


def test_required_kept_is_the_exact_binomial_bound():
    from pruner_model.evaluation.statistics import required_kept
    from scipy.stats import binom

    for n, target, conf in [(97, 0.95, 0.8), (240, 0.95, 0.9), (900, 0.97, 0.8), (30, 0.9, 0.95)]:
        k = required_kept(n, target, conf)
        assert binom.sf(k - 1, n, target) <= 1 - conf < binom.sf(k - 2, n, target)  # the fewest such k
    assert required_kept(240, 0.95) == 228  # ceil(0.95 * 240): the sample meets the target
    # the headroom shrinks as the slice grows, and keeps all that was seen when n is too small
    shares = [required_kept(n, 0.95, 0.8) / n for n in (120, 240, 900, 4000)]
    assert shares == sorted(shares, reverse=True) and 0.95 < shares[-1] < 0.955
    assert required_kept(20, 0.99, 0.9) == 20 and required_kept(0, 0.95, 0.9) == 0


def test_kept_interval_is_the_exact_interval_and_the_promise_check_tells_a_miss_from_luck():
    from pruner_model.evaluation.statistics import kept_interval, promise_check
    from scipy.stats import beta, binom

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
