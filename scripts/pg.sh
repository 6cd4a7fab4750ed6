#!/usr/bin/env bash
# PostgreSQL for the tests (marker pg); run by `scripts/setup.sh --test`.
#
# If the database the tests use answers ($VOICE_AGENT_TEST_PG, else
# postgresql://postgres@127.0.0.1:5432/test), there is nothing to do. Otherwise install Debian's
# postgresql package if needed and start a throwaway cluster (trust auth on 127.0.0.1, database
# `test`) on 5432 or a free port, and write its URL to .cache/pg/url, where tests/conftest.py
# finds it. Its data lives under .cache/pg (or /tmp when the checkout is not readable by the
# postgres user that root must run it as).
#   bash scripts/pg.sh           make PostgreSQL available
#   bash scripts/pg.sh --local   start the throwaway cluster even if the default answers
#   bash scripts/pg.sh --stop    stop the throwaway cluster
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEFAULT=postgresql://postgres@127.0.0.1:5432/test
dir=$PWD/.cache/pg
mode=${1:-}

say() { echo "setup: $*" >&2; }

answers() {  # whether a database answers at URL $1 (psycopg comes with the test extra)
  "$PY" -c 'import sys, psycopg; psycopg.connect(sys.argv[1], connect_timeout=3).close()' "$1" >/dev/null 2>&1
}

as_owner() {  # initdb and pg_ctl refuse to run as root: run them as the postgres user then
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

datadir() { cat "$dir/datadir" 2>/dev/null || true; }

if [ "$mode" = --stop ]; then
  d=$(datadir)
  if [ -n "$d" ] && as_owner "$(bindir)/pg_ctl" -D "$d" status >/dev/null 2>&1; then
    as_owner "$(bindir)/pg_ctl" -D "$d" -m fast -w stop >/dev/null
  fi
  say "throwaway PostgreSQL stopped"
  exit 0
fi

if [ -n "${VOICE_AGENT_TEST_PG:-}" ]; then
  answers "$VOICE_AGENT_TEST_PG" && { say "PostgreSQL for the tests: \$VOICE_AGENT_TEST_PG answers"; exit 0; }
  say "error: \$VOICE_AGENT_TEST_PG does not answer: $VOICE_AGENT_TEST_PG"
  exit 1
fi
if [ "$mode" != --local ] && answers "$DEFAULT"; then
  say "PostgreSQL for the tests answers at $DEFAULT"
  rm -f "$dir/url"  # the tests use the default, not an older throwaway cluster
  exit 0
fi

if [ -z "$(bindir)" ]; then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo"
  say "installing Debian's postgresql package"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
bin=$(bindir)
mkdir -p "$dir"

data=$(datadir)
if [ -z "$data" ] || [ ! -f "$data/PG_VERSION" ]; then
  data=$dir/data
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$dir"; then
    data=$(mktemp -d /tmp/voice-agent-pg.XXXXXX)  # the postgres user cannot reach the checkout
  fi
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres: "$data" && chmod 700 "$data"
  echo "$data" > "$dir/datadir"
  say "creating a throwaway PostgreSQL cluster in $data"
  as_owner "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 >/dev/null
fi

if ! as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  port=$("$PY" - <<'EOF'
import socket
for port in (5432, 0):  # the default port when it is free, else any free one
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
EOF
)
  as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $data" start >/dev/null
else
  port=$(sed -n 4p "$data/postmaster.pid")
fi
url=postgresql://postgres@127.0.0.1:$port/test
if ! answers "$url"; then
  "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres test
fi
answers "$url" || { say "error: the throwaway PostgreSQL does not answer at $url (log: $data/server.log)"; exit 1; }
echo "$url" > "$dir/url"
say "PostgreSQL for the tests: $url (stop it with: bash scripts/pg.sh --stop)"
