"""Per-source evaluation: where the compression goes, and how well passages are told apart.

For each source of a labeled file (the records' ``source``: ``squad``, ``nq``, ``multirc``, ...)
the same seeded slice of query groups is scored once, and reported:

- compression at 95% and 97% of answers kept and the best sentence F1 (the sweep over
  thresholds, an in-sample figure on these groups);
- the promise at the checkpoint's own threshold (share kept, exact interval, verdict), and at
  the checkpoint's named operating point of the same source, where it has one;
- at the threshold that keeps 95% of answers: the share of tokens kept in gold passages, in other
  passages of the same document, in retriever-mined distractors, in random passages and in groups
  with no answer at all (the records' ``meta.role``, as `pruner data qa` writes it; SQuAD records'
  ``meta.gold`` / ``meta.hard`` map to gold / same_doc / random);
- the relevance head's passage ranking: the share of questions whose gold passage ranks first,
  and within a question the share of mined and of random passages the gold passage outscores.

Sources whose gold passages carry no sentence label (``meta.passage_only``) report the ranking
only.
"""

from __future__ import annotations

import numpy as np
from pruner_model.evaluation.calibration import calibrate_threshold
from pruner_model.evaluation.groups import LabeledGroup, load_range, records_by_source
from pruner_model.evaluation.metrics import ScoredGroup, best_compression_at, metrics_at, sweep
from pruner_model.evaluation.statistics import promise_check

ROLES = ("gold", "same_doc", "mined", "random", "answerless")


def passage_role(record: dict) -> str | None:
    """A record's part in its group: ``meta.role``, or SQuAD's ``meta.gold`` / ``meta.hard``."""
    meta = record.get("meta") or {}
    if meta.get("role"):
        return str(meta["role"])
    if "gold" in meta:
        return "gold" if meta["gold"] else "same_doc" if meta.get("hard") else "random"
    return None


def with_roles(records: list[dict]) -> list[dict]:
    """Copies of ``records`` whose ``meta.role`` is set wherever :func:`passage_role` tells it."""
    out = []
    for r in records:
        role = passage_role(r)
        out.append(r if role is None else dict(r, meta=dict(r.get("meta") or {}, role=role)))
    return out


def role_token_shares(groups: list[LabeledGroup], scored: list[ScoredGroup], threshold) -> dict:
    """Share of each role's tokens kept at ``threshold`` (a number, or the checkpoint's
    per-request default, a ``RequestDefault``) (``answerless``: every passage of the groups
    without a gold passage)."""
    kept = dict.fromkeys(ROLES, 0)
    total = dict.fromkeys(ROLES, 0)
    for g, s, keep in zip(groups, scored, _masks(scored, threshold)):
        roles = [p.get("role") for p in g.passages]
        answerless = "gold" not in roles
        cut = 0
        for p, units in zip(g.passages, g.units):
            sl = slice(cut, cut + len(units))
            cut += len(units)
            role = "answerless" if answerless else p.get("role")
            if role in total:
                total[role] += int(s.tokens[sl].sum())
                kept[role] += int(s.tokens[sl][keep[sl]].sum())
    return {r: (kept[r] / total[r] if total[r] else None) for r in ROLES}


def passage_ranking(groups: list[LabeledGroup], scored: list[ScoredGroup]) -> dict:
    """How the relevance head orders each question's passages (gold vs the others)."""
    per_passage = []
    for g, s in zip(groups, scored):
        if s.relevance is None:
            per_passage.append(None)
            continue
        rel, cut = [], 0
        for units in g.units:
            rel.append(float(s.relevance[cut]) if len(units) else float("-inf"))
            cut += len(units)
        per_passage.append(rel)
    return rank_passages(groups, per_passage)


def rank_passages(groups: list[LabeledGroup], passage_scores: list[list[float] | None]) -> dict:
    """How ``passage_scores`` (one score per passage of each group; None skips the group) order
    each question's passages: the share of questions whose gold passage scores highest, and per
    role the share of that role's passages the gold one outscores."""
    first = n_q = 0
    wins = {"mined": [0, 0], "random": [0, 0], "same_doc": [0, 0]}
    for g, rel in zip(groups, passage_scores):
        if rel is None:
            continue
        roles = [p.get("role") for p in g.passages]
        gold = [r for r, role in zip(rel, roles) if role == "gold"]
        others = [(r, role) for r, role in zip(rel, roles) if role != "gold"]
        if not gold or not others:
            continue
        best = max(gold)
        n_q += 1
        first += int(all(best > r for r, _ in others))
        for r, role in others:
            if role in wins:
                wins[role][0] += int(best > r)
                wins[role][1] += 1
    out = {"questions": n_q, "gold_first": first / n_q if n_q else None}
    for role, (w, n) in wins.items():
        out[f"gold_over_{role}"] = w / n if n else None
        out[f"{role}_pairs"] = n
    return out


ANSWER_SIZES = ("1", "2", "3+")  # answer sentences a question needs kept, as the reports bucket them


def kept_by_answer_size(scored: list[ScoredGroup], threshold) -> dict:
    """``{"1" | "2" | "3+": {"questions", "kept"}}``: the questions whose answer spans that many
    sentences (units labeled relevant), and the share of them keeping every one at ``threshold``
    (a number or a per-request default; ``kept`` None where there are none). An answer over
    several sentences is kept only when all of them are, so a promise met on one-sentence answers
    can be missed on text whose answers run longer."""
    out = {k: [0, 0] for k in ANSWER_SIZES}
    for g, keep in zip(scored, _masks(scored, threshold)):
        n = int(g.labels.sum())
        if n:
            cell = out[ANSWER_SIZES[min(n, 3) - 1]]
            cell[0] += 1
            cell[1] += int(keep[g.labels].all())
    return {k: {"questions": n, "kept": kept / n if n else None} for k, (n, kept) in out.items()}


def _masks(scored: list[ScoredGroup], threshold) -> list[np.ndarray]:
    if isinstance(threshold, int | float):
        return [g.scores >= threshold for g in scored]
    return threshold.masks(scored)


class ScoreMemo:
    """The heads' scores of one set of weights by query group, for a caller that scores the same
    groups with the same weights twice (an adaptation's checkpoint: once in the mix step, as the
    blend's share 0, and again in its report). Scores are reused only for the same windowing (the
    config's ``max_length``, ``stride`` and ``max_query_length``) and the same backend precision;
    whether the weights are the same is the caller's to know."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._scores: dict[str, object] = {}

    @staticmethod
    def _key_of(pruner) -> tuple:
        cfg = pruner.config
        return (cfg.max_length, cfg.stride, cfg.max_query_length, getattr(pruner, "precision", None))

    def __len__(self) -> int:
        return len(self._scores)

    def get(self, pruner, groups: list[LabeledGroup]) -> list | None:
        """The scores of every group of ``groups`` in order, or None when one is missing."""
        if self._key != self._key_of(pruner) or any(g.id not in self._scores for g in groups):
            return None
        return [self._scores[g.id] for g in groups]

    def put(self, pruner, groups: list[LabeledGroup], raw: list) -> None:
        if self._key != self._key_of(pruner):
            self._key, self._scores = self._key_of(pruner), {}
        self._scores.update((g.id, r) for g, r in zip(groups, raw))


def score_at_default(
    pruner, groups: list[LabeledGroup], progress: bool = False, memo: ScoreMemo | None = None
) -> tuple[list, list, object]:
    """``(raw, scored, default)``: ``groups`` scored by ``pruner`` (the heads' scores), the same
    under the checkpoint's score rule (what its thresholds are compared with), and its default
    there: the per-request default (a ``RequestDefault``) or its one threshold. ``memo``: the
    heads' scores of these very weights, reused where it holds every group, else filled in."""
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.scorer import score_groups
    from pruner_model.evaluation.threshold_fit import request_default

    cfg = pruner.config
    raw = None if memo is None else memo.get(pruner, groups)
    if raw is None:
        raw = score_groups(pruner, groups, progress=progress).groups
        if memo is not None:
            memo.put(pruner, groups, raw)
    rule = (
        getattr(cfg, "relevance_exponent", 0.0),
        getattr(cfg, "relative_floor", None),
        getattr(cfg, "relevance_contrast", 0.0),
    )
    default = request_default(cfg, groups, raw)
    return raw, with_score_rules(raw, *rule), float(cfg.threshold) if default is None else default


def at_threshold(scored: list[ScoredGroup], threshold, promised: float) -> dict:
    """The promise and compression at ``threshold``: a number, or the checkpoint's per-request
    default (a ``RequestDefault``; ``threshold`` then reports the median of its thresholds)."""
    at = metrics_at(scored, float("nan"), _masks(scored, threshold))
    if not isinstance(threshold, int | float):
        t = threshold.thresholds
        threshold = float(np.median(t)) if len(t) else float("nan")
    return {
        "threshold": threshold,
        "evidence_preserved": at["evidence_preserved"],
        "compression": at["compression"],
        "promise": promise_check(at["queries_preserved"], at["queries_with_evidence"], promised),
    }


def source_metrics(
    groups: list[LabeledGroup],
    scored: list[ScoredGroup],
    checkpoint_threshold,
    promised: float,
) -> dict:
    """Every per-source number (see the module docstring) of one source's scored groups;
    ``checkpoint_threshold``: the checkpoint's default, a number or its per-request default."""
    out: dict = {
        "groups": len(groups),
        "queries_with_evidence": sum(s.has_evidence for s in scored),
        "ranking": passage_ranking(groups, scored),
    }
    if not out["queries_with_evidence"]:
        return out
    curve = sweep(scored)
    for target in (0.95, 0.97):
        p = best_compression_at(curve, target)
        out[f"compression_at_{target:.2f}"] = None if p is None else p["compression"]
    out["best_f1"] = max((pt["f1"] for pt in curve), default=0.0)
    out["at_checkpoint_threshold"] = at_threshold(scored, checkpoint_threshold, promised)
    t95 = calibrate_threshold(scored, 0.95)
    out["tokens_kept_at_0.95"] = role_token_shares(groups, scored, t95)
    out["tokens_kept_at_checkpoint"] = role_token_shares(groups, scored, checkpoint_threshold)
    out["kept_by_answer_sentences"] = kept_by_answer_size(scored, checkpoint_threshold)
    return out


def evaluate_sources(
    pruner,
    records: list[dict],
    max_groups: int | None = 400,
    start: int = 0,
    seed: int = 0,
    progress: bool = False,
    operating_point: str | None = None,
) -> dict:
    """``{source: source_metrics}`` for each source of ``records`` (groups ``start:start +
    max_groups`` of each source's seeded permutation), on the pruner's own score scale; each source
    also at the checkpoint's named operating point of its name (``operating_point``: at that one)."""
    cfg = pruner.config
    by_source = records_by_source(with_roles(records))
    stop = None if max_groups is None else start + max_groups
    promised = float(getattr(cfg, "target_evidence", None) or 0.95)
    out = {}
    for src in sorted(by_source):
        groups = load_range(
            by_source[src], seed, start, stop, cfg.segmenter_language, cfg.segmenter_structure
        )
        if not groups:
            continue
        raw, scored, default = score_at_default(pruner, groups, progress)
        out[src] = source_metrics(groups, scored, default, promised)
        point = (getattr(cfg, "operating_points", None) or {}).get(operating_point or src)
        if point is not None and out[src]["queries_with_evidence"]:
            out[src]["at_operating_point"] = at_operating_point(cfg, raw, scored, point, promised)
    return out


def at_operating_point(cfg, raw: list[ScoredGroup], scored: list[ScoredGroup], point: dict, promised: float):
    """:func:`at_threshold` at a named operating point ``{threshold, relative_floor}`` of the
    checkpoint ``cfg``: on the checkpoint's own floor scored as its threshold is (``scored``), on
    another ``raw`` rescored under that floor with the checkpoint's exponent and contrast."""
    from pruner_model.evaluation.evaluator import with_score_rules

    floor = getattr(cfg, "relative_floor", None)
    at = scored
    if point["relative_floor"] != floor:
        exponent = getattr(cfg, "relevance_exponent", 0.0)
        at = with_score_rules(raw, exponent, point["relative_floor"], getattr(cfg, "relevance_contrast", 0.0))
    return at_threshold(at, float(point["threshold"]), promised)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def promise_text(at: dict | None) -> str:
    """``kept [low, high] verdict`` of a source's ``at_checkpoint_threshold`` (or
    ``at_operating_point``) numbers."""
    if not at:
        return "– (passage labels only)"
    low, high = at["promise"]["interval"]
    return f"{at['evidence_preserved']:.3f} [{low:.3f}, {high:.3f}] {at['promise']['verdict']}"


def sources_markdown(by_source: dict) -> str:
    """Two tables: compression and promise per source; where the kept tokens go, and ranking."""
    lines = [
        "| source | groups | compression at 95% kept | at 97% | best F1 | kept at checkpoint threshold "
        "[95% interval] | compression there | kept at the source's operating point | compression there |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for src, m in by_source.items():
        at, named = m.get("at_checkpoint_threshold"), m.get("at_operating_point")
        lines.append(
            f"| {src} | {m['groups']} | {_pct(m.get('compression_at_0.95'))} | "
            f"{_pct(m.get('compression_at_0.97'))} | {_pct(m.get('best_f1'))} | {promise_text(at)} | "
            f"{_pct(at['compression']) if at else '–'} | {promise_text(named) if named else '–'} | "
            f"{_pct(named['compression']) if named else '–'} |"
        )
    lines += [
        "",
        "Tokens kept (%) at the threshold that keeps 95% of answers, by passage role; relevance-head ranking (%).",
        "",
        "| source | gold | same doc | mined | random | no answer in group | gold ranked first "
        "| gold > mined | gold > random |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for src, m in by_source.items():
        t = m.get("tokens_kept_at_0.95") or {}
        r = m["ranking"]
        lines.append(
            f"| {src} | {_pct(t.get('gold'))} | {_pct(t.get('same_doc'))} | {_pct(t.get('mined'))} | "
            f"{_pct(t.get('random'))} | {_pct(t.get('answerless'))} | {_pct(r['gold_first'])} | "
            f"{_pct(r['gold_over_mined'])} | {_pct(r['gold_over_random'])} |"
        )
    return "\n".join(lines + _answer_size_lines(by_source)) + "\n"


def _answer_size_lines(by_source: dict) -> list[str]:
    """The third table: kept at the checkpoint's default by how many sentences the answer spans."""
    lines = [
        "",
        "Kept at the checkpoint threshold by how many sentences the answer spans: share of questions (questions).",
        "",
        "| source | " + " | ".join(f"{k} sentence{'s' if k != '1' else ''}" for k in ANSWER_SIZES) + " |",
        "|---|" + "---|" * len(ANSWER_SIZES),
    ]
    for src, m in by_source.items():
        sizes = m.get("kept_by_answer_sentences")
        if sizes:
            cells = [
                "–" if c["kept"] is None else f"{c['kept']:.3f} ({c['questions']})"
                for c in (sizes[k] for k in ANSWER_SIZES)
            ]
            lines.append(f"| {src} | " + " | ".join(cells) + " |")
    return lines


def measure_sample(
    pruner, records: list[dict], target, confidence, max_groups, seed: int, memo: ScoreMemo | None = None
) -> dict:
    """The sample's groups at the checkpoint's default and at the threshold calibrated on them
    (``memo``: see :func:`score_at_default`)."""
    from pruner_model.evaluation.calibration import calibrate_threshold
    from pruner_model.evaluation.groups import load_range

    cfg = pruner.config
    target = float(target if target is not None else (cfg.target_evidence or 0.95))
    groups = load_range(records, seed, 0, max_groups, cfg.segmenter_language, cfg.segmenter_structure)
    if not groups:
        raise ValueError("no query groups in the data")
    _, ruled, default = score_at_default(pruner, groups, progress=True, memo=memo)
    if not any(g.has_evidence for g in ruled):
        raise ValueError("no group of the data has an answer sentence: nothing to calibrate on")
    threshold = float(calibrate_threshold(ruled, target, confidence))
    return {
        "groups": len(groups),
        "with_evidence": sum(g.has_evidence for g in ruled),
        "target": target,
        "per_request": not isinstance(default, float),
        "before": at_threshold(ruled, default, target),
        "threshold": threshold,
        "after": at_threshold(ruled, threshold, target),
    }
