"""The browser page at `/`, in headless Chromium with a WAV file as the fake microphone.

Chromium is driven over the Chrome DevTools Protocol (its own websocket; no playwright): the
test clicks "Start call", the page captures the fake microphone through its AudioWorklet,
streams 16 kHz PCM16 to the real server (subprocess, real ASR + policy + TTS), and the test
polls the DOM until the decision, its reasons and citations are shown.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def chromium_path() -> str:
    """Debian's chromium; installed on first use (`apt-get install -y chromium`)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    try:
        subprocess.run(["apt-get", "install", "-y", "chromium"], check=True, timeout=600,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"chromium is not installed and `apt-get install -y chromium` failed: {e}")
    path = shutil.which("chromium")
    if not path:
        pytest.skip("chromium not found after apt-get install")
    return path


class Browser:
    """Headless Chromium with a fake microphone playing `wav` (looped), driven over CDP."""

    def __init__(self, url: str, wav: Path, profile: Path):
        self.profile = profile
        args = [
            chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required",
            "--remote-debugging-port=0", "--remote-allow-origins=*", url,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(profile.parent / "chromium.log", "wb"))
        self.ws: Any = None
        self._ids = itertools.count(1)

    async def connect(self, timeout: float = 30.0) -> None:
        from websockets.asyncio.client import connect

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        page = None
        while page is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                page = next((t for t in json.load(r) if t.get("type") == "page"), None)
            if page is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no page target in chromium")
                await asyncio.sleep(0.1)
        self.ws = await connect(page["webSocketDebuggerUrl"], max_size=2**24)

    async def evaluate(self, expression: str) -> Any:
        """Runtime.evaluate with the value returned by value (promises awaited)."""
        mid = next(self._ids)
        await self.ws.send(json.dumps({"id": mid, "method": "Runtime.evaluate", "params": {
            "expression": expression, "returnByValue": True, "awaitPromise": True}}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
            if msg.get("id") == mid:
                res = msg.get("result", {})
                if "exceptionDetails" in res:
                    raise RuntimeError(f"page error: {res['exceptionDetails'].get('text')}")
                return res.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.25)
        return None

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


PAGE_STATE = """(() => {
  const q = (s) => document.querySelector(s);
  return {
    status: q('#status').dataset.state,
    action: q('#decision').dataset.action,
    message: q('#decision-message').textContent,
    reasons: q('#decision-reasons').textContent,
    citations: [...document.querySelectorAll('#citations li')].map(li => li.dataset.docId || ''),
    you: [...document.querySelectorAll('#log .you')].map(p => p.textContent),
    transfer: q('#transfer').hidden ? null : q('#transfer-team').textContent,
    errors: q('#errors').hidden ? [] : [...q('#errors').children].map(p => p.textContent),
  };
})()"""


async def drive_page(url: str, wav: Path, profile: Path, *, timeout: float = 60.0) -> dict:
    """Open the page, click Start call, wait for the first decision; returns the page state."""
    b = Browser(url, wav, profile)
    try:
        await b.connect()
        assert await b.wait_for("document.readyState === 'complete' && !!document.querySelector('#start')", 20)
        await b.evaluate("document.querySelector('#start').click(); true")
        await b.wait_for("!!document.querySelector('#decision').dataset.action", timeout)
        return await b.evaluate(PAGE_STATE)
    finally:
        await b.close()


def _mic_wav(tmp: Path) -> Path:
    """The caller's question as a 16 kHz WAV with silence around it (Chromium loops the file;
    the trailing second lets the server's endpointer end the turn)."""
    import numpy as np

    from voice_agent.audio import load_audio, write_wav

    if not shutil.which("espeak-ng"):
        pytest.skip("no espeak-ng")
    src = tmp / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(src), "How do I set up my voicemail?"],
                   check=True)
    x = load_audio(src, 16000)
    pad = np.zeros(16000, np.float32)
    return write_wav(tmp / "mic.wav", np.concatenate([pad[:4800], x, pad, pad]), 16000)


def test_page_shows_the_decision_for_spoken_question(tmp_path):
    from voice_agent.bench_load import start_server, stop_server

    wav = _mic_wav(tmp_path)
    profile = tmp_path / "profile"
    profile.mkdir()
    proc, port = start_server(str(ROOT / "fixtures" / "kb"), tmp_path, max_calls=2, asr_model="tiny.en")
    try:
        state = asyncio.run(drive_page(f"http://127.0.0.1:{port}/", wav, profile, timeout=60))
    finally:
        assert stop_server(proc) == 0
    assert state["errors"] == [], state
    assert state["action"] == "answer", state
    assert "121" in state["message"]
    assert "grounded_answer" in state["reasons"]
    assert "voicemail-setup" in state["citations"]
    assert state["you"] and "voice" in state["you"][0].lower()
    log = (tmp_path / "server.log").read_text()
    assert '"endpoint": "native"' in log and '"action": "answer"' in log
