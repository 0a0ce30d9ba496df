"""The web config file: the exporter toolkit's format read and checked, with clear one-line errors
that never show a hash; bcrypt credentials checked (and cached) without telling names apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
import trustme

from logmetrics.serve import webconfig
from logmetrics.serve.webconfig import Authenticator, LiveWebConfig, WebConfigError

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """A directory holding a CA, a server certificate and key for localhost."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    return tmp_path


def write(path: Path, text: str) -> str:
    """Write a web config file and give its path."""
    path.write_text(text)
    return str(path)


def test_relative_paths_are_read_from_the_files_directory(certs: Path) -> None:
    """cert_file and friends are relative to the web config's directory, and the file loads whole."""
    path = write(certs / "web.yml", f"""
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS13
basic_auth_users:
  alice: {HASH}
""")
    cfg = webconfig.load(path)
    assert cfg.tls is not None and cfg.tls.cert_file == str(certs / "server.crt")
    assert cfg.tls.client_ca_file == str(certs / "ca.crt") and cfg.tls.min_version == "TLS13"
    assert set(cfg.users) == {"alice"}
    assert "TLS (min TLS13" in webconfig.summary(path) and "1 user" in webconfig.summary(path)


@pytest.mark.parametrize(("text", "want"), [
    ("nonsense: 1\n", "nonsense: unknown key"),
    ("tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file: missing"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Maybe\n",
     "client_auth_type: 'Maybe' is not one of"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "client_ca_file: missing"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS10\n",
     "min_version: 'TLS10' is not one of"),
    ("tls_server_config:\n  cert_file: nowhere.crt\n  key_file: server.key\n", "cannot load"),
    ("basic_auth_users:\n  bob: $1$notbcryptatall\n", "basic_auth_users.bob: not a bcrypt hash"),
    ("basic_auth_users: [a, b]\n", "basic_auth_users: must be a mapping"),
    ("tls_server_config: [\n", "not valid YAML"),
])
def test_a_broken_file_is_one_line_naming_file_key_and_reason(certs: Path, text: str, want: str) -> None:
    """Each kind of mistake is refused with one line that names the file, the key and the reason."""
    path = write(certs / "web.yml", text)
    with pytest.raises(WebConfigError) as info:
        webconfig.load(path)
    msg = str(info.value)
    assert msg.startswith(f"web config {path}: ") and want in msg and "\n" not in msg, msg
    assert "notbcryptatall" not in msg


def test_unknown_http_server_config_keys_are_warned_and_ignored(tmp_path: Path) -> None:
    """http_server_config is accepted; what it sets is named in a warning and otherwise ignored."""
    cfg = webconfig.load(write(tmp_path / "web.yml", "http_server_config:\n  http2: false\n"))
    assert cfg.tls is None and not cfg.users
    assert cfg.warnings == (f"web config {tmp_path / 'web.yml'}: http_server_config.http2 is not supported "
                            "here and is ignored",)


def test_credentials_are_checked_and_successes_cached() -> None:
    """Right credentials pass (and are cached); a wrong password or an unknown user fails and is not cached."""
    auth = Authenticator({"alice": HASH.encode()})
    assert not auth.cached("alice", "s3cret")
    assert auth.check("alice", "s3cret") and auth.cached("alice", "s3cret")
    assert not auth.check("alice", "wrong") and not auth.cached("alice", "wrong")
    assert not auth.check("mallory", "s3cret") and not auth.check("", "")
    assert auth._dummy is not None and auth._dummy[4:6] == b"04"  # an unknown name costs a bcrypt of the same cost


def test_a_broken_reload_keeps_the_running_config(tmp_path: Path) -> None:
    """A change that breaks the file is refused once with one line and the old users stay; a good one is taken."""
    path = tmp_path / "web.yml"
    write(path, f"basic_auth_users:\n  alice: {HASH}\n")
    said: list[str] = []
    live = LiveWebConfig(str(path), on_failure=said.append)
    write(path, "basic_auth_users:\n  alice: [oops\n")
    live.refresh(force=True)
    live.refresh(force=True)  # the same broken file: not told twice
    assert live.failures == 1 and len(said) == 1 and said[0].startswith(f"web config {path}: not valid YAML")
    assert set(live.auth.users) == {"alice"}
    write(path, f"basic_auth_users:\n  bob: {HASH}\n")
    live.refresh(force=True)
    assert live.reloads == 1 and set(live.auth.users) == {"bob"}


def test_check_config_checks_the_web_config_it_names(tmp_path: Path) -> None:
    """check-config reads the web_config the file names: a broken one is exit code 2 naming it."""
    web = tmp_path / "web.yml"
    write(web, f"basic_auth_users:\n  alice: {HASH}\n")
    (tmp_path / "lm.toml").write_text('web_config = "web.yml"\n[[input]]\npath = "/var/log/x.log"\n')
    run = [sys.executable, "-m", "logmetrics", "check-config", str(tmp_path / "lm.toml")]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "basic auth for 1 user(s)" in ok.stdout, ok.stdout + ok.stderr
    write(web, "basic_auth_users:\n  alice: plain-text-password\n")
    bad = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr == (f"logmetrics: error: {tmp_path / 'lm.toml'}: web config {web}: "
                                                  "basic_auth_users.alice: not a bcrypt hash ($2a$, $2b$ or $2y$, "
                                                  "60 characters)\n")
    assert "plain-text-password" not in bad.stderr + bad.stdout
