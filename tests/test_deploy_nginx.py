"""The README's reverse proxy, run: nginx (Debian's package) on a free loopback port with a fresh
self-signed certificate and `deploy/nginx.conf` rendered as the README says, in front of a real
`run.py serve` whose `twilio:` section points at the REST stand-in. One Twilio call goes through it
over wss:// (the only scheme Twilio streams to): key 0, the spoken transfer, the mark, the echo,
and the call moved once. In CI (CI set) a missing nginx fails the test instead of skipping it."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.twilio_helpers import StandIn, TwilioPeer, twilio_section
from voice_agent.bench_load import start_server, stop_server

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None)
    if found is None:
        message = "nginx is not installed (scripts/setup.sh --test installs it: apt-get install nginx)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, valid for a day (openssl CLI)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def start_nginx(prefix: Path, listen: int, upstream: int, cert: Path, key: Path) -> subprocess.Popen:
    return run_nginx(prefix, "nginx.conf", listen, {"UPSTREAM": f"127.0.0.1:{upstream}"}, cert, key)


def run_nginx(prefix: Path, name: str, listen: int, upstreams: dict[str, str], cert: Path,
              key: Path) -> subprocess.Popen:
    """deploy/`name` rendered (its @...@ placeholders) under `prefix`, running until terminated."""
    conf = (ROOT / "deploy" / name).read_text()
    for name, value in (("LISTEN", f"127.0.0.1:{listen}"), *upstreams.items(), ("CERT", str(cert)), ("KEY", str(key))):
        conf = conf.replace(f"@{name}@", value)
    assert not [ln for ln in conf.splitlines() if "@" in ln.split("#")[0]]  # every placeholder rendered
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    (prefix / "nginx.conf").write_text(conf)
    proc = subprocess.Popen([nginx_binary(), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=open(prefix / "nginx.log", "wb"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"nginx exited {proc.returncode}: {(prefix / 'nginx.log').read_text()[-800:]}")
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("nginx did not listen within 20 s")


def test_a_twilio_call_through_nginx_over_wss(tmp_path):
    nginx_binary()
    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(cafile=str(cert))  # trusts exactly this certificate
    with StandIn() as api:
        (tmp_path / "server.yaml").write_text(yaml.safe_dump({"twilio": twilio_section(api.base_url)}))
        server, port = start_server(str(ROOT / "fixtures" / "kb"), tmp_path, max_calls=2, asr_model="tiny.en")
        proxy = None
        try:
            listen = free_port()
            proxy = start_nginx(tmp_path / "nginx", listen, port, cert, key)
            with urllib.request.urlopen(f"https://127.0.0.1:{listen}/healthz", context=ctx, timeout=10) as r:
                assert json.load(r)["ready"] is True  # plain HTTPS goes through too

            async def call() -> TwilioPeer:
                from websockets.asyncio.client import connect

                async with connect(f"wss://127.0.0.1:{listen}/twilio", ssl=ctx, compression=None) as ws:
                    peer = TwilioPeer(ws)
                    await peer.start()
                    await peer.press("0")
                    await peer.wait_mark("transfer:", timeout=90)
                    deadline = time.monotonic() + 20
                    while not api.requests and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    await peer.stop()
                    await peer.closed(60)
                    return peer

            peer = asyncio.run(call())
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(10)
            assert stop_server(server) == 0
    names = peer.marks()
    assert names[-2].startswith("reply:") and names[-1].startswith("transfer:"), names
    assert len(api.requests) == 1 and "<Enqueue>support</Enqueue>" in api.updates(peer.call_sid)[0].form["Twiml"]
    hid = names[-1].split(":", 1)[1]
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines() if line.strip()]
    assert [(r["handoff_id"], r["ok"]) for r in audit if r.get("kind") == "transfer_redirect"] == [(hid, True)]
