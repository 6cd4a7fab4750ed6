"""`run.py replay`, `run.py mic` and `run.py bench voice` from the command line."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voice_agent.audio import load_audio, read_wav, write_wav

ROOT = Path(__file__).resolve().parent.parent
SR = 16000


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.unit
@pytest.mark.parametrize("make_bad,reason", [
    (lambda p: None, "no such file"),
    (lambda p: p.write_text("not audio"), "not a WAV file"),
    (lambda p: p.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00"
                             b"\x00\x7d\x00\x00\x02\x00\x10\x00data\xff\x00\x00\x00\x00\x00"), "truncated"),
])
def test_replay_bad_wav_is_one_line_exit_2(tmp_path, make_bad, reason):
    p = tmp_path / "call.wav"
    make_bad(p)
    r = run("replay", "--kb", "fixtures/kb", str(p))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and reason in r.stderr and str(p) in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.unit
def test_replay_missing_kb(tmp_path):
    p = write_wav(tmp_path / "x.wav", np.zeros(SR, np.float32), SR)
    r = run("replay", "--kb", str(tmp_path / "nokb"), str(p))
    assert r.returncode == 2 and "knowledge base directory not found" in r.stderr
    assert r.stderr.strip().count("\n") == 0


@pytest.mark.unit
def test_mic_without_a_microphone_names_the_fix():
    r = run("mic", "--kb", "fixtures/kb", "--input-device", "no-such-device-xyz")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert ("plug in a microphone" in r.stderr) or ("apt-get install libportaudio2" in r.stderr)


@pytest.mark.audio
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_replay_two_turn_call(tmp_path):
    if not (ROOT / "fixtures/kb").is_dir():
        pytest.skip("fixture KB missing")
    parts = []
    for i, (voice, text) in enumerate([("en-us", "How do I set up my voicemail?"),
                                       ("en+f3", "I want to speak to a human agent.")]):
        p = tmp_path / f"t{i}.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(p), text], check=True)
        parts += [np.zeros(int(0.6 * SR), np.float32), load_audio(p, SR)]
    call = write_wav(tmp_path / "call.wav", np.concatenate(parts + [np.zeros(SR, np.float32)]), SR)
    out = tmp_path / "reply.wav"
    r = run("replay", "--kb", "fixtures/kb", str(call), "--out", str(out), "--json",
            "--state-dir", str(tmp_path / "var"))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.strip().splitlines()]
    turns, last = lines[:-1], lines[-1]
    assert len(turns) == 2, r.stdout
    assert "voice" in turns[0]["transcript"].lower() and turns[0]["decision"]["action"] == "answer"
    assert turns[1]["decision"]["action"] == "transfer" and turns[1]["decision"]["handoff"]["team"]
    assert last["reply_audio"] == str(out)
    audio, sr = read_wav(out)
    assert sr == SR and len(audio) / SR > 3.0 and np.abs(audio).max() > 0.05


@pytest.mark.audio
@pytest.mark.slow
def test_bench_voice_json(tmp_path):
    calls = ROOT / "fixtures/audio"
    if not any(calls.glob("*.wav")):
        pytest.skip("audio fixtures not generated")
    out = tmp_path / "bench"
    r = run("bench", "voice", "--limit", "1", "--json", "--state-dir", str(tmp_path), "--out", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert {"p50_ms", "p95_ms", "stages", "rtf", "rss_mb", "cores", "early_end_rate"} <= set(res)
    assert res["turns"] >= 1 and 200 < res["p50_ms"] < 10000 and 0 < res["rtf"] < 1
    # --out: the report with every turn's milliseconds, and the histogram drawn from them
    saved = json.loads((out / "voice_latency.json").read_text())
    assert saved["result"] == res and len(saved["turns"]) == res["turns"]
    assert saved["turns"][0]["total"] > 0
    assert (out / "voice_latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.audio
@pytest.mark.slow
def test_bench_voice_on_the_phone_line(tmp_path):
    if not any((ROOT / "fixtures/audio").glob("*.wav")):
        pytest.skip("audio fixtures not generated")
    r = run("bench", "voice", "--limit", "1", "--line", "phone", "--json", "--state-dir", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["line"] == "phone" and res["turns"] >= 1 and 200 < res["p50_ms"] < 10000


@pytest.mark.unit
def test_the_phone_line_carries_8_khz_mulaw_audio():
    import numpy as np

    from voice_agent.bench_voice import _as_line

    t = np.arange(16000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 300 * t) + 0.3 * np.sin(2 * np.pi * 6000 * t)).astype(np.float32)
    assert _as_line(tone, 16000) is tone
    line = _as_line(tone, 8000)
    assert len(line) == 8000
    spectrum = np.abs(np.fft.rfft(line))
    assert spectrum[300] > 100 * spectrum[3500:].max()  # the voice band passes; 6 kHz cannot
    assert 0 < np.abs(line - np.sin(2 * np.pi * 300 * t[::2]) * 0.3).max() < 0.05  # μ-law's small error


@pytest.mark.unit
def test_bench_voice_out_must_be_a_folder(tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    r = run("bench", "voice", "--out", str(f))
    assert r.returncode == 2 and r.stderr.strip() == f"error: --out {f}: not a folder (a file of that name exists)"
