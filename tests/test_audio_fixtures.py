"""The generated audio fixtures match their manifest and cover the gold cases' buckets."""
import wave
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
AUDIO = ROOT / "fixtures" / "audio"


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load((AUDIO / "manifest.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cases() -> dict[str, dict]:
    data = yaml.safe_load((ROOT / "fixtures" / "cases.yaml").read_text())
    return {c["id"]: c for c in (data["cases"] if isinstance(data, dict) else data)}


def _read(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2), f"{path}: not mono PCM16"
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        return x, w.getframerate()


def test_every_manifest_entry_exists_and_is_plausible(manifest):
    for e in manifest["files"]:
        x, rate = _read(AUDIO / e["file"])
        assert rate == e["sample_rate"] == (8000 if e["telephone"] else 16000), e["id"]
        duration = len(x) / rate
        assert abs(duration - e["duration_s"]) < 0.02, e["id"]
        words = sum(len(t.split()) for t in e["texts"])
        # roughly 1.5-5 words per second of speech, plus padding and turn gaps
        assert words / 5 < duration < words / 1.2 + 1.2 + 1.5 * len(e["texts"]), e["id"]
        assert 0.3 <= e["lead_silence_s"] <= 0.6 and 0.3 <= e["trail_silence_s"] <= 0.6
        assert 0.05 < float(np.max(np.abs(x))) <= 1.0, f"{e['id']}: silent or clipped"
        if not e["noise"]:  # padding is silent unless noise was mixed in
            assert float(np.max(np.abs(x[: int(0.25 * rate)]))) < 0.01, e["id"]


def test_wav_files_and_manifest_agree(manifest):
    listed = {e["file"] for e in manifest["files"]}
    on_disk = {p.name for p in AUDIO.glob("*.wav")}
    assert listed == on_disk


def test_selection_matches_cases_and_covers_buckets(manifest, cases):
    entries = manifest["files"]
    singles = [e for e in entries if e["kind"] == "question"]
    calls = [e for e in entries if e["kind"] == "call"]
    assert len(singles) >= 44 and len(calls) >= 6
    for e in entries:
        case = cases[e["id"]]
        assert not case.get("faults"), e["id"]
        assert e["bucket"] == case.get("bucket")
        assert e["texts"] == ([case["question"]] if e["kind"] == "question" else case["turns"])
    spoken_buckets = {e["bucket"] for e in entries}
    # every bucket that has a case without injected faults is covered
    expected = {c.get("bucket") for c in cases.values() if not c.get("faults")}
    assert expected <= spoken_buckets, expected - spoken_buckets


def test_variety_of_conditions(manifest):
    entries = manifest["files"]
    singles = [e for e in entries if e["kind"] == "question"]
    voices = {e["voice"] for e in entries}
    assert "piper:joe" in voices and sum(v.startswith("espeak:") for v in voices) >= 4
    noisy = [e for e in singles if e["noise"]]
    assert len(singles) / 4 <= len(noisy) <= len(singles) / 2
    assert len({e["noise"]["snr_db"] for e in noisy}) >= 3
    assert 6 <= sum(e["telephone"] for e in singles) <= 12
    espeak_speeds = {e["speed"] for e in entries if e["voice"].startswith("espeak:")}
    assert min(espeak_speeds) >= 140 and max(espeak_speeds) <= 190 and len(espeak_speeds) >= 4


def test_total_size_is_small():
    total = sum(p.stat().st_size for p in AUDIO.iterdir())
    assert total < 15_000_000, total
