"""A KB file's YAML front matter: splitting it off, reading it safely (no aliases, no timestamp
magic) and checking each field. Every field is checked even after one fails, so `kb check` can
list all of a file's problems; the loader reports the first."""
from __future__ import annotations

import datetime as dt
import difflib
import re
from pathlib import Path
from typing import Callable, TypeVar, cast

import yaml

from .models import Document, Risk, Status

__all__ = ["KBFileError", "FrontMatter", "split_front_matter", "read_document", "KNOWN_KEYS"]

_STATUSES = ("active", "deprecated", "draft")
_RISKS = ("low", "medium", "high", "critical")
KNOWN_KEYS = {
    "id", "title", "status", "version", "effective_from", "effective_until", "supersedes",
    "applies_to", "acl", "risk", "handoff_team",
}
_T = TypeVar("_T")
# A front-matter mapping as YAML reads it: keys are text in a valid file, but YAML allows any scalar.
FrontMatter = dict[object, object]
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # libyaml: ~10x faster
    """Safe YAML that leaves dates as text: we parse them ourselves, so "2026-13-45"
    becomes a "bad date in effective_from" problem instead of a constructor crash."""


_Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


class KBFileError(Exception):
    """One KB file is malformed; `str()` is "path: reason"."""

    def __init__(self, path: str | Path, reason: str, key: str | None = None,
                 more: list[tuple[str | None, str]] | None = None):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason
        # every problem found in the file: (front-matter key or None, reason); `kb check` lists them all
        self.errors: list[tuple[str | None, str]] = [(key, reason), *(more or [])]


def _has_aliases(front: str) -> bool:
    """Whether the YAML defines an anchor or uses an alias: read from the event stream, which never
    expands anything."""
    return any(isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None) for ev in yaml.parse(front, Loader=_Loader))


def split_front_matter(text: str, path: Path) -> tuple[FrontMatter, str]:
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise KBFileError(path, "no front matter (the file must start with a '---' line)")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            break
    else:
        raise KBFileError(path, "front matter is not closed by a '---' line")
    front = "\n".join(lines[1:i])
    try:
        if _has_aliases(front):  # aliases expand without bound (a "billion laughs" file)
            raise KBFileError(path, "YAML anchors and aliases (& and *) are not allowed in front matter")
        meta = yaml.load(front, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise KBFileError(path, f"unreadable YAML front matter{where}: {problem}") from None
    except (ValueError, TypeError) as e:  # e.g. unhashable keys
        raise KBFileError(path, f"unreadable YAML front matter: {e}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise KBFileError(path, f"front matter must be a mapping, got {type(meta).__name__}")
    return meta, "\n".join(lines[i + 1 :])


def _date(meta: FrontMatter, key: str, path: Path) -> dt.date | None:
    v = meta.get(key)
    if v is None or v == "":
        return None
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    try:
        return dt.date.fromisoformat(str(v).strip())
    except ValueError:
        raise KBFileError(path, f"bad date in {key}: {v!r} (expected YYYY-MM-DD)", key=key) from None


def _str_list(meta: FrontMatter, key: str, path: Path, default: list[str]) -> list[str]:
    v = meta.get(key)
    if v is None:
        return list(default)
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",") if p.strip()]
    if not isinstance(v, list) or not all(isinstance(x, (str, int)) for x in v):
        raise KBFileError(path, f"{key} must be a list of strings, got {v!r}", key=key)
    return [str(x).strip() for x in v]


def _scalar_str(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v).strip()


def _acl(meta: FrontMatter, path: Path) -> tuple[list[str], list[str]]:
    """Who may see the document. Permissions fail closed: an empty acl, or a key that looks like a
    mistyped `acl` ("acls"), restricts the document to no one, and says so; a role that looks like
    a mistyped "public" stays a role of its own, and is reported."""
    near = [k for k in map(str, meta) if k != "acl" and (k.lower().startswith("acl")
                                                        or difflib.SequenceMatcher(None, k.lower(), "acl").ratio() >= 0.75)]
    if near:
        return [], [f"front-matter key {near[0]!r} looks like 'acl': the document is restricted to no one "
                    "until the key is corrected"]
    if "acl" in meta and meta["acl"] in (None, "", []):
        return [], ["acl is empty: the document is restricted to no one (write acl: [public] to publish it)"]
    acl = _str_list(meta, "acl", path, ["public"])
    warnings = [f"acl role {r!r} looks like 'public' but is not: only callers with role {r!r} see the document"
                for r in acl if r != "public" and difflib.SequenceMatcher(None, r.lower(), "public").ratio() >= 0.8]
    return acl, warnings


def _required(meta: FrontMatter, key: str, path: Path) -> str:
    v = meta.get(key)
    if v is None or _scalar_str(v) == "":
        raise KBFileError(path, f"missing {key} in front matter", key=key)
    if key == "id" and re.search(r"[\s#]", _scalar_str(v)):
        raise KBFileError(path, f"id {_scalar_str(v)!r} must not contain spaces or '#'", key=key)
    return _scalar_str(v)


def _choice(meta: FrontMatter, key: str, path: Path, choices: tuple[str, ...], default: str) -> str:
    v = _scalar_str(meta.get(key) or default).lower()
    if v not in choices:
        raise KBFileError(path, f"unknown {key} {meta.get(key)!r} (expected one of {', '.join(choices)})", key=key)
    return v


def _applies(meta: FrontMatter, path: Path) -> dict[str, str]:
    applies = meta.get("applies_to") or {}
    if not isinstance(applies, dict):
        raise KBFileError(path, f"applies_to must be a mapping of facet: value, got {applies!r}", key="applies_to")
    return {str(k).strip(): _scalar_str(v) for k, v in applies.items() if v is not None}


def read_document(meta: FrontMatter, rel: str, path: Path) -> tuple[Document, list[str]]:
    """The document of a front matter and its warnings; raises a KBFileError carrying every
    field's error (`errors`), the first one as its message."""
    errors: list[tuple[str | None, str]] = []

    def checked(read: Callable[[], _T], fallback: _T) -> _T:
        try:
            return read()
        except KBFileError as e:
            errors.extend(e.errors)
            return fallback

    doc_id = checked(lambda: _required(meta, "id", path), "")
    title = checked(lambda: _required(meta, "title", path), "")
    status = checked(lambda: _choice(meta, "status", path, _STATUSES, "active"), "active")
    risk = checked(lambda: _choice(meta, "risk", path, _RISKS, "low"), "low")
    no_date: dt.date | None = None
    start = checked(lambda: _date(meta, "effective_from", path), no_date)
    until = checked(lambda: _date(meta, "effective_until", path), no_date)
    if start and until and until < start:
        errors.append(("effective_until", f"bad dates: effective_until {until} is before effective_from {start}"))
    none: list[str] = []
    applies = checked(lambda: _applies(meta, path), dict[str, str]())
    supersedes = checked(lambda: _str_list(meta, "supersedes", path, []), none)
    acl, warnings = checked(lambda: _acl(meta, path), (none, list[str]()))
    if errors:
        raise KBFileError(path, errors[0][1], key=errors[0][0], more=errors[1:])
    unknown = sorted(set(map(str, meta)) - KNOWN_KEYS)
    if unknown:
        warnings.append(f"unknown front-matter keys ignored: {', '.join(unknown)}")
    team = meta.get("handoff_team")
    doc = Document(id=doc_id, title=title, status=cast(Status, status), version=_scalar_str(meta.get("version") or ""),
                   effective_from=start, effective_until=until, supersedes=supersedes, applies_to=applies, acl=acl,
                   risk=cast(Risk, risk), handoff_team=_scalar_str(team) if team not in (None, "") else None,
                   path=rel)
    return doc, warnings
