"""`run.py eval` and `run.py calibrate` as a user runs them: real engine, real fixture KB."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kb"

CASES = """
- id: ok1
  bucket: direct_evidence
  question: "How do I set up my voicemail?"
  expect: {action: answer, cite_any: [voicemail-setup], contains_all: ["121"]}
- id: down1
  bucket: retrieval_failure
  question: "How do I set up my voicemail?"
  faults: [retrieval_unavailable]
  expect: {action_any: [refuse, transfer]}
- id: ok2
  bucket: direct_evidence
  question: "How do I set up my voicemail?"
  expect: {action: answer}
- id: lex1
  bucket: retrieval_failure
  question: "How do I set up my voicemail?"
  faults: [embedding_unavailable]
  expect: {action: answer}
- id: none1
  bucket: no_answer
  question: "Do you sell laptops?"
  expect: {action: refuse}
- id: mt1
  bucket: multi_turn
  turns: ["Can I get a refund if I cancel my annual plan early?", "I'm a personal customer."]
  expect: {actions: [clarify, answer], missing_any: [customer_type], cite_any: [refund-personal-2026]}
- id: hr1
  bucket: high_risk
  question: "I want to dispute a charge on my bill"
  expect: {action: transfer, team: billing_disputes}
"""


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cases_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("cases") / "cases.yaml"
    p.write_text(CASES, encoding="utf-8")
    return p


@pytest.mark.slow
def test_eval_json_out_and_png(cases_file, tmp_path):
    out = tmp_path / "res" / "results.jsonl"
    p = run("eval", "--kb", str(KB), "--cases", str(cases_file), "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout.strip().splitlines()[-1])
    for key in ("cases", "action_accuracy", "unsafe_answer_rate", "over_abstain_rate", "clarification_precision",
                "handoff_precision", "evidence_support_rate", "conflict_detection_rate", "version_safety_rate",
                "cost", "buckets", "case_pass_rate", "confusion"):
        assert key in m, key
    assert m["cases"] == 7 and m["scored_turns"] == 8
    assert set(m["buckets"]) == {"direct_evidence", "retrieval_failure", "no_answer", "multi_turn", "high_risk"}
    assert sum(map(sum, m["confusion"]["rows_expected_cols_actual"])) == 8
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["ok1", "down1", "ok2", "lex1", "none1", "mt1", "hr1"]
    by_id = {x["id"]: x for x in lines}
    for x in lines:
        assert {"id", "bucket", "transcripts", "decisions", "ok", "failures"} <= set(x)
    # The fault hit its own case only: the same question answers before and after it.
    assert by_id["down1"]["decisions"][0]["action"] == "refuse"
    assert "retrieval_unavailable" in by_id["down1"]["decisions"][0]["reasons"]
    assert by_id["ok1"]["decisions"][0]["action"] == "answer"
    assert by_id["ok2"]["decisions"][0]["action"] == "answer"
    assert len(by_id["mt1"]["decisions"]) == 2
    png = out.with_name("results.confusion.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert m["png"] == str(png)
    buckets = out.with_name("results_buckets.png")
    assert buckets.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and m["buckets_png"] == str(buckets)


@pytest.mark.slow
def test_eval_compare_runs_all_policies(cases_file, tmp_path):
    out = tmp_path / "results.jsonl"
    p = run("eval", "--kb", str(KB), "--cases", str(cases_file), "--compare", "--json", "--out", str(out))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(data["policies"]) == {"gated", "threshold", "minimal"}
    chart = tmp_path / "results_compare.png"
    assert data["compare_png"] == str(chart) and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in data["policies"]:  # each policy's results keep their own charts
        assert (tmp_path / f"results.{name}_buckets.png").exists() and (tmp_path / f"results.{name}.jsonl").exists()
    for name, m in data["policies"].items():
        assert m["policy"] == name and m["cases"] == 7
    # The naive design never clarifies or transfers (mt1, hr1 cost it); the real policy must do better.
    assert data["policies"]["gated"]["cost"] < data["policies"]["threshold"]["cost"]


@pytest.mark.slow
def test_eval_table_output(cases_file):
    p = run("eval", "--kb", str(KB), "--cases", str(cases_file))
    assert p.returncode == 0, p.stderr
    assert "bucket" in p.stdout and "ALL" in p.stdout
    assert "confusion (rows: expected, columns: actual)" in p.stdout


@pytest.mark.unit
@pytest.mark.parametrize("args, needle", [
    (["--kb", "/nonexistent/kb", "--cases", "CASES"], "/nonexistent/kb: knowledge base directory not found"),
    (["--kb", str(KB), "--cases", "/nonexistent/cases.yaml"], "/nonexistent/cases.yaml: cases file not found"),
    (["--kb", str(KB), "--cases", "BAD"], "case 'x': expect.action"),
    (["--kb", str(KB), "--cases", "CASES", "--audio-dir", "/nonexistent/audio"], "audio directory not found"),
])
def test_eval_bad_input_one_line_error(cases_file, tmp_path, args, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n  question: q\n  expect: {action: perhaps}\n")
    args = [str(cases_file) if a == "CASES" else str(bad) if a == "BAD" else a for a in args]
    p = run("eval", *args, timeout=60)
    assert p.returncode == 2
    assert needle in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


@pytest.mark.unit
def test_calibrate_bad_fraction(cases_file):
    p = run("calibrate", "--kb", str(KB), "--cases", str(cases_file), "--dev-fraction", "1.5", timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == "error: --dev-fraction must be between 0 and 1, got 1.5"


@pytest.mark.slow
def test_calibrate_writes_kb_override(cases_file, tmp_path):
    kb = tmp_path / "kb"
    shutil.copytree(KB, kb)
    (kb / "_policy.yaml").unlink(missing_ok=True)
    p = run("calibrate", "--kb", str(kb), "--cases", str(cases_file), "--seed", "0", "--write", "--json",
            timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["dev_cases"] + report["test_cases"] == 7
    assert report["after"]["dev"]["cost"] <= report["before"]["dev"]["cost"]
    text = (kb / "_policy.yaml").read_text()
    assert text.startswith("# Written by `run.py calibrate`")
    assert set(yaml.safe_load(text)) == {"thresholds"}
    assert yaml.safe_load(text)["thresholds"] == report["after"]["thresholds"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_empty_kb_is_an_error(cases_file, tmp_path, command):
    p = run(command, "--kb", str(tmp_path), "--cases", str(cases_file), timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == f"error: {tmp_path}: no loadable documents in the knowledge base"


@pytest.mark.slow
def test_a_failure_says_which_words_the_kb_lacks_and_a_synonym_fixes_it(tmp_path):
    cases = tmp_path / "cases.yaml"
    cases.write_text('- id: inv1\n  bucket: paraphrase\n  question: "When does my invoice get generated each month?"\n'
                     '  expect: {action: answer}\n', encoding="utf-8")
    p = run("eval", "--kb", str(KB), "--cases", str(cases))
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("inv1"))
    # "invoice" is close enough in meaning to "bill" to count as said; "generated" is not
    assert "expected answer, got refuse (reasons: " in line and "likeliest bill-" in line and "'generated'" in line
    assert "callers' words the likeliest section did not say" in p.stdout and "'generated' (1)" in p.stdout
    kb = tmp_path / "kb"
    shutil.copytree(KB, kb)
    with open(kb / "_policy.yaml", "a", encoding="utf-8") as f:
        f.write('\nsynonyms:\n  bill: ["invoice"]\n')
    p = run("eval", "--kb", str(kb), "--cases", str(cases), "--json")
    assert p.returncode == 0, p.stderr
    metrics = json.loads(p.stdout.splitlines()[-1])
    assert metrics["case_pass_rate"] == 1.0 and metrics["vocabulary_gaps"] == {}
