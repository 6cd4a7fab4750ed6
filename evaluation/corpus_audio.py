"""`run.py eval --corpus DIR --audio-dir AUDIO`: every domain's spoken cases (AUDIO/<domain>/<id>.wav,
as scripts/make_domain_audio.py writes them) through the voice path, each beside the same case typed,
so the table shows what hearing costs per domain and per channel. Leave-one-domain-out like the text
corpus: a domain's scorer is fitted on the other domains. Sealed domains have no recordings here."""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from policy.config import Costs

from .audio_gap import (GapRow, Pair, channel_reader, gap_rows, gap_tables, hearing_lines, reheard_line, text_twins,
                        voice_reader)
from .corpus import Domain, Engines, Fitted, Fitter
from .corpus_diff import DiffError, read_run
from .evaluate import AudioSetup, costs_of, run_cases, run_text_case, scratch
from .metrics import CaseResult

MAX_AUDIO_S = 600.0


@dataclass
class DomainAudio:
    name: str
    rows: list[GapRow]  # per channel, then ALL
    pairs: list[Pair]
    channel_of: Callable[[CaseResult], str]
    voice_of: Callable[[CaseResult], str]
    costs: Costs


def score_domain_audio(d: Domain, folder: Path, audio_setup: AudioSetup,
                       fitted: Callable[[], Fitted] | None) -> DomainAudio:
    cases = [c for c in d.cases if (folder / f"{c.id}.wav").is_file() and not c.faults]
    engine, runner = audio_setup(str(d.kb), tempfile.mkdtemp(prefix=f"voice-agent-audio-{d.name}-"), None,
                                 d.cases.today, "public", MAX_AUDIO_S)
    try:
        if fitted is not None:
            fitted().apply(engine)  # fitted without this domain
        scratch(engine)
        results = run_cases(engine, cases, audio_dir=folder, audio_runner=runner)
    finally:
        close = getattr(runner, "close", None)
        if close is not None:
            close()
    pairs = text_twins(results, lambda r: run_text_case(engine, r.case))
    channel_of = channel_reader(folder)
    costs = costs_of(engine)
    return DomainAudio(d.name, gap_rows(pairs, channel_of, costs), pairs, channel_of, voice_reader(folder), costs)


def audio_corpus(domains: list[Domain], audio_root: Path, audio_setup: AudioSetup, engines: Engines,
                 fit: Fitter | None, progress: Callable[[str], None] | None = None) -> list[DomainAudio]:
    """Each open domain with a folder of recordings under `audio_root`, by name."""
    pool = [d for d in domains if not d.sealed]
    out = []
    for d in pool:
        folder = audio_root / d.name
        if not folder.is_dir():
            continue
        fitted = (lambda d=d: fit([x for x in pool if x.name != d.name], engines)) if fit is not None else None
        out.append(score_domain_audio(d, folder, audio_setup, fitted))
        if progress:
            progress(d.name)
    return out


def format_audio_corpus(scored: list[DomainAudio], failures: bool = False) -> str:
    head = f"{'domain':<14}{'cases':>6}{'voice':>8}{'text':>8}{'gap':>8}{'unsafe v/t':>12}{'phone gap':>11}  human requests"
    lines = ["voice against text, the same cases, per domain:", head, "-" * len(head)]
    for da in scored:
        all_, phone = da.rows[-1], next((r for r in da.rows if r.group == "telephone"), None)
        humans = f"{all_.human_transferred}/{all_.human_requests}" if all_.human_requests else "-"
        lines.append(f"{da.name:<14}{all_.cases:>6}{all_.voice_pass:>8.3f}{all_.text_pass:>8.3f}{all_.gap:>+8.3f}"
                     f"{f'{all_.voice_unsafe}/{all_.text_unsafe}':>12}{(f'{phone.gap:+.3f}' if phone else '-'):>11}  {humans}")
    if scored:
        worst = min(scored, key=lambda da: da.rows[-1].gap)
        lines.append(f"worst gap: {worst.name} {worst.rows[-1].gap:+.3f}")
        pairs, channel_of, voice_of = _pooled(scored)
        lines += ["", "all domains, per channel and per voice:"]
        lines.append(gap_tables(pairs, channel_of, voice_of, scored[0].costs))
        lines.append(reheard_line(pairs))
    if failures:
        for da in scored:
            for v, _ in da.pairs:
                if not v.ok:
                    lines.append(f"  {da.name}/{v.case.id} [{v.case.bucket}]: {'; '.join(v.failures)}")
                    lines += [f"      {x}" for x in hearing_lines(v)]
    return "\n".join(lines)


def _row(r: GapRow) -> dict[str, object]:
    return {**asdict(r), "gap": round(r.gap, 4)}


def _pooled(scored: list[DomainAudio]) -> tuple[list[Pair], Callable[[CaseResult], str], Callable[[CaseResult], str]]:
    """Every domain's (voice, text) pairs together, with each spoken case's channel and voice."""
    pairs = [p for da in scored for p in da.pairs]
    by_channel = {id(v): da.channel_of(v) for da in scored for v, _ in da.pairs}
    by_voice = {id(v): da.voice_of(v) for da in scored for v, _ in da.pairs}
    return pairs, lambda r: by_channel[id(r)], lambda r: by_voice[id(r)]


def audio_corpus_json(scored: list[DomainAudio]) -> dict[str, object]:
    """The run as data (`--out DIR` writes it to DIR/voice.json, `--json` prints it): the tables'
    rows, and each spoken case with its channel, voice, both outcomes and what was heard."""
    pairs, channel_of, voice_of = _pooled(scored)
    costs = scored[0].costs if scored else Costs()
    return {
        "domains": {da.name: [_row(r) for r in da.rows] for da in scored},
        "channels": [_row(r) for r in gap_rows(pairs, channel_of, costs)],
        "voices": [_row(r) for r in gap_rows(pairs, voice_of, costs, order=None)],
        "cases": [{"domain": da.name, "id": v.case.id, "bucket": v.case.bucket, "channel": channel_of(v),
                   "voice": voice_of(v), "voice_ok": v.ok, "text_ok": t.ok, "failures": v.failures,
                   "heard": hearing_lines(v)} for da in scored for v, t in da.pairs],
    }


def load_voice_run(path: str | Path) -> dict[str, object]:
    """An earlier run's voice.json (`eval --corpus --audio-dir --out DIR`), checked."""
    data = read_run(path, "voice")
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(cases, list) or not all(
            isinstance(c, dict) and {"domain", "id", "voice_ok"} <= set(c) for c in cases):
        raise DiffError(f"{path}: not a voice run (expected the voice.json that `eval --corpus --audio-dir --out DIR` "
                        "writes)")
    return data


def diff_voice_runs(before: dict[str, object], now: dict[str, object]) -> list[str]:
    """Spoken cases gained and lost since an earlier run of the same recordings, with what was heard
    then and now: a change to the voice path moves cases it does not touch, so look at which moved."""
    def index(run: dict[str, object]) -> dict[str, dict]:
        return {f"{c['domain']}/{c['id']}": c for c in run["cases"]}  # type: ignore[attr-defined]

    old, new = index(before), index(now)
    both = sorted(old.keys() & new.keys())
    gained = [k for k in both if new[k]["voice_ok"] and not old[k]["voice_ok"]]
    lost = [k for k in both if old[k]["voice_ok"] and not new[k]["voice_ok"]]
    unsafe = [next((r["voice_unsafe"] for r in run.get("voices", []) if r.get("group") == "ALL"), "?")  # type: ignore[attr-defined]
              for run in (before, now)]
    out = [f"voice against the earlier run: spoken cases passed {sum(old[k]['voice_ok'] for k in both)} -> "
           f"{sum(new[k]['voice_ok'] for k in both)} of {len(both)}, unsafe voice answers {unsafe[0]} -> {unsafe[1]}"]
    for tag, keys in (("gained", gained), ("lost  ", lost)):
        for k in keys:
            out.append(f"  {tag} {k} [{new[k].get('voice', '')}]")
            out += [f"      before {x}" for x in old[k].get("heard", [])]
            out += [f"      now    {x}" for x in new[k].get("heard", [])]
    if missing := len(new.keys() - old.keys()):
        out.append(f"  {missing} spoken cases not in the earlier run")
    return out
