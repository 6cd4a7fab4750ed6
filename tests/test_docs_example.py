"""The example in docs/KB.md and docs/EVAL.md is real: its KB files and its cases file, copied out of
the Markdown, load cleanly, and the agent gets every case right through `run.py eval`, as a reader
would run it.

A file in the docs is a fenced code block preceded by a `<!-- file: PATH -->` line."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "docs" / "KB.md", ROOT / "docs" / "EVAL.md"]
_FILE_BLOCK = re.compile(r"^<!-- file: (?P<path>[^\s>]+) -->\n(?P<fence>`{3,}|~{3,})[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                         re.M | re.S)


def doc_files() -> dict[str, str]:
    """PATH -> the text of its block, from every doc; a path given twice is a mistake in the docs."""
    files: dict[str, str] = {}
    for doc in DOCS:
        for m in _FILE_BLOCK.finditer(doc.read_text(encoding="utf-8")):
            path = m.group("path")
            assert path not in files, f"{doc.name}: {path} is given twice"
            assert not Path(path).is_absolute() and ".." not in Path(path).parts, path
            files[path] = m.group("body")
    return files


def write_example(root: Path) -> tuple[Path, Path]:
    for rel, text in doc_files().items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root / "kb", root / "cases.yaml"


@pytest.mark.unit
def test_the_docs_hold_the_whole_example():
    files = doc_files()
    docs = [p for p in files if p.startswith("kb/") and p.endswith(".md")]
    assert len(docs) >= 5, sorted(files)
    assert "kb/_policy.yaml" in files and "cases.yaml" in files, sorted(files)


@pytest.mark.unit
def test_kb_check_passes_the_example_strictly(tmp_path):
    kb_dir, _ = write_example(tmp_path)
    proc = subprocess.run([sys.executable, "run.py", "kb", "check", "--kb", str(kb_dir), "--strict"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s), 0 warning(s)" in proc.stderr, proc.stdout


@pytest.mark.unit
def test_the_example_kb_and_cases_load_without_problems(tmp_path):
    from evaluation.cases import load_cases
    from kb.loader import load_kb
    from policy.config import load_policy_config

    kb_dir, cases_file = write_example(tmp_path)
    kb = load_kb(kb_dir)
    assert not kb.problems, [str(p) for p in kb.problems]
    config = load_policy_config(kb_dir=kb_dir)
    assert config.facet_synonyms and config.facet_questions
    cases = load_cases(cases_file)
    assert len(cases) >= 10 and cases.today is not None
    cited = {doc for c in cases for doc in c.expect.cite_any}
    assert cited <= set(kb.docs), cited - set(kb.docs)


@pytest.mark.slow
def test_the_agent_passes_every_example_case(tmp_path):
    kb_dir, cases_file = write_example(tmp_path / "bike")
    proc = subprocess.run([sys.executable, "run.py", "eval", "--kb", str(kb_dir), "--cases", str(cases_file),
                           "--json", "--out", str(tmp_path / "results.jsonl")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    failures = {}
    for line in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if not row["ok"]:
            failures[row["id"]] = row["failures"] + [d["message"] for d in row["decisions"]]
    assert metrics["case_pass_rate"] == 1.0, failures
    assert metrics["unsafe_answers"] == 0, failures


@pytest.mark.slow
def test_the_example_synonym_answers_a_callers_word_the_pages_do_not_use(tmp_path):
    """KB.md's table: "once-over" is read as "safety check"; without the synonym the turn is refused."""
    import datetime as dt

    from policy.engine import Engine

    kb_dir, _ = write_example(tmp_path / "bike")
    q = "Could you give my road bike a once-over before my trip, what does that cost?"
    d = Engine.load(kb_dir, state_dir=tmp_path / "s1", on_date=dt.date(2026, 6, 1)).session().turn(q).decision
    assert d.action.value == "answer" and "£25" in d.message
    policy = kb_dir / "_policy.yaml"
    policy.write_text(policy.read_text(encoding="utf-8").split("# Callers' words")[0], encoding="utf-8")
    d = Engine.load(kb_dir, state_dir=tmp_path / "s2", on_date=dt.date(2026, 6, 1)).session().turn(q).decision
    assert d.action.value == "refuse" and "£25" not in d.message


@pytest.mark.slow
@pytest.mark.server
def test_the_example_kb_served_answers_its_cases_over_the_websocket(tmp_path):
    """The reader's last step: `run.py serve` on the example KB, typed turns of the example's
    single-turn cases over the native protocol, the expected action for each."""
    import asyncio

    from evaluation.cases import load_cases
    from voice_agent.bench_servers import start_server, stop_server
    from voice_agent.client import stream_call

    kb_dir, cases_file = write_example(tmp_path / "bike")
    cases = [c for c in load_cases(cases_file) if len(c.caller_turns) == 1 and not c.faults and not c.caller.all_facets()
             and c.role("public") == "public"][:4]
    assert len(cases) >= 3
    state = tmp_path / "state"
    state.mkdir()
    proc, port = start_server(str(kb_dir), state, max_calls=2, asr_model="tiny.en",
                              extra=["--date", str(load_cases(cases_file).today)])
    try:
        got = {}
        for c in cases:
            res = asyncio.run(stream_call(f"ws://127.0.0.1:{port}/v1/call", texts=[c.caller_turns[0]],
                                          realtime=False, timeout_s=120))
            got[c.id] = (res.decisions[0]["action"] if res.decisions else None, c.expected_per_turn()[0] or [])
    finally:
        stop_server(proc)
    wrong = {cid: g for cid, g in got.items() if g[0] not in [a.value for a in g[1]]}
    assert not wrong, wrong
