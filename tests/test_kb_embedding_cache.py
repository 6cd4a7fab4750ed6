"""The embedding cache: reused on a second start, rebuilt when corrupt or stale, its checks and
where it lives."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kb import cache as emb_cache
from kb.loader import load_kb
from kb.retrieve import Retriever
from tests.retrieve_fixtures import DAY, kb_dirs, QUESTION, scores


# ----------------------------------------------------------------------------- cache


@pytest.mark.slow
def test_cache_reused_on_second_start_and_corruption_rebuilt(kb_dirs, tmp_path, monkeypatch):
    from kb.embed import Embedder

    kb = load_kb(kb_dirs[0])
    first = Retriever(kb, cache_dir=tmp_path)
    assert first.cache_status == "miss" and first.dense_available
    (npy,) = list((tmp_path / "embeddings").glob("*.npy"))
    assert npy.name.startswith(kb.kb_version)
    expected = first.search(QUESTION, on_date=DAY)

    real_embed = Embedder.embed
    calls: list[int] = []

    def counting(self, texts, progress=None):
        calls.append(len(texts))
        return real_embed(self, texts, progress)

    monkeypatch.setattr(Embedder, "embed", counting)
    second = Retriever(kb, cache_dir=tmp_path)
    assert second.cache_status == "hit" and calls == []  # no section was re-embedded
    assert scores(second.search(QUESTION, on_date=DAY)) == scores(expected)
    assert calls == [1]  # only the query

    # flip bytes inside the array: checksum catches it, sections are re-embedded
    raw = bytearray(npy.read_bytes())
    raw[-8:] = b"\x00\x00\xc0\x7f" * 2
    npy.write_bytes(bytes(raw))
    calls.clear()
    third = Retriever(kb, cache_dir=tmp_path)
    assert third.cache_status == "rebuilt" and calls == [len(kb.sections)]
    assert scores(third.search(QUESTION, on_date=DAY)).keys() == scores(expected).keys()

    # a manifest that lies about the shape is not trusted either
    man = npy.with_suffix(".json")
    m = json.loads(man.read_text())
    m["dim"] = 12
    man.write_text(json.dumps(m))
    arr, why = emb_cache.load_embeddings(tmp_path, kb.kb_version, third._embedder.model_id,
                                         [f"x{i}" for i in range(len(kb.sections))])
    assert arr is None and why.startswith(("corrupt", "stale"))


@pytest.mark.unit
def test_cache_roundtrip_and_checks(tmp_path):
    texts = ["a", "b", "c"]
    arr = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    emb_cache.save_embeddings(tmp_path, "kb-abc", "model", texts, arr)
    got, why = emb_cache.load_embeddings(tmp_path, "kb-abc", "model", texts)
    assert why == "hit" and np.array_equal(got, arr)
    assert emb_cache.load_embeddings(tmp_path, "kb-abc", "model", ["a", "b", "d"])[1].startswith("stale")
    assert emb_cache.load_embeddings(tmp_path, "kb-other", "model", texts)[1] == "miss"
    npy, _ = emb_cache.cache_paths(tmp_path, "kb-abc", "model")
    npy.write_bytes(npy.read_bytes()[:-10])  # truncated
    assert emb_cache.load_embeddings(tmp_path, "kb-abc", "model", texts)[0] is None


@pytest.mark.unit
def test_cache_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICE_AGENT_CACHE", str(tmp_path))
    assert emb_cache.cache_root() == tmp_path
    monkeypatch.delenv("VOICE_AGENT_CACHE")
    assert emb_cache.cache_root() == Path.home() / ".cache" / "voice_agent"
