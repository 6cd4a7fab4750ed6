"""Knowledge base: loading and validating Markdown + front matter, and hybrid retrieval.

Imports nothing from `policy` or `voice_agent`. `Retriever` is imported lazily so that
`import kb` stays cheap for code that only loads or validates a KB.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .loader import (KBFileError, KBNotFound, KnowledgeBase, effective_status, load_kb,
                     parse_document, slugify, visible_to)
from .models import (Document, EffectiveStatus, Hit, LoadProblem, RetrievalResult,
                     RetrievalUnavailable, Section)

if TYPE_CHECKING:
    from .retrieve import Retriever

__all__ = [
    "KBFileError", "KBNotFound", "KnowledgeBase", "effective_status", "load_kb", "parse_document",
    "slugify", "visible_to", "Document", "EffectiveStatus", "Hit", "LoadProblem",
    "RetrievalResult", "RetrievalUnavailable", "Section", "Retriever",
]


def __getattr__(name: str) -> type[Retriever]:
    if name == "Retriever":
        # lazy (documented design): kb.retrieve pulls numpy, the embedder and the indexes
        from .retrieve import Retriever

        return Retriever
    raise AttributeError(f"module 'kb' has no attribute {name!r}")
