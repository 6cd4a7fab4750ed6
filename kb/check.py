"""`kb check`: every problem of a KB, file by file with line numbers, and the suspects that only
show across files: a role, team or facet value used once and spelled close to another, documents
and documents no caller can reach. Errors are what the loader skips or fails closed on;
warnings are what loads but is probably a typo."""
from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .front_matter import KNOWN_KEYS, KBFileError, read_document, split_front_matter
from .loader import KnowledgeBase, load_kb, md_files, slugify
from .models import Document

__all__ = ["Finding", "check_kb", "suspects"]

_KEY_LINE = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the KB root; "." for the KB as a whole
    line: int  # 1-based; 0 when no line applies
    severity: str  # "error" (skipped or fails closed) | "warning" (likely a typo) | "note" (worth a look)
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.severity}: {self.message}"


def check_kb(root: str | Path, roles: set[str] | None = None) -> list[Finding]:
    """All findings, files in path order. `roles`: the roles callers can be given (the server's
    tokens); documents readable by none of them, nor by the public, are reported unreachable."""
    kb = load_kb(root)
    out = [f for p in md_files(kb.root) for f in _file_findings(p, kb.root)]
    out += _load_findings(kb, out)
    if not kb.docs:
        out.append(Finding(".", 0, "error", "no loadable document: every question would be refused"))
        return out
    return sorted(out + suspects(kb, roles) + _lonely_teams(kb), key=lambda f: (f.path, f.line))


def suspects(kb: KnowledgeBase, roles: set[str] | None = None) -> list[Finding]:
    """The cross-file warnings of a loaded KB (commands print them at start)."""
    lines = {d.path: _key_lines(kb.root / d.path) for d in kb.docs.values()}
    return _near_duplicates(kb, lines) + _reach(kb, lines, roles)


def _file_findings(path: Path, root: Path) -> list[Finding]:
    """Every front-matter error of one file, each on its key's line."""
    rel = path.relative_to(root).as_posix()
    try:
        meta, _ = split_front_matter(path.read_text(encoding="utf-8"), path)
        read_document(meta, rel, path)
    except KBFileError as e:
        keys = _key_lines(path)
        return [Finding(rel, keys.get(key or "", 1), "error", reason) for key, reason in e.errors]
    except (OSError, UnicodeDecodeError):
        return []  # the loader's own report covers unreadable files
    return []


def _load_findings(kb: KnowledgeBase, seen: list[Finding]) -> list[Finding]:
    """The loader's reports not already listed field by field (warnings, duplicates, size, UTF-8)."""
    have = {(f.path, f.message) for f in seen}
    out = []
    for p in kb.problems:
        if (p.path, p.reason) in have:
            continue
        msg = p.reason
        if p.reason.startswith("unknown front-matter keys ignored"):
            msg += _did_you_mean_keys(p.reason)
        out.append(Finding(p.path, _line_of(kb.root / p.path, p.reason), "error" if p.fatal else "warning", msg))
    return out


_ABOUT_KEY = [("unknown front-matter keys ignored: ", None), ("front-matter key '", None),
              ("duplicate id", "id"), ("supersedes unknown", "supersedes"), ("acl", "acl")]


def _line_of(path: Path, reason: str) -> int:
    """The line a loader report is about: its front-matter key, or the heading of its section."""
    if m := re.match(r"section #([\w-]+)", reason):
        return _heading_lines(path).get(m.group(1), 1)
    keys = _key_lines(path)
    for prefix, key in _ABOUT_KEY:
        if reason.startswith(prefix):
            named = re.split(r"[',\s]", reason[len(prefix):], maxsplit=1)[0]
            return keys.get(key or named, 1)
    return 1


def _heading_lines(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, line in enumerate(_text_lines(path), start=1):
        if m := re.match(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", line):
            out.setdefault(slugify(m.group(1)), i)
    return out


def _did_you_mean_keys(reason: str) -> str:
    names = reason.split(":", 1)[1].split(",")
    hints = [f"{m[0]!r} for {n.strip()!r}" for n in names if (m := difflib.get_close_matches(n.strip(), sorted(KNOWN_KEYS), 1))]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def _key_lines(path: Path) -> dict[str, int]:
    """Line of each top-level front-matter key (the file's first line is the opening '---')."""
    out: dict[str, int] = {}
    for i, line in enumerate(_text_lines(path)[1:], start=2):
        if line.strip() in ("---", "..."):
            break
        if m := _KEY_LINE.match(line):
            out.setdefault(m.group(1), i)
    return out


def _text_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        return []


def _rare_and_close(counts: Counter[str]) -> list[tuple[str, str]]:
    """Names used once that are spelled close to a name used more often: (rare, likely meant)."""
    out = []
    for name, n in sorted(counts.items()):
        if n != 1:
            continue
        others = [o for o in counts if o != name and counts[o] >= n]
        if m := difflib.get_close_matches(name, others, n=1, cutoff=0.8):
            out.append((name, m[0]))
    return out


Reader = Callable[[Document], list[str]]  # the names of one kind a document uses


def _name_kinds(docs: list[Document]) -> list[tuple[str, str, Reader]]:
    """(what it is called, its front-matter key, how to read it off a document)."""
    kinds: list[tuple[str, str, Reader]] = [
        ("acl role", "acl", lambda d: list(d.acl)),
        ("team", "handoff_team", lambda d: [d.handoff_team] if d.handoff_team else []),
        ("facet", "applies_to", lambda d: list(d.applies_to)),
    ]
    for k in sorted({k for d in docs for k in d.applies_to}):
        kinds.append((f"{k} value", "applies_to", _facet_value(k)))
    return kinds


def _facet_value(key: str) -> Reader:
    return lambda d: [d.applies_to[key]] if key in d.applies_to else []


def _near_duplicates(kb: KnowledgeBase, lines: dict[str, dict[str, int]]) -> list[Finding]:
    out = []
    docs = sorted(kb.docs.values(), key=lambda d: d.path)
    for what, key, read in _name_kinds(docs):
        for rare, meant in _rare_and_close(Counter(n for d in docs for n in read(d))):
            for d in docs:
                if rare in read(d):
                    out.append(Finding(d.path, lines[d.path].get(key, 1), "warning",
                                       f"{what} {rare!r} is used once; did you mean {meant!r}?"))
    return out


def _lonely_teams(kb: KnowledgeBase) -> list[Finding]:
    """Teams named by one document and close to no other: probably fine, worth a look (kb check only)."""
    out = []
    docs = sorted(kb.docs.values(), key=lambda d: d.path)
    teams = Counter(d.handoff_team for d in docs if d.handoff_team)
    for d in docs:
        if d.handoff_team and teams[d.handoff_team] == 1 and len(teams) > 1 and \
                not difflib.get_close_matches(d.handoff_team, [t for t in teams if t != d.handoff_team], 1, 0.8):
            out.append(Finding(d.path, _key_lines(kb.root / d.path).get("handoff_team", 1), "note",
                               f"team {d.handoff_team!r} is named by this document only (it is spoken to callers: "
                               "check the spelling)"))
    return out


def _reach(kb: KnowledgeBase, lines: dict[str, dict[str, int]], roles: set[str] | None) -> list[Finding]:
    out = []
    for d in sorted(kb.docs.values(), key=lambda d: d.path):
        line = lines[d.path]
        if roles is not None and "public" not in d.acl and not set(d.acl) & roles:
            out.append(Finding(d.path, line.get("acl", 1), "warning",
                               f"no caller can read this document: acl {d.acl} names no role the server grants "
                               f"({', '.join(sorted(roles)) or 'none'})"))
    return out
