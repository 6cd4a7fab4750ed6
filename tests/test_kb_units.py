"""Answer units: sentences, list items and table rows, and their embedding index."""
from __future__ import annotations

import numpy as np
import pytest

from kb.models import Section
from kb.units import UnitIndex, table_row_sentence, units_of_text

pytestmark = pytest.mark.unit


def test_wrapped_paragraphs_list_items_and_tables_become_units():
    text = ("Refunds are paid to the card you used.\nThey take up to\nten days. Ask us if not.\n\n"
            "You can pay by:\n- card\n- bank transfer,\n  same day\n\n"
            "| Region | Unit rate | Standing charge |\n|---|---|---|\n| North | 24.86p | 45p |\n| South | 26.02p | |")
    assert units_of_text(text) == [
        "Refunds are paid to the card you used.", "They take up to ten days.", "Ask us if not.",
        "You can pay by:", "card", "bank transfer, same day",
        "North: Unit rate 24.86p; Standing charge 45p.", "South: Unit rate 26.02p."]


def test_a_row_is_read_with_its_column_names():
    assert table_row_sentence(["Card", "Annual fee"], ["**Gold**", "£120"]) == "**Gold**: Annual fee £120."
    assert table_row_sentence(["Tier"], ["Basic"]) == "Basic."


def test_long_units_are_cut_at_a_word():
    unit = units_of_text("word " * 200)[0]
    assert len(unit) <= 404 and unit.endswith(" ...")


def _section(loc: str, text: str, heading: str = "H") -> Section:
    doc, slug = loc.split("#")
    return Section(locator=loc, doc_id=doc, slug=slug, heading=heading, heading_path=["T"], text=text, order=0)


def test_unit_index_scores_units_headings_and_section_maxima(tmp_path, monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_CACHE", str(tmp_path))
    vocab = ["alpha", "beta", "gamma"]

    def embed(texts):  # one axis per word: a unit is as close as the words it shares
        out = np.array([[float(w in t.lower()) for w in vocab] for t in texts], np.float32) + 1e-6
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    secs = [_section("a#x", "Alpha here. Beta there."), _section("b#y", "Gamma only.", heading="Gamma"),
            _section("c#z", "")]
    idx = UnitIndex(secs, embed, "kb-1", "m")
    assert idx.scores("a#x", embed(["alpha"])[0]) == []  # not built yet
    idx.build()
    q = embed(["beta"])[0]
    assert idx.units("a#x") == ["Alpha here.", "Beta there."]
    assert idx.scores("a#x", q)[1] > 0.9 > idx.scores("a#x", q)[0]
    assert list(np.round(idx.section_max(q), 2)) == [1.0, 0.0, -1.0]  # no units: -1
    assert idx.heading_score("b#y", embed(["gamma"])[0]) > 0.9
    assert idx.similarity("a#x", 0, "b#y", 0) < 0.1 and idx.similarity("a#x", 9, "b#y", 0) is None
    again = UnitIndex(secs, lambda t: (_ for _ in ()).throw(AssertionError("cached")), "kb-1", "m")
    again.build()  # from the disk cache: the embedder is never called
    assert again.scores("a#x", q) == idx.scores("a#x", q)
