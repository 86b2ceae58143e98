"""A self-contained HTML page of a prune result: kept units highlighted, scores on hover."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: results imports this module to render
    from pruner_model.inference.results import PruneResult

_STYLE = """
.pruner{font-family:system-ui,sans-serif;max-width:60rem;line-height:1.5}
.passage{border:1px solid #ccc;border-radius:6px;padding:.8rem;margin:1rem 0;white-space:pre-wrap}
.kept{background:#c8f7c5}.dropped{color:#999}.meta{color:#555;font-size:.9em}
.summarized{background:#fde9a9}.summary{background:#fdf3d0;border-left:3px solid #e0b000;padding:.3rem .6rem;margin:.4rem 0}
"""


def render_fragment(result: PruneResult) -> str:
    """The result as an HTML fragment: kept units highlighted, dropped ones greyed, scores on
    hover (``PruneResult._repr_html_``)."""
    s = result.stats
    out = [
        f"<style>{_STYLE}</style><div class='pruner'>",
        f"<b>Query:</b> {html.escape(result.query)}",
        f"<p class='meta'>threshold {result.threshold:.3f} · tokens {s.tokens_in} → {s.tokens_out} "
        f"(compression {s.compression:.1%}) · sentences {s.sentences_in} → {s.sentences_out} · "
        f"duplicates removed {s.duplicates_removed}</p>",
    ]
    if s.summary is not None:
        m = s.summary
        out.append(
            f"<p class='meta'>middle tier: {m.summarized} of {m.chunks} chunks summarized "
            f"({m.tokens_in} → {m.tokens_out} tokens), {m.guard_fallbacks} kept verbatim by the fact "
            f"guard, {m.failed} without a summary{' (' + html.escape(m.error) + ')' if m.error else ''}</p>"
        )
    for p in result.passages:
        text = p.source_text
        title = f" — {html.escape(p.title)}" if p.title else ""
        out.append(
            f"<div><b>Passage {html.escape(p.id)}</b>{title} <span class='meta'>relevance "
            f"{p.relevance:.3f}</span></div><div class='passage'>"
        )
        pos = 0
        for sent in p.sentences:
            out.append(html.escape(text[pos : sent.start]))
            # with summarize: verbatim green, summarized amber, dropped grey
            cls = "summarized" if sent.tier == "summarized" else "kept" if sent.kept else "dropped"
            out.append(
                f"<span class='{cls}' title='score {sent.score:.3f}'>"
                f"{html.escape(text[sent.start : sent.end])}</span>"
            )
            pos = sent.end
        out.append(html.escape(text[pos:]) + "</div>")
        for part in p.summaries:
            out.append(
                f"<div class='summary'><span class='meta'>summary of {part.tokens_in} tokens in "
                f"{part.tokens_out}:</span> {html.escape(part.text)}</div>"
            )
    out.append("</div>")
    return "".join(out)


def render_html(result: PruneResult) -> str:
    """A self-contained page of :func:`render_fragment` (``pruner prune --format html``)."""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>pruner</title></head><body>"
        + render_fragment(result)
        + "</body></html>"
    )
