"""Headless Chromium driven over the Chrome DevTools Protocol (its own websocket; no playwright),
with a WAV file as the fake microphone; and a check that a screenshot really shows an element
(its colour fills its box)."""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection

WIDTH, HEIGHT = 1000, 1500  # CSS pixels at scale 1: a rect from the DOM is a rect in the screenshot


def chromium_path() -> str:
    """Debian's chromium; installed on first use (`apt-get install -y chromium`)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    try:
        subprocess.run(["apt-get", "install", "-y", "chromium"], check=True, timeout=600,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"chromium is not installed and `apt-get install -y chromium` failed: {e}")
    path = shutil.which("chromium")
    if not path:
        pytest.skip("chromium not found after apt-get install")
    return path


class Browser:
    """Headless Chromium with a fake microphone playing `wav` (looped), driven over CDP."""

    def __init__(self, url: str, wav: Path, profile: Path):
        self.profile = profile
        args = [
            chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required",
            f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars",
            "--remote-debugging-port=0", "--remote-allow-origins=*", url,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=open(profile.parent / f"{profile.name}-chromium.log", "wb"))
        self.ws: ClientConnection | None = None
        self._ids = itertools.count(1)

    async def connect(self, timeout: float = 30.0) -> None:
        from websockets.asyncio.client import connect

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        page = None
        while page is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                page = next((t for t in json.load(r) if t.get("type") == "page"), None)
            if page is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no page target in chromium")
                await asyncio.sleep(0.1)
        self.ws = await connect(page["webSocketDebuggerUrl"], max_size=2**26)
        await self.call("Emulation.setDeviceMetricsOverride",
                        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})

    async def call(self, method: str, params: dict[str, object]) -> dict:
        assert self.ws is not None
        mid = next(self._ids)
        await self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def evaluate(self, expression: str) -> object:
        """Runtime.evaluate with the value returned by value (promises awaited)."""
        res = await self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"page error: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.2)
        return None

    async def screenshot(self, path: Path) -> Path:
        res = await self.call("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(res["data"]))
        return path

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def colour_share(png: Path, rect: dict[str, float], rgb: tuple[int, int, int], tol: int = 40) -> float:
    """Share of the pixels inside `rect` (CSS px: x, y, width, height) within `tol` of `rgb`."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    x0, y0 = int(rect["x"]), int(rect["y"])
    box = img[y0:y0 + int(rect["height"]), x0:x0 + int(rect["width"])]
    if box.size == 0:
        return 0.0
    close = np.abs(box - np.array(rgb)).max(axis=2) <= tol
    return float(close.mean())
