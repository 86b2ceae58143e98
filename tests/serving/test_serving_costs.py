"""Money in the serving metrics: a request that costs more than it saves is counted as a loss
(a Prometheus counter only rises), and no price can overflow the running sums."""

from __future__ import annotations

import json

import pytest
from pruner_model.inference.settings import SelectionParams
from pruner_model.serving.metrics import Metrics


def test_a_negative_saving_is_a_loss_not_a_crash():
    m = Metrics()
    m.record(0.01, 1, 100, 40, cost_saved=0.5)
    m.record(0.01, 1, 100, 90, cost_saved=-0.2)  # a summarizer that spent more than it saved
    m.record(0.01, 1, 100, 90, cost_saved=float("inf"))
    snap = m.snapshot()
    assert snap["cost_saved_usd"] == pytest.approx(0.3)
    json.dumps(snap, allow_nan=False)
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    assert "pruner_cost_lost_usd_total 0.2" in text and "pruner_cost_saved_usd_total 0.5" in text


def test_a_price_past_any_real_one_is_refused():
    SelectionParams(price_per_million_tokens=75.0)
    with pytest.raises(ValueError, match="price_per_million_tokens"):
        SelectionParams(price_per_million_tokens=1.7e308)
