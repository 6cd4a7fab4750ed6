"""Recall@3 of hybrid retrieval on the fixture KB's caller questions (must stay >= 0.9)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from kb.loader import load_kb
from kb.retrieve import Retriever

ROOT = Path(__file__).resolve().parent.parent
KB_DIR, QUESTIONS = ROOT / "fixtures" / "kb", ROOT / "fixtures" / "retrieval_questions.yaml"
ON_DATE = dt.date(2026, 11, 29)  # the date the question file's expectations hold on

pytestmark = pytest.mark.skipif(not QUESTIONS.exists(), reason="fixtures/retrieval_questions.yaml missing")


def recall_at_3(retriever: Retriever) -> tuple[float, list[str]]:
    items = yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))
    misses = []
    for it in items:
        res = retriever.search(it["q"], role=it.get("role", "public"), on_date=ON_DATE, k=3)
        got = [h.doc_id for h in res.hits]
        if not set(got) & set(it["expect_any"]):
            misses.append(f"{it['q']!r}: expected {it['expect_any']}, got {got}")
    return 1 - len(misses) / len(items), misses


@pytest.mark.slow
def test_hybrid_recall_at_3(tmp_path):
    kb = load_kb(KB_DIR)
    assert not [p for p in kb.problems if p.fatal], kb.problems
    r = Retriever(kb, cache_dir=tmp_path)
    assert r.dense_available, r.dense_error
    recall, misses = recall_at_3(r)
    print(f"hybrid recall@3 = {recall:.3f}")
    assert recall >= 0.9, "\n".join(misses)


@pytest.mark.unit
def test_lexical_only_recall_at_3():
    """The fallback when the embedding model is down must still find most answers."""
    recall, misses = recall_at_3(Retriever(load_kb(KB_DIR), dense=False))
    print(f"lexical-only recall@3 = {recall:.3f}")
    assert recall >= 0.85, "\n".join(misses)
