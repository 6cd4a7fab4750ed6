"""`run.py bench retrieval`: build a synthetic KB of N sections and time queries.

Everything goes through the real path: .md files on disk -> `load_kb` -> `Retriever`
(real MiniLM embeddings unless --no-dense) -> `search`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import cache as emb_cache
from .measure import peak_rss_mb, percentile
from .embed import load_embedder
from .loader import load_kb
from .retrieve import Retriever, section_embed_text
from .synthetic import synthetic_queries, write_synthetic_kb

__all__ = ["cli", "run_bench"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py bench retrieval", description=__doc__.splitlines()[0])
    p.add_argument("--sections", type=int, default=10000, help="synthetic KB size (default 10000)")
    p.add_argument("--queries", type=int, default=200, help="queries to time (default 200)")
    p.add_argument("--no-dense", action="store_true", help="lexical only (skip MiniLM)")
    p.add_argument("--engine", choices=["fast", "rank-bm25"], default="fast", help="lexical engine")
    p.add_argument("--role", default="public", help="caller role (default public)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="embedding cache (default: a fresh temp dir, so the build really embeds)")
    p.add_argument("--dense-sample", type=int, default=None, metavar="N",
                   help="embed only N sections with the real model (to measure its rate) and fill the "
                        "rest with random unit vectors; queries still run the real model and the full "
                        "matmul. For timing 100k-section queries without minutes of embedding; reported "
                        "in the output as dense_sample")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return p


def _prefill_cache(kb, cache_dir: Path, sample: int, seed: int) -> dict:
    """Real embeddings for `sample` sections, random unit vectors for the rest, written to
    the cache the Retriever reads, so its start skips embedding the rest."""
    emb = load_embedder()
    texts = [section_embed_text(kb.docs[s.doc_id].title, s) for s in kb.sections]
    n = min(sample, len(texts))
    t = time.perf_counter()
    real = emb.embed(texts[:n])
    rate = n / max(time.perf_counter() - t, 1e-9)
    rng = np.random.default_rng(seed)
    fill = rng.standard_normal((len(texts) - n, real.shape[1])).astype(np.float32)
    fill /= np.linalg.norm(fill, axis=1, keepdims=True)
    emb_cache.save_embeddings(cache_dir, kb.kb_version, emb.model_id, texts, np.vstack([real, fill]))
    return {"dense_sample": n, "embed_per_s": round(rate, 1), "embed_all_est_s": round(len(texts) / rate, 1)}


def run_bench(sections: int, queries: int, dense: bool, engine: str, role: str = "public",
              seed: int = 7, cache_dir: Path | None = None, dense_sample: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as tmp:
        t0 = time.perf_counter()
        write_synthetic_kb(Path(tmp) / "kb", sections, seed=seed)
        t1 = time.perf_counter()
        kb = load_kb(Path(tmp) / "kb")
        cache_dir = cache_dir or Path(tmp) / "cache"
        extra: dict = {}
        if dense and dense_sample is not None:
            extra = _prefill_cache(kb, cache_dir, dense_sample, seed)
        t2 = time.perf_counter()
        r = Retriever(kb, dense=dense, cache_dir=cache_dir, progress=True, lexical_engine=engine)
        if dense and not r.dense_available:
            raise RuntimeError(f"dense model unavailable: {r.dense_error}")
        r.search("warm up the index", role=role)  # builds the role's lexical view lazily
        t3 = time.perf_counter()
        qs = synthetic_queries(queries)
        lat, hits = [], 0
        for q in qs:
            a = time.perf_counter()
            res = r.search(q, role=role)
            lat.append((time.perf_counter() - a) * 1000)
            hits += bool(res.hits)
        return {
            "sections": len(kb.sections), "docs": len(kb.docs), "visible_sections": res.visible_sections,
            "lexical_engine": engine, "dense": dense, "queries": queries,
            "write_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2), "build_s": round(t3 - t2, 2),
            "p50_ms": round(percentile(lat, 50) or 0.0, 2), "p95_ms": round(percentile(lat, 95) or 0.0, 2),
            "mean_ms": round(sum(lat) / len(lat), 2) if lat else 0.0,
            "answered_frac": round(hits / max(1, queries), 3), "rss_mb": peak_rss_mb(),
            "cores": os.cpu_count() or 1, "load_problems": len(kb.problems),
            "embed_cache": r.cache_status, **extra,
        }


def cli(argv: list[str]) -> int:
    if argv and argv[0] == "retrieval":  # also callable as `bench retrieval ...`
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.sections < 1 or args.queries < 1:
        print("error: --sections and --queries must be at least 1", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        out = run_bench(args.sections, args.queries, not args.no_dense, args.engine, args.role,
                        args.seed, args.cache_dir, args.dense_sample)
    except (RuntimeError, OSError) as e:
        print(f"error: retrieval bench failed: {e}", file=sys.stderr)
        return 1
    print(f"sections {out['sections']} ({out['docs']} docs, {out['visible_sections']} visible to {args.role}), "
          f"engine {out['lexical_engine']}, dense {'on' if out['dense'] else 'off'}")
    print(f"write {out['write_s']} s, load {out['load_s']} s, index build {out['build_s']} s"
          f" (embedding cache: {out['embed_cache']})")
    if "dense_sample" in out:
        print(f"dense sample: {out['dense_sample']} sections really embedded at {out['embed_per_s']}/s "
              f"(all would take ~{out['embed_all_est_s']} s); the rest are random unit vectors")
    print(f"query p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms over {out['queries']} queries")
    print(f"peak RSS {out['rss_mb']} MB, cores {out['cores']}")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
