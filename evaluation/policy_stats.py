"""`run.py policy-stats`: count the hand-written patterns and word lists the policy decides with.

Counted, in `policy/*.py` (but the modules in NOT_POLICY, which do not decide a turn) (read as syntax trees, so comments and docstrings never count):
- a regular expression: a string literal given to a `re` function, or a string literal in a
  module-level list, tuple, dict or set that holds regular-expression syntax;
- a word list: a module-level collection of three or more literal words (a set, a list, a
  `"a b c".split()`, or a word string handed to a function), but a module's `__all__`;
and in the policy YAML files: each lexicon pattern counts as a regular expression, each list of
spoken phrases (facet synonyms, intent examples) as one word list. The aim is for the total to fall."""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import TypedDict, cast

import yaml

# Modules under policy/ that do not decide a turn: the contract, evaluation and plumbing.
NOT_POLICY = {"decision.py", "cases.py", "metrics.py", "evaluate.py", "calibrate.py", "baselines.py", "bench.py",
              "store.py", "config.py", "cli.py", "cli_schema.py", "cli_handoffs.py", "cli_kb.py", "store_api.py",
              "store_embedded.py", "store_pg.py", "store_pg_schema.py", "store_select.py"}
_RE_FUNCS = {"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"}
_RE_SYNTAX = ("\\b", "\\s", "\\d", "\\w", "(?", "[^", ")?", "|")


def _looks_regex(s: str) -> bool:
    return any(tok in s for tok in _RE_SYNTAX)


def _word_list(node: ast.AST) -> bool:
    """A literal collection of plain words, or a string of three or more words split or tokenized."""
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        strs = [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return len(strs) >= 3 and len(strs) == len(node.elts) and not any(_looks_regex(str(e.value)) for e in strs)
    if isinstance(node, ast.Call):
        args = [a for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        target = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            args.append(target)  # "a b c".split()
        return any(len(str(a.value).split()) >= 3 and not _looks_regex(str(a.value)) for a in args)
    return False


def _regexes_in(node: ast.AST, counted: set[int]) -> int:
    """Regex strings in a table, but those already counted as the pattern of a `re` call in it."""
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and _looks_regex(n.value) and id(n) not in counted)


def _type_literals(tree: ast.AST) -> set[int]:
    """Nodes inside `Literal[...]`: a type's allowed values, not words the policy reads."""
    return {id(sub) for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == "Literal" for sub in ast.walk(n.slice)}


def _is_export_list(stmt: ast.Assign | ast.AnnAssign) -> bool:
    """`__all__`: the module's exported names, not words the policy reads."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def count_python(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    regex_nodes: set[int] = set()
    inside: set[int] = set()  # every node of a counted pattern, so a table never counts it again
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _RE_FUNCS \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "re" and n.args:
            if isinstance(n.args[0], ast.Constant) or isinstance(n.args[0], ast.BinOp):
                regex_nodes.add(id(n.args[0]))
                inside.update(id(sub) for sub in ast.walk(n.args[0]))
    regexes = len(regex_nodes)
    literals = _type_literals(tree)
    words = 0
    for stmt in tree.body:  # module-level tables
        value = getattr(stmt, "value", None)
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or value is None or _is_export_list(stmt):
            continue
        if isinstance(value, (ast.List, ast.Tuple, ast.Dict, ast.Set)) and not _word_list(value):
            regexes += _regexes_in(value, inside)
        for sub in ast.walk(value):
            if id(sub) not in literals and _word_list(sub):
                words += 1
    return {"regexes": regexes, "word_lists": words}


class PolicyLists(TypedDict, total=False):
    """The parts of a policy YAML file that hold patterns and phrase lists (the rest is not read)."""

    lexicons: dict[str, list[str] | None] | None
    facet_synonyms: dict[str, dict[str, list[str]] | None] | None
    synonyms: dict[str, list[str] | None] | None
    intents: dict[str, object] | None


class PolicyStats(TypedDict):
    regexes: int
    word_lists: int
    total: int
    files: dict[str, dict[str, int]]  # per file with any: {"regexes": n, "word_lists": n}


def count_yaml(data: PolicyLists) -> dict[str, int]:
    regexes = words = 0
    for patterns in (data.get("lexicons") or {}).values():
        regexes += len(patterns or [])
    for values in (data.get("facet_synonyms") or {}).values():
        words += len(values or {})
    words += len(data.get("synonyms") or {})
    for intent in (data.get("intents") or {}).values():
        words += 1 if intent else 0
    return {"regexes": regexes, "word_lists": words}


def policy_stats(root: Path) -> PolicyStats:
    files: dict[str, dict[str, int]] = {}
    for path in sorted((root / "policy").rglob("*.py")):
        if path.name in NOT_POLICY:
            continue
        files[str(path.relative_to(root))] = count_python(path.read_text(encoding="utf-8"))
    for path in sorted((root / "policy").rglob("*.yaml")):
        data = cast(PolicyLists, yaml.safe_load(path.read_text(encoding="utf-8")) or {})  # a policy file's mapping
        files[str(path.relative_to(root))] = count_yaml(data)
    regexes = sum(f["regexes"] for f in files.values())
    words = sum(f["word_lists"] for f in files.values())
    return {"regexes": regexes, "word_lists": words, "total": regexes + words,
            "files": {k: v for k, v in files.items() if v["regexes"] or v["word_lists"]}}


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="run.py policy-stats", description=__doc__.splitlines()[0])
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="project root")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    stats = policy_stats(Path(args.root))
    if args.json:
        print(json.dumps(stats))
        return 0
    for name, f in stats["files"].items():
        print(f"{name:<36}{f['regexes']:>5} regex{f['word_lists']:>5} word lists")
    print(f"{'total':<36}{stats['regexes']:>5} regex{stats['word_lists']:>5} word lists = {stats['total']}")
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
