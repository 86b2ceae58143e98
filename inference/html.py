"""A self-contained HTML page of a prune result: kept units highlighted, scores on hover."""

from __future__ import annotations

import html

from .results import PruneResult

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;line-height:1.5}
.passage{border:1px solid #ccc;border-radius:6px;padding:.8rem;margin:1rem 0;white-space:pre-wrap}
.kept{background:#c8f7c5}.dropped{color:#999}.meta{color:#555;font-size:.9em}
"""


def render_html(result: PruneResult, texts: list[str]) -> str:
    """``texts[i]`` is the original text of ``result.passages[i]``."""
    s = result.stats
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>pruner</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h2>Query: {html.escape(result.query)}</h2>",
        f"<p class='meta'>threshold {result.threshold:.3f} · tokens {s.tokens_in} → {s.tokens_out} "
        f"(compression {s.compression:.1%}) · sentences {s.sentences_in} → {s.sentences_out} · "
        f"duplicates removed {s.duplicates_removed}</p>",
    ]
    for p, text in zip(result.passages, texts):
        title = f" — {html.escape(p.title)}" if p.title else ""
        out.append(
            f"<h3>Passage {html.escape(p.id)}{title} <span class='meta'>relevance "
            f"{p.relevance:.3f}</span></h3><div class='passage'>"
        )
        pos = 0
        for sent in p.sentences:
            out.append(html.escape(text[pos : sent.start]))
            cls = "kept" if sent.kept else "dropped"
            out.append(
                f"<span class='{cls}' title='score {sent.score:.3f}'>"
                f"{html.escape(text[sent.start : sent.end])}</span>"
            )
            pos = sent.end
        out.append(html.escape(text[pos:]) + "</div>")
    out.append("</body></html>")
    return "".join(out)
