"""`pruner evaluate`: compression against evidence kept, for the model and baselines, on the same
units and through the same metric code (:mod:`pruner_model.metrics`).

Every system gives each unit of each passage a score; a threshold sweep over those scores traces
the curve of compression vs evidence preserved. The model's scores come from
:meth:`ContextPruner.prune_batch`; its operating point (the recommended threshold) is then
measured by running the real pipeline (dedup included) at that threshold.

Baselines: keep everything; top-N passages by BM25; sentence lexical overlap with a density bonus
(0.7·|q∩s|/|q| + 0.3·|q∩s|/|s| over stop-word-free word sets); bi-encoder cosine between query and
sentence with the bundled all-MiniLM-L6-v2 (needs torch).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pruner_model.groups import STOP_WORDS, LabeledGroup, content_words, load_groups, load_slice, words
from pruner_model.metrics import (
    ScoredGroup,
    best_compression_at,
    calibrate_threshold,
    metrics_at,
    promise_check,
    relative_groups,
    sweep,
)

TARGETS = (0.90, 0.95, 0.97, 0.99)
Scores = list[list[np.ndarray]]  # per group, per passage: one score per unit
BASELINES: dict[str, tuple[str, Callable[..., Scores]]] = {}


def baseline(cli_name: str, system: str):
    """Register a baseline: ``fn(groups, progress=None) -> Scores``; ``--baselines`` offers
    ``cli_name``, reports name it ``system``."""

    def register(fn):
        BASELINES[cli_name] = (system, fn)
        return fn

    return register


def _scored(g: LabeledGroup, scores: list[np.ndarray], tokens: list[np.ndarray]) -> ScoredGroup:
    return ScoredGroup(
        np.concatenate(scores) if scores else np.zeros(0),
        np.concatenate(g.labels) if g.labels else np.zeros(0, bool),
        np.concatenate(tokens) if tokens else np.zeros(0, np.int64),
        np.concatenate(g.words) if g.words else np.zeros(0, np.int64),
    )


# ---------------------------------------------------------------------------- systems
def model_scores(pruner, groups: list[LabeledGroup], batch_queries: int = 16, progress=None):
    """Unit scores and token counts from the pruner's scoring path (no selection)."""
    out, latencies = [], []
    for b in range(0, len(groups), batch_queries):
        chunk = groups[b : b + batch_queries]
        results = pruner.prune_batch([(g.query, g.passages) for g in chunk], threshold=1.0, dedup=False)
        for r in results:
            scores = [np.array([s.score for s in p.sentences]) for p in r.passages]
            tokens = [np.array([s.tokens for s in p.sentences], dtype=np.int64) for p in r.passages]
            out.append((scores, tokens))
            latencies.append(r.stats.encoder_seconds + r.stats.postprocess_seconds)
        if progress is not None:
            progress.update(len(chunk))
    return out, latencies


@baseline("all", "keep_all")
def keep_all_scores(groups: list[LabeledGroup], progress=None) -> Scores:
    """Every unit scores 1: the uncompressed context."""
    return [[np.ones(len(u)) for u in g.units] for g in groups]


@baseline("lexical", "lexical_overlap")
def lexical_baseline(groups: list[LabeledGroup], progress=None) -> Scores:
    return [lexical_scores(g) for g in groups]


def lexical_scores(g: LabeledGroup) -> list[np.ndarray]:
    q = content_words(g.query)
    out = []
    for p, us in zip(g.passages, g.units):
        sc = []
        for u in us:
            s = content_words(p["text"][u.start : u.end])
            inter = len(q & s)
            sc.append(0.7 * inter / len(q) + 0.3 * inter / len(s) if q and s else 0.0)
        out.append(np.array(sc))
    return out


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.df = Counter(w for d in docs for w in set(d))
        self.n = len(docs)
        self.avgdl = float(np.mean([len(d) for d in docs])) if docs else 1.0

    def score(self, query: list[str], doc: list[str]) -> float:
        tf = Counter(doc)
        s = 0.0
        for w in set(query):
            if w not in tf:
                continue
            idf = math.log(1 + (self.n - self.df[w] + 0.5) / (self.df[w] + 0.5))
            s += (
                idf
                * tf[w]
                * (self.k1 + 1)
                / (tf[w] + self.k1 * (1 - self.b + self.b * len(doc) / self.avgdl))
            )
        return s


@baseline("bm25", "bm25_top_n")
def bm25_scores(groups: list[LabeledGroup], progress=None) -> Scores:
    """Every unit of a passage gets (P - rank) / P, rank by BM25 within the group: a threshold
    then keeps the top-N passages whole."""
    bm = BM25([words(p["text"]) for g in groups for p in g.passages])
    out = []
    for g in groups:
        q = [w for w in words(g.query) if w not in STOP_WORDS]
        s = np.array([bm.score(q, words(p["text"])) for p in g.passages])
        ranks = np.argsort(np.argsort(-s, kind="stable"), kind="stable")
        n = len(g.passages)
        out.append([np.full(len(us), (n - rk) / n) for us, rk in zip(g.units, ranks)])
    return out


@baseline("biencoder", "biencoder_cosine")
def biencoder_scores(groups: list[LabeledGroup], progress=None, batch_size: int = 64) -> Scores:
    """Cosine similarity of mean-pooled all-MiniLM-L6-v2 embeddings, mapped to [0, 1]."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from pruner_model import default_backbone_path

    path = str(default_backbone_path())
    tok = AutoTokenizer.from_pretrained(path)
    enc = AutoModel.from_pretrained(path).eval()

    @torch.no_grad()
    def embed(texts: list[str]) -> np.ndarray:
        vecs = []
        for i in range(0, len(texts), batch_size):
            b = tok(
                texts[i : i + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            h = enc(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1).clamp(min=1)
            vecs.append(torch.nn.functional.normalize(v, dim=-1).numpy())
        return np.concatenate(vecs) if vecs else np.zeros((0, 1))

    out = []
    for g in groups:
        texts = [p["text"][u.start : u.end] for p, us in zip(g.passages, g.units) for u in us]
        e = embed([g.query, *texts])
        cos = (e[1:] @ e[0] + 1) / 2 if len(texts) else np.zeros(0)
        sizes = np.cumsum([len(us) for us in g.units])[:-1]
        out.append(list(np.split(cos, sizes)))
        if progress is not None:
            progress.update(1)
    return out


# ---------------------------------------------------------------------------- report
def evaluate(
    pruner,
    records: list[dict],
    target: float = 0.97,
    max_groups: int | None = None,
    baselines: tuple[str, ...] = tuple(BASELINES),
    budgets: tuple[int, ...] = (),
    progress_factory=None,
    start: int = 0,
    seed: int = 0,
    pipeline: bool = True,
    thresholds: dict[str, float] | None = None,
    return_groups: bool = False,
    confidence: float | None = None,
) -> dict | tuple[dict, dict[str, list[ScoredGroup]]]:
    """Curves, best compression per evidence target and the recommended threshold.

    Groups ``start:start + max_groups`` of the seeded permutation
    (:func:`pruner_model.groups.load_slice`, the slicing training calibrates and reports on);
    all groups when ``max_groups`` is None and ``start`` is 0. ``pipeline=False`` skips the
    operating point's second pass through the full pipeline (dedup, budgets): the operating point
    is then read off the sentence scores alone. ``thresholds`` (name -> threshold on the
    checkpoint's scale): what each keeps, in ``operating_point.at_thresholds``.
    ``confidence``: the recommended threshold keeps ``>= target`` on new queries with that
    confidence (:func:`pruner_model.metrics.required_kept`), not only on these.
    ``return_groups``: also return each system's scored groups (``{system: [ScoredGroup]}``, on
    the scale its curve is measured on), e.g. for :func:`pruner_model.metrics.paired_bootstrap`.
    """
    cfg = pruner.config
    if start or max_groups is not None:
        stop = None if max_groups is None else start + max_groups
        groups = load_slice(records, seed, start, stop, cfg.segmenter_language, cfg.segmenter_structure)
    else:
        groups = load_groups(records, cfg.segmenter_language, cfg.segmenter_structure)
    if not groups:
        raise ValueError("no groups to evaluate")
    unknown = sorted(set(baselines) - set(BASELINES))
    if unknown:
        raise ValueError(f"unknown baseline {unknown[0]!r} (choose from {', '.join(BASELINES)})")
    bar = progress_factory(len(groups), "scoring (model)") if progress_factory else None
    t0 = time.perf_counter()
    scored, latencies = model_scores(pruner, groups, progress=bar)
    if bar is not None:
        bar.close()
    tokens = [t for _, t in scored]
    raw = [_scored(g, s, t) for g, (s, t) in zip(groups, scored)]
    floor = getattr(cfg, "relative_floor", None)
    # the curve the checkpoint's thresholds live on: relative scores when it has a relative floor
    systems: dict[str, list[ScoredGroup]] = {"pruner": relative_groups(raw, floor)}
    if floor is not None:
        systems["pruner_absolute"] = raw
    for name in baselines:
        system, fn = BASELINES[name]
        bar = progress_factory(len(groups), f"scoring ({system})") if progress_factory else None
        scores = fn(groups, progress=bar)
        if bar is not None:
            bar.close()
        systems[system] = [_scored(g, sc, t) for g, sc, t in zip(groups, scores, tokens)]
    report: dict = {
        "groups": len(groups),
        "passages": sum(len(g.passages) for g in groups),
        "groups_with_evidence": sum(any(lab.any() for lab in g.labels) for g in groups),
        "target_evidence": target,
        "confidence": confidence,
        "relative_floor": floor,
        "relevance_exponent": getattr(pruner.config, "relevance_exponent", 0.0),
        "systems": {},
    }
    for name, gs in systems.items():
        curve = sweep(gs)
        best = {
            f"{t:.2f}": (
                lambda p: (
                    None if p is None else {"compression": p["compression"], "threshold": p["threshold"]}
                )
            )(best_compression_at(curve, t))
            for t in TARGETS
        }
        report["systems"][name] = {
            "curve": [
                {
                    k: pt[k]
                    for k in (
                        "threshold",
                        "evidence_preserved",
                        "compression",
                        "word_compression",
                        "f1",
                        "f2",
                    )
                }
                for pt in curve
            ],
            "best_compression_at": best,
            "best_f1": max((pt["f1"] for pt in curve), default=0.0),
        }
    # the model's operating point (and each token budget), measured through the real pipeline
    # (dedup included); every setting of a query rides in one run(), so the encoder sees it once
    from .pruner import PruneRequest

    model_groups = systems["pruner"]
    threshold = calibrate_threshold(model_groups, target, confidence)
    settings = [pruner.selection_params(threshold=threshold)]
    settings += [pruner.selection_params(threshold=0.0, token_budget=b) for b in budgets]
    masks: list[list[np.ndarray]] = [[] for _ in settings]
    for b in range(0, len(groups) if pipeline else 0, 16):
        chunk = groups[b : b + 16]
        res = pruner.run([PruneRequest(g.query, g.passages, sp) for sp in settings for g in chunk])
        for k in range(len(settings)):
            masks[k] += [
                np.concatenate([np.array([s.kept for s in p.sentences], dtype=bool) for p in r.passages])
                for r in res[k * len(chunk) : (k + 1) * len(chunk)]
            ]
    op = metrics_at(model_groups, threshold, keep_masks=masks[0] if pipeline else None)
    op["checkpoint_threshold"] = float(pruner.config.threshold)
    op["at_checkpoint_threshold"] = at = metrics_at(model_groups, float(pruner.config.threshold))
    if at["queries_with_evidence"]:  # the checkpoint's threshold was not fitted on these: test its promise
        promised = float(pruner.config.target_evidence or target)
        at["promise"] = promise_check(at["queries_preserved"], at["queries_with_evidence"], promised)
    op["at_thresholds"] = {name: metrics_at(model_groups, float(t)) for name, t in (thresholds or {}).items()}
    below = getattr(cfg, "uncertainty_threshold", None)
    if below is not None:  # queries flagged uncertain, and the checkpoint's threshold with keep_all for them
        flagged = [bool(len(g.scores)) and float(g.scores.max()) < below for g in raw]
        masks_all = [
            np.ones(len(g.scores), bool) if f else g.scores >= cfg.threshold
            for g, f in zip(model_groups, flagged)
        ]
        fallback = metrics_at(model_groups, float(cfg.threshold), keep_masks=masks_all)
        op["uncertain"] = {
            "threshold": below,
            "share_flagged": float(np.mean(flagged)) if flagged else 0.0,
            "evidence_with_keep_all": fallback["evidence_preserved"],
            "compression_with_keep_all": fallback["compression"],
        }
    op["latency_ms_mean"] = float(np.mean(latencies) * 1000)
    op["seconds"] = time.perf_counter() - t0
    report["recommended_threshold"] = threshold
    report["operating_point"] = op
    if budgets:
        report["budgets"] = []
        for b, keep in zip(budgets, masks[1:]):
            m = metrics_at(model_groups, 0.0, keep_masks=keep)
            report["budgets"].append(
                {
                    "token_budget": b,
                    "evidence_preserved": m["evidence_preserved"],
                    "compression": m["compression"],
                }
            )
    return (report, systems) if return_groups else report


_VERDICTS = {
    "met": "the promise holds on these queries.",
    "within chance": "under the promise but inside the interval: too few queries to tell a miss from luck.",
    "missed": "the whole interval lies under the promise: the threshold does not keep it on these "
    "queries (`--write-threshold` writes the recommended one into the checkpoint).",
}


def _promise_lines(op: dict) -> list[str]:
    at = op["at_checkpoint_threshold"]
    p = at.get("promise")
    if p is None:
        return []
    lo, hi = p["interval"]
    return [
        "",
        "## The checkpoint's own threshold\n",
        f"At {op['checkpoint_threshold']:.4f} (promised evidence {p['target']}): kept {p['kept']} of "
        f"{p['queries']} queries with evidence ({p['share']:.3f}; {p['level']:.0%} interval "
        f"{lo:.3f}–{hi:.3f}), compression {at['compression']:.3f}. **{p['verdict']}**: "
        + _VERDICTS[p["verdict"]],
    ]


def write_markdown(report: dict, path: Path) -> None:
    lines = [
        "# Pruning evaluation\n",
        f"{report['groups']} queries ({report['groups_with_evidence']} with evidence), "
        f"{report['passages']} passages.\n",
        "## Best token compression at each evidence-preserved level\n",
        "| system | " + " | ".join(f"evidence ≥ {t:.2f}" for t in TARGETS) + " |",
        "|---|" + "---|" * len(TARGETS),
    ]
    for name, s in report["systems"].items():
        cells = []
        for t in TARGETS:
            b = s["best_compression_at"][f"{t:.2f}"]
            cells.append("—" if b is None else f"{b['compression']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    op = report["operating_point"]
    lines += [
        "",
        f"## Operating point (target evidence {report['target_evidence']}"
        + (f", with confidence {report['confidence']}" if report.get("confidence") is not None else "")
        + ")\n",
        f"Recommended threshold **{report['recommended_threshold']:.4f}** "
        f"(checkpoint default {op['checkpoint_threshold']:.4f}"
        + (
            f"; on scores relative to each query's best sentence, floor {report['relative_floor']}"
            if report.get("relative_floor") is not None
            else ""
        )
        + (
            f"; sentence scores times passage relevance^{report['relevance_exponent']}"
            if report.get("relevance_exponent")
            else ""
        )
        + "), measured through the full pipeline:\n",
        "| metric | value |",
        "|---|---|",
    ]
    for k in (
        "evidence_preserved",
        "relevant_sentences_kept",
        "compression",
        "word_compression",
        "precision",
        "recall",
        "f1",
        "f2",
        "negative_tokens_kept",
        "latency_ms_mean",
    ):
        lines.append(f"| {k} | {op[k]:.3f} |")
    lines += _promise_lines(op)
    if report.get("budgets"):
        lines += ["", "## Token budgets\n", "| budget | evidence preserved | compression |", "|---|---|---|"]
        lines += [
            f"| {b['token_budget']} | {b['evidence_preserved']:.3f} | {b['compression']:.3f} |"
            for b in report["budgets"]
        ]
    from pruner_model.records import atomic_open

    with atomic_open(path) as fh:
        fh.write("\n".join(lines) + "\n")


def plot_curves(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    for name, s in report["systems"].items():
        pts = sorted((p["compression"], p["evidence_preserved"]) for p in s["curve"])
        xs, ys = zip(*pts)
        style = "o" if name == "keep_all" else "-"
        ax.plot(xs, ys, style, label=name, lw=2 if name == "pruner" else 1.2)
    op = report["operating_point"]
    ax.plot(
        [op["compression"]],
        [op["evidence_preserved"]],
        "k*",
        ms=14,
        label=f"operating point (t={report['recommended_threshold']:.3f})",
    )
    ax.axhline(report["target_evidence"], color="grey", ls=":", lw=1)
    ax.set_xlabel("token compression (1 − kept / total)")
    ax.set_ylabel("evidence preserved (queries with every relevant sentence kept)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"Compression vs evidence ({report['groups']} queries)")
    fig.tight_layout()
    from pruner_model.records import atomic_open

    with atomic_open(path, "wb") as fh:  # no half-written figure if plotting fails
        fig.savefig(fh, format="png")
    plt.close(fig)
