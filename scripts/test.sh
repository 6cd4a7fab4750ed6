#!/usr/bin/env bash
# Set up (including Chromium for the browser test), type-check, then run the whole test suite.
# Fast subset for development: .venv/bin/python -m pytest -m unit
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export HF_HUB_OFFLINE=1
# The PostgreSQL tests fail (not skip) here when the database does not answer: setup made it available.
export VOICE_AGENT_REQUIRE_PG=1
# Types first: kb, policy, voice_agent and evaluation must check clean ([tool.mypy] in pyproject.toml).
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q "$@"
