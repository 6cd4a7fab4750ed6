"""Fail closed: permissions typos restrict, YAML bombs are refused, torn records do not swallow the
next one, unencodable text never fails a turn, absurd sample rates are refused."""
from __future__ import annotations

import io
import struct
import wave

import pytest

from kb.loader import load_kb
from policy.store import JsonlStore
from voice_agent.audio import AudioError, read_wav_bytes

pytestmark = pytest.mark.unit


def _doc(tmp_path, front: str):
    (tmp_path / "d.md").write_text(f"---\nid: d\ntitle: T\n{front}\n---\n# T\nStaff may waive one late fee a year for any customer.\n")
    kb = load_kb(tmp_path)
    return kb.docs.get("d"), [p.reason for p in kb.problems]


@pytest.mark.parametrize("front, acl, says", [
    ("acl: []", [], "acl is empty"),
    ("acl:", [], "acl is empty"),
    ("acls: [staff]", [], "looks like 'acl'"),
    ("ACL: [public]", [], "looks like 'acl'"),
    ("acl: [publc]", ["publc"], "looks like 'public'"),
    ("acl: [public]", ["public"], None),
])
def test_permissions_fail_closed_and_are_reported(tmp_path, front, acl, says):
    doc, problems = _doc(tmp_path, front)
    assert doc.acl == acl
    assert (says is None and not problems) or any(says in p for p in problems)


def test_yaml_anchors_are_refused_before_they_expand(tmp_path):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    doc, problems = _doc(tmp_path, bomb + "applies_to: *c")
    assert doc is None and any("anchors and aliases" in p for p in problems)
    doc, _ = _doc(tmp_path, 'version: "Terms & conditions *2026*"')  # & and * in text are fine
    assert doc is not None


@pytest.mark.chaos
def test_a_torn_last_line_never_swallows_the_next_record(tmp_path):
    store = JsonlStore(tmp_path / "handoffs.jsonl", fsync=False)
    for i in range(10):
        store.append({"id": i})
        with (tmp_path / "handoffs.jsonl").open("ab") as f:
            f.write(b'{"id": "torn')  # the process died mid-write
    store.append({"id": "last"})
    assert [r["id"] for r in store.read()] == [*range(10), "last"] and store.bad_lines() == 10


def test_unencodable_text_is_replaced_not_fatal(tmp_path):
    store = JsonlStore(tmp_path / "audit.jsonl", fsync=False)
    store.append({"question": "agent please \ud800"})
    assert list(store.read()) == [{"question": "agent please ?"}]


def _wav(rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 100)
    data = bytearray(buf.getvalue())
    data[24:28] = struct.pack("<I", rate)  # the fmt chunk's sample rate
    return bytes(data)


@pytest.mark.parametrize("rate", [1, 3999, 192001, 4_294_967_295])
def test_absurd_sample_rates_are_refused(rate):
    with pytest.raises(AudioError, match="unsupported sample rate"):
        read_wav_bytes(_wav(rate), "x.wav")
    assert read_wav_bytes(_wav(8000), "x.wav")[1] == 8000


def test_a_recording_over_the_length_limit_is_refused_from_its_header(tmp_path):
    import subprocess
    import sys
    import time

    from voice_agent.audio_files import read_audio

    wav = tmp_path / "long.wav"
    with wave.open(str(wav), "wb") as w:  # 40 s at 8 kHz
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 8000 * 40)
    t = time.monotonic()
    with pytest.raises(AudioError, match="about 40 s of audio; the limit is 30 s"):
        read_audio(wav, max_seconds=30)
    assert time.monotonic() - t < 0.5
    assert len(read_audio(wav, max_seconds=60)[0]) == 8000 * 40
    r = subprocess.run([sys.executable, "run.py", "replay", "--kb", "fixtures/kb", str(wav), "--max-audio-s", "30"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "limit is 30 s" in r.stderr
    bad = subprocess.run([sys.executable, "run.py", "replay", "--kb", "fixtures/kb", str(wav), "--max-audio-s", "-1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
