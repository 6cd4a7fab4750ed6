"""The wheel is the product: built from the repository, installed away from it, its `voice-agent`
command answers from a KB with the packaged policy, scorer and page, not from files in the clone."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy: setuptools keeps a build/ folder beside the sources, and a stale one
    # (a module since deleted) would end up in the wheel
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", ".cache", "var",
                                                              "__pycache__", "fixtures", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                   check=True, capture_output=True, timeout=600)
    [whl] = out.glob("voice_agent_refusal-*.whl")
    return whl


def test_the_wheel_carries_its_data_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("run.py", "policy/default_policy.yaml", "policy/answerability.json", "policy/turn_probes.json",
                   "policy/migrations/001_init.sql",
                   "voice_agent/web/index.html", "voice_agent/web/console.js", "voice_agent/web/meter.js",
                   "voice_agent/web/style.css",
                   "voice_agent/web/app.js", "voice_agent/call/session.py", "voice_agent/transport/server.py",
                   "voice_agent/stages/tts_worker.py", "evaluation/cli.py"):
        assert needed in names, needed
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "voice-agent = run:entry" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_installed_command_answers_outside_the_clone(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    # the dependencies come from this environment; the product itself only from the wheel
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]),
           "HF_HUB_OFFLINE": "1"}
    away = tmp_path / "elsewhere"
    away.mkdir()
    p = subprocess.run([sys.executable, str(target / "bin" / "voice-agent"), "ask", "--kb", str(ROOT / "fixtures" / "kb"),
                        "--state-dir", str(tmp_path / "state"), "--date", "2026-11-29", "When is my bill due?"],
                       cwd=away, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["action"] == "answer" and "21 days" in d["message"]
    import_path = subprocess.run([sys.executable, "-c", "import policy; print(policy.__file__)"], cwd=away, env=env,
                                 capture_output=True, text=True, timeout=60).stdout
    assert import_path.startswith(str(target)), import_path


def test_the_installed_server_serves_its_page_and_stops_cleanly(wheel, tmp_path):
    import re
    import signal
    import time
    import urllib.request

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]),
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    away = tmp_path / "elsewhere"
    away.mkdir()
    (away / "server.yaml").write_text("{}\n")
    proc = subprocess.Popen([sys.executable, str(target / "bin" / "voice-agent"), "serve", "--kb",
                             str(ROOT / "fixtures" / "kb"), "--port", "0", "--state-dir", str(tmp_path / "state")],
                            cwd=away, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port, deadline = None, time.monotonic() + 240
        assert proc.stdout is not None
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            if m := re.search(r"listening on ws://[^:]+:(\d+)", line):
                port = int(m.group(1))
        assert port, "the installed server did not start listening"
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert "<html" in page.lower() and "/app.js" in page
        assert b"export" in urllib.request.urlopen(f"http://127.0.0.1:{port}/console.js", timeout=10).read()
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=10).status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
