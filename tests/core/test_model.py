import pytest
import torch
from transformers import AutoConfig, AutoModel

from pruner_model import PrunerConfig, PrunerModel, default_backbone_path
from tests.conftest import tiny_config


def test_forward_shapes_and_loss(tiny_model):
    ids = torch.randint(1000, 2000, (3, 12))
    labels = torch.full((3, 12), -100)
    labels[:, 5:] = torch.randint(0, 2, (3, 7))
    out = tiny_model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        labels=labels,
        relevance_labels=torch.tensor([1.0, 0.0, 1.0]),
    )
    assert out.token_logits.shape == (3, 12)
    assert out.relevance_logits.shape == (3,)
    assert out.loss.ndim == 0 and out.loss.item() > 0


def test_loss_ignores_masked_tokens(tiny_model):
    ids = torch.randint(1000, 2000, (2, 10))
    labels = torch.full((2, 10), -100)
    labels[:, 4:] = 1
    out1 = tiny_model(input_ids=ids, labels=labels)
    logits = out1.token_logits.detach()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 4:], torch.ones(2, 6))
    assert torch.allclose(out1.loss, expected, atol=1e-6)


def test_save_load_round_trip_identical(tmp_path, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pkl"))
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, PrunerModel)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), PrunerConfig)
    loaded.eval()
    ids = torch.randint(1000, 2000, (2, 16))
    a, b = tiny_model(input_ids=ids), loaded(input_ids=ids)
    assert torch.equal(a.token_logits, b.token_logits)
    assert torch.equal(a.relevance_logits, b.relevance_logits)


def test_distilbert_backbone_without_token_type_ids():
    model = PrunerModel(tiny_config("distilbert")).eval()
    out = model(input_ids=torch.randint(1000, 2000, (2, 9)))
    assert out.token_logits.shape == (2, 9)


def test_from_backbone_loads_bundled_minilm():
    model = PrunerModel.from_backbone(threshold=0.4)
    ref = AutoModel.from_pretrained(str(default_backbone_path()))
    assert model.config.threshold == 0.4
    assert model.config.encoder_config.model_type == "bert"
    sd = ref.state_dict()
    for name, tensor in model.encoder.state_dict().items():
        assert torch.equal(tensor, sd[name]), name


def test_config_validates():
    import pytest

    with pytest.raises(ValueError):
        tiny_config(threshold=1.5)


def test_sentence_ranking_loss_values_and_direction():
    from pruner_model.core.losses import sentence_ranking_loss

    # one window: sentence 0 relevant (mean logit 2), sentences 1 and 2 not (0 and -1); -1 = off context
    z = torch.tensor([[5.0, 2.0, 2.0, 0.0, -1.0, -1.0]], requires_grad=True)
    lab = torch.tensor([[-100, 1, 1, 0, 0, 0]])
    sid = torch.tensor([[-1, 0, 0, 1, 2, 2]])
    loss = sentence_ranking_loss(z, lab, sid)
    neg = torch.logsumexp(torch.tensor([0.0, -1.0]), 0)
    assert loss.item() == pytest.approx(torch.nn.functional.softplus(neg - 2.0).item(), abs=1e-6)
    loss.backward()
    assert z.grad[0, 0] == 0  # off-context token untouched
    assert (z.grad[0, 1:3] < 0).all() and (z.grad[0, 3:] > 0).all()  # relevant up, others down
    # a window with no irrelevant sentence (or no relevant one) contributes nothing
    assert sentence_ranking_loss(z, torch.tensor([[-100, 1, 1, 1, 1, 1]]), sid).item() == 0.0
    assert sentence_ranking_loss(z, torch.tensor([[-100, 0, 0, 0, 0, 0]]), sid).item() == 0.0


def test_sentence_ranking_loss_pools_negatives_of_a_group():
    from pruner_model.core.losses import sentence_ranking_loss

    # row 0: the answer passage (sentence 0 relevant, logit 2; sentence 1 at -1); row 1: a
    # distractor passage of the same query (a sentence at 3); row 2: another query's passage
    z = torch.tensor([[2.0, 2.0, -1.0], [3.0, 3.0, -5.0], [9.0, 9.0, 9.0]], requires_grad=True)
    lab = torch.tensor([[1, 1, 0], [0, 0, 0], [0, 0, 0]])
    sid = torch.tensor([[0, 0, 1], [0, 0, 1], [0, 0, 0]])
    window = sentence_ranking_loss(z, lab, sid)  # row 0 alone: softplus(-1 - 2)
    assert window.item() == pytest.approx(torch.nn.functional.softplus(torch.tensor(-3.0)).item(), abs=1e-6)
    grouped = sentence_ranking_loss(z, lab, sid, torch.tensor([4, 4, 5]))
    neg = torch.logsumexp(torch.tensor([-1.0, 3.0, -5.0]), 0)  # row 2 (other group) left out
    assert grouped.item() == pytest.approx(torch.nn.functional.softplus(neg - 2.0).item(), abs=1e-6)
    grouped.backward()
    assert (z.grad[1, :2] > 0).all() and (z.grad[2] == 0).all()  # the distractor is pushed down
    # a group whose only rows are positive-only contributes nothing (no negatives anywhere)
    lone = sentence_ranking_loss(
        z, torch.tensor([[1, 1, 1], [0, 0, 0], [0, 0, 0]]), sid, torch.tensor([1, 2, 3])
    )
    assert lone.item() == 0.0


def test_batch_ranking_scope_ranks_answers_against_other_queries_sentences(tiny_model):
    from pruner_model.core.losses import sentence_ranking_loss

    # row 0: query A's answer passage; row 1: a passage of query B scored high for B
    z = torch.tensor([[2.0, 2.0, -1.0], [3.0, 3.0, -5.0]])
    lab = torch.tensor([[1, 1, 0], [0, 0, 0]])
    sid = torch.tensor([[0, 0, 1], [0, 0, 1]])
    groups = torch.tensor([0, 1])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, lab.float())
    tiny_model.config.sentence_loss_weight = 1.0
    by_group = tiny_model.compute_loss(z, None, lab, None, sid, groups)
    assert by_group.item() == pytest.approx(
        (bce + sentence_ranking_loss(z, lab, sid, groups)).item(), abs=1e-6
    )
    tiny_model.config.sentence_ranking_scope = "batch"
    by_batch = tiny_model.compute_loss(z, None, lab, None, sid, groups)
    neg = torch.logsumexp(torch.tensor([-1.0, 3.0, -5.0]), 0)  # query B's sentences count too
    assert by_batch.item() == pytest.approx((bce + torch.nn.functional.softplus(neg - 2.0)).item(), abs=1e-6)
    assert by_batch > by_group
    with pytest.raises(ValueError, match="sentence_ranking_scope"):
        PrunerConfig(sentence_ranking_scope="query")


def test_doctests_of_the_core_modules():
    import doctest

    import pruner_model.core.losses
    import pruner_model.core.modeling
    import pruner_model.core.score_rules
    import pruner_model.core.segmentation
    import pruner_model.evaluation.statistics

    for mod in (
        pruner_model.core.losses,
        pruner_model.core.modeling,
        pruner_model.core.score_rules,
        pruner_model.evaluation.statistics,
        pruner_model.core.segmentation,
    ):
        result = doctest.testmod(mod)
        assert result.attempted > 0 and result.failed == 0, mod.__name__


def test_sentence_loss_weight_adds_to_the_loss(tiny_model):
    ids = torch.randint(1000, 2000, (2, 10))
    labels = torch.full((2, 10), -100)
    labels[:, 4:] = torch.tensor([1, 1, 0, 0, 0, 0])
    sid = torch.full((2, 10), -1)
    sid[:, 4:] = torch.tensor([0, 0, 1, 1, 2, 2])
    base = tiny_model(input_ids=ids, labels=labels, sentence_ids=sid).loss  # weight 0 by default
    assert torch.allclose(base, tiny_model(input_ids=ids, labels=labels).loss)
    tiny_model.config.sentence_loss_weight = 1.0
    assert tiny_model(input_ids=ids, labels=labels, sentence_ids=sid).loss > base


def test_query_match_marks_context_tokens_that_occur_in_the_query():
    from tests.conftest import tiny_config

    model = PrunerModel(tiny_config("bert", query_match=True)).eval()
    # [CLS] q1 q2 [SEP] c(q2) c(other) c(q1) [SEP] [PAD]
    ids = torch.tensor([[101, 2054, 3000, 102, 3000, 4000, 2054, 102, 0]])
    assert model.query_match_mask(ids).tolist() == [
        [False, False, False, False, True, False, True, False, False]
    ]
    # zero-initialized: the model starts as the plain encoder would
    plain = PrunerModel(tiny_config("bert")).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("match_")})
    with torch.no_grad():
        a = model(input_ids=ids).token_logits
        b = plain(input_ids=ids).token_logits
    assert torch.allclose(a, b, atol=1e-6)
    # a trained match embedding moves only the matched tokens' inputs
    with torch.no_grad():
        model.match_embedding.weight[1].normal_()  # (a constant shift would vanish in LayerNorm)
        c = model(input_ids=ids).token_logits
    assert not torch.allclose(a, c)


def test_mean_pooled_relevance_ignores_padding():
    torch.manual_seed(0)
    model = PrunerModel(tiny_config("bert", relevance_pooling="mean")).eval()
    ids = torch.tensor([[101, 2054, 102, 2003, 1996, 102]])
    alone = model(input_ids=ids, attention_mask=torch.ones_like(ids)).relevance_logits
    padded_ids = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros(1, 4, dtype=torch.long)], dim=1)
    padded = model(input_ids=padded_ids, attention_mask=mask).relevance_logits
    assert torch.allclose(alone, padded, atol=1e-5)
    cls = PrunerModel(tiny_config("bert")).eval()
    cls.load_state_dict(model.state_dict())
    assert not torch.allclose(cls(input_ids=ids).relevance_logits, alone)  # the option changes what is read
    with pytest.raises(ValueError, match="relevance_pooling"):
        PrunerConfig(relevance_pooling="max")


def test_relevance_distillation_orders_a_query_groups_distractors_as_the_teacher_does(tiny_model):
    from pruner_model.core.losses import relevance_distillation_loss

    teacher = torch.tensor([9.0, 3.0, 0.0, -3.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    y = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # window 0 answers: left to the relevance BCE
    z = torch.tensor([-5.0, 2.0, 0.0, -2.0, 1.0, 0.0], requires_grad=True)
    agree = relevance_distillation_loss(z, teacher, groups, y)
    reverse = relevance_distillation_loss(torch.tensor([-5.0, -2.0, 0.0, 2.0, 0.0, 1.0]), teacher, groups, y)
    assert agree < reverse
    # by hand: each group's cross-entropy over its irrelevant windows, groups weighted equally
    ce = [
        -(torch.softmax(teacher[s], 0) * torch.log_softmax(z.detach()[s], 0)).sum()
        for s in (slice(1, 4), slice(4, 6))
    ]
    assert agree.item() == pytest.approx(((ce[0] + ce[1]) / 2).item(), abs=1e-5)
    agree.backward()
    assert torch.isfinite(z.grad).all() and z.grad[0] == 0  # the answer's window: no gradient
    # the answer's own logit does not enter: raising it changes nothing
    moved = relevance_distillation_loss(torch.tensor([5.0, 2.0, 0.0, -2.0, 1.0, 0.0]), teacher, groups, y)
    assert moved.item() == pytest.approx(agree.item(), abs=1e-6)

    # in the total loss only with a weight, teacher scores and query groups
    z = z.detach()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    tok = torch.zeros(6, 3)  # no token labels: the relevance terms alone
    w = tiny_model.config.relevance_loss_weight
    tiny_model.config.relevance_distill_weight = 0.0
    assert tiny_model.compute_loss(tok, z, None, y, None, groups, teacher).item() == pytest.approx(
        w * bce.item()
    )
    tiny_model.config.relevance_distill_weight = 2.0
    tiny_model.config.relevance_distill_temperature = 0.5
    with_teacher = tiny_model.compute_loss(tok, z, None, y, None, groups, teacher)
    expected = w * bce + 2.0 * relevance_distillation_loss(z, teacher / 0.5, groups, y)
    assert with_teacher.item() == pytest.approx(expected.item(), abs=1e-5)
    assert tiny_model.compute_loss(tok, z, None, y, None, None, teacher).item() == pytest.approx(
        w * bce.item()
    )
    with pytest.raises(ValueError, match="relevance_distill_temperature"):
        PrunerConfig(relevance_distill_temperature=0.0)
    with pytest.raises(ValueError, match="relevance_distill_weight"):
        PrunerConfig(relevance_distill_weight=-1.0)


@pytest.mark.parametrize("query_interaction", [False, True])
def test_length_chunked_encoding_gives_the_same_logits_loss_and_gradients(query_interaction):
    from pruner_model.core.modeling import length_chunks

    torch.manual_seed(0)
    model = PrunerModel(tiny_config(query_interaction=query_interaction, sentence_loss_weight=0.5)).eval()
    lengths = torch.tensor([12, 40, 9, 33, 40, 20])  # unsorted: the chunks must come back in row order
    width = 40
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(1000, 2000, (6, width)) * mask
    ids[:, 0], ids[:, 4] = 101, 102  # [CLS] query [SEP]: the query ends before any padding
    labels = torch.where(mask.bool() & (torch.arange(width) > 4), torch.randint(0, 2, (6, width)), -100)
    sentence_ids = torch.where(labels >= 0, torch.arange(width) // 5, -1)
    batch = dict(
        input_ids=ids,
        attention_mask=mask,
        labels=labels.float(),
        relevance_labels=torch.tensor([1.0, 0, 0, 1, 0, 0]),
        sentence_ids=sentence_ids,
        groups=torch.tensor([0, 0, 0, 1, 1, 1]),
    )
    outs, grads = [], []
    for chunks in (1, 3):
        model.encoder_chunks = chunks
        model.zero_grad()
        out = model(**batch)
        out.loss.backward()
        outs.append(out)
        grads.append(model.encoder.embeddings.word_embeddings.weight.grad.clone())
    real = mask.bool()
    assert len(length_chunks(sorted(lengths.tolist(), reverse=True), 3)) == 3  # it did split
    assert torch.allclose(outs[0].token_logits[real], outs[1].token_logits[real], atol=1e-5)
    assert torch.allclose(outs[0].relevance_logits, outs[1].relevance_logits, atol=1e-5)
    assert torch.allclose(outs[0].loss, outs[1].loss, atol=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_length_chunks_pads_fewest_tokens():
    from pruner_model.core.modeling import length_chunks

    lengths = [250, 240, 130, 120, 118, 40, 30, 20]
    runs = length_chunks(lengths, 3)
    assert [(a, b) for a, b, _ in runs] == [(0, 2), (2, 5), (5, 8)]
    assert sum((b - a) * top for a, b, top in runs) == 2 * 250 + 3 * 130 + 3 * 40
    assert length_chunks(lengths, 1) == [(0, 8, 250)]
    assert length_chunks([], 4) == []
