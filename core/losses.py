"""The training losses of :class:`~pruner_model.core.modeling.PrunerModel` beyond per-token
BCE: sentence ranking (answer sentences above the others of their group), passage ranking
(listwise softmax over a group's passages) and relevance distillation (the relevance head against a
teacher's passage scores)."""

from __future__ import annotations

import torch
from torch import nn


def sentence_ranking_loss(
    token_logits: torch.Tensor,
    labels: torch.Tensor,
    sentence_ids: torch.Tensor,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each relevant sentence against the irrelevant sentences of its window (or of its group).

    A sentence's logit is the mean of its tokens' logits (``sentence_ids``: the sentence index of
    each token, -1 off the context); a sentence is relevant when one of its tokens is labeled 1.
    For a relevant sentence with logit ``z`` and irrelevant sentences ``n_1..n_k`` the loss is
    ``-log softmax(z, n_1..n_k)[0] = softplus(logsumexp(n) - z)``, averaged over the relevant
    sentences that have negatives (0 when none has). Token BCE scores every token alone; this term
    asks the relevant sentence to beat its competitors, which is the ranking the keep threshold
    acts on.

    Without ``groups`` the competitors are the other sentences of the same window (the answer
    passage's neighbours). With ``groups`` (one id per row: rows of one query group share it, see
    ``training.data.GroupedBatches``) they are the irrelevant sentences of every row of the group,
    distractor passages included: the ranking that a group-relative keep rule
    (``PrunerConfig.relative_floor``) acts on.

    >>> z = torch.tensor([[2.0, 2.0, 0.0, -1.0]])
    >>> lab = torch.tensor([[1, 1, 0, 0]])
    >>> sid = torch.tensor([[0, 0, 1, 1]])
    >>> round(float(sentence_ranking_loss(z, lab, sid)), 4)  # softplus(-0.5 - 2)
    0.0789
    >>> z2 = torch.tensor([[2.0, 2.0, 0.0, -1.0], [1.0, 1.0, -9.0, -9.0]])
    >>> lab2 = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])
    >>> sid2 = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]])
    >>> round(float(sentence_ranking_loss(z2, lab2, sid2, torch.tensor([7, 7]))), 4)  # negatives -0.5, 1.0, -9.0
    0.3716
    """
    ids = sentence_ids.long()
    n = int(ids.max().item()) + 1 if ids.numel() else 0
    if n <= 0:
        return token_logits.new_zeros(())
    on = ids >= 0
    slot = ids.clamp(min=0)
    z = token_logits.float() * on
    sums = torch.zeros(ids.shape[0], n, device=z.device).scatter_add(1, slot, z)
    counts = torch.zeros_like(sums).scatter_add(1, slot, on.float())
    pos_tok = ((labels == 1) & on).float()
    pos = torch.zeros_like(sums).scatter_reduce(1, slot, pos_tok, reduce="amax") > 0
    present = counts > 0
    mean = sums / counts.clamp(min=1.0)
    neg = present & ~pos
    pos = present & pos
    neg_lse = torch.logsumexp(mean.masked_fill(~neg, float("-inf")), dim=1)  # [B], -inf: none
    if groups is not None:  # pool the negatives of every row of the same group
        same = groups.view(-1, 1) == groups.view(1, -1)  # [B, B]
        neg_lse = torch.logsumexp(neg_lse.view(1, -1).masked_fill(~same, float("-inf")), dim=1)
    rows = pos.any(dim=1) & torch.isfinite(neg_lse)
    if not rows.any():
        return token_logits.new_zeros(())
    per = nn.functional.softplus(neg_lse.masked_fill(~rows, 0.0).unsqueeze(1) - mean)  # [B, n]
    use = pos & rows.unsqueeze(1)
    return per[use].mean()


def passage_ranking_loss(
    relevance_logits: torch.Tensor, relevance_labels: torch.Tensor, groups: torch.Tensor
) -> torch.Tensor:
    """The relevant windows of each query group against all of the group's windows: ``-log(sum
    over relevant exp(z) / sum over the group exp(z))``, averaged over the groups that have both a
    relevant and an irrelevant window (0 when none has). Binary relevance scores each window
    alone; this asks the answer's passage to outrank the distractors retrieved with it.

    >>> z = torch.tensor([2.0, 0.0, 0.0, 1.0, 1.0])
    >>> y = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    >>> g = torch.tensor([0, 0, 0, 1, 1])  # group 1 has no relevant window: left out
    >>> round(float(passage_ranking_loss(z, y, g)), 4)  # log(e^2 + 2) - 2
    0.2395
    """
    z = relevance_logits.float()
    pos = relevance_labels > 0.5
    same = groups.view(-1, 1) == groups.view(1, -1)  # [B, B]
    all_lse = torch.logsumexp(z.view(1, -1).masked_fill(~same, float("-inf")), dim=1)
    pos_lse = torch.logsumexp(z.view(1, -1).masked_fill(~(same & pos.view(1, -1)), float("-inf")), dim=1)
    has_neg = (same & ~pos.view(1, -1)).any(dim=1)
    rows = pos & has_neg  # one term per relevant window: its group's loss, weighted per group below
    if not rows.any():
        return z.new_zeros(())
    per = (all_lse - pos_lse)[rows]
    n_pos = (same & pos.view(1, -1)).sum(dim=1)[rows].float()  # each group counts once
    return (per / n_pos).sum() / (1.0 / n_pos).sum()


def relevance_distillation_loss(
    relevance_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    groups: torch.Tensor,
    relevance_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy of the student's distribution over each query group's irrelevant windows
    (``softmax(relevance_logits)`` over them) against the teacher's (``softmax(teacher_logits)``),
    averaged over the groups with two such windows or more (0 when none has). The student learns
    the teacher's ordering of the distractors a query was retrieved with (a random passage below a
    look-alike); the relevant windows are left to the relevance BCE, which the teacher would
    otherwise contradict wherever it prefers a look-alike to the answer. Without
    ``relevance_labels`` every window counts.

    >>> z = torch.tensor([0.0, 0.0, 5.0, 9.0])
    >>> t = torch.tensor([1.0, 1.0, 0.0, -9.0])
    >>> g = torch.tensor([0, 0, 1, 0])
    >>> y = torch.tensor([0.0, 0.0, 0.0, 1.0])  # window 3 answers: left out; group 1 has one window
    >>> round(float(relevance_distillation_loss(z, t, g, y)), 4)  # uniform student: log 2
    0.6931
    """
    z = relevance_logits.float()
    t = teacher_logits.float().to(z.device)
    use = torch.ones_like(z, dtype=torch.bool) if relevance_labels is None else relevance_labels <= 0.5
    same = (groups.view(-1, 1) == groups.view(1, -1)) & use.view(1, -1) & use.view(-1, 1)  # [B, B]
    log_q = z.view(1, -1) - torch.logsumexp(
        z.view(1, -1).masked_fill(~same, float("-inf")), dim=1, keepdim=True
    )
    p = torch.softmax(t.view(1, -1).masked_fill(~same, float("-inf")), dim=1)  # [B, B]
    size = same.sum(dim=1).float()
    rows = size > 1
    if not rows.any():
        return z.new_zeros(())
    # row i: the cross-entropy of its group's irrelevant windows
    per = -(p[rows] * log_q[rows].masked_fill(~same[rows], 0.0)).sum(dim=1)
    return (per / size[rows]).sum() / (1.0 / size[rows]).sum()  # each group counts once
