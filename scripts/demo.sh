#!/usr/bin/env bash
# The main job: set up, then a demo call on the bundled sample KB. A recorded multi-turn caller call
# goes through VAD, faster-whisper, the refusal policy, the pre-TTS recheck and piper; transcripts and
# decisions are printed and the agent's spoken reply is written to out/demo-reply.wav.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/python run.py replay --kb fixtures/kb "${1:-fixtures/audio/mt06.wav}" --out out/demo-reply.wav
