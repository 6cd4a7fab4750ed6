"""Size bounds on KB input, so one oversized file cannot exhaust memory at load or in the
tokenizer: a file over `MAX_FILE_BYTES` is skipped, and a section over `MAX_SECTION_CHARS` is
split at paragraph (else line, else character) boundaries into parts that are each retrieved
and cited on their own: `<slug>`, `<slug>-part-2`, ..."""
from __future__ import annotations

from .models import Section

__all__ = ["MAX_FILE_BYTES", "MAX_SECTION_CHARS", "split_long_sections"]

MAX_FILE_BYTES = 4 * 1024 * 1024  # a KB page is a few KB; 4 MB is a book
MAX_SECTION_CHARS = 6000  # about 1,000 words: well past any answer a caller is read


def split_long_sections(sections: list[Section], limit: int = MAX_SECTION_CHARS) -> list[Section]:
    out: list[Section] = []
    for s in sections:
        parts = _pieces(s.text, limit) if len(s.text) > limit else [s.text]
        for i, text in enumerate(parts):
            slug = s.slug if i == 0 else f"{s.slug}-part-{i + 1}"
            out.append(s.model_copy(update={"slug": slug, "locator": f"{s.doc_id}#{slug}", "text": text,
                                            "order": len(out)}))
    return out


def _pieces(text: str, limit: int) -> list[str]:
    """Greedy packing of paragraphs, then lines, then fixed-size cuts, each piece ≤ limit."""
    for sep in ("\n\n", "\n"):
        units = text.split(sep)
        if all(len(u) <= limit for u in units):
            return _pack(units, sep, limit)
    return [text[i:i + limit] for i in range(0, len(text), limit)]


def _pack(units: list[str], sep: str, limit: int) -> list[str]:
    out: list[str] = []
    cur = ""
    for u in units:
        if cur and len(cur) + len(sep) + len(u) > limit:
            out.append(cur)
            cur = u
        else:
            cur = f"{cur}{sep}{u}" if cur else u
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out if p.strip()]
