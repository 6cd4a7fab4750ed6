"""The eval's audio path: the runner that feeds a case's WAV through a call (unit, with a stand-in
call that follows voice_agent.call's event contract), the eval wiring of an injected runner, and the
real voice path end to end once `voice_agent/call.py` exists."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluation.cases import Case
from policy.decision import Action, Citation, Decision
from voice_agent.audio import write_wav
from voice_agent.eval_audio import run_audio_case

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kb"


class Ev:
    def __init__(self, type_: str, **kw):
        self.type = type_
        self.__dict__.update(kw)


class FakeCall:
    """Emits, for every ~1 s of fed audio, a transcript, a decision and (unless mute) reply audio."""

    def __init__(self, role, facets, mute=False, reheard=False):
        self.role, self.facets, self.mute, self.reheard = role, facets, mute, reheard
        self.q: asyncio.Queue = asyncio.Queue()
        self.fed = 0
        self.closed = False

    async def feed_audio(self, pcm16: bytes) -> None:
        self.fed += len(pcm16)

    async def end_of_input(self) -> None:
        turns = max(1, round(self.fed / 32000))
        asyncio.get_running_loop().create_task(self._emit(turns))

    async def _emit(self, turns: int) -> None:
        for i in range(turns):
            await asyncio.sleep(0.01)  # decisions arrive after end_of_input returns
            await self.q.put(Ev("transcript", text=f"turn {i}", final=False))
            await self.q.put(Ev("transcript", text=f"turn {i}", final=True, raw_text=f"turn {i}"))
            if self.reheard:  # the repair pass: a second final transcript before the decision
                await self.q.put(Ev("transcript", text=f"turn {i}!", final=True, raw_text=f"turn {i}"))
            await self.q.put(Ev("decision", decision=Decision(action=Action.refuse, message=f"no {i}"),
                                said=f"said {i}"))
            if not self.mute:
                await self.q.put(Ev("audio_start", id=i, sample_rate=16000, encoding="pcm16"))
                await self.q.put(Ev("audio_chunk", id=i, data=b"\x00\x01" * 100))
                await self.q.put(Ev("audio_end", id=i))

    async def events(self):
        while True:
            yield await self.q.get()

    async def close(self) -> None:
        self.closed = True


class FakeRuntime:
    def __init__(self, mute=False, reheard=False):
        self.mute, self.reheard = mute, reheard
        self.calls: list[FakeCall] = []

    def new_call(self, *, role="public", facets=None, config=None):
        self.calls.append(FakeCall(role, facets, self.mute, self.reheard))
        self.calls[-1].config = config
        return self.calls[-1]


def case(turns=1, **caller) -> Case:
    body = {"id": "a1", "expect": {"action": "refuse"}, "caller": caller}
    body.update({"turns": [f"q{i}" for i in range(turns)]} if turns > 1 else {"question": "q"})
    return Case.model_validate(body)


def wav(tmp_path: Path, seconds: float, sr: int = 16000) -> Path:
    return write_wav(tmp_path / "a1.wav", np.zeros(int(seconds * sr), np.float32), sr)


@pytest.mark.unit
def test_runner_collects_final_transcripts_and_decisions(tmp_path):
    rt = FakeRuntime()
    transcripts, decisions, problems, hearing = run_audio_case(rt, case(2, customer_type="business"),
                                                               wav(tmp_path, 2.0), config=None, role="agent")
    assert transcripts == ["turn 0", "turn 1"]
    assert hearing == [("turn 0", "said 0"), ("turn 1", "said 1")]
    assert [d.message for d in decisions] == ["no 0", "no 1"]
    assert problems == []
    call = rt.calls[0]
    assert call.fed == 2 * 16000 * 2
    assert call.role == "agent" and call.facets == {"customer_type": "business"} and call.closed


@pytest.mark.unit
def test_a_telephone_recording_goes_in_at_8_khz_as_a_phone_line_does(tmp_path):
    rt = FakeRuntime()
    run_audio_case(rt, case(), wav(tmp_path, 1.0, sr=8000), config=None)
    call = rt.calls[0]
    assert call.config.input_rate == 8000 and call.fed == 8000 * 2  # the call resamples, not the runner
    assert call.config.speech_threshold() == call.config.narrowband_vad_threshold


@pytest.mark.unit
def test_a_second_hearing_replaces_the_first_rather_than_adding_a_turn(tmp_path):
    transcripts, decisions, _, hearing = run_audio_case(FakeRuntime(reheard=True), case(2), wav(tmp_path, 2.0),
                                                        config=None)
    assert transcripts == ["turn 0!", "turn 1!"] and len(decisions) == 2
    assert hearing == [("turn 0", "said 0"), ("turn 1", "said 1")]


@pytest.mark.unit
def test_runner_reports_missing_reply_audio(tmp_path):
    _, decisions, problems, _ = run_audio_case(FakeRuntime(mute=True), case(), wav(tmp_path, 1.0), config=None,
                                            quiet_s=0.2)
    assert len(decisions) == 1
    assert problems == ["audio: no reply audio for turn(s) [1]"]


@pytest.mark.unit
def test_eval_uses_injected_runner_for_cases_with_wavs(tmp_path, capsys):
    from evaluation.evaluate import run_cases

    class Kb:
        docs: dict = {}

        def section(self, locator):
            return None

    class Engine:
        kb = Kb()

        def session(self, **kw):
            raise AssertionError("text path must not run for an audio case")

    (tmp_path / "a1.wav").write_bytes(b"")
    seen = []

    def runner(c, path):
        seen.append((c.id, path))
        return ["heard"], [Decision(action=Action.answer, message="x", citations=[Citation(doc_id="d", section="s")])]

    [r] = run_cases(Engine(), [case()], audio_dir=tmp_path, audio_runner=runner)
    assert seen == [("a1", tmp_path / "a1.wav")]
    from evaluation.why import print_failures

    print_failures([r], 5)
    assert "      heard: heard" in capsys.readouterr().out  # a failing audio case shows what was heard
    assert r.mode == "audio" and r.line()["transcripts"] == ["heard"]
    assert r.failures == ["turn 1: expected refuse, got answer"]
    assert r.turns[0].sources[0].status == "missing"  # cited section not in the KB

    # Fewer decisions than caller turns: the unheard turn is scored as not answered.
    two = Case.model_validate({"id": "a1", "turns": ["q1", "q2"], "expect": {"actions": ["clarify", "answer"]}})
    [r2] = run_cases(Engine(), [two], audio_dir=tmp_path,
                     audio_runner=lambda c, p: (["q1"], [Decision(action=Action.clarify, message="which?")], []))
    assert [t.decision.action for t in r2.turns] == [Action.clarify, Action.refuse]
    assert r2.failures[:2] == ["audio: 1 decision(s) for 2 caller turn(s)", "turn 2: expected answer, got refuse"]


@pytest.mark.audio
@pytest.mark.slow
def test_eval_audio_dir_through_real_voice_path(tmp_path):
    pytest.importorskip("voice_agent.call", reason="voice_agent/call.py not written yet")
    if not shutil.which("espeak-ng"):
        pytest.skip("espeak-ng not installed")
    audio = tmp_path / "audio"
    audio.mkdir()
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(audio / "vm1.wav"),
                    "How do I set up my voicemail?"], check=True)
    cases = tmp_path / "cases.yaml"
    cases.write_text("""
- id: vm1
  bucket: direct_evidence
  question: "How do I set up my voicemail?"
  expect: {action: answer, cite_any: [voicemail-setup]}
- id: txt1
  bucket: no_answer
  question: "Do you sell laptops?"
  expect: {action: refuse}
""")
    out = tmp_path / "res.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "eval", "--kb", str(KB), "--cases", str(cases),
                        "--audio-dir", str(audio), "--out", str(out), "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads(p.stdout.strip().splitlines()[-1])
    assert m["audio_cases"] == 1 and m["cases"] == 2
    lines = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert lines["vm1"]["mode"] == "audio" and lines["txt1"]["mode"] == "text"
    # the raw transcript ("voice mail"); the engine repairs it to the KB term before retrieval
    assert "voicemail" in lines["vm1"]["transcripts"][0].lower().replace(" ", "")
    assert lines["vm1"]["ok"], lines["vm1"]["failures"]


@pytest.mark.unit
def test_voice_is_compared_with_text_per_channel(tmp_path):
    from evaluation.audio_gap import channel_reader, channels_of, format_gap, gap_rows, text_twins
    from evaluation.metrics import CaseResult, TurnRecord
    from policy.config import Costs

    (tmp_path / "manifest.yaml").write_text("files:\n- {id: a, telephone: true}\n- {id: b, noise: {kind: pink}}\n"
                                           "- {id: c, telephone: false, noise: null}\n")
    channels = channels_of(tmp_path)
    assert channels == {"a": "telephone", "b": "noisy", "c": "wideband"}

    def result(cid: str, action: Action, mode: str, bucket: str = "human_request") -> CaseResult:
        c = Case.model_validate({"id": cid, "bucket": bucket, "question": "q", "expect": {"action": "transfer"}})
        rec = TurnRecord(case_id=cid, bucket=bucket, index=0, question="q", expected=[Action.transfer],
                         decision=Decision(action=action, message="m"))
        return CaseResult(case=c, turns=[rec], mode=mode, failures=[] if action == Action.transfer else ["wrong"])

    spoken = [result("a", Action.refuse, "audio"), result("b", Action.transfer, "audio"),
              result("c", Action.transfer, "audio"), result("t", Action.refuse, "text")]
    pairs = text_twins(spoken, lambda r: result(r.case.id, Action.transfer, "text"))
    rows = gap_rows(pairs, channel_reader(tmp_path), Costs())
    by = {r.group: r for r in rows}
    assert set(by) == {"telephone", "noisy", "wideband", "ALL"}  # the text-only case is not compared
    assert (by["telephone"].voice_pass, by["telephone"].text_pass, by["telephone"].gap) == (0.0, 1.0, -1.0)
    assert (by["ALL"].cases, by["ALL"].human_requests, by["ALL"].human_transferred) == (3, 3, 2)
    table = format_gap(rows)
    assert "telephone" in table and "2/3" in table


@pytest.mark.unit
def test_voice_is_compared_with_text_per_voice(tmp_path):
    from evaluation.audio_gap import channel_reader, gap_tables, text_twins, voice_reader, voices_of
    from evaluation.metrics import CaseResult, TurnRecord
    from policy.config import Costs

    (tmp_path / "manifest.yaml").write_text("files:\n- {id: a, voice: 'espeak:en-gb-scotland'}\n"
                                           "- {id: b, voice: 'piper:joe'}\n- {id: c, voice: 'piper:joe'}\n- {id: d}\n")
    assert voices_of(tmp_path) == {"a": "espeak:en-gb-scotland", "b": "piper:joe", "c": "piper:joe"}

    def result(cid: str, action: Action, mode: str) -> CaseResult:
        c = Case.model_validate({"id": cid, "bucket": "direct_evidence", "question": "q", "expect": {"action": "answer"}})
        rec = TurnRecord(case_id=cid, bucket="direct_evidence", index=0, question="q", expected=[Action.answer],
                         decision=Decision(action=action, message="m"))
        return CaseResult(case=c, turns=[rec], mode=mode, failures=[] if action == Action.answer else ["wrong"])

    spoken = [result("a", Action.refuse, "audio"), result("b", Action.answer, "audio"),
              result("c", Action.refuse, "audio"), result("d", Action.answer, "audio")]
    pairs = text_twins(spoken, lambda r: result(r.case.id, Action.answer, "text"))
    table = gap_tables(pairs, channel_reader(tmp_path), voice_reader(tmp_path), Costs())
    rows = {line.split()[0]: line.split()[1:5] for line in table.splitlines()[-5:]}
    assert rows["espeak:en-gb-scotland"] == ["1", "0.000", "1.000", "-1.000"]
    assert rows["piper:joe"] == ["2", "0.500", "1.000", "-0.500"]
    assert rows["(not"][:2] == ["named)", "1"]  # a recording whose voice the manifest does not name
    assert rows["ALL"] == ["4", "0.500", "1.000", "-0.500"]
    (tmp_path / "manifest.yaml").write_text("files:\n- {id: a}\n- {id: b}\n")
    plain = gap_tables(pairs, channel_reader(tmp_path), voice_reader(tmp_path), Costs())
    assert plain.count("voice against text") == 1 and "\nvoice " not in plain  # no voices named: no per-voice table

@pytest.mark.unit
def test_two_voice_runs_are_compared_case_by_case(tmp_path):
    from evaluation.corpus_audio import diff_voice_runs, load_voice_run
    from evaluation.corpus_diff import DiffError

    def run(ok: dict[str, bool], unsafe: int) -> dict:
        return {"voices": [{"group": "ALL", "voice_unsafe": unsafe}],
                "cases": [{"domain": "gym", "id": i, "voice": "piper:joe", "voice_ok": v, "heard": [f"heard: {i} {v}"]}
                          for i, v in ok.items()]}

    before, now = run({"a": True, "b": False, "c": True}, 2), run({"a": False, "b": True, "c": True, "d": True}, 1)
    lines = diff_voice_runs(before, now)
    assert lines[0] == ("voice against the earlier run: spoken cases passed 2 -> 2 of 3, "
                        "unsafe voice answers 2 -> 1")
    assert "  gained gym/b [piper:joe]" in lines and "  lost   gym/a [piper:joe]" in lines
    assert "      before heard: b False" in lines and "      now    heard: b True" in lines
    assert lines[-1] == "  1 spoken cases not in the earlier run" and not any("gym/c" in x for x in lines)
    good = tmp_path / "voice.json"
    good.write_text(json.dumps(before))
    assert load_voice_run(good) == before
    for text in ("{not json", json.dumps({"cases": [{"id": "a"}]}), json.dumps({"gym": {"cases": 3}})):
        good.write_text(text)
        with pytest.raises(DiffError):
            load_voice_run(good)
