"""Load a Markdown knowledge base (CONTRACT §1): front matter, validation, sections.

A bad file never stops the load: it becomes a `LoadProblem` naming the file and the
reason, and every other file still loads.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .front_matter import KBFileError, read_document, split_front_matter
from .models import Document, EffectiveStatus, LoadProblem, Section
from .screen import quarantine
from .sizes import MAX_FILE_BYTES, split_long_sections

__all__ = [
    "KnowledgeBase", "KBNotFound", "KBFileError", "load_kb", "parse_document", "slugify",
    "effective_status", "visible_to", "kb_version_of", "md_files",
]

_HEADING_RE = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


class KBNotFound(Exception):
    """The KB path is missing or not a directory."""


def kb_dir_error(path: str | Path) -> str | None:
    """The one-line error every command gives for a KB path that is not a directory, else None."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return f"{p}: knowledge base directory not found"
    if next(p.rglob("*.md"), None) is None:
        return f"{p}: no loadable documents in the knowledge base"
    return None


@dataclass
class KnowledgeBase:
    root: Path
    docs: dict[str, Document]
    sections: list[Section]
    problems: list[LoadProblem]
    kb_version: str
    # id -> ids of the documents that list it in `supersedes`
    superseded_by: dict[str, list[str]] = field(default_factory=dict)
    _by_locator: dict[str, Section] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_locator = {s.locator: s for s in self.sections}
        sup: dict[str, list[str]] = {}
        for d in self.docs.values():
            for old in d.supersedes:
                sup.setdefault(old, []).append(d.id)
        self.superseded_by = sup

    def doc(self, doc_id: str) -> Document:
        try:
            return self.docs[doc_id]
        except KeyError:
            raise KeyError(f"no document with id {doc_id!r} in {self.root}") from None

    def section(self, locator: str) -> Section | None:
        return self._by_locator.get(locator)


def slugify(heading: str) -> str:
    """GitHub-style anchor: lowercase, punctuation dropped, spaces -> '-'. Keeps non-Latin
    letters (Chinese headings stay readable); never returns an empty slug."""
    s = unicodedata.normalize("NFKC", heading).strip().lower()
    s = re.sub(r"[^\w\s-]", "", s)  # \w is Unicode-aware: keeps CJK, drops punctuation
    s = re.sub(r"[\s_]+", "-", s)
    s = re.sub(r"-{2,}", "-", s).strip("-")
    return s or "section"


def visible_to(doc: Document, role: str) -> bool:
    return "public" in doc.acl or role in doc.acl


def effective_status(doc: Document, on_date: dt.date, kb: KnowledgeBase | None = None) -> EffectiveStatus:
    """Status on `on_date`: declared status, then dates, then supersession by an active doc."""
    return _effective(doc, on_date, kb, frozenset())


def _effective(doc: Document, on_date: dt.date, kb: KnowledgeBase | None, seen: frozenset[str]) -> EffectiveStatus:
    if doc.status == "deprecated":
        return EffectiveStatus.deprecated
    if doc.status == "draft":
        return EffectiveStatus.draft
    if doc.effective_until is not None and on_date > doc.effective_until:
        return EffectiveStatus.deprecated
    if doc.effective_from is not None and on_date < doc.effective_from:
        return EffectiveStatus.draft
    if kb is not None:
        seen = seen | {doc.id}
        for newer_id in kb.superseded_by.get(doc.id, ()):
            newer = kb.docs.get(newer_id)
            if newer is None or newer_id in seen:  # a supersession cycle must not recurse forever
                continue
            if _effective(newer, on_date, kb, seen) == EffectiveStatus.active:
                return EffectiveStatus.deprecated
    return EffectiveStatus.active


# ---------------------------------------------------------------------------- parsing


def _sections(doc: Document, body: str) -> list[Section]:
    """Split at headings. Text before the first heading becomes a section named after
    the title; headings inside fenced code do not split; duplicate slugs get -2, -3."""
    raw: list[tuple[int, str, list[str]]] = []  # (level, heading, lines)
    cur: tuple[int, str, list[str]] = (0, doc.title, [])
    in_fence = False
    for line in body.split("\n"):
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING_RE.match(line)
        if m:
            raw.append(cur)
            cur = (len(m.group(1)), m.group(2).strip(), [])
        else:
            cur[2].append(line)
    raw.append(cur)

    out: list[Section] = []
    used: dict[str, int] = {}
    stack: list[tuple[int, str]] = []  # enclosing headings (level, text)
    for level, heading, lines in raw:
        text = "\n".join(lines).strip()
        if level == 0 and not text:
            continue  # nothing before the first heading
        while stack and stack[-1][0] >= level > 0:
            stack.pop()
        path = [doc.title] + [h for _, h in stack if h != doc.title]
        if level > 0:
            stack.append((level, heading))
        base = slugify(heading)
        n = used.get(base, 0) + 1
        used[base] = n
        slug = base if n == 1 else f"{base}-{n}"
        if not text:
            continue  # a heading with only sub-headings under it: nothing to retrieve or cite
        out.append(
            Section(
                locator=f"{doc.id}#{slug}", doc_id=doc.id, slug=slug, heading=heading,
                heading_path=path, text=text, order=len(out),
            )
        )
    return out


def parse_document(path: Path, root: Path) -> tuple[Document, list[Section]]:
    """Parse one file; raises `KBFileError(path, reason)` when it is malformed."""
    doc, sections, _ = _parse(Path(path), Path(root))
    return doc, sections


def _parse(path: Path, root: Path) -> tuple[Document, list[Section], list[str]]:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise KBFileError(path, f"file is {size / 2**20:.1f} MB; the limit is {MAX_FILE_BYTES // 2**20} MB")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise KBFileError(path, f"not valid UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise KBFileError(path, f"unreadable: {e.strerror or e}") from None
    meta, body = split_front_matter(text.replace("\r\n", "\n"), path)
    doc, warnings = read_document(meta, rel, path)
    sections, held_back = quarantine(split_long_sections(_sections(doc, body)))
    warnings += held_back
    if not sections:
        warnings.append("no text under any heading: nothing to retrieve")
    return doc, sections, warnings


def md_files(root: Path) -> list[Path]:
    # Hidden directories (.git, .obsidian, ...) are not part of the KB.
    return sorted(
        p for p in root.rglob("*.md")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def kb_version_of(root: Path, files: list[Path] | None = None) -> str:
    """"kb-" + 12 hex of sha256 over the sorted (relative path, bytes) of all *.md files."""
    root = Path(root)
    h = hashlib.sha256()
    for p in sorted(files if files is not None else md_files(root), key=lambda p: p.relative_to(root).as_posix()):
        h.update(p.relative_to(root).as_posix().encode("utf-8") + b"\0")
        try:
            data = p.read_bytes()
        except OSError:
            data = b""
        h.update(len(data).to_bytes(8, "big") + data)
    return "kb-" + h.hexdigest()[:12]


def load_kb(path: str | Path) -> KnowledgeBase:
    """Load every *.md under `path`. Raises only `KBNotFound`; bad files become problems."""
    root = Path(path).expanduser()
    if not root.exists():
        raise KBNotFound(f"knowledge base not found: {root}")
    if not root.is_dir():
        raise KBNotFound(f"knowledge base is not a directory: {root}")
    root = root.resolve()
    files = md_files(root)
    docs: dict[str, Document] = {}
    sections: list[Section] = []
    problems: list[LoadProblem] = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        try:
            doc, secs, warnings = _parse(p, root)
        except KBFileError as e:
            problems.append(LoadProblem(path=rel, reason=e.reason))
            continue
        if doc.id in docs:
            problems.append(LoadProblem(path=rel, reason=f"duplicate id {doc.id!r} (already defined in {docs[doc.id].path})"))
            continue
        docs[doc.id] = doc
        sections += secs
        problems += [LoadProblem(path=rel, reason=w, fatal=False) for w in warnings]
    for d in docs.values():
        for old in d.supersedes:
            if old not in docs:
                problems.append(LoadProblem(path=d.path, reason=f"supersedes unknown id {old!r}", fatal=False))
    return KnowledgeBase(root=root, docs=docs, sections=sections, problems=problems,
                         kb_version=kb_version_of(root, files))
