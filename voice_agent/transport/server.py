"""`run.py serve`: the websocket server. It only routes: native protocol at `/v1/call`, Twilio
Media Streams at `/twilio`, the page and `/healthz` over HTTP (CONTRACT §5, docs/PROTOCOL.md).
One conversation per connection; `connection.py` holds what every endpoint shares."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from typing import cast

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request

from kb.loader import kb_dir_error
from policy.cli import iso_date
from policy.store_api import HandoffStore, StoreError
from policy.store_select import add_store_arg, open_store
from voice_agent.call import VoiceRuntime
from voice_agent.logs import configure_logging
from voice_agent.stages.tts import TtsPool

from .config import ServerConfig, ServerConfigError, load_server_config
from .native import handle_native
from .protocol import PROTOCOL_VERSION, event_schemas
from .routes import process_request_for
from .state import LOG, ServerState, log_event
from .twilio import handle_twilio

__all__ = ["ServerState", "open_server", "server_port", "run_until_signal", "cli"]

# websockets closes with 1009 on its own above this; between max_frame_bytes and this we answer
# `frame_too_large` first so the client learns why.
HARD_FRAME_FACTOR = 4


async def open_server(state: ServerState, host: str = "127.0.0.1", port: int = 0) -> Server:
    """Start listening; returns the websockets Server (its port: `server_port(server)`)."""
    async def handler(ws: ServerConnection) -> None:
        # The handler runs after the handshake, so the request is there.
        path = cast(Request, ws.request).path.split("?", 1)[0]
        if path == "/twilio":
            await handle_twilio(ws, state)
        else:
            await handle_native(ws, state)

    return await serve(
        handler, host, port,
        process_request=process_request_for(state),
        max_size=state.config.max_frame_bytes * HARD_FRAME_FACTOR,
        compression=None,  # audio does not compress; deflate would only burn the 2 cores
        ping_interval=20, ping_timeout=20, close_timeout=5,
    )


def server_port(server: Server) -> int:
    return int(next(iter(server.sockets)).getsockname()[1])


async def run_until_signal(state: ServerState, host: str, port: int) -> int:
    """Serve until SIGTERM/SIGINT, then stop accepting, let in-flight turns finish, exit 0."""
    server = await open_server(state, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    actual = server_port(server)
    # Tests and `bench load` read this line to learn the port (`--port 0` picks a free one).
    print(f"listening on ws://{host}:{actual} (native /v1/call, twilio /twilio, page /)", flush=True)
    log_event("listening", host=host, port=actual, max_calls=state.config.max_calls, pid=os.getpid())
    await stop.wait()
    log_event("shutdown", active_calls=state.active)
    state.shutting_down.set()  # handlers drain their in-flight turn, then close 1001
    server.close(close_connections=False)
    try:
        await asyncio.wait_for(server.wait_closed(), state.config.drain_timeout_s + 5)
    except asyncio.TimeoutError:
        LOG.warning("shutdown: connections still open after the drain timeout; closing them")
    if state.webhook is not None:
        await state.webhook.flush(5.0)  # the last transfers' desk notifications
    log_event("stopped", calls_total=state.calls_total, busy_total=state.busy_total)
    return 0


def _parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py serve", description="Run the websocket server (native /v1/call + Twilio /twilio + page /).")
    ap.add_argument("--kb", help="knowledge base directory")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed on stdout)")
    ap.add_argument("--config", help="server YAML (tokens, limits); default ./server.yaml when present")
    ap.add_argument("--max-calls", type=int, help="concurrent-call limit (overrides the config)")
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--state-dir", default="var", help="where audits and handoff packages are stored")
    ap.add_argument("--date", type=iso_date, help="decide as of this ISO date, not today (demos and tests of a "
                    "dated KB)")
    ap.add_argument("--policy", help="policy YAML (default: the built-in policy)")
    ap.add_argument("--tts-workers", type=int, default=None,
                    help="piper worker processes shared by all calls (default: one per concurrent call, at most 4)")
    ap.add_argument("--print-schemas", action="store_true", help="print the JSON Schema of every protocol event and exit")
    add_store_arg(ap)
    return ap.parse_args(argv)


def _args_error(args: argparse.Namespace) -> str | None:
    """What is wrong with --kb / --port / --max-calls, if anything."""
    if not args.kb:
        return "serve needs --kb DIR (the knowledge base to answer from)"
    if err := kb_dir_error(args.kb):
        return err
    if not (0 <= args.port <= 65535):
        return f"--port {args.port}: must be 0..65535"
    if args.max_calls is not None and not 1 <= args.max_calls <= 256:
        return f"--max-calls {args.max_calls}: must be 1..256"
    return None


def _load_runtime(args: argparse.Namespace, config: ServerConfig, tts_workers: int,
                  store: HandoffStore) -> VoiceRuntime | None:
    """The voice runtime with its TTS worker(s); None (after saying why) when it cannot be loaded
    or the config's tokens name roles no document uses."""
    try:
        t0 = time.monotonic()
        runtime = VoiceRuntime.load(args.kb, asr_model=args.asr_model, state_dir=args.state_dir,
                                    policy_file=args.policy, tts=tts_workers == 1, store=store)
        runtime.engine.on_date = args.date
        if tts_workers > 1:
            # Concurrent calls: with one worker every reply waits for the whole previous reply
            # to render; a small pool lets replies start in parallel.
            runtime.tts = TtsPool(tts_workers).start()
        if problem := _config_vs_kb(config, runtime, args.kb):
            runtime.close()  # its TTS worker, and the second model still warming (exiting mid-decode aborts)
            print(f"error: {args.config or 'server config'}: {problem}", file=sys.stderr)
            return None
        log_event("runtime_loaded", seconds=round(time.monotonic() - t0, 2), kb=args.kb, tts_workers=tts_workers)
    except Exception as e:  # a bad KB, a missing model package: one actionable line, no traceback
        print(f"error: cannot load the voice runtime for {args.kb}: {e}", file=sys.stderr)
        return None
    return runtime


def _config_vs_kb(config: ServerConfig, runtime: VoiceRuntime, kb: str) -> str | None:
    """Token roles and Twilio teams the KB does not know: a typo would fail only on a live call."""
    engine = runtime.engine
    unknown = sorted(set(config.tokens.values()) - engine.roles())
    if unknown:
        return (f"token role(s) {', '.join(unknown)} not used by any document of {kb} "
                f"(known: {', '.join(sorted(engine.roles()))})")
    teams = {engine.config.default_team} | {t for role in engine.roles() for t in engine.teams(role)}
    unknown = sorted(set(config.twilio.teams) - teams) if config.twilio else []
    if unknown:
        return f"twilio.teams: {', '.join(unknown)} not a handoff team of {kb} (known: {', '.join(sorted(teams))})"
    return None


def _serve(args: argparse.Namespace, runtime: VoiceRuntime, config: ServerConfig) -> int:
    """Serve until signalled, then close the runtime (TTS workers) and flush the logs."""
    async def main() -> int:
        state = ServerState(runtime, config, asr_model=args.asr_model, audit=runtime.engine.audit,
                            store=runtime.engine.store, checkpoints=runtime.engine.store)
        try:
            return await run_until_signal(state, args.host, args.port)
        except OSError as e:
            print(f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
            return 2

    try:
        rc = asyncio.run(main())
    finally:
        close = getattr(runtime, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                LOG.warning("runtime close failed", exc_info=True)
        logging.shutdown()  # flush the log handlers before the process exits
    return rc


def cli(argv: list[str]) -> int:
    args = _parse_args(argv)
    if args.print_schemas:
        print(json.dumps({"protocol": PROTOCOL_VERSION, "events": event_schemas()}, indent=2))
        return 0
    if problem := _args_error(args):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        config = load_server_config(args.config)
    except ServerConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.max_calls is not None:
        config = config.model_copy(update={"max_calls": args.max_calls})
    tts_workers = args.tts_workers if args.tts_workers is not None else min(config.max_calls, 4)
    if not 1 <= tts_workers <= 16:
        print(f"error: --tts-workers {tts_workers}: must be 1..16", file=sys.stderr)
        return 2
    configure_logging(logging.INFO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        store = open_store(args.store, args.state_dir)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runtime = _load_runtime(args, config, tts_workers, store)
    if runtime is None:
        store.shutdown()
        return 2
    return _serve(args, runtime, config)
