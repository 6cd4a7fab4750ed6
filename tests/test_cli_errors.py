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
    (["eval", "--corpus", str(ROOT / "fixtures" / "domains"), "--against", "/no/such/corpus.json"],
     "cannot read an earlier corpus run"),
    (["eval", "--corpus", str(ROOT / "fixtures" / "domains"), "--audio-dir", str(ROOT / "fixtures"), "--against",
      str(ROOT / "pyproject.toml")], "cannot read an earlier voice run"),
    (["replay", "--kb", KB, "--role", "agnet", str(ROOT / "fixtures" / "audio" / "d01.wav")], "unknown role 'agnet'"),
    (["client", "--text", "hi", "--resume-url", "http://127.0.0.1:1/v1/call"], "--resume-url http://"),
    (["bench", "load", "--servers", "2", "--store", "jsonl"], "servers share calls through PostgreSQL"),
    (["nope"], "unknown command"),
    (["kb", "check", "--kb", "/no/such/kb"], "knowledge base directory not found"),
    (["kb", "lint"], "invalid choice"),
    (["handoffs", "--state", "waiting2"], "invalid choice"),
    (["serve", "--kb", KB, "--port", "notaport"], "invalid int value"),
    (["bench", "nope"], "unknown benchmark 'nope'"),
    (["calibrate", "--kb", KB, "--cases", "/no/cases.yaml"], "cases file not found"),
    (["policy-stats", "--bogus"], "unrecognized arguments"),
    (["schema", "--bogus"], "unrecognized arguments"),
    (["eval", "--kb", KB, "--cases", str(ROOT / "fixtures" / "cases.yaml"), "--max-audio-s", "0"], "more than 0"),
    (["client", "--url", "ftp://x", "a.wav"], "expected ws://"),
    (["train", "--corpus", str(ROOT / "fixtures" / "domains"), "--out", "/proc/nope/scorer.json"], "cannot write there"),
])
def test_bad_input_is_one_line_and_non_zero(argv, says):
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], capture_output=True, text=True, timeout=180,
                       cwd=ROOT)
    err = [line for line in p.stderr.strip().splitlines() if not line.startswith("usage:") and line.strip()
           and not line.startswith(" ")]
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(err) == 1 and says in err[0], p.stderr


@pytest.mark.slow
def test_a_first_time_embedding_shows_progress_on_a_terminal(tmp_path):
    """stderr on a terminal: the first load of a new KB draws progress bars; in a pipe it stays quiet."""
    import fcntl
    import os
    import shutil
    import struct
    import termios
    import uuid

    kb = tmp_path / "kb"
    kb.mkdir()
    tag = uuid.uuid4().hex
    for i in range(220):  # a KB large enough to take a while: bars start above 200 sections
        (kb / f"p{i}.md").write_text(f"---\nid: p{i}\ntitle: Page {i}\n---\n# Topic {i}\nFact {i} of {tag}.\n")
    env = {**os.environ, "VOICE_AGENT_CACHE": str(tmp_path / "cache")}
    piped = subprocess.run([sys.executable, str(ROOT / "run.py"), "ask", "--kb", str(kb), "--state-dir",
                            str(tmp_path / "s1"), "What is fact 7?"], capture_output=True, text=True, env=env,
                           timeout=300)
    assert piped.returncode == 0 and "%|" not in piped.stderr
    shutil.rmtree(tmp_path / "cache")  # first time again
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a terminal 80 columns wide
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "ask", "--kb", str(kb), "--state-dir",
                             str(tmp_path / "s2"), "What is fact 7?"], stdout=subprocess.PIPE, stderr=slave,
                            env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(300)
    os.close(master)
    assert proc.returncode == 0 and b"%|" in seen, seen[-500:]
