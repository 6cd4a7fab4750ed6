"""Answer units: the pieces of a section that can be spoken on their own. A sentence of prose, one
list item, or one table row read as a sentence ("North: Unit rate 24.5p; Standing charge 45p").

Each unit is embedded once (with its heading, for context) so a question can be matched to the
sentence or row that answers it, not only to the section as a whole."""
from __future__ import annotations

import re
import sys
import threading

import numpy as np

from .cache import cache_root, load_embeddings, save_embeddings
from .models import Section

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*$£€])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
MAX_UNIT_CHARS = 400  # a unit is something one says in a breath; longer runs are cut at a word


def split_sentences(line: str) -> list[str]:
    return [s.strip() for s in _SENT_SPLIT.split(line) if s.strip()]


_LABEL = re.compile(r"^\W*([^:;,.!?]{1,30}?)\W*:\s")


def unit_label(unit: str) -> str | None:
    """The label a unit opens with: a table row's first cell ("B" in "B: Annual charge £1,709.81.")
    or a labelled line ("Where: in the Quayside Kitchen")."""
    m = _LABEL.match(unit)
    return m.group(1).strip() if m and m.group(1).strip() else None


def _cells(line: str) -> list[str]:
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]


def table_row_sentence(header: list[str], row: list[str]) -> str:
    """One row read with its column names: 'Silver: Annual fee £30; Cash withdrawal fee 2%.'"""
    pairs = [f"{h} {c}".strip() for h, c in zip(header[1:], row[1:]) if c]
    lead = row[0] if row else ""
    body = "; ".join(pairs)
    text = f"{lead}: {body}" if lead and body else (lead or body)
    return text if text.endswith((".", "!", "?")) else text + "."


def _table(lines: list[str]) -> list[str]:
    rows = [_cells(ln) for ln in lines if not _TABLE_RULE.match(ln)]
    if len(rows) < 2:
        return [" ".join(c for r in rows for c in r if c)] if rows else []
    header = rows[0]
    return [table_row_sentence(header, r) for r in rows[1:] if any(r)]


def _cap(unit: str) -> str:
    if len(unit) <= MAX_UNIT_CHARS:
        return unit
    return unit[:MAX_UNIT_CHARS].rsplit(" ", 1)[0] + " ..."


def _blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Group lines into ("table", rows), ("item", [text]) and ("para", [text]) blocks; a paragraph
    or list item hard-wrapped over several lines is one block."""
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            blocks.append(("gap", []))
        elif stripped.startswith("|"):
            if blocks and blocks[-1][0] == "table":
                blocks[-1][1].append(line)
            else:
                blocks.append(("table", [line]))
        elif _LIST_ITEM.match(line):
            blocks.append(("item", [_LIST_ITEM.sub("", line).strip()]))
        elif blocks and blocks[-1][0] in ("para", "item") and line[:1].isspace() or \
                (blocks and blocks[-1][0] == "para"):
            blocks[-1][1].append(stripped)  # a wrapped line continues its paragraph or item
        else:
            blocks.append(("para", [stripped]))
    return [b for b in blocks if b[0] != "gap"]


def units_of_text(text: str) -> list[str]:
    """Prose sentences, list items and table rows, in their order in the text."""
    out: list[str] = []
    for kind, lines in _blocks(text.splitlines()):
        if kind == "table":
            out.extend(_table(lines))
        else:
            out.extend(split_sentences(" ".join(lines)))
    return [_cap(u) for u in out if re.search(r"\w", u)]


def section_units(s: Section) -> list[str]:
    return units_of_text(s.text)


def unit_embed_text(s: Section, unit: str) -> str:
    return f"{s.heading}: {unit}"


class UnitIndex:
    """Embeddings of every unit of a KB, built once (and cached on disk with the KB version)."""

    def __init__(self, sections: list[Section], embed, kb_version: str, model_id: str):
        self._units = {s.locator: section_units(s) for s in sections}
        self._rows: dict[str, tuple[int, int]] = {}
        texts: list[str] = []
        for s in sections:
            start = len(texts)
            texts.extend(unit_embed_text(s, u) for u in self._units[s.locator])
            self._rows[s.locator] = (start, len(texts))
        # after the units, one row per section for its heading alone (FAQ headings are questions)
        self._heading_row = {s.locator: len(texts) + i for i, s in enumerate(sections)}
        texts.extend(s.heading for s in sections)
        self._texts, self._embed = texts, embed
        self._key, self._model_id = f"units-{kb_version}", model_id
        self._matrix: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._empty: np.ndarray | None = None
        self._lock = threading.Lock()

    def units(self, locator: str) -> list[str]:
        return self._units.get(locator, [])

    def build(self, progress: bool = False) -> None:
        with self._lock:
            if self._matrix is not None:
                return
            root = cache_root()
            arr, _ = load_embeddings(root, self._key, self._model_id, self._texts)
            if arr is None:
                arr = self._embed_all(progress)
                try:
                    save_embeddings(root, self._key, self._model_id, self._texts, arr)
                except OSError:
                    pass  # a read-only cache only costs the next start this work again
            self._matrix = arr

    def _embed_all(self, progress: bool) -> np.ndarray:
        bar = None
        if progress and len(self._texts) > 300:
            from tqdm import tqdm  # optional: only for a progress bar

            bar = tqdm(total=len(self._texts), desc="embedding KB sentences", unit="sent", file=sys.stderr)
        chunks = []
        for i in range(0, len(self._texts), 256):
            chunks.append(self._embed(self._texts[i:i + 256]))
            if bar:
                bar.update(len(self._texts[i:i + 256]))
        if bar:
            bar.close()
        return np.concatenate(chunks) if chunks else np.zeros((0, 384), np.float32)

    def section_max(self, query_vec: np.ndarray) -> np.ndarray | None:
        """Per section (KB order), the cosine of the question to its closest unit (-1: no units)."""
        if self._matrix is None:
            return None
        if self._starts is None:
            bounds = list(self._rows.values())  # units only: headings are scored apart
            self._starts = np.array([a for a, b in bounds], dtype=np.int64)
            self._empty = np.array([a == b for a, b in bounds])
        if not len(self._matrix):
            return np.full(len(self._starts), -1.0, dtype=np.float32)
        sims = self._matrix @ query_vec
        starts = np.minimum(self._starts, len(sims) - 1)
        out = np.maximum.reduceat(sims, starts)
        out[self._empty] = -1.0
        return out

    def similarity(self, a: str, i: int, b: str, j: int) -> float | None:
        """Cosine between unit i of section a and unit j of section b (None when unknown)."""
        if self._matrix is None or a not in self._rows or b not in self._rows:
            return None
        ra, rb = self._rows[a][0] + i, self._rows[b][0] + j
        if ra >= self._rows[a][1] or rb >= self._rows[b][1]:
            return None
        return float(self._matrix[ra] @ self._matrix[rb])

    def heading_score(self, locator: str, query_vec: np.ndarray) -> float | None:
        if self._matrix is None or locator not in self._heading_row:
            return None
        return round(float(self._matrix[self._heading_row[locator]] @ query_vec), 4)

    def scores(self, locator: str, query_vec: np.ndarray) -> list[float]:
        """Cosine of the question to each unit of the section (empty before `build`)."""
        if self._matrix is None or locator not in self._rows:
            return []
        a, b = self._rows[locator]
        return [round(float(x), 4) for x in self._matrix[a:b] @ query_vec]
