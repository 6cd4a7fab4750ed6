"""The browser console at `/`, in headless Chromium against a real server (subprocess, real ASR,
policy and TTS), with a WAV file as the fake microphone.

Spoken: the page captures the fake microphone through its AudioWorklet and streams 16 kHz PCM16;
the test polls the DOM until the turn is answered. Typed: three typed turns (refuse, clarify,
transfer) over a silent microphone, then Hang up. Both read the history, the action badges, the
indicator's recorded states, the mic meter, the readable citations and the handoff panel, check
that no reason code reaches the page, and check a screenshot for the elements.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from policy.decision import Reason
from tests.browser_helpers import Browser, colour_share

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
BADGE_RGB = {"answer": (0x1a, 0x7f, 0x37), "clarify": (0x9a, 0x67, 0x00), "refuse": (0xcf, 0x22, 0x2e),
             "transfer": (0x82, 0x50, 0xdf)}
TRANSFER_BG = (0xfb, 0xef, 0xff)

PAGE_STATE = """(() => {
  const q = (s) => document.querySelector(s);
  const rect = (el) => { const r = el.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, height: r.height}; };
  return {
    state: q('#status').dataset.state,
    history: q('#status').dataset.history.split(' '),
    peak: Number(q('#level').dataset.peak),
    turns: [...document.querySelectorAll('#history .turn')].map(li => ({
      you: li.querySelector('.you').textContent,
      source: li.dataset.source || '',
      action: li.querySelector('.badge') ? li.querySelector('.badge').textContent : null,
      badge: li.querySelector('.badge') ? rect(li.querySelector('.badge')) : null,
      message: li.querySelector('.message') ? li.querySelector('.message').textContent : null,
      citations: [...li.querySelectorAll('button.cite')].map(b => b.textContent),
    })),
    transfer: q('#transfer').hidden ? null : {team: q('#transfer-team').textContent, id: q('#transfer-id').textContent,
      summary: q('#transfer-summary').textContent, rect: rect(q('#transfer')),
      sources: [...document.querySelectorAll('#transfer button.cite')].map(b => b.textContent)},
    errors: q('#errors').hidden ? [] : [...q('#errors').children].map(p => p.textContent),
    text: document.body.innerText,
  };
})()"""


def _wav(tmp: Path, name: str, text: str | None) -> Path:
    """A 16 kHz WAV for the fake microphone (Chromium loops it): the caller's question with silence
    around it (the trailing second lets the server's endpointer end the turn), or silence only."""
    import numpy as np

    from voice_agent.audio import load_audio, write_wav

    pad = np.zeros(16000, np.float32)
    if text is None:
        return write_wav(tmp / name, np.concatenate([pad] * 4), 16000)
    if not shutil.which("espeak-ng"):
        pytest.skip("no espeak-ng")
    src = tmp / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(src), text], check=True)
    x = load_audio(src, 16000)
    return write_wav(tmp / name, np.concatenate([pad[:4800], x, pad, pad]), 16000)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    from voice_agent.bench_load import start_server, stop_server

    state = tmp_path_factory.mktemp("server")
    proc, port = start_server(str(ROOT / "fixtures" / "kb"), state, max_calls=2, asr_model="tiny.en")
    try:
        yield f"http://127.0.0.1:{port}/", state
    finally:
        assert stop_server(proc) == 0


async def _open(url: str, wav: Path, profile: Path) -> Browser:
    b = Browser(url, wav, profile)
    await b.connect()
    assert await b.wait_for("document.readyState === 'complete' && !!document.querySelector('#start')", 20)
    await b.evaluate("document.querySelector('#start').click(); true")
    assert await b.wait_for("document.querySelector('#status').dataset.state === 'listening'", 20), \
        await b.evaluate(PAGE_STATE)
    return b


def _no_reason_codes(state: dict) -> None:
    shown = [r.value for r in Reason if r.value in state["text"]]
    assert not shown, f"reason codes on the page: {shown}"


def _badges_painted(png: Path, state: dict) -> None:
    """Each badge's colour fills its box in the screenshot (the badge is drawn, visible, unclipped)."""
    for t in state["turns"]:
        share = colour_share(png, t["badge"], BADGE_RGB[t["action"]])
        assert share > 0.4, (t["action"], t["badge"], share)


def test_spoken_turn_in_the_console(server, tmp_path):
    url, state_dir = server

    async def go() -> dict:
        profile = tmp_path / "spoken"
        profile.mkdir()
        b = await _open(url, _wav(tmp_path, "mic.wav", "How do I set up my voicemail?"), profile)
        try:
            assert await b.wait_for("!!document.querySelector('#history .badge')", 60), await b.evaluate(PAGE_STATE)
            await b.wait_for("document.querySelector('#status').dataset.history.includes('speaking')", 20)
            state = await b.evaluate(PAGE_STATE)
            assert isinstance(state, dict)
            state["png"] = str(await b.screenshot(tmp_path / "spoken.png"))
            return state
        finally:
            await b.close()

    state = asyncio.run(go())
    print(f"spoken: states {' > '.join(state['history'])}; mic meter peak {state['peak']}")
    assert state["errors"] == [], state
    first = state["turns"][0]
    assert first["source"] == "spoken" and "voice" in first["you"].lower(), first
    assert first["action"] == "answer" and "121" in first["message"], first
    assert "Voicemail setup — Setting up voicemail" in first["citations"], first
    h = state["history"]
    # thinking lasts until the reply is heard: no "listening" flash between the decision and its audio
    assert h.index("listening") < h.index("thinking") and h[h.index("thinking") + 1] == "speaking", h
    assert state["peak"] >= 20, state["peak"]  # the meter follows the spoken question
    _no_reason_codes(state)
    _badges_painted(Path(state["png"]), state)
    log = (state_dir / "server.log").read_text()
    assert '"endpoint": "native"' in log and '"action": "answer"' in log


# The answer (and its readable citation) is the spoken test's; each reply here plays in real time.
TYPED = [("Do you sell laptops?", "refuse"), ("How much is the late payment fee?", "clarify"),
         ("How long does a billing dispute take to sort out?", "transfer")]


async def _type_turns(b: Browser) -> None:
    for n, (text, _) in enumerate(TYPED, 1):
        await b.evaluate(f"document.querySelector('#text').value = {json.dumps(text)};"
                         "document.querySelector('#text-form').requestSubmit(); true")
        # the typed words are in the history at once, before any reply
        assert await b.evaluate(f"document.querySelectorAll('#history .you').length === {n}")
        assert await b.wait_for(f"document.querySelectorAll('#history .badge').length === {n}", 60), \
            await b.evaluate(PAGE_STATE)


def test_typed_turns_badges_transfer_panel(server, tmp_path):
    url, state_dir = server

    async def go() -> tuple[dict, str]:
        profile = tmp_path / "typed"
        profile.mkdir()
        b = await _open(url, _wav(tmp_path, "silence.wav", None), profile)
        try:
            await _type_turns(b)
            assert await b.wait_for("!document.querySelector('#transfer').hidden", 60), await b.evaluate(PAGE_STATE)
            await b.evaluate("document.querySelector('#transfer button.cite').click(); true")
            quote = await b.evaluate("(() => { const q = document.querySelector('#transfer .quote');"
                                     " return q.hidden ? '' : q.textContent; })()")
            state = await b.evaluate(PAGE_STATE)
            assert isinstance(state, dict) and isinstance(quote, str)
            state["png"] = str(await b.screenshot(tmp_path / "typed.png"))
            # Hang up: the mic stops and the server closes the call (normally: nothing is in flight)
            await b.evaluate("document.querySelector('#stop').click(); true")
            state["ended"] = await b.wait_for("!document.querySelector('#start').disabled"
                                              " && document.querySelector('#status-text').textContent", 20)
            state["level_after"] = await b.evaluate("document.querySelector('#level').getAttribute('aria-valuenow')")
            return state, quote
        finally:
            await b.close()

    state, quote = asyncio.run(go())
    print(f"typed: states {' > '.join(state['history'])}; mic meter peak {state['peak']}")
    assert state["errors"] == [], state
    assert [(t["you"], t["action"]) for t in state["turns"]] == TYPED
    assert all(t["source"] == "typed" for t in state["turns"])
    assert all(t["citations"] == [] for t in state["turns"])  # no answer, nothing cited
    h = state["history"]
    assert h.index("thinking") < h.index("speaking") < h.index("transferred") and h[-1] == "transferred", h
    assert state["state"] == "transferred"
    assert state["ended"] == "Transferred to a person — call ended (1000 stop)", state["ended"]
    assert state["level_after"] == "0"
    assert state["peak"] < 5, state["peak"]  # a silent microphone leaves the meter still
    # the handoff panel shows the package the server stored
    stored = [json.loads(line) for line in (state_dir / "handoffs.jsonl").read_text().splitlines()]
    package = next(p for p in stored if p["id"] == state["transfer"]["id"])
    assert package["team"] == "billing_disputes" and state["transfer"]["team"] == "billing disputes"
    assert state["transfer"]["summary"] == package["summary"]
    assert state["transfer"]["sources"][0] == "Charge disputes — Raising a billing dispute"
    assert quote == package["evidence"][0]["quote"] and "6 months" in quote
    _no_reason_codes(state)
    png = Path(state["png"])
    _badges_painted(png, state)
    assert colour_share(png, state["transfer"]["rect"], TRANSFER_BG, tol=8) > 0.4
