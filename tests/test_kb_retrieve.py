"""Hybrid retrieval: ACL isolation, status/date, facets, fusion, fallbacks (the embedding cache has its own tests)."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from kb.embed import EmbeddingUnavailable
from kb.loader import load_kb
from kb.models import EffectiveStatus, RetrievalUnavailable
from kb.retrieve import Retriever, rrf
from tests.retrieve_fixtures import DAY, dense, kb_dirs, lexical, QUESTION, scores


# ----------------------------------------------------------------------------- ACL


@pytest.mark.unit
def test_restricted_doc_never_reaches_public_but_is_best_for_agent(lexical):
    agent = lexical.search(QUESTION, role="agent", on_date=DAY)
    assert agent.hits[0].doc_id == "internal-refund-override"  # it really is the best match
    public = lexical.search(QUESTION, role="public", on_date=DAY, k=50)
    assert "internal-refund-override" not in {h.doc_id for h in public.hits}
    assert public.visible_sections == agent.visible_sections - 1
    assert all("override" not in h.text.lower() for h in public.hits)


@pytest.mark.unit
def test_restricted_doc_does_not_change_public_scores(kb_dirs):
    with_secret = Retriever(load_kb(kb_dirs[0]), dense=False)
    without = Retriever(load_kb(kb_dirs[1]), dense=False)
    for q in (QUESTION, "refund override code", "router reset", "annual plan cancel fee"):
        a = with_secret.search(q, role="public", on_date=DAY, k=50)
        b = without.search(q, role="public", on_date=DAY, k=50)
        assert scores(a) == scores(b)
        assert a.visible_sections == b.visible_sections
        assert a.query_terms == b.query_terms


@pytest.mark.slow
def test_restricted_doc_does_not_change_public_scores_dense(kb_dirs, dense, tmp_path):
    without = Retriever(load_kb(kb_dirs[1]), cache_dir=tmp_path)
    for q in (QUESTION, "override code for refunds"):
        a = dense.search(q, role="public", on_date=DAY, k=50)
        b = without.search(q, role="public", on_date=DAY, k=50)
        assert set(scores(a)) == set(scores(b))
        for loc, (ls, ds, lr, dr, fr) in scores(a).items():
            ls2, ds2, lr2, dr2, fr2 = scores(b)[loc]
            assert (ls, lr, dr, fr) == (ls2, lr2, dr2, fr2)
            assert ds == pytest.approx(ds2, abs=1e-5)


@pytest.mark.unit
def test_vocabulary_excludes_restricted_words(lexical):
    public, agent = lexical.vocabulary("public"), lexical.vocabulary("agent")
    assert "Sentinelworks" in agent and "Sentinelworks" not in public
    assert not any("override" == w.lower() for w in public)
    assert "router" in {w.lower() for w in public} and "Hub" in public


# ----------------------------------------------------------------------------- status, dates


@pytest.mark.unit
def test_outdated_and_future_material_returned_with_status(lexical):
    def status_of(q, doc_id, day):
        res = lexical.search(q, on_date=day, k=50)
        return next(h.status for h in res.hits if h.doc_id == doc_id)

    assert status_of("loyalty points", "loyalty-draft", DAY) == EffectiveStatus.draft
    assert status_of("summer double data", "summer-promo", DAY) == EffectiveStatus.draft  # future
    assert status_of("summer double data", "summer-promo", dt.date(2026, 7, 15)) == EffectiveStatus.active
    assert status_of("free roaming europe", "spring-promo", DAY) == EffectiveStatus.deprecated  # expired
    assert status_of("refunded within 14 days", "refund-old", DAY) == EffectiveStatus.deprecated  # superseded
    assert status_of("refunded within 14 days", "refund-old", dt.date(2026, 1, 10)) == EffectiveStatus.active


# ----------------------------------------------------------------------------- facets


@pytest.mark.unit
def test_facets_exclude_other_values_before_ranking(lexical):
    q = "fee for ending early"
    none = {h.doc_id for h in lexical.search(q, on_date=DAY, k=50).hits}
    assert {"refund-personal", "refund-business"} <= none
    biz = lexical.search(q, facets={"customer_type": "business"}, on_date=DAY, k=50)
    ids = {h.doc_id for h in biz.hits}
    assert "refund-business" in ids and "refund-personal" not in ids
    # ranks are 1..n among what is left: the excluded doc took no rank
    assert sorted(h.lexical_rank for h in biz.hits if h.lexical_rank) == list(range(1, len([h for h in biz.hits if h.lexical_rank]) + 1))
    # a facet key a document does not set does not exclude it
    assert "refund-old" in {h.doc_id for h in lexical.search("refund fee", facets={"customer_type": "business"}, on_date=DAY, k=50).hits}
    assert "refund-personal" in {h.doc_id for h in lexical.search(q, facets={"customer_type": "Personal"}, on_date=DAY, k=50).hits}


# ----------------------------------------------------------------------------- fusion, terms


@pytest.mark.unit
def test_rrf_arithmetic():
    assert rrf([1, 3], 60) == pytest.approx(1 / 61 + 1 / 63)
    assert rrf([None, 2], 60) == pytest.approx(1 / 62)
    assert rrf([None, None]) == 0.0
    assert rrf([1, 1], 10) == pytest.approx(2 / 11)


@pytest.mark.slow
def test_hits_carry_fused_ranks_and_scores(dense):
    res = dense.search(QUESTION, on_date=DAY, k=50)
    assert not res.lexical_only and res.hits
    prev = None
    for i, h in enumerate(res.hits, 1):
        assert h.fused_rank == i
        assert h.fused_score == pytest.approx(rrf([h.lexical_rank, h.dense_rank], 60))
        assert h.dense_score is not None and -1.0 <= h.dense_score <= 1.0
        assert (h.lexical_rank is None) == (h.lexical_score == 0.0)
        if prev is not None:
            assert h.fused_score <= prev
        prev = h.fused_score
    assert any(h.lexical_rank and h.dense_rank for h in res.hits)
    top = res.hits[0]
    assert top.doc_id == "refund-personal" and top.status == EffectiveStatus.active
    assert top.version == "2026-02" and top.risk == "medium" and top.handoff_team == "billing"


@pytest.mark.slow
def test_rrf_k_is_configurable(kb_dirs, dense):
    r = Retriever(load_kb(kb_dirs[0]), cache_dir=dense.cache_dir, rrf_k=5)
    h = r.search(QUESTION, on_date=DAY).hits[0]
    assert h.fused_score == pytest.approx(rrf([h.lexical_rank, h.dense_rank], 5))


@pytest.mark.unit
def test_covered_and_missing_terms(lexical):
    res = lexical.search("refund within 10 business days for my router", on_date=DAY, k=50)
    assert res.query_terms == ["refund", "within", "10", "business", "day", "router"]
    money = next(h for h in res.hits if h.locator == "refund-personal#when-the-money-arrives")
    assert {"refund", "10", "day"} <= set(money.covered_terms)
    assert "router" in money.missing_terms
    assert set(money.covered_terms) | set(money.missing_terms) == set(res.query_terms)
    # a term found only in the document title counts as covered
    who = lexical.search("personal annual refund cancellation", on_date=DAY, k=50)
    h = next(h for h in who.hits if h.locator == "refund-personal#when-the-money-arrives")
    assert "personal" in h.covered_terms and "annual" in h.covered_terms


@pytest.mark.unit
def test_nothing_relevant_is_an_empty_list(lexical):
    res = lexical.search("xylophone zebra quantum", on_date=DAY)
    assert res.hits == [] and res.visible_sections > 0
    assert lexical.search("", on_date=DAY).hits == []


# ----------------------------------------------------------------------------- failures


@pytest.mark.unit
def test_retrieval_unavailable_fault_and_broken_index(kb_dirs):
    r = Retriever(load_kb(kb_dirs[0]), dense=False)
    with pytest.raises(RetrievalUnavailable, match="fault"):
        r.search(QUESTION, faults=["retrieval_unavailable"])
    r.search(QUESTION)  # builds the public view
    view = next(iter(r._views.values()))
    view.sections = view.sections[:-1]  # simulate a corrupted index
    with pytest.raises(RetrievalUnavailable, match="index corrupt"):
        r.search(QUESTION)
    with pytest.raises(RetrievalUnavailable, match="not loaded"):
        Retriever(None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_embedding_fault_gives_lexical_only(dense):
    res = dense.search(QUESTION, on_date=DAY, faults=["embedding_unavailable"])
    assert res.lexical_only and "lexical-only" in res.degraded_reason
    assert res.hits and all(h.dense_score is None and h.dense_rank is None for h in res.hits)
    assert res.hits[0].doc_id in {"refund-personal", "refund-old"}
    normal = dense.search(QUESTION, on_date=DAY)
    assert not normal.lexical_only and normal.degraded_reason is None


@pytest.mark.unit
def test_dense_model_failing_to_load_falls_back(kb_dirs, monkeypatch, tmp_path):
    import kb.retrieve as retrieve

    def broken():
        raise EmbeddingUnavailable("MiniLM failed to load: simulated")

    monkeypatch.setattr(retrieve, "load_embedder", broken)
    r = Retriever(load_kb(kb_dirs[0]), cache_dir=tmp_path)
    assert not r.dense_available and "simulated" in r.dense_error
    res = r.search(QUESTION, on_date=DAY)
    assert res.lexical_only and "simulated" in res.degraded_reason
    assert res.hits[0].doc_id == "refund-personal" and res.hits[0].dense_score is None
    with pytest.raises(EmbeddingUnavailable):
        r.embed(["hello"])


@pytest.mark.unit
def test_single_section_and_chinese_kb(tmp_path):
    # one section: every term's BM25 IDF is negative (floored); it must still be found
    (tmp_path / "zh.md").write_text(
        "---\nid: zh-refund\ntitle: 退款政策\n---\n# 年度套餐退款\n取消年度套餐后，退款将在5到10个工作日内退回原支付方式。\n",
        encoding="utf-8",
    )
    r = Retriever(load_kb(tmp_path), dense=False)
    res = r.search("我想取消套餐，退款多久到账？")
    assert [h.locator for h in res.hits] == ["zh-refund#年度套餐退款"]
    assert {"取消", "套餐", "退款"} <= set(res.hits[0].covered_terms)
    assert r.search("router").hits == []


@pytest.mark.unit
def test_initials_of_names_are_indexed():
    from kb.retrieve import initialisms

    text = ("Calls to Zone 2, the United Kingdom and EU countries, cost 12 cents. Direct Debit is free. "
            "Visit the Market Street store.")
    assert initialisms(text) == ["ms", "uk"]  # "Direct Debit" opens a sentence: not a name run


@pytest.mark.unit
def test_a_turns_repeated_words_are_embedded_once_and_alike():
    from kb.embed import load_embedder

    emb = load_embedder(threads=1)
    emb._recent.clear()
    texts = ["How much is the late fee?", "the late fee", "HOW MUCH IS THE LATE FEE?"]
    fresh = emb._embed_all(texts)
    runs = []
    real_run = emb._run
    emb._run = lambda batch: runs.append(list(batch)) or real_run(batch)  # type: ignore[method-assign]
    first = emb.embed(texts)
    again = emb.embed(["the late fee", "how much is the late fee?"])
    # the tokenizer is uncased: the third text is the first one; one model run for the first call, none after
    assert len(runs) == 1 and sorted(runs[0]) == ["How much is the late fee?", "the late fee"]
    assert np.allclose(first, fresh, atol=1e-5)
    assert np.allclose(again, fresh[[1, 0]], atol=1e-5)


@pytest.mark.unit
def test_a_clause_embedded_alone_is_remembered_beside_a_longer_one():
    # the tokenizer pads a batch to its longest text: the padding must not make a second key
    from kb.embed import load_embedder

    emb = load_embedder(threads=1)
    emb._recent.clear()
    runs: list[list[str]] = []
    real_run = emb._run
    emb._run = lambda batch: runs.append(list(batch)) or real_run(batch)  # type: ignore[method-assign]
    alone = emb.embed(["how much notice do i need to give"])
    both = emb.embed(["i want to cancel my contract and move to another network", "how much notice do i need to give"])
    assert runs == [["how much notice do i need to give"], ["i want to cancel my contract and move to another network"]]
    assert np.allclose(both[1], alone[0], atol=1e-5)
