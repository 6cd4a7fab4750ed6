#!/usr/bin/env bash
# Set up (including Chromium for the browser test), then run the whole test suite.
# Fast subset for development: .venv/bin/python -m pytest -m unit
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -q "$@"
