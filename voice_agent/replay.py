"""`run.py replay`: play a recorded call (one caller turn, or several separated by silence)
through the voice path and print what was heard and decided; write the spoken replies."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from kb.jsontypes import JsonObject
from kb.loader import kb_dir_error
from policy.cli import fail, positive_seconds
from policy.store_api import StoreError
from policy.store_select import add_store_arg, open_store

from .audio import AudioError, float_to_pcm16, pcm16_to_float, resample, write_wav
from .audio_files import MAX_SECONDS, read_audio
from .call import CallConfig, VoiceRuntime
from .interfaces import CallRuntime

SR = 16000
GAP_S = 0.4  # silence between replies in the written reply audio


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py replay", description=__doc__)
    p.add_argument("wav", help="the caller's recording (WAV; any rate, mono or stereo)")
    p.add_argument("--kb", required=True, help="knowledge base directory")
    p.add_argument("--out", default="out/reply.wav", help="where to write the reply audio (default: out/reply.wav)")
    p.add_argument("--role", default="public", help="caller role for document permissions (default: public)")
    p.add_argument("--facet", action="append", default=[], metavar="KEY=VALUE",
                   help="a known caller facet, e.g. customer_type=business (repeatable)")
    p.add_argument("--asr-model", default="tiny.en", help="tiny.en (default), base, or a CTranslate2 model dir")
    p.add_argument("--policy", default=None, help="policy YAML (default: the built-in policy)")
    p.add_argument("--state-dir", default="var", help="where audits and handoffs are stored (default: var)")
    p.add_argument("--json", action="store_true", help="one JSON object per turn, then one with the reply path")
    p.add_argument("--max-audio-s", type=positive_seconds, default=MAX_SECONDS,
                   help=f"refuse a recording longer than this many seconds (default: {MAX_SECONDS:g})")
    add_store_arg(p)
    return p


async def replay(runtime: CallRuntime, pcm: np.ndarray, *, role: str = "public", facets: dict[str, str] | None = None
                 ) -> tuple[list[JsonObject], np.ndarray]:
    """Feed a 16 kHz recording through one call; returns (turns, reply audio at 16 kHz)."""
    # Fed faster than real time: barge-in would cut replies short, so it is off here.
    call = runtime.new_call(role=role, facets=facets, config=CallConfig(barge_in=False, output_rate=SR, reply_lead_s=None))
    turns: list[JsonObject] = []
    audio: dict[str, list[bytes]] = {}
    order: list[str] = []

    async def consume() -> None:
        async for ev in call.events():
            if ev.type == "transcript":
                turns.append({"turn": len(turns) + 1, "transcript": ev.text, "heard": ev.raw_text,
                              "low_confidence": ev.low_confidence})
            elif ev.type == "decision":
                d = ev.decision.public_dict()
                if turns and turns[-1].get("decision") is not None and "tts_unavailable" in d["reasons"]:
                    turns[-1]["decision"] = d  # TTS failed: the turn became a transfer
                    continue
                if not turns or turns[-1].get("decision") is not None:
                    turns.append({"turn": len(turns) + 1, "transcript": None})
                turns[-1]["decision"] = d
                turns[-1]["timings_ms"] = {k: round(v, 1) for k, v in ev.timings_ms.items()}
            elif ev.type == "audio_start":
                order.append(ev.id)
                audio[ev.id] = []
            elif ev.type == "audio_chunk":
                audio.setdefault(ev.id, []).append(ev.data)
            elif ev.type == "error":
                print(f"warning: {ev.code}: {ev.message}", file=sys.stderr)

    consumer = asyncio.create_task(consume())
    data = float_to_pcm16(pcm)
    step = SR // 50 * 2  # 20 ms
    for i in range(0, len(data), step):
        await call.feed_audio(data[i : i + step])
    await call.feed_audio(b"\x00" * (SR * 2))  # a second of silence closes the last turn
    await call.end_of_input()
    await call.close()
    await consumer
    gap = np.zeros(int(GAP_S * SR), dtype=np.float32)
    parts: list[np.ndarray] = []
    for rid in order:
        if parts:
            parts.append(gap)
        parts.append(pcm16_to_float(b"".join(audio[rid])))
    return turns, (np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32))


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    kb = Path(args.kb)
    if err := kb_dir_error(kb):
        return fail(err)
    try:
        pcm, sr = read_audio(args.wav, args.max_audio_s)
    except AudioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if len(pcm) == 0:
        print(f"error: {args.wav}: the recording is empty", file=sys.stderr)
        return 2
    facets = {}
    for f in args.facet:
        if "=" not in f:
            print(f"error: --facet {f!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        k, v = f.split("=", 1)
        facets[k.strip()] = v.strip()
    try:
        store = open_store(args.store, args.state_dir)
    except StoreError as e:
        return fail(str(e))
    try:
        runtime = VoiceRuntime.load(kb, asr_model=args.asr_model, state_dir=args.state_dir, policy_file=args.policy,
                                    store=store)
    except Exception as e:  # noqa: BLE001 - a CLI reports, it does not dump a traceback
        store.shutdown()
        print(f"error: cannot start the voice path: {e}", file=sys.stderr)
        return 2
    if args.role not in runtime.engine.roles():
        runtime.close()
        print(f"error: unknown role {args.role!r}; this knowledge base knows: "
              f"{', '.join(sorted(runtime.engine.roles()))}", file=sys.stderr)
        return 2
    try:
        turns, reply = asyncio.run(replay(runtime, resample(pcm, sr, SR), role=args.role, facets=facets))
    finally:
        runtime.close()
    if not turns:
        print(f"error: {args.wav}: no caller speech found", file=sys.stderr)
        return 1
    for t in turns:
        if args.json:
            print(json.dumps(t, ensure_ascii=False))
        else:
            print(f"turn {t['turn']}: heard {t.get('transcript')!r}")
            print(json.dumps(t.get("decision"), ensure_ascii=False))
    try:
        out = write_wav(args.out, reply, SR)
    except AudioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"reply_audio": str(out), "seconds": round(len(reply) / SR, 2)}) if args.json
          else f"reply audio: {out}")
    return 0
