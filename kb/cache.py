"""On-disk cache of section embeddings, keyed by KB content hash + model id.

Layout: `<cache>/embeddings/<kb_version>-<model_id>.npy` plus a `.json` manifest holding
the shape, dtype, a sha256 of the array bytes and a hash of the exact embedded texts.
Anything that does not check out (missing, truncated, wrong shape, checksum mismatch)
is treated as absent and rebuilt, never trusted.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["cache_root", "texts_digest", "load_embeddings", "save_embeddings", "cache_paths"]


def cache_root(cache_dir: Path | str | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("VOICE_AGENT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "voice_agent"


def texts_digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "big") + b)
    return h.hexdigest()


def cache_paths(root: Path, kb_version: str, model_id: str) -> tuple[Path, Path]:
    base = root / "embeddings" / f"{kb_version}-{model_id}"
    return base.with_suffix(".npy"), base.with_suffix(".json")


def load_embeddings(root: Path, kb_version: str, model_id: str, texts: list[str]) -> tuple[np.ndarray | None, str]:
    """(array, "hit") when a valid cache entry exists, else (None, why-not)."""
    npy, man = cache_paths(root, kb_version, model_id)
    if not npy.exists() or not man.exists():
        return None, "miss"
    try:
        manifest = json.loads(man.read_text("utf-8"))
        raw = npy.read_bytes()
        if hashlib.sha256(raw).hexdigest() != manifest["sha256"]:
            return None, "corrupt: checksum mismatch"
        arr = np.load(npy, allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"corrupt: {type(e).__name__}: {e}"
    if list(arr.shape) != [len(texts), manifest.get("dim")] or arr.dtype != np.float32:
        return None, f"corrupt: shape {arr.shape} {arr.dtype}"
    if manifest.get("texts_sha256") != texts_digest(texts):
        return None, "stale: embedded texts differ"
    if not np.isfinite(arr).all():
        return None, "corrupt: non-finite values"
    return arr, "hit"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_embeddings(root: Path, kb_version: str, model_id: str, texts: list[str], arr: np.ndarray) -> Path:
    """Write array then manifest, each atomically (a reader never sees half a file)."""
    npy, man = cache_paths(root, kb_version, model_id)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
    raw = buf.getvalue()
    _atomic_write(npy, raw)
    manifest = {
        "kb_version": kb_version, "model_id": model_id, "rows": int(arr.shape[0]),
        "dim": int(arr.shape[1]), "dtype": "float32", "sha256": hashlib.sha256(raw).hexdigest(),
        "texts_sha256": texts_digest(texts),
    }
    _atomic_write(man, json.dumps(manifest, indent=1).encode("utf-8"))
    return npy
