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
    "handoffs": ("policy.cli_handoffs", "List stored handoff packages"),
    "eval": ("evaluation.cli", "Run gold cases and print the metrics"),
    "policy-stats": ("evaluation.policy_stats", "Count the policy's hand-written patterns and word lists"),
    "train": ("evaluation.train", "Fit the answerability scorer on a corpus of domains"),
    "calibrate": ("policy.calibrate", "Fit policy thresholds for a KB on its gold cases"),
    "replay": ("voice_agent.replay", "Play a recorded call through the voice path"),
    "mic": ("voice_agent.mic", "Talk to the agent through the microphone"),
    "serve": ("voice_agent.server", "Run the websocket server (native + Twilio)"),
    "client": ("voice_agent.client", "Stream a WAV file to a running server"),
    "bench": ("voice_agent.bench", "Benchmarks: retrieval | decide | voice | load"),
}


def usage() -> str:
    lines = ["usage: python3 run.py COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<13} {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run `python3 run.py COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; run `python3 run.py --help`", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.cli(rest) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `run.py schema | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
