"""The `twilio:` server config section (checked at load, the environment winning over the file),
the TwiML each destination gets, and the one-line errors `run.py serve` gives for a bad section."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from voice_agent.transport.config import ServerConfigError, load_server_config
from voice_agent.transport.twilio_config import Destination
from voice_agent.transport.twilio_rest import describe_error, rebase, twiml_for

ROOT = Path(__file__).resolve().parent.parent
SID_A, SID_B = "AC" + "a" * 32, "AC" + "b" * 32
GOOD = f"""twilio:
  account_sid: {SID_A}
  auth_token: file-token
  teams:
    billing: {{dial: "+15550100"}}
    tech_support: {{sip: "sip:desk@example.com"}}
  default: {{enqueue: support}}
"""


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None):
    p = tmp_path / "server.yaml"
    p.write_text(text)
    return load_server_config(p, env=env or {})


@pytest.mark.unit
def test_a_good_section_maps_teams_and_falls_back_to_the_default(tmp_path):
    t = load(tmp_path, GOOD).twilio
    assert t is not None and t.account_sid == SID_A and t.auth_token == "file-token" and t.api_base is None
    assert t.destination("billing").describe() == "dial +15550100"
    assert t.destination("tech_support").describe() == "sip sip:desk@example.com"
    assert t.destination("legal").describe() == t.destination(None).describe() == "enqueue support"
    assert load(tmp_path, "max_calls: 2\n").twilio is None  # no section: transfers stay a mark only
    assert "file-token" not in repr(t)  # the secret never reaches a log through repr


@pytest.mark.unit
@pytest.mark.parametrize("teams,says", [
    ('{billing: {dial: "+15550100", sip: "sip:a@b.com"}}', "twilio.teams.billing: give exactly one of dial, sip, "
                                                             "enqueue (got dial, sip)"),
    ("{billing: {}}", "twilio.teams.billing: give exactly one of dial, sip, enqueue (got none)"),
    ('{billing: {dial: "call me"}}', "twilio.teams.billing: dial 'call me' is not a phone number"),
    ('{billing: {sip: "desk.example.com"}}', "is not a SIP address"),
    ('{billing: {phone: "+15550100"}}', "twilio.teams.billing.phone: Extra inputs are not permitted"),
    ('{billing: "+15550100"}', "twilio.teams.billing"),
    ('{"": {enqueue: q}}', "team names must be non-empty"),
])
def test_a_bad_team_entry_is_one_line_naming_it(tmp_path, teams, says):
    text = GOOD.replace('''teams:
    billing: {dial: "+15550100"}
    tech_support: {sip: "sip:desk@example.com"}''', f"teams: {teams}")
    with pytest.raises(ServerConfigError) as e:
        load(tmp_path, text)
    assert says in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path))


@pytest.mark.unit
@pytest.mark.parametrize("edit,says", [
    (("  default: {enqueue: support}\n", ""), "twilio.default: Field required"),
    (("file-token", "file-token\n  api_base: ftp://proxy"), "twilio.api_base: 'ftp://proxy' is not a base URL"),
    ((SID_A, "ACnope"), "twilio.account_sid: 'ACnope' is not an account SID"),
    (("  auth_token: file-token\n", ""), "twilio: no auth_token: give it in the file or in TWILIO_AUTH_TOKEN"),
    (("teams:", "timeout_s: 0\n  teams:"), "twilio.timeout_s"),
])
def test_a_bad_section_is_one_line(tmp_path, edit, says):
    with pytest.raises(ServerConfigError) as e:
        load(tmp_path, GOOD.replace(*edit))
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.unit
def test_the_environment_wins_over_the_file(tmp_path):
    env = {"TWILIO_ACCOUNT_SID": SID_B, "TWILIO_AUTH_TOKEN": "env-token", "TWILIO_API_BASE": "http://127.0.0.1:9/"}
    t = load(tmp_path, GOOD, env).twilio
    assert t is not None and (t.account_sid, t.auth_token, t.api_base) == (SID_B, "env-token", "http://127.0.0.1:9")
    # credentials from the environment alone: the file need not hold the secret
    bare = GOOD.replace(f"  account_sid: {SID_A}\n  auth_token: file-token\n", "")
    t = load(tmp_path, bare, {"TWILIO_ACCOUNT_SID": SID_B, "TWILIO_AUTH_TOKEN": "env-token"}).twilio
    assert t is not None and (t.account_sid, t.auth_token) == (SID_B, "env-token")
    with pytest.raises(ServerConfigError, match="no account_sid or auth_token"):
        load(tmp_path, bare)
    with pytest.raises(ServerConfigError, match=r"with the environment's TWILIO_\*\): account_sid"):
        load(tmp_path, GOOD, {"TWILIO_ACCOUNT_SID": "not-a-sid"})


@pytest.mark.unit
def test_twiml_per_destination_is_escaped():
    dial = twiml_for(Destination(dial="+1 555 0100"))
    assert "<Dial><Number>+15550100</Number></Dial><Say>" in dial  # a desk that does not answer: say so
    assert "<Dial><Sip>sip:desk@example.com</Sip></Dial>" in twiml_for(Destination(sip="sip:desk@example.com"))
    q = twiml_for(Destination(enqueue="R&D <team>"))
    assert q.endswith("<Response><Enqueue>R&amp;D &lt;team&gt;</Enqueue></Response>")


@pytest.mark.unit
def test_the_api_base_replaces_scheme_and_host_only():
    url = f"https://api.twilio.com/2010-04-01/Accounts/{SID_A}/Calls/CA1.json"
    assert rebase(url, "http://127.0.0.1:8080") == f"http://127.0.0.1:8080/2010-04-01/Accounts/{SID_A}/Calls/CA1.json"
    assert rebase(url, None) == url


@pytest.mark.unit
def test_errors_are_one_line():
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from twilio.base.exceptions import TwilioRestException

    e = TwilioRestException(500, "https://x", msg="Internal error\nmore", code=20500, method="POST")
    assert describe_error(e) == "HTTP 500 (Twilio error 20500): Internal error"
    assert describe_error(RequestsConnectionError("refused\nat 127.0.0.1")) == "ConnectionError: refused"


@pytest.mark.slow
def test_serve_refuses_a_bad_section_and_a_team_the_kb_does_not_know(tmp_path):
    def serve(text: str) -> subprocess.CompletedProcess:
        cfg = tmp_path / "server.yaml"
        cfg.write_text(text)
        return subprocess.run([sys.executable, str(ROOT / "run.py"), "serve", "--kb", str(ROOT / "fixtures" / "kb"),
                               "--port", "0", "--config", str(cfg), "--state-dir", str(tmp_path / "var")],
                              capture_output=True, text=True, timeout=180, cwd=ROOT)

    p = serve(GOOD.replace('{dial: "+15550100"}', '{dial: "+15550100", enqueue: billing}'))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [f"error: {tmp_path / 'server.yaml'}: twilio.teams.billing: give exactly "
                                             "one of dial, sip, enqueue (got dial, enqueue)"]
    p = serve(GOOD.replace("billing:", "biling:"))
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "twilio.teams: biling not a handoff team of" in last and "billing" in last, p.stderr[-500:]
