"""Local servers for the benchmarks and the tests: `run.py serve --port 0` started as a process
(its port read off its first stdout line) and stopped with SIGTERM, its resident memory, and the
caller audio a load replays."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEXT = "What number do I call to pay my bill over the phone?"


def rss_mb(pid: int) -> tuple[float | None, float | None]:
    """(current, peak) resident set size of a process in MiB, from /proc (Linux)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, None
    vals = {k: int(v) / 1024.0 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}
    return (round(vals["VmRSS"], 1) if "VmRSS" in vals else None, round(vals["VmHWM"], 1) if "VmHWM" in vals else None)


def tree_rss_mb(pid: int) -> float | None:
    """RSS of the server plus its children (the TTS worker process)."""
    total, seen = 0.0, False
    pids = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(k) for k in kids]
    except OSError:
        pass
    for p in pids:
        now, _ = rss_mb(p)
        if now is not None:
            total += now
            seen = True
    return round(total, 1) if seen else None


def default_wav(tmp: Path) -> Path:
    """A recorded question: a fixture whose case expects an answer, else espeak-ng speech."""
    audio = ROOT / "fixtures" / "audio"
    manifest = audio / "manifest.yaml"
    if manifest.exists():
        try:
            files = (yaml.safe_load(manifest.read_text()) or {}).get("files") or []
            clean = [f for f in files if isinstance(f, dict) and f.get("bucket") == "direct_evidence"
                     and f.get("kind") == "question" and not f.get("noise") and not f.get("telephone")]
            for f in clean:
                p = audio / str(f.get("file") or f"{f.get('id')}.wav")
                if p.exists():
                    return p
        except Exception:
            pass  # a manifest we cannot read: fall back to any fixture WAV
    for p in sorted(audio.glob("*.wav")) if audio.is_dir() else []:
        return p
    if not shutil.which("espeak-ng"):
        raise RuntimeError("no fixture audio under fixtures/audio and no espeak-ng to make some; pass --wav FILE")
    out = tmp / "question.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(out), DEFAULT_TEXT], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def start_server(kb: str, state_dir: Path, *, max_calls: int | None, asr_model: str, timeout: float = 180.0,
                 extra: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """Start `run.py serve --port 0` on loopback; returns (process, port) once it listens."""
    cfg = state_dir / "server.yaml"
    if not cfg.exists():
        cfg.write_text("{}\n")  # no tokens; ignore any ./server.yaml of the working directory
    cmd = [sys.executable, str(ROOT / "run.py"), "serve", "--kb", kb, "--host", "127.0.0.1", "--port", "0",
           "--config", str(cfg), "--state-dir", str(state_dir), "--asr-model", asr_model, *(extra or [])]
    if max_calls is not None:
        cmd += ["--max-calls", str(max_calls)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = open(state_dir / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, cwd=str(ROOT))
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    buf = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (state_dir / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"server exited with {proc.returncode}: {' | '.join(tail)}")
        chunk = proc.stdout.read() or b""
        buf += chunk
        m = re.search(rb"listening on ws://[^:]+:(\d+)", buf)
        if m:
            os.set_blocking(proc.stdout.fileno(), True)
            return proc, int(m.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"server did not start listening within {timeout:.0f}s")


def stop_server(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return int(proc.returncode)
