"""The retrieval bench runs the real path on a synthetic KB and reports its numbers."""
from __future__ import annotations

import json

import pytest

from kb.bench import cli
from kb.loader import load_kb
from kb.synthetic import synthetic_queries, write_synthetic_kb


@pytest.mark.unit
def test_synthetic_kb_is_deterministic_and_loads(tmp_path):
    a = load_kb(write_synthetic_kb(tmp_path / "a", 120, seed=3))
    b = load_kb(write_synthetic_kb(tmp_path / "b", 120, seed=3))
    assert len(a.sections) == 120 and a.problems == []
    assert a.kb_version == b.kb_version
    assert load_kb(write_synthetic_kb(tmp_path / "c", 120, seed=4)).kb_version != a.kb_version
    assert any(d.acl == ["agent"] for d in a.docs.values())
    assert synthetic_queries(5) == synthetic_queries(5)


@pytest.mark.unit
def test_bench_json_last_line(capsys):
    assert cli(["retrieval", "--sections", "300", "--queries", "20", "--no-dense", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("p50_ms", "p95_ms", "build_s", "rss_mb", "cores", "sections", "lexical_engine"):
        assert key in out
    assert out["sections"] == 300 and out["lexical_engine"] == "fast" and out["p95_ms"] >= out["p50_ms"] > 0
    assert out["answered_frac"] > 0.5


@pytest.mark.unit
def test_bench_bad_input(capsys):
    assert cli(["--sections", "0"]) == 2
    assert "error:" in capsys.readouterr().err
