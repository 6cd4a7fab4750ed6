"""One way to log, for the server and its TTS workers: every line on stderr is one JSON object
(python-json-logger), the libraries' lines included, so a log shipper never parses free text."""
from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

# LogRecord's own attribute names: an event field with one of these names is renamed, not lost
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def configure_logging(level: int | str = logging.INFO, **static: str) -> None:
    """Route the root logger (and so every library's logger) through one JSON formatter.
    `static` fields go on every line (e.g. component="tts_worker")."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                       rename_fields={"levelname": "level", "asctime": "ts"},
                                       static_fields=dict(static), json_ensure_ascii=False,
                                       datefmt="%Y-%m-%dT%H:%M:%S%z"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)  # a library's warnings.warn becomes a JSON line too


MAX_FIELD_CHARS = 500  # a caller's text or a peer's error can be anything: a log line stays bounded
MAX_FIELD_ITEMS = 50


def event_fields(event: str, fields: dict[str, object]) -> dict[str, object]:
    """The `extra` of one event line: its name and fields, renaming any that LogRecord owns, with
    long text and long lists cut (saying how much was left out)."""
    return {"event": event, **{(f"{k}_" if k in _RESERVED else k): capped(v) for k, v in fields.items()}}


def capped(v: object, depth: int = 0) -> object:
    if isinstance(v, str):
        return v if len(v) <= MAX_FIELD_CHARS else f"{v[:MAX_FIELD_CHARS]}…(+{len(v) - MAX_FIELD_CHARS} chars)"
    if depth >= 2:
        return v
    if isinstance(v, (list, tuple)):
        items = [capped(x, depth + 1) for x in v[:MAX_FIELD_ITEMS]]
        return items + [f"…(+{len(v) - MAX_FIELD_ITEMS} items)"] if len(v) > MAX_FIELD_ITEMS else items
    if isinstance(v, dict):
        return {k: capped(x, depth + 1) for k, x in list(v.items())[:MAX_FIELD_ITEMS]}
    return v
