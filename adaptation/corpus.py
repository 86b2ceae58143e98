"""The corpus steps of an adaptation (``--corpus``): a folder of documents turned into labeled
records before the split, fine-tuning, calibration and report, each resumable under ``OUTPUT/data``:

1. ``chunks``: the documents read and cut as a retriever would (``chunks.jsonl``);
2. ``questions``: questions written for a seeded sample of chunks through the OpenAI-compatible
   endpoint (``questions.raw.jsonl``, its cache and rejects), or the queries of ``--queries``
   (``questions.jsonl``);
3. ``groups``: copies and near-duplicates dropped, each question's group mined from the corpus by
   BM25 and the bundled bi-encoder, with random chunks and answer-less groups (``groups.jsonl``);
4. ``labels``: the groups labeled by the same endpoint as `pruner annotate` labels them
   (``labels.raw.jsonl``), and a written question kept only when its own chunk holds its evidence
   (``labeled.jsonl``, what the split step reads).
"""

from __future__ import annotations

import math
import random
from pathlib import Path


def corpus_settings(args) -> dict:
    """What the corpus steps are told (stored with the adaptation: another value needs a new
    ``--output``)."""
    import os

    from pruner_model.annotation.corpus import ChunkSettings
    from pruner_model.annotation.mining import GroupSettings

    ChunkSettings(args.chunk_words, args.chunk_overlap).check()
    GroupSettings(args.passages, args.bm25, args.dense, args.answerless_share).check()
    if args.questions < 1 or args.questions_per_chunk < 1:
        raise ValueError("--questions and --questions-per-chunk must be >= 1")
    if not 0 <= args.unanswered_share <= 1:
        raise ValueError(f"--unanswered-share must be in [0, 1], got {args.unanswered_share}")
    if args.queries is not None and not Path(args.queries).is_file():
        raise ValueError(f"{args.queries}: no such query log")
    return {
        "path": str(args.corpus),
        "queries": args.queries,
        "llm_model": args.llm_model or os.environ.get("OPENAI_MODEL"),
        "chunk_words": args.chunk_words,
        "chunk_overlap": args.chunk_overlap,
        "questions": args.questions,
        "per_chunk": args.questions_per_chunk,
        "unanswered_share": args.unanswered_share,
        "passages": args.passages,
        "bm25": args.bm25,
        "dense": args.dense,
        "answerless_share": args.answerless_share,
    }


def chunks(ctx) -> dict:
    c, data = ctx.settings.corpus, ctx.data
    data.mkdir(parents=True, exist_ok=True)
    from pruner_model.annotation.corpus import ChunkSettings, chunk_corpus, read_corpus
    from pruner_model.core.records import write_jsonl

    docs = read_corpus(c["path"])
    chunks = chunk_corpus(docs, ChunkSettings(c["chunk_words"], c["chunk_overlap"]))
    write_jsonl(data / "chunks.jsonl", chunks)
    return {"documents": len(docs), "chunks": len(chunks)}


def questions(ctx) -> dict:
    c, data, seed = ctx.settings.corpus, ctx.data, ctx.settings.seed
    from pruner_model.annotation.questions import QuestionWriter, chunk_group
    from pruner_model.core.records import read_jsonl, write_jsonl
    from tqdm.auto import tqdm

    if c["queries"]:
        log = read_jsonl(c["queries"])
        bad = next((i for i, q in enumerate(log, 1) if not str(q.get("query") or "").strip()), None)
        if bad is not None:
            raise ValueError(f"{c['queries']}:{bad}: expected {{query}} with a non-empty 'query' string")
        questions = [{"question": q["query"], "kind": "logged", "chunk": None, "document": None} for q in log]
        write_jsonl(data / "questions.jsonl", questions)
        return {"logged queries": len(questions)}
    chunks = read_jsonl(data / "chunks.jsonl")
    sampled = random.Random(seed).sample(chunks, min(len(chunks), math.ceil(c["questions"] / c["per_chunk"])))
    writer = QuestionWriter(ctx.runtime.llm(c["llm_model"]), c["per_chunk"], c["unanswered_share"], seed)
    writer.open_cache(data / "questions.cache.jsonl")
    raw = data / "questions.raw.jsonl"
    with tqdm(total=len(sampled), desc="writing questions", unit="chunk") as bar:
        acc = writer.run(
            [chunk_group(ch) for ch in sampled],
            raw,
            data / "questions.rejects.jsonl",
            bar,
            [data / "chunks.jsonl"],
        )
    questions = [
        {**q, "chunk": r["chunk"], "document": r["document"]} for r in read_jsonl(raw) for q in r["questions"]
    ]
    if not questions:  # the step is not marked done: the same command asks again
        raise ValueError(
            f"no chunk got questions ({acc.groups_rejected} rejected, reasons in questions.rejects.jsonl)"
        )
    write_jsonl(data / "questions.jsonl", questions)
    return {
        "chunks asked": len(sampled),
        "chunks rejected": acc.groups_rejected,
        "written": len(questions),
        "accounting": acc.to_dict(),
    }


def groups(ctx) -> dict:
    c, data, seed = ctx.settings.corpus, ctx.data, ctx.settings.seed
    from pruner_model.annotation.mining import GroupSettings, build_groups, filter_questions
    from pruner_model.core.biencoder import BiEncoder
    from pruner_model.core.records import read_jsonl, write_jsonl
    from tqdm.auto import tqdm

    chunks = read_jsonl(data / "chunks.jsonl")
    questions = read_jsonl(data / "questions.jsonl")
    encoder = BiEncoder() if c["dense"] else None
    kept, dropped = filter_questions(questions, {ch["id"]: ch for ch in chunks}, encoder)
    if not kept:
        raise ValueError(f"no question left after the filters ({dropped}): write more questions")
    settings = GroupSettings(c["passages"], c["bm25"], c["dense"], c["answerless_share"], seed)
    with tqdm(total=len(kept), desc="mining groups", unit="question") as bar:
        groups = build_groups(kept, chunks, settings, encoder, bar)
    write_jsonl(data / "groups.jsonl", groups)
    return {
        "questions": len(questions),
        "dropped": dropped,
        "groups": len(groups),
        "answer-less": sum(g["meta"]["answerless"] for g in groups),
    }


def labels(ctx) -> dict:
    c, data = ctx.settings.corpus, ctx.data
    from pruner_model.annotation.llm import Annotator
    from pruner_model.annotation.mining import confirm
    from pruner_model.core.records import read_jsonl, write_jsonl
    from tqdm.auto import tqdm

    groups = read_jsonl(data / "groups.jsonl")
    annotator = Annotator(ctx.runtime.llm(c["llm_model"]))
    annotator.open_cache(data / "labels.cache.jsonl")
    raw = data / "labels.raw.jsonl"
    with tqdm(total=len(groups), desc="labeling", unit="group") as bar:
        acc = annotator.run(groups, raw, data / "labels.rejects.jsonl", bar, [data / "groups.jsonl"])
    labeled = read_jsonl(raw)
    if not labeled:  # the step is not marked done: the same command asks again
        raise ValueError(
            f"no group was labeled ({acc.groups_rejected} rejected, reasons in labels.rejects.jsonl)"
        )
    records, counts = confirm(labeled, groups)
    write_jsonl(data / "labeled.jsonl", records)
    return {"groups rejected": acc.groups_rejected, **counts, "accounting": acc.to_dict()}


def corpus_markdown(corpus: dict) -> list[str]:
    """The corpus steps' lines of the adaptation report."""
    ch, q, g, lab = (corpus.get(s) or {} for s in STEPS)
    spent = [x.get("accounting") or {} for x in (q, lab)]
    tokens = sum(a.get("prompt_tokens", 0) + a.get("completion_tokens", 0) for a in spent)
    cost = sum(a.get("estimated_cost", 0.0) for a in spent)
    n_q = g.get("questions", 0) or 1
    drops = ", ".join(f"{k} {v} ({v / n_q:.0%})" for k, v in (g.get("dropped") or {}).items())
    labeled = sum(lab.get(k, 0) for k in ("confirmed", "not answered by its chunk", "kept as labeled")) or 1
    source = (
        f"{q['logged queries']} logged queries"
        if "logged queries" in q
        else f"{q.get('written', 0)} questions written for {q.get('chunks asked', 0)} chunks "
        f"({q.get('chunks rejected', 0)} chunks rejected by the writer's checks)"
    )
    return [
        f"Corpus: {ch.get('documents', 0)} documents in {ch.get('chunks', 0)} chunks; {source}; "
        f"dropped: {drops or 'none'}; {g.get('groups', 0)} groups ({g.get('answer-less', 0)} without "
        f"the question's document); labels: {lab.get('confirmed', 0)} confirmed by their chunk, "
        f"{lab.get('not answered by its chunk', 0)} dropped as not answered by it "
        f"({lab.get('not answered by its chunk', 0) / labeled:.0%}), {lab.get('kept as labeled', 0)} kept as "
        f"labeled, {lab.get('groups rejected', 0)} rejected by the labeler. Endpoint: {tokens} tokens, "
        f"estimated ${cost:.4f}; {sum(s.get('seconds', 0) for s in (q, lab)) / 60:.1f} minutes.",
        "",
    ]


STEPS = {"chunks": chunks, "questions": questions, "groups": groups, "labels": labels}  # in order
