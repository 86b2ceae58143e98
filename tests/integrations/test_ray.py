"""Ray Data on a local 2-worker cluster: same output as the single-process run."""

import json

import pytest

pytestmark = pytest.mark.slow


def test_ray_data_predictor_matches_single_process(tiny_checkpoint):
    import ray
    from pruner_model.integrations.ray import PrunerPredictor

    from pruner_model import ContextPruner

    rows = [
        {
            "id": f"g{i}",
            "query": f"When was tower {i} built?",
            "passages": [
                f"Tower {i} was built in {1800 + i}. It is tall.",
                "Bananas are yellow. They are sweet.",
            ],
        }
        for i in range(12)
    ]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        ds = ray.data.from_items(rows).map_batches(
            PrunerPredictor,
            fn_constructor_kwargs={"model": str(tiny_checkpoint), "threshold": 0.5},
            concurrency=2,
            batch_size=4,
        )
        out = {r["id"]: r for r in ds.take_all()}
    finally:
        ray.shutdown()
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    assert set(out) == {r["id"] for r in rows}
    for r in rows:
        ref = pruner.prune(r["query"], r["passages"], threshold=0.5)
        got = out[r["id"]]
        assert got["pruned_text"] == ref.text
        assert got["tokens_in"] == ref.stats.tokens_in and got["tokens_out"] == ref.stats.tokens_out
        assert json.loads(got["prune_result"])["passages"][0]["spans"] == [
            list(s) for s in ref.passages[0].spans
        ]
