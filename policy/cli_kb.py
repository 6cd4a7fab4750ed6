"""`run.py kb check --kb DIR`: lint a knowledge base and its `_policy.yaml` before callers meet it.

Prints one line per finding (`path:line: error|warning|note: message`) and a summary; exits 1
when there is an error (or a warning with `--strict`), 0 otherwise."""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict

from kb.check import Finding, check_kb
from kb.loader import KBNotFound, KnowledgeBase, kb_dir_error, load_kb

from .config import KB_OVERRIDE_NAME, PolicyConfig, PolicyConfigError, load_policy_config


def policy_findings(kb_dir: str, policy_file: str | None) -> list[Finding]:
    """The KB's policy override: readable, and naming only facets, values and teams the KB has."""
    where = KB_OVERRIDE_NAME if policy_file is None else policy_file
    try:
        cfg = load_policy_config(policy_file, kb_dir=kb_dir)
    except PolicyConfigError as e:
        return [Finding(where, 0, "error", str(e).split(": ", 1)[-1])]
    return _policy_vs_kb(cfg, kb_dir, where)


def _policy_vs_kb(cfg: PolicyConfig, kb_dir: str, where: str) -> list[Finding]:
    kb = load_kb(kb_dir)
    facets: dict[str, set[str]] = {}
    for d in kb.docs.values():
        for k, v in d.applies_to.items():
            facets.setdefault(k, set()).add(v)
    out = []
    for key in [*cfg.facet_synonyms, *cfg.facet_questions]:
        if key not in facets:
            out.append(Finding(where, 0, "warning", f"facet {key!r} is not used by any document's applies_to"
                               + _hint(key, facets)))
    for key, values in cfg.facet_synonyms.items():
        for value in values:
            if key in facets and value not in facets[key]:
                out.append(Finding(where, 0, "warning", f"facet_synonyms.{key}: {value!r} is not a value of "
                                   f"{key} in the KB" + _hint(value, facets[key])))
    out += _synonym_findings(cfg, kb, where)
    teams = {d.handoff_team for d in kb.docs.values() if d.handoff_team}
    if teams and cfg.default_team not in teams:
        out.append(Finding(where, 0, "note", f"default_team {cfg.default_team!r} is not a handoff_team of any "
                           f"document ({', '.join(sorted(teams))}); transfers with no topic go there"))
    if teams and cfg.distress_team and cfg.distress_team not in teams:
        out.append(Finding(where, 0, "note", f"distress_team {cfg.distress_team!r} is not a handoff_team of any "
                           f"document{_hint(cfg.distress_team, teams)}; callers in danger or distress go there"))
    return out


def _synonym_findings(cfg: PolicyConfig, kb: KnowledgeBase, where: str) -> list[Finding]:
    """A KB phrase no page says makes its callers' phrases search for nothing; a caller's phrase
    listed for two KB phrases is read as only one of them."""
    text = f" {_words(' '.join(f'{kb.docs[s.doc_id].title} {s.heading} {s.text}' for s in kb.sections))} "
    out: list[Finding] = []
    seen: dict[str, str] = {}
    for kb_phrase, callers in cfg.synonyms.items():
        if f" {_words(kb_phrase)} " not in text:
            out.append(Finding(where, 0, "warning", f"synonyms: {kb_phrase!r} is in no section of the KB, so "
                               "callers' words for it would search for words no page has"))
        for c in callers:
            key = " ".join(c.lower().split())
            if key in seen and seen[key] != kb_phrase:
                out.append(Finding(where, 0, "warning", f"synonyms: {c!r} is listed for both {seen[key]!r} and "
                                   f"{kb_phrase!r}; it is read as {kb_phrase!r}"))
            seen[key] = kb_phrase
    return out


def _words(text: str) -> str:
    """Lower-case words and digits, one space apart: "Wi-Fi Calling." is "wi fi calling"."""
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def _hint(name: str, known: Iterable[str]) -> str:
    m = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {m[0]!r}?" if m else ""


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py kb", description="Knowledge base tools.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="report every problem of a KB, with file and line")
    c.add_argument("--kb", required=True, help="knowledge base directory")
    c.add_argument("--policy-file", help="policy YAML the KB is served with (besides its _policy.yaml)")
    c.add_argument("--roles", default=None, help="comma-separated roles the server's tokens grant; "
                   "documents none of them (nor the public) can read are reported")
    c.add_argument("--strict", action="store_true", help="exit 1 on warnings too (notes never fail)")
    c.add_argument("--json", action="store_true", help="one JSON finding per line")
    args = p.parse_args(argv)
    if err := kb_dir_error(args.kb):
        print(f"error: {err}", file=sys.stderr)
        return 2
    roles = None if args.roles is None else {r.strip() for r in args.roles.split(",") if r.strip()}
    try:
        findings = check_kb(args.kb, roles=roles) + policy_findings(args.kb, args.policy_file)
    except KBNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for f in findings:
        print(json.dumps(asdict(f)) if args.json else str(f))
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    if not args.json:
        print(f"{args.kb}: {errors} error(s), {warnings} warning(s), {len(findings) - errors - warnings} note(s)",
              file=sys.stderr)
    return 1 if errors or (args.strict and warnings) else 0
