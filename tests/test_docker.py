"""The Dockerfile: statically, it copies every package the wheel ships; where a Docker daemon
answers, the image builds and answers a question from its bundled sample KB."""
from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.unit
def test_the_dockerfile_copies_every_shipped_package():
    dockerfile = (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    top = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert top <= copied, f"packages not copied into the image: {sorted(top - copied)}"
    assert "HF_HUB_OFFLINE=1" in dockerfile  # models come from pip packages, never a hub


def _daemon() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _daemon(), reason="no Docker daemon answers here (`docker info` fails)")
def test_the_image_builds_and_answers():
    tag = "voice-agent-test:latest"
    subprocess.run(["docker", "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    out = subprocess.run(["docker", "run", "--rm", tag, "ask", "--kb", "/app/sample-kb", "--state-dir", "/tmp/s",
                          "How do I set up my voicemail?"], capture_output=True, text=True, timeout=300, check=True)
    decision = json.loads(out.stdout)
    assert decision["action"] == "answer" and decision["citations"]
