"""KB loading: validation problems name the file, the rest of the KB still loads."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from kb.loader import (KBFileError, KBNotFound, effective_status, load_kb, parse_document, slugify,
                       visible_to)
from kb.models import EffectiveStatus

pytestmark = pytest.mark.unit

GOOD = """---
id: good-doc
title: A good document
---
# Section one
Body one.
"""


def write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def md(front: str, body: str = "# Heading\nSome text.\n") -> str:
    return f"---\n{front.strip()}\n---\n{body}"


BAD_CASES = {
    "missing id": (md("title: No id"), "missing id"),
    "missing title": (md("id: no-title"), "missing title"),
    "unknown status": (md("id: s\ntitle: T\nstatus: retired"), "unknown status"),
    "unknown risk": (md("id: r\ntitle: T\nrisk: extreme"), "unknown risk"),
    "bad date": (md("id: d\ntitle: T\neffective_from: 2026-13-45"), "bad date"),
    "bad date text": (md("id: d2\ntitle: T\neffective_until: next tuesday"), "bad date"),
    "dates reversed": (md("id: d3\ntitle: T\neffective_from: 2026-05-01\neffective_until: 2026-01-01"), "bad dates"),
    "unreadable yaml": (md("id: y\ntitle: [unclosed"), "unreadable YAML"),
    "no front matter": ("# Just markdown\nNo front matter here.\n", "no front matter"),
    "unclosed front matter": ("---\nid: x\ntitle: T\n# Heading\n", "not closed"),
    "front matter not a mapping": (md("- a\n- b"), "must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_file_reported_with_path_and_rest_loads(tmp_path, case):
    text, reason = BAD_CASES[case]
    write(tmp_path, "good.md", GOOD)
    write(tmp_path, "sub/bad.md", text)
    kb = load_kb(tmp_path)
    assert list(kb.docs) == ["good-doc"]
    assert [s.locator for s in kb.sections] == ["good-doc#section-one"]
    fatal = [p for p in kb.problems if p.fatal]
    assert len(fatal) == 1
    assert fatal[0].path == "sub/bad.md"
    assert reason in fatal[0].reason
    with pytest.raises(KBFileError) as e:
        parse_document(tmp_path / "sub/bad.md", tmp_path)
    assert str(tmp_path / "sub/bad.md") in str(e.value) and reason in str(e.value)


def test_duplicate_id_keeps_first_reports_second(tmp_path):
    write(tmp_path, "a.md", GOOD)
    write(tmp_path, "b.md", GOOD.replace("A good document", "Another"))
    kb = load_kb(tmp_path)
    assert kb.doc("good-doc").title == "A good document"
    (p,) = kb.problems
    assert p.path == "b.md" and "duplicate id 'good-doc'" in p.reason and "a.md" in p.reason


def test_invalid_utf8_is_a_problem(tmp_path):
    write(tmp_path, "good.md", GOOD)
    (tmp_path / "bin.md").write_bytes(b"---\nid: x\ntitle: \xff\xfe\n---\n")
    kb = load_kb(tmp_path)
    assert list(kb.docs) == ["good-doc"]
    assert kb.problems[0].path == "bin.md" and "UTF-8" in kb.problems[0].reason


def test_missing_kb_raises_one_line(tmp_path):
    with pytest.raises(KBNotFound) as e:
        load_kb(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value) and "\n" not in str(e.value)
    f = write(tmp_path, "file.md", GOOD)
    with pytest.raises(KBNotFound, match="not a directory"):
        load_kb(f)


def test_sections_slugs_and_paths(tmp_path):
    write(tmp_path, "doc.md", md(
        "id: doc\ntitle: Router help\nversion: 3\napplies_to: {customer_type: personal}",
        "Intro before any heading.\n\n# Router help\n\n## Factory reset!\nHold the button.\n\n"
        "```\n# not a heading\n```\n\n## Factory reset?\nAgain.\n\n### Lights & sounds\nBlue light.\n\n"
        "## Factory reset\nThird.\n",
    ))
    kb = load_kb(tmp_path)
    assert kb.problems == []
    assert [s.slug for s in kb.sections] == ["router-help", "factory-reset", "factory-reset-2", "lights-sounds", "factory-reset-3"]
    pre, first, second, sub, third = kb.sections
    assert pre.heading == "Router help" and pre.text == "Intro before any heading."
    assert "# not a heading" in first.text  # fenced code does not split
    assert sub.heading_path == ["Router help", "Factory reset?"]
    assert first.heading_path == ["Router help"]
    assert kb.section("doc#factory-reset-2") is second and kb.section("doc#nope") is None
    d = kb.doc("doc")
    assert d.version == "3" and d.applies_to == {"customer_type": "personal"} and d.acl == ["public"]
    assert d.status == "active" and d.risk == "low" and d.path == "doc.md"


def test_slugify():
    assert slugify("Factory reset of the Home Router") == "factory-reset-of-the-home-router"
    assert slugify("  What's new? (2026) ") == "whats-new-2026"
    assert slugify("退款 规则") == "退款-规则"
    assert slugify("!!!") == "section"


def test_kb_version_is_content_hash(tmp_path):
    write(tmp_path, "a.md", GOOD)
    v1 = load_kb(tmp_path).kb_version
    assert v1.startswith("kb-") and len(v1) == 15
    assert load_kb(tmp_path).kb_version == v1
    write(tmp_path, "a.md", GOOD.replace("Body one", "Body two"))
    assert load_kb(tmp_path).kb_version != v1


def test_effective_status_dates_and_supersession(tmp_path):
    write(tmp_path, "new.md", md("id: new\ntitle: New\neffective_from: 2026-02-01\nsupersedes: [old]"))
    write(tmp_path, "old.md", md("id: old\ntitle: Old\neffective_until: 2026-12-31"))
    write(tmp_path, "exp.md", md("id: exp\ntitle: Expired\neffective_until: 2025-12-31"))
    write(tmp_path, "dep.md", md("id: dep\ntitle: Dep\nstatus: deprecated"))
    write(tmp_path, "dr.md", md("id: dr\ntitle: Draft\nstatus: draft"))
    kb = load_kb(tmp_path)
    st = lambda i, d: effective_status(kb.doc(i), d, kb)  # noqa: E731
    jan, mar = dt.date(2026, 1, 15), dt.date(2026, 3, 1)
    assert st("new", jan) == EffectiveStatus.draft  # not yet in force
    assert st("old", jan) == EffectiveStatus.active  # its successor is not active yet
    assert st("new", mar) == EffectiveStatus.active
    assert st("old", mar) == EffectiveStatus.deprecated  # superseded by an active doc
    assert st("exp", mar) == EffectiveStatus.deprecated
    assert st("dep", mar) == EffectiveStatus.deprecated and st("dr", mar) == EffectiveStatus.draft
    assert st("new", dt.date(2026, 2, 1)) == EffectiveStatus.active  # boundaries are inclusive


def test_supersession_cycle_terminates(tmp_path):
    write(tmp_path, "a.md", md("id: a\ntitle: A\nsupersedes: [b]"))
    write(tmp_path, "b.md", md("id: b\ntitle: B\nsupersedes: [a]"))
    kb = load_kb(tmp_path)
    assert effective_status(kb.doc("a"), dt.date(2026, 1, 1), kb) in set(EffectiveStatus)


def test_visible_to():
    from kb.models import Document

    assert visible_to(Document(id="a", title="A"), "public")
    agent_only = Document(id="b", title="B", acl=["agent"])
    assert visible_to(agent_only, "agent") and not visible_to(agent_only, "public")
    assert visible_to(Document(id="c", title="C", acl=["public", "agent"]), "supervisor")
