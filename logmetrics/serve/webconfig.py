"""The web config file (``--web-config``): TLS and basic authentication for the HTTP endpoint.

The format is the Prometheus exporter toolkit's: ``tls_server_config`` (``cert_file``,
``key_file``, ``client_auth_type``, ``client_ca_file``, ``min_version``, ``max_version``),
``basic_auth_users`` (user name: bcrypt hash) and ``http_server_config`` (accepted, not used).
Relative paths are relative to the web config file's directory. :class:`LiveWebConfig` reads the
file, and the files it names, again when they change, so certificates rotate without a restart;
a file that has become invalid is refused with one line on stderr and the running one stays.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from logmetrics.errors import UserError

log = logging.getLogger(__name__)

CLIENT_AUTH = {  # the toolkit's names -> (verify mode, whether a client CA file is needed)
    "NoClientCert": (ssl.CERT_NONE, False),
    # Python's ssl cannot ask for a certificate without checking it against a CA: these two check it
    "RequestClientCert": (ssl.CERT_OPTIONAL, True),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}
VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version")
IGNORED_TLS_KEYS = ("cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
CACHE_SIZE = 1024  # successful checks remembered (by a hash of user and password)
CHECK_EVERY = 1.0  # seconds between looks at the files' mtime, size and inode


class WebConfigError(UserError):
    """A web config file that cannot be used: one line naming the file, the key and the reason."""


@dataclass(frozen=True)
class TlsConfig:
    """``tls_server_config`` with its paths made absolute."""

    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str | None = None

    def files(self) -> tuple[str, ...]:
        """Every file this TLS configuration reads."""
        return (self.cert_file, self.key_file, *((self.client_ca_file,) if self.client_ca_file else ()))


@dataclass(frozen=True)
class WebConfig:
    """A valid web config file."""

    path: str
    tls: TlsConfig | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # name -> bcrypt hash
    warnings: tuple[str, ...] = ()

    def files(self) -> tuple[str, ...]:
        """The file itself and every file it names."""
        return (self.path, *(self.tls.files() if self.tls else ()))


def _fail(path: str, key: str, reason: str) -> WebConfigError:
    return WebConfigError(f"web config {path}: {key}: {reason}")


def load(path: str) -> WebConfig:
    """Read and check a web config file (and the certificates it names); WebConfigError if unusable."""
    import yaml  # only a server with a web config needs it

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise WebConfigError(f"web config {path}: cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise WebConfigError(f"web config {path}: not valid YAML{line}: "
                             f"{getattr(exc, 'problem', None) or type(exc).__name__}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise _fail(path, "(top level)", "must be a mapping")
    warnings: list[str] = []
    for key in doc:
        if key not in ("tls_server_config", "basic_auth_users", "http_server_config"):
            raise _fail(path, str(key), "unknown key (known: tls_server_config, basic_auth_users, http_server_config)")
    http = doc.get("http_server_config")
    if http is not None and not isinstance(http, dict):
        raise _fail(path, "http_server_config", "must be a mapping")
    for key in http or {}:
        warnings.append(f"web config {path}: http_server_config.{key} is not supported here and is ignored")
    base = os.path.dirname(os.path.abspath(path))
    tls = _tls(path, base, doc.get("tls_server_config"), warnings)
    config = WebConfig(os.path.abspath(path), tls, _users(path, doc.get("basic_auth_users")), tuple(warnings))
    if tls is not None:
        context(config)  # the certificates must load now, not at the first connection
    return config


def _tls(path: str, base: str, raw: object, warnings: list[str]) -> TlsConfig | None:
    """``tls_server_config``, checked, with paths made absolute."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail(path, "tls_server_config", "must be a mapping")
    for key in raw:
        if key in IGNORED_TLS_KEYS:
            warnings.append(f"web config {path}: tls_server_config.{key} is not supported here and is ignored")
        elif key not in TLS_KEYS:
            raise _fail(path, f"tls_server_config.{key}", f"unknown key (known: {', '.join(TLS_KEYS)})")
    values: dict[str, str] = {}
    for key in TLS_KEYS:
        value = raw.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise _fail(path, f"tls_server_config.{key}", "must be a string")
        values[key] = value
    for key in ("cert_file", "key_file"):
        if key not in values:
            raise _fail(path, f"tls_server_config.{key}", "missing (both cert_file and key_file are needed for TLS)")
    for key in ("cert_file", "key_file", "client_ca_file"):
        if key in values:
            values[key] = os.path.normpath(os.path.join(base, values[key]))
    auth = values.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise _fail(path, "tls_server_config.client_auth_type", f"{auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    if CLIENT_AUTH[auth][1] and "client_ca_file" not in values:
        raise _fail(path, "tls_server_config.client_ca_file", f"missing: client_auth_type {auth} needs it")
    for key in ("min_version", "max_version"):
        if key in values and values[key] not in VERSIONS:
            raise _fail(path, f"tls_server_config.{key}", f"{values[key]!r} is not one of {', '.join(VERSIONS)}")
    return TlsConfig(values["cert_file"], values["key_file"], auth, values.get("client_ca_file"),
                     values.get("min_version", "TLS12"), values.get("max_version"))


def _users(path: str, raw: object) -> dict[str, bytes]:
    """``basic_auth_users``: names and bcrypt hashes (a hash is never shown in an error)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(path, "basic_auth_users", "must be a mapping of user name to bcrypt hash")
    users: dict[str, bytes] = {}
    for name, hashed in raw.items():
        if not isinstance(name, str) or not name or ":" in name:
            raise _fail(path, "basic_auth_users", f"user name {str(name)!r} must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not hashed.startswith(BCRYPT_PREFIXES) or len(hashed) != 60:
            raise _fail(path, f"basic_auth_users.{name}", "not a bcrypt hash ($2a$, $2b$ or $2y$, 60 characters)")
        users[name] = hashed.encode("ascii", "replace")
    return users


def context(config: WebConfig) -> ssl.SSLContext:
    """A server SSL context for the configuration's TLS settings (which must be set)."""
    tls = config.tls
    assert tls is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = VERSIONS[tls.min_version]
    if tls.max_version is not None:
        ctx.maximum_version = VERSIONS[tls.max_version]
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise _fail(config.path, "tls_server_config.cert_file/key_file",
                    f"cannot load {tls.cert_file} with {tls.key_file}: {_reason(exc)}") from None
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type][0]
    if tls.client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise _fail(config.path, "tls_server_config.client_ca_file",
                        f"cannot load {tls.client_ca_file}: {_reason(exc)}") from None
    return ctx


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)


def _stamp(files: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    """What tells that a file changed: (mtime, size, inode), or zeros for a file that is gone."""
    out = []
    for name in files:
        try:
            st = os.stat(name)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


class Authenticator:
    """Checks basic-auth credentials against bcrypt hashes, in time that tells nothing of the names."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._ok: dict[bytes, None] = {}  # sha256 of user + password: checks that passed
        self._dummy: bytes | None = None
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether requests need credentials at all."""
        return bool(self.users)

    def _key(self, user: str, password: str) -> bytes:
        return hashlib.sha256(f"{len(user)}:{user}:{password}".encode("utf-8", "surrogatepass")).digest()

    def cached(self, user: str, password: str) -> bool:
        """Whether these credentials passed a check lately (cheap, for every scrape)."""
        return self._key(user, password) in self._ok

    def check(self, user: str, password: str) -> bool:
        """Whether the credentials are right (a bcrypt check unless cached: run it off the event loop)."""
        import bcrypt  # only a server with users needs it

        key = self._key(user, password)
        if key in self._ok:
            return True
        hashed = None
        for name, value in self.users.items():  # every name compared, in constant time each
            if hmac.compare_digest(name.encode("utf-8", "surrogatepass"), user.encode("utf-8", "surrogatepass")):
                hashed = value
        try:
            ok = bcrypt.checkpw(password.encode("utf-8", "surrogatepass"), hashed or self._dummy_hash())
        except ValueError:  # a hash bcrypt cannot read: refused like a wrong password
            ok = False
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                if len(self._ok) >= CACHE_SIZE:
                    self._ok.clear()
                self._ok[key] = None
        return ok

    def _dummy_hash(self) -> bytes:
        """A hash of the same cost as the first user's, so that an unknown name costs the same time."""
        import bcrypt

        with self._lock:
            if self._dummy is None:
                first = next(iter(self.users.values()), b"$2b$10$")
                try:
                    rounds = int(first[4:6])
                except ValueError:
                    rounds = 10
                self._dummy = bcrypt.hashpw(b"logmetrics", bcrypt.gensalt(rounds=min(max(rounds, 4), 31)))
            return self._dummy


class LiveWebConfig:
    """A web config that follows its files: looked at at most once a second, swapped when valid."""

    def __init__(self, path: str, on_failure: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.config = load(path)  # a broken file at start is the caller's error to report
        self.context = context(self.config) if self.config.tls else None
        self.auth = Authenticator(self.config.users)
        self.failures = 0  # reloads refused
        self.reloads = 0  # reloads taken
        self._on_failure = on_failure
        self._stamp = _stamp(self.config.files())
        self._refused: tuple[tuple[int, int, int], ...] | None = None
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        for warning in self.config.warnings:
            log.warning("%s", warning)

    def refresh(self, force: bool = False) -> None:
        """Read the files again if they changed (at most once a second unless forced)."""
        now = time.monotonic()
        if not force and now - self._checked < CHECK_EVERY:
            return
        with self._lock:
            self._checked = now
            stamp = _stamp(self.config.files())
            if stamp == self._stamp or stamp == self._refused:
                return
            try:
                new = load(self.path)
                if (new.tls is None) != (self.config.tls is None):
                    raise _fail(self.path, "tls_server_config",
                                "turning TLS on or off needs a restart (the running configuration stays)")
                ctx = context(new) if new.tls else None
            except WebConfigError as exc:
                self.failures += 1
                self._refused = stamp  # one line per change, not one per second
                if self._on_failure is not None:
                    self._on_failure(f"{exc}; the running web config stays")
                return
            self.config, self.context, self._stamp, self._refused = new, ctx, _stamp(new.files()), None
            if new.users != self.auth.users:
                self.auth = Authenticator(new.users)
            self.reloads += 1
            for warning in new.warnings:
                log.warning("%s", warning)


def summary(path: str) -> str:
    """One line saying what a valid web config file sets up (for check-config)."""
    config = load(path)
    parts = []
    if config.tls is not None:
        parts.append(f"TLS (min {config.tls.min_version}, client certificates: {config.tls.client_auth_type})")
    if config.users:
        parts.append(f"basic auth for {len(config.users)} user(s)")
    return f"web config {path}: " + (", ".join(parts) or "no TLS and no authentication")

