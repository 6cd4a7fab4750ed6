#!/usr/bin/env python3
"""Command line of the voice agent. A thin dispatcher: each command lives in its module
and is imported only when used, so `--help` and the text path stay fast."""
from __future__ import annotations

import importlib
import os
import sys

# Models come from pip packages; never let a library reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("policy.cli", "Answer one typed question: prints the Decision JSON"),
    "schema": ("policy.cli_schema", "Print the JSON Schema of the Decision"),
    "handoffs": ("policy.cli_handoffs", "The handoff desk: list, follow, claim and close handoffs"),
    "kb": ("policy.cli_kb", "Knowledge base tools: `kb check --kb DIR` lints a KB"),
    "eval": ("voice_agent.eval_audio", "Run gold cases and print the metrics"),
    "policy-stats": ("evaluation.policy_stats", "Count the policy's hand-written patterns and word lists"),
    "train": ("evaluation.train", "Fit the answerability scorer on a corpus of domains"),
    "calibrate": ("evaluation.calibrate", "Fit policy thresholds for a KB on its gold cases"),
    "replay": ("voice_agent.replay", "Play a recorded call through the voice path"),
    "mic": ("voice_agent.mic", "Talk to the agent through the microphone"),
    "serve": ("voice_agent.transport.server", "Run the websocket server (native + Twilio)"),
    "client": ("voice_agent.client", "Stream a WAV file to a running server"),
    "bench": ("run", "Benchmarks: retrieval | decide | voice | load | store"),
}
BENCHES: dict[str, str] = {
    "retrieval": "kb.bench",  # index build + hybrid query latency at N sections
    "decide": "evaluation.bench_decide",  # retrieval + policy + compose + recheck per turn
    "voice": "voice_agent.bench_voice",  # end of caller speech -> first reply audio
    "load": "voice_agent.bench_load",  # concurrent calls against a local server
    "store": "evaluation.bench_store",  # handoff write and commit -> desk latency, JSONL vs PostgreSQL
    "wer": "voice_agent.bench_wer",  # ASR word error rate on generated recordings, per voice/channel/domain
}


def usage() -> str:
    lines = ["usage: python3 run.py COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<13} {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run `python3 run.py COMMAND --help` for a command's options."]
    return "\n".join(lines)


def bench(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python3 run.py bench {{{'|'.join(BENCHES)}}} [options]", file=sys.stderr)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"error: unknown benchmark {argv[0]!r}; choose one of {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(BENCHES[argv[0]]).cli(argv[1:]) or 0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; run `python3 run.py --help`", file=sys.stderr)
        return 2
    entry = bench if name == "bench" else importlib.import_module(COMMANDS[name][0]).cli
    try:
        return int(entry(rest) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `run.py schema | head`
        sys.stderr.close()
        return 0


def entry() -> None:
    """The `voice-agent` console command of an installed package."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
