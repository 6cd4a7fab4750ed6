"""One REST call: move a live Twilio call off the media stream to a person, with TwiML that
dials the team's number or SIP address, or puts the caller in the team's queue. Blocking (the
official `twilio` package uses requests): the transfer runs it in a thread, with a timeout."""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from .twilio_config import Destination, TwilioConfig

__all__ = ["twiml_for", "redirect_call", "describe_error", "NO_ANSWER_MESSAGE"]

# Said when a dialled desk does not answer (TwiML goes on after <Dial>); a queue waits instead.
NO_ANSWER_MESSAGE = ("Nobody could take your call just now. Your request is saved, and someone will call you "
                     "back.")


def twiml_for(dest: Destination) -> str:
    """The TwiML the call runs instead of the stream. Built with the package's TwiML writer, so
    a configured value is always escaped."""
    from twilio.twiml.voice_response import Dial, VoiceResponse  # optional heavy import: only when a call is moved

    r = VoiceResponse()
    if dest.enqueue is not None:
        r.enqueue(dest.enqueue)
        return str(r)
    dial = Dial()
    if dest.sip is not None:
        dial.sip(dest.sip)
    else:
        dial.number((dest.dial or "").replace(" ", ""))
    r.append(dial)
    r.say(NO_ANSWER_MESSAGE)
    return str(r)


def redirect_call(cfg: TwilioConfig, call_sid: str, dest: Destination) -> None:
    """`POST /2010-04-01/Accounts/{sid}/Calls/{call_sid}.json` with `Twiml`; raises on any
    failure (HTTP error, timeout, refused connection). Never retried: a second update of a call
    already moved could ring a second person."""
    from twilio.rest import Client  # optional heavy import (requests, aiohttp): only when a call is moved

    client = Client(cfg.account_sid, cfg.auth_token, http_client=_http_client(cfg.api_base, cfg.timeout_s))
    client.calls(call_sid).update(twiml=twiml_for(dest))


def _http_client(api_base: str | None, timeout_s: float) -> object:
    """The package's own HTTP client (the documented way to change how it sends requests), with
    the scheme and host of every URL replaced by `api_base` when one is set (a regional proxy,
    or a local stand-in in tests). `max_retries=0`: exactly one request per update."""
    from twilio.http.http_client import TwilioHttpClient  # optional heavy import, as above

    class BaseUrlClient(TwilioHttpClient):
        def request(self, method: str, url: str, *args: object, **kw: object) -> object:
            return super().request(method, rebase(url, api_base), *args, **kw)

    return BaseUrlClient(timeout=timeout_s, max_retries=0)


def rebase(url: str, api_base: str | None) -> str:
    """`url` on `api_base`'s scheme and host (its path and query kept)."""
    if not api_base:
        return url
    base, u = urlsplit(api_base), urlsplit(url)
    return urlunsplit((base.scheme, base.netloc, u.path, u.query, u.fragment))


def describe_error(e: BaseException) -> str:
    """One line for the log and the audit: the HTTP status and Twilio's message, or the
    exception's own first line (a timeout, a refused connection)."""
    status = getattr(e, "status", None)
    if isinstance(status, int):
        code = getattr(e, "code", None)
        msg = str(getattr(e, "msg", "") or "").strip().splitlines()
        return f"HTTP {status}" + (f" (Twilio error {code})" if code else "") + (f": {msg[0]}" if msg else "")
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}"[:300] if text else type(e).__name__
