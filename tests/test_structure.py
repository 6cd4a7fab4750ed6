"""The layout's rules, checked on the source: arrows run one way (transport → call → policy → kb,
evaluation → policy), no import cycles, no import of another module's private name, no file over
400 lines and no function over 60 (tests and scripts too), and every package says what it owns."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kb", "policy", "evaluation", "voice_agent")
# Which top-level layers each layer may import. voice_agent.eval_audio is the voice runner
# that evaluation receives as a callable, so it may reach evaluation (for the Case it runs).
ALLOWED = {
    "kb": set(),
    "policy": {"kb"},
    "evaluation": {"policy", "kb"},
    "voice_agent": {"policy", "kb"},
}
VOICE_LAYERS = ["voice_agent.transport", "voice_agent.call", "voice_agent.stages"]  # top to bottom


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _runtime_imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) for each import not under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            out.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
    return out


MODULES = _modules()
IMPORTS = {name: _runtime_imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    return module.split(".")[0]


def test_layers_import_only_downwards():
    wrong = []
    for name, imports in IMPORTS.items():
        for target, _, line in imports:
            if _layer(target) not in PACKAGES or _layer(target) == _layer(name):
                continue
            if _layer(target) not in ALLOWED[_layer(name)] and name != "voice_agent.eval_audio":
                wrong.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_voice_layers_import_only_downwards():
    wrong = []
    for name, imports in IMPORTS.items():
        mine = next((i for i, layer in enumerate(VOICE_LAYERS) if name.startswith(layer)), None)
        for target, _, line in imports:
            theirs = next((i for i, layer in enumerate(VOICE_LAYERS) if target.startswith(layer)), None)
            if mine is not None and theirs is not None and theirs < mine:
                wrong.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target} (a layer above)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {name: {t for t, _, _ in imports if t in MODULES and t != name} for name, imports in IMPORTS.items()}
    # a package's __init__ re-exporting its own modules is not a cycle
    graph = {n: {t for t in ts if not n.startswith(t + ".")} for n, ts in graph.items()}
    seen: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in seen:
                visit(nxt, path + [nxt])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_name():
    private = [f"{MODULES[name].relative_to(ROOT)}:{line} {target}.{n}"
               for name, imports in IMPORTS.items() for target, names, line in imports
               for n in names if n.startswith("_") and not n.startswith("__") and _layer(target) in PACKAGES]
    assert not private, "\n".join(private)


def test_files_and_functions_stay_small():
    """The packages, the tests, the scripts and run.py alike."""
    big = []
    extra = [*sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "scripts").glob("*.py")), ROOT / "run.py"]
    for path in [*MODULES.values(), *extra]:
        tree = ast.parse(path.read_text())
        lines = len(path.read_text().splitlines())
        if lines > 400:
            big.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not big, "\n".join(big)


def test_every_package_says_what_it_owns():
    for path in sorted(ROOT.glob("*/**/__init__.py")):
        if path.parts[len(ROOT.parts)] not in PACKAGES:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.split()) >= 8, f"{path.relative_to(ROOT)}: no docstring saying what it owns"
