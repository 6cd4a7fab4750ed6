"""The fast BM25 engine must score exactly like rank_bm25's BM25Okapi."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kb.lexical import FastBM25Index, RankBM25Index, make_index
from kb.loader import load_kb
from kb.retrieve import section_index_text
from kb.tokenize import content_terms, content_tokens

pytestmark = pytest.mark.unit

FIXTURE_KB = Path(__file__).resolve().parent.parent / "fixtures" / "kb"


def assert_same(corpus: list[list[str]], queries: list[list[str]]) -> None:
    fast, ref = FastBM25Index().build(corpus), RankBM25Index().build(corpus)
    assert fast.size == ref.size == len(corpus)
    for q in queries:
        a, b = fast.scores(q), ref.scores(q)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=str(q))
        # same top-10 (stable ordering so ties break identically)
        assert list(np.argsort(-a, kind="stable")[:10]) == list(np.argsort(-b, kind="stable")[:10])


def test_matches_reference_on_random_corpus():
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(300)]
    weights = [1 / (i + 1) for i in range(300)]  # Zipf: some terms in > half the docs (negative IDF floor)
    corpus = [rng.choices(vocab, weights=weights, k=rng.randint(1, 60)) for _ in range(400)]
    queries = [rng.choices(vocab, weights=weights, k=rng.randint(1, 6)) for _ in range(60)]
    queries += [["w0", "w0", "w5"], ["unknown-term"], [], ["w1", "nope", "w299"]]
    fast = FastBM25Index().build(corpus)
    from rank_bm25 import BM25Okapi

    ref = BM25Okapi(corpus)
    floored = [w for w in ref.idf if ref.idf[w] == pytest.approx(0.25 * ref.average_idf)]
    assert floored, "test corpus should contain terms above half the documents"
    assert fast.idf == pytest.approx(ref.idf)
    assert_same(corpus, queries)


def test_matches_reference_on_fixture_kb():
    if not FIXTURE_KB.is_dir():
        pytest.skip("fixtures/kb not present")
    kb = load_kb(FIXTURE_KB)
    corpus = [content_tokens(section_index_text(kb.doc(s.doc_id).title, s)) for s in kb.sections]
    queries = [content_terms(q) for q in [
        "Can I get a refund if I cancel my annual plan early?", "How do I reset my router?",
        "roaming day pass price in Mexico", "late fee for business invoices", "eSIM QR code expired",
    ]]
    assert len(corpus) > 20
    assert_same(corpus, queries)


def test_empty_corpus_and_unknown_engine():
    for eng in ("fast", "rank-bm25"):
        idx = make_index(eng).build([])
        assert idx.scores(["x"]).shape == (0,)
    with pytest.raises(ValueError, match="unknown lexical engine"):
        make_index("lucene")
