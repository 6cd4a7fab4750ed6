"""Bad values on the command line: one line on stderr, a non-zero exit, never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KB = str(ROOT / "fixtures" / "kb")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("argv, says", [
    (["ask", "--kb", KB, "--date", "2026-13-01", "hi"], "not a date"),
    (["ask", "--kb", KB, "--state-dir", "/proc/nope", "what is the late fee"], "cannot write the state directory"),
    (["ask", "--kb", KB, "--role", "agnet", "hi"], "unknown role 'agnet'"),
    (["ask", "--kb", "/no/such/kb", "hi"], "knowledge base directory not found"),
    (["ask", "--kb", str(ROOT / "tests"), "hi"], "no loadable documents"),
    (["ask", "--kb", KB, "--facet", "customer_type=persnal", "what is the late fee"], "did you mean 'personal'?"),
    (["ask", "--kb", KB, "--facet", "custmer_type=personal", "what is the late fee"], "did you mean 'customer_type'?"),
    (["eval", "--kb", KB, "--cases", str(ROOT / "fixtures" / "cases.yaml"), "--date", "2026-02-30"], "not a date"),
    (["eval", "--corpus", "/no/such/corpus"], "corpus directory not found"),
    (["train", "--corpus", "/no/such/corpus"], "corpus directory not found"),
    (["eval", "--corpus", str(ROOT / "tests" / "data" / "one_domain")], "needs at least two domains"),
    (["replay", "--kb", KB, "--role", "agnet", str(ROOT / "fixtures" / "audio" / "d01.wav")], "unknown role 'agnet'"),
    (["client", "--text", "hi", "--resume-url", "http://127.0.0.1:1/v1/call"], "--resume-url http://"),
    (["bench", "load", "--servers", "2", "--store", "jsonl"], "servers share calls through PostgreSQL"),
    (["nope"], "unknown command"),
])
def test_bad_input_is_one_line_and_non_zero(argv, says):
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], capture_output=True, text=True, timeout=180,
                       cwd=ROOT)
    err = [line for line in p.stderr.strip().splitlines() if not line.startswith("usage:") and line.strip()
           and not line.startswith(" ")]
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(err) == 1 and says in err[0], p.stderr
