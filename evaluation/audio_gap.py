"""Voice against text on the same cases: for `eval --audio-dir`, each spoken case is also run on the
text path, and the two are compared per recording channel (wideband, noisy, telephone band) and per
voice (the synthesiser and voice that spoke it), as the audio directory's `manifest.yaml` records
them. What the voice path loses is what ASR costs; the per-voice rows show whether it loses it on
every speaker or on a few hard ones."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from policy.decision import Action

from .metrics import CaseResult, Costs, summarize

CHANNELS = ("wideband", "noisy", "telephone")
UNKNOWN_VOICE = "(not named)"
Pair = tuple[CaseResult, CaseResult]  # a case spoken, and the same case typed


def channel_reader(audio_dir: Path) -> Callable[[CaseResult], str]:
    """A spoken case's channel, from the directory's manifest."""
    channels = channels_of(audio_dir)
    return lambda r: channels.get(r.case.id, "wideband")


def voice_reader(audio_dir: Path) -> Callable[[CaseResult], str]:
    """A spoken case's voice ("espeak:en-gb-scotland"), from the directory's manifest."""
    voices = voices_of(audio_dir)
    return lambda r: voices.get(r.case.id, UNKNOWN_VOICE)


def _manifest_files(audio_dir: Path) -> list[dict]:
    path = audio_dir / "manifest.yaml"
    try:
        files = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("files") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    return [f for f in files if isinstance(f, dict) and f.get("id")]


def channels_of(audio_dir: Path) -> dict[str, str]:
    """Case id → channel from the directory's manifest; an unlisted file counts as wideband."""
    return {str(f["id"]): "telephone" if f.get("telephone") else "noisy" if f.get("noise") else "wideband"
            for f in _manifest_files(audio_dir)}


def voices_of(audio_dir: Path) -> dict[str, str]:
    """Case id → the voice that spoke it, as the manifest names it (a recording of a real caller, or
    a manifest without voices, has none)."""
    return {str(f["id"]): str(f["voice"]) for f in _manifest_files(audio_dir) if f.get("voice")}


@dataclass
class GapRow:
    group: str  # the channel, or in a per-voice table the voice
    cases: int
    voice_pass: float
    text_pass: float
    voice_unsafe: int
    text_unsafe: int
    human_requests: int  # spoken human-request cases on this channel …
    human_transferred: int  # … of which the voice path transferred on every turn

    @property
    def gap(self) -> float:
        return self.voice_pass - self.text_pass


def _human_transferred(r: CaseResult) -> bool:
    return bool(r.turns) and all(t.decision.action == Action.transfer for t in r.turns)


def text_twins(results: list[CaseResult], text_run: Callable[[CaseResult], CaseResult]) -> list[Pair]:
    """Each spoken case beside the same case run on the text path."""
    return [(r, text_run(r)) for r in results if r.mode == "audio"]


def gap_rows(pairs: list[Pair], group_of: Callable[[CaseResult], str], costs: Costs,
             order: tuple[str, ...] | None = CHANNELS) -> list[GapRow]:
    """One row per group present (channels in `order`; with `order` None, whatever groups
    `group_of` gives, by name), then ALL, over (voice, text) pairs of the same cases."""
    rows = []
    names = order if order is not None else tuple(sorted({group_of(v) for v, _ in pairs}))
    groups = [(c, [p for p in pairs if group_of(p[0]) == c]) for c in names]
    for name, group in [g for g in groups if g[1]] + [("ALL", pairs)]:
        if not group:
            continue
        voice, text = summarize([v for v, _ in group], costs), summarize([t for _, t in group], costs)
        humans = [v for v, _ in group if v.case.bucket == "human_request"]
        rows.append(GapRow(group=name, cases=len(group), voice_pass=voice["case_pass_rate"] or 0.0,
                           text_pass=text["case_pass_rate"] or 0.0, voice_unsafe=voice["unsafe_answers"],
                           text_unsafe=text["unsafe_answers"],
                           human_requests=len(humans), human_transferred=sum(map(_human_transferred, humans))))
    return rows


def format_gap(rows: list[GapRow], label: str = "channel") -> str:
    width = max([12, *(len(r.group) + 2 for r in rows)])
    head = f"{label:<{width}}{'cases':>6}{'voice':>8}{'text':>8}{'gap':>8}{'unsafe v/t':>12}  human requests transferred"
    lines = ["voice against text, the same cases:", head, "-" * len(head)]
    for r in rows:
        humans = f"{r.human_transferred}/{r.human_requests}" if r.human_requests else "-"
        lines.append(f"{r.group:<{width}}{r.cases:>6}{r.voice_pass:>8.3f}{r.text_pass:>8.3f}{r.gap:>+8.3f}"
                     f"{f'{r.voice_unsafe}/{r.text_unsafe}':>12}  {humans}")
    return "\n".join(lines)


def gap_tables(pairs: list[Pair], channel_of: Callable[[CaseResult], str], voice_of: Callable[[CaseResult], str],
               costs: Costs) -> str:
    """The per-channel table, and the per-voice one where the recordings name their voices."""
    out = format_gap(gap_rows(pairs, channel_of, costs))
    if any(voice_of(v) != UNKNOWN_VOICE for v, _ in pairs):
        out += "\n\n" + format_gap(gap_rows(pairs, voice_of, costs, order=None), "voice")
    return out


def hearing_lines(r: CaseResult) -> list[str]:
    """A failed spoken case's turns as the voice path took them: what ASR heard, what its second
    pass changed, and how the policy read it (fillers, numbers, KB words repaired)."""
    lines = []
    for t in r.turns:
        heard = t.heard or t.transcript or "(nothing)"
        line = f"heard: {heard}"
        if t.heard and t.transcript:
            line += f"  | second pass: {t.transcript}"
        if t.said and t.said != (t.transcript or ""):
            line += f"  | read as: {t.said}"
        lines.append(line)
    return lines


def reheard_line(pairs: list[Pair]) -> str:
    """What hearing again did: turns whose words a second hearing changed, and how their cases ended."""
    changed = [(v, t) for v, _ in pairs for t in v.turns if t.heard]
    unsafe = sum(t.decision.action == Action.answer and t.expected is not None and Action.answer not in t.expected
                 for _, t in changed)
    cases = {id(v): v for v, _ in changed}.values()
    passed = sum(v.ok for v in cases)
    return (f"heard again and changed: {len(changed)} turns of {len(cases)} cases; {passed} of those cases passed, "
            f"{unsafe} turns answered where they should not")
