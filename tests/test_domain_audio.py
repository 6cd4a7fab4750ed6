"""The domain audio corpus (scripts/make_domain_audio.py) and the ASR word error rate benchmark
(`run.py bench wer`): real espeak-ng, flite and piper (through the TTS worker), real whisper."""
from __future__ import annotations

import json
import subprocess
import sys
import wave
from collections import Counter
from pathlib import Path

import pytest
import yaml

from voice_agent.stages.speech_text import speakable
from voice_agent.wer import WerCount, count, normalize_words

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the generators are scripts, not a package

import speech_conditions as sc  # noqa: E402  (path set up above)
from audio_synth import case_rng  # noqa: E402

DOMAIN = "gym"


def _run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _generate(out: Path, n: int = 3) -> subprocess.CompletedProcess[str]:
    return _run("scripts/make_domain_audio.py", "--domain", DOMAIN, "--per-domain", str(n), "--out", out)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same three cases generated twice, into two folders."""
    runs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp(name)
        proc = _generate(out)
        assert proc.returncode == 0, proc.stderr
        runs.append(out)
    return runs[0], runs[1]


def _cases() -> dict[str, dict]:
    data = yaml.safe_load((ROOT / "fixtures" / "domains" / DOMAIN / "cases.yaml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in data["cases"]}


# ------------------------------------------------------------------------------ word error rate


@pytest.mark.unit
def test_wer_counts_substitutions_deletions_and_insertions():
    c = count("please cancel my flight booking for friday", "please cancel the flight for friday today")
    assert (c.words, c.substitutions, c.deletions, c.insertions) == (7, 1, 1, 1)
    assert c.rate == pytest.approx(3 / 7)
    assert count("Hello there.", "").as_dict()["wer"] == 1.0  # nothing heard: every word missing
    assert count("", "noise").insertions == 1 and count("", "noise").rate is None


@pytest.mark.unit
def test_wer_normalises_case_punctuation_numbers_and_fillers_alike():
    same = [("Um, can I pay €25 on the 1st?", "can i pay twenty-five euros on the first"),
            ("Is the 0 1 9 9 code OK at 3 PM?", "is the 0199 code okay at 3 p.m."),
            ("They're charging 10% on £1,200.", "they are charging ten percent on 1200 pounds"),
            ("It was twenty twenty six", "it was 2026")]
    for said, heard in same:
        assert normalize_words(said) == normalize_words(heard), (said, heard)
        assert count(said, heard).errors == 0
    # a restart is speech: losing its repeated word is an error; a hesitation sound is not
    assert count("uh, I, I want to pay", "I want to pay").deletions == 1


@pytest.mark.unit
def test_wer_counts_add_up_per_group():
    total = WerCount()
    for c in (count("a b c d", "a b c d"), count("a b", "a x")):
        total.add(c)
    assert (total.files, total.words, total.errors) == (2, 6, 1)
    assert total.as_dict()["wer"] == round(1 / 6, 4)


# ------------------------------------------------------------------------------ the variation table


@pytest.mark.unit
def test_every_domain_of_24_gets_every_condition():
    conds = sc.deal(24, "airline", 7)
    assert {c.voice.label for c in conds} == {v.label for v in sc.VOICES}
    assert Counter(c.channel.name for c in conds) == {ch.name: 6 for ch in sc.CHANNELS}
    assert Counter(c.style for c in conds) == {"hesitant": 4, "fast": 3, "plain": 17}
    assert sc.deal(24, "airline", 7) == conds and sc.deal(24, "bank", 7) != conds
    for c in conds:
        if c.style != "fast":
            assert c.voice in sc.VOICES, c
            continue
        base = next(v for v in sc.VOICES if sc.styled(v, "fast") == c.voice)
        assert c.voice.speed > base.speed if base.engine == "espeak" else c.voice.speed < base.speed, c


@pytest.mark.unit
def test_a_hesitant_caller_says_every_word_and_more():
    text = "Can I get a refund if I cancel my annual plan early?"
    said = {sc.hesitant(text, case_rng(f"t{i}")) for i in range(12)}
    assert len(said) > 3  # fillers and restarts vary with the case
    for s in said:
        words = s.lower().replace(",", "").split()
        it = iter(words)
        assert all(w in it for w in text.lower().split()), s  # the question's words, in order
        assert len(words) >= len(text.split()) + 2  # an opener and a restart at least


# ------------------------------------------------------------------------------ generation


def _read(path: Path) -> tuple[int, float]:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2), f"{path}: not mono PCM16"
        return w.getframerate(), w.getnframes() / w.getframerate()


@pytest.mark.audio
@pytest.mark.slow
def test_generated_files_match_their_manifest(generated):
    out = generated[0] / DOMAIN
    manifest = yaml.safe_load((out / "manifest.yaml").read_text(encoding="utf-8"))
    entries, cases = manifest["files"], _cases()
    assert manifest["domain"] == DOMAIN and len(entries) == 3
    assert {p.name for p in out.glob("*.wav")} == {e["file"] for e in entries}
    assert {e["channel"] for e in entries} == {"wideband", "telephone", "noise-heavy"}
    assert [e["style"] for e in entries].count("hesitant") == 1
    for e in entries:
        rate, duration = _read(out / e["file"])
        assert rate == e["sample_rate"] == (8000 if e["telephone"] else 16000), e["id"]
        assert abs(duration - e["duration_s"]) < 0.02 and e["domain"] == DOMAIN
        case = cases[e["id"]]
        assert not case.get("faults") and e["bucket"] == case["bucket"]
        assert e["texts"] == case.get("turns", [case.get("question")])
        assert (e["noise"] is not None) == (e["channel"] == "noise-heavy")
        if e["style"] == "hesitant":
            assert all(len(s.split()) > len(t.split()) for s, t in zip(e["spoken"], e["texts"]))
        else:
            assert e["spoken"] == [speakable(t) for t in e["texts"]]


@pytest.mark.audio
@pytest.mark.slow
def test_generation_is_deterministic(generated):
    a, b = (g / DOMAIN for g in generated)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "manifest.yaml" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.slow
def test_generator_bad_input_is_one_line(tmp_path):
    for args, expected in [(("--domain", "nosuch"), "unknown domain 'nosuch'"),
                           (("--per-domain", "0"), "at least 1"),
                           (("--corpus", tmp_path / "none"), "corpus directory not found")]:
        proc = _run("scripts/make_domain_audio.py", "--out", tmp_path / "out", *args, timeout=60)
        assert proc.returncode == 2 and expected in proc.stderr.strip().splitlines()[-1], proc.stderr
    missing = tmp_path / "corpus" / "lost"
    missing.mkdir(parents=True)
    (missing / "domain.yaml").write_text("kb: kb\ncases: cases.yaml\n")
    proc = _run("scripts/make_domain_audio.py", "--corpus", tmp_path / "corpus", "--out", tmp_path / "out",
                timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot read cases file" in proc.stderr


@pytest.mark.audio
@pytest.mark.slow
def test_corpus_voice_eval_writes_every_spoken_case_with_its_voice(generated, tmp_path):
    """`eval --corpus --audio-dir --out`: the voice-against-text rows per channel and per voice, and
    each spoken case beside its typed twin, as data; only the domain with recordings is heard."""
    proc = _run("run.py", "eval", "--corpus", ROOT / "fixtures" / "domains", "--audio-dir", generated[0],
                "--no-refit", "--json", "--out", tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    data = json.loads((tmp_path / "voice.json").read_text(encoding="utf-8"))
    assert printed == data and list(data["domains"]) == [DOMAIN]
    manifest = {e["id"]: e for e in yaml.safe_load((generated[0] / DOMAIN / "manifest.yaml").read_text())["files"]}
    assert {c["id"]: c["voice"] for c in data["cases"]} == {i: e["voice"] for i, e in manifest.items()}
    assert all(c["heard"] and c["heard"][0].startswith("heard: ") for c in data["cases"])
    voices = {r["group"]: r for r in data["voices"]}
    assert set(voices) == {e["voice"] for e in manifest.values()} | {"ALL"}
    assert sum(r["cases"] for n, r in voices.items() if n != "ALL") == voices["ALL"]["cases"] == 3
    assert voices["ALL"]["voice_pass"] == pytest.approx(sum(c["voice_ok"] for c in data["cases"]) / 3, abs=1e-3)
    again = _run("run.py", "eval", "--corpus", ROOT / "fixtures" / "domains", "--audio-dir", generated[0],
                 "--no-refit", "--against", tmp_path / "voice.json", timeout=600)  # the same recordings, heard again
    passed = sum(c["voice_ok"] for c in data["cases"])
    assert again.returncode == 0 and f"spoken cases passed {passed} -> {passed} of 3" in again.stdout, again.stderr


# ------------------------------------------------------------------------------ bench wer


@pytest.mark.audio
@pytest.mark.slow
def test_bench_wer_on_generated_files(generated):
    parent, again = generated
    proc = _run("run.py", "bench", "wer", "--audio-dir", parent, "--audio-dir", again / DOMAIN, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["overall"]["files"] == 6 and result["groups"]["domain"][DOMAIN]["files"] == 6
    assert set(result["groups"]["channel"]) == {"wideband", "telephone", "noise-heavy"}
    words = sum(len(normalize_words(s)) for e in yaml.safe_load(
        (parent / DOMAIN / "manifest.yaml").read_text(encoding="utf-8"))["files"] for s in e["spoken"])
    assert result["overall"]["words"] == 2 * words
    assert 0.0 <= result["overall"]["wer"] < 0.5  # synthetic speech: whisper hears most of it
    assert result["cores"] >= 1 and len(result["load_avg"]) == 3


@pytest.mark.slow
def test_bench_wer_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.yaml").write_text("files:\n- file: gone.wav\n  spoken: [hello]\n")
    for args, expected in [(("--audio-dir", tmp_path / "none"), "no such folder"),
                           (("--audio-dir", tmp_path / "empty"), "no manifest.yaml"),
                           (("--audio-dir", bad), "listed in"),
                           (("--audio-dir", bad, "--limit", "-1"), "--limit")]:
        proc = _run("run.py", "bench", "wer", *args, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
