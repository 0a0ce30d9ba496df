"""The configuration file (``watch --config FILE``, ``check-config FILE``): TOML, checked strictly.

Every error is one line, ``FILE:LINE: reason``: the line and column tomllib gives for a syntax
error, the line of the offending key (found in the text, best effort) for a value that is wrong.
Unknown keys are errors, so that a misspelt setting never goes unnoticed. Relative paths in the
file are taken from the file's own directory. ``None`` in the result means "not set in the file":
the command line's flag or its default applies.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from logmetrics import lazyre
from logmetrics.envelopes.unwrap import MODES
from logmetrics.errors import UserError
from logmetrics.store.guard import LABEL_LIMITS

STATIC_LABELS = ("model",)  # labels an operator may set per input; the others come from the log
LISTEN_FORMS = "HOST:PORT, :PORT or [IPV6]:PORT (e.g. 127.0.0.1:9877, :9877, [::1]:9877)"
MAX_FILE_BYTES = 1 << 20  # a configuration file is a few kilobytes; a bigger one is a mistake
MAX_LINE_BYTES = 1 << 30  # --max-line-bytes at most (a line held whole in memory)
MAX_LABEL_LIMIT = 1_000_000
TOP_KEYS = ("listen", "web_config", "state_file", "poll_interval", "rescan_interval", "from_beginning",
            "max_line_bytes", "label_limits", "expire_after", "input", "process")
INPUT_KEYS = ("path", "parser", "envelope", "source", "labels", "include", "exclude")
PROCESS_KEYS = ("backend", "pattern")


class ConfigError(UserError):
    """A configuration file that cannot be used: ``FILE:LINE: reason`` (LINE 0: the file as a whole)."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        self.file, self.line, self.reason = file, line, reason
        super().__init__(f"{file}:{line}: {reason}" if line else f"{file}: {reason}")


@dataclass(frozen=True)
class Input:
    """One ``[[input]]``: a file, directory or glob, and what applies to the files it names."""

    path: str
    parser: str | None = None
    envelope: str | None = None
    source: str | None = None
    model: str | None = None  # labels.model
    include: tuple[str, ...] = ()  # globs of the files a directory or glob input takes (all, if none)
    exclude: tuple[str, ...] = ()  # globs of the files it leaves out


@dataclass(frozen=True)
class Config:
    """What a configuration file says; None where it says nothing."""

    file: str
    inputs: tuple[Input, ...] = ()
    processes: tuple[tuple[str, str], ...] = ()  # (backend, pattern), in the file's order
    listen: str | None = None
    web_config: str | None = None
    state_file: str | None = None
    poll_interval: float | None = None
    rescan_interval: float | None = None
    from_beginning: bool | None = None
    max_line_bytes: int | None = None
    label_limits: tuple[tuple[str, int], ...] = ()
    expire_after: float | None = None  # seconds; NEVER: never
    expire_after_set: bool = False  # the file names expire_after (its value may be "never")


#: ``--expire-after never``: a source's series are kept for as long as logmetrics runs.
NEVER = "never"
_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0))


def parse_duration(text: str, what: str, minimum: float = 0.0) -> float:
    """A duration such as ``15s``, ``1m``, ``500ms``, ``2h``, ``7d`` or ``30`` (seconds), in
    seconds, at least ``minimum``; ``ValueError`` naming ``what`` otherwise."""
    t = text.strip()
    for unit, scale in _UNITS:
        if t.endswith(unit) and t[:-len(unit)].replace(".", "", 1).isdigit():
            value = float(t[:-len(unit)]) * scale
            break
    else:
        value = float(t) if t.replace(".", "", 1).isdigit() else -1.0
    if not minimum <= value < float("inf"):
        raise ValueError(f"{text!r} is not {what} (15s, 1m, 500ms, 2h, 7d or seconds"
                         + (f", at least {minimum:g} s)" if minimum else ")"))
    return value


def parse_expiry(text: str) -> float | None:
    """``--expire-after``: a duration in seconds, or None for ``never``."""
    return None if text.strip() == NEVER else parse_duration(text, "a duration (or 'never')")


def parse_listen(value: str, what: str = "--listen") -> tuple[str, int]:
    """A listen address as (host, port); host "" means every interface, IPv6 and IPv4."""
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise UserError(f"{what} expects {LISTEN_FORMS}, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UserError(f"{what}: {host!r} in brackets is not an IPv6 address, in {value!r}") from None
    elif ":" in host or "[" in host or "]" in host:
        raise UserError(f"{what} expects {LISTEN_FORMS}; an IPv6 address goes in brackets, got {value!r}")
    return host, int(port)


_HEADER = lazyre.compile(r"\s*\[(\[)?([^\[\]]*)\]")
_SYNTAX_AT = lazyre.compile(r"\(at line (\d+), column (\d+)\)")


def line_of(text: str, table: str, index: int | None, key: str | None) -> int:
    """The line of ``key`` in ``table`` (its ``index``-th element for an array of tables; "" is the
    top level), else of the table's header, else 0. Best effort: a scan of headers and ``key =``."""
    counts: dict[str, int] = {}
    current, at = "", None
    header = 0
    want = re.compile(rf"""(^|[\s.{{,])["']?{re.escape(key)}["']?\s*=""") if key else None
    for no, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            current = re.sub(r"[\s\"']", "", m.group(2))
            root = current.split(".")[0]
            if m.group(1) and current == root:
                counts[root] = counts.get(root, -1) + 1
            at = counts.get(root)
            if root == table and at == index and not header:
                header = no
            continue
        root = current.split(".")[0]
        if want is not None and root == table and at == index and want.search(line.split("#")[0]):
            return no
    return header


class _Checker:
    """Checks the parsed document; every error names the line of what is wrong."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.base = os.path.dirname(os.path.abspath(file))

    def fail(self, reason: str, table: str = "", index: int | None = None, key: str | None = None) -> ConfigError:
        return ConfigError(self.file, line_of(self.text, table, index, key) or (1 if not table else 0), reason)

    def keys(self, data: Mapping[str, object], allowed: tuple[str, ...], where: str, table: str,
             index: int | None) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(f"unknown key {_show(key)} in {where} (known: {', '.join(allowed)})", table,
                                index, key)

    def text_value(self, data: Mapping[str, object], key: str, where: str, table: str = "",
                   index: int | None = None) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}{key} must be a string, not {_kind(value)}", table, index, key)
        if not value.strip() or "\0" in value or len(value) > 4096:
            raise self.fail(f"{where}{key} must be a non-empty string without NUL, at most 4096 characters",
                            table, index, key)
        return value

    def path(self, value: str | None) -> str | None:
        return None if value is None else os.path.normpath(os.path.join(self.base, os.path.expanduser(value)))

    def number(self, data: Mapping[str, object], key: str, low: float, high: float, *,
               integer: bool) -> float | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
            raise self.fail(f"{key} must be {'an integer' if integer else 'a number'}, not {_kind(value)}", key=key)
        if not low <= value <= high:  # (NaN compares false; a huge integer is not made a float)
            raise self.fail(f"{key} must be between {low:g} and {high:g}, got {_show(value)}", key=key)
        return value

    def input(self, i: int, item: object) -> Input:
        where = f"input #{i + 1}: "
        if not isinstance(item, dict):
            raise self.fail(f"each input must be a table ([[input]] with path = ...), not {_kind(item)}", key="input")
        self.keys(item, INPUT_KEYS, f"[[input]] #{i + 1}", "input", i)
        path = self.text_value(item, "path", where, "input", i)
        if path is None:
            raise self.fail(f"{where}path is required (a file, a directory or a glob)", "input", i)
        if path == "-":
            raise self.fail(f"{where}stdin ('-') is given on the command line, not in the file", "input", i, "path")
        envelope = self.text_value(item, "envelope", where, "input", i)
        if envelope is not None and envelope not in MODES:
            raise self.fail(f"{where}envelope {_show(envelope)} is none of: {', '.join(MODES)}", "input", i,
                            "envelope")
        labels = item.get("labels", {})
        if not isinstance(labels, dict):
            raise self.fail(f"{where}labels must be a table (labels = {{model = \"...\"}}), not {_kind(labels)}",
                            "input", i, "labels")
        for name in labels:
            if name not in STATIC_LABELS:
                raise self.fail(f"{where}label {_show(name)} cannot be set per input (only: "
                                f"{', '.join(STATIC_LABELS)}); it comes from the log", "input", i, name)
        return Input(path=str(self.path(path)), parser=self.text_value(item, "parser", where, "input", i),
                     envelope=envelope, source=self.text_value(item, "source", where, "input", i),
                     model=self.text_value(labels, "model", where + "labels.", "input", i),
                     include=self.globs(item, "include", where, i), exclude=self.globs(item, "exclude", where, i))

    def globs(self, item: dict[str, object], key: str, where: str, i: int) -> tuple[str, ...]:
        """An input's ``include`` or ``exclude``: a list of glob strings (or one string)."""
        value = item.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(f"{where}{key} must be a list of globs (such as [\"*.log\"]), not {_kind(value)}",
                            "input", i, key)
        for n, pattern in enumerate(value, 1):
            if not isinstance(pattern, str) or not pattern:
                what = "an empty string" if pattern == "" else _kind(pattern)
                raise self.fail(f"{where}{key}: glob #{n} must be a non-empty string (such as \"*.log\"), not {what}",
                                "input", i, key)
        return tuple(str(g) for g in value)

    def process(self, i: int, item: object) -> tuple[str, str]:
        where = f"process #{i + 1}: "
        if not isinstance(item, dict):
            raise self.fail(f"each process rule must be a table ([[process]] with backend and pattern), not "
                            f"{_kind(item)}", key="process")
        self.keys(item, PROCESS_KEYS, f"[[process]] #{i + 1}", "process", i)
        backend = self.text_value(item, "backend", where, "process", i)
        pattern = self.text_value(item, "pattern", where, "process", i)
        if backend is None or pattern is None:
            raise self.fail(f"{where}backend and pattern are both required", "process", i)
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise self.fail(f"{where}pattern is not a valid regular expression: {exc}", "process", i,
                            "pattern") from None
        return backend, pattern

    def limits(self, data: object) -> tuple[tuple[str, int], ...]:
        if not isinstance(data, dict):
            raise self.fail(f"label_limits must be a table, not {_kind(data)}", key="label_limits")
        out: list[tuple[str, int]] = []
        for name, value in data.items():
            if name not in LABEL_LIMITS:
                raise self.fail(f"label_limits: unknown label {_show(name)} (known: {', '.join(LABEL_LIMITS)})",
                                "label_limits", None, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LABEL_LIMIT:
                raise self.fail(f"label_limits.{name} must be an integer from 1 to {MAX_LABEL_LIMIT}, got "
                                f"{_show(value)}", "label_limits", None, name)
            out.append((name, value))
        return tuple(out)

    def check(self, doc: dict[str, object]) -> Config:
        self.keys(doc, TOP_KEYS, "the file", "", None)
        listen = self.text_value(doc, "listen", "")
        if listen is not None:
            try:
                parse_listen(listen, "listen")
            except UserError as exc:
                raise self.fail(str(exc), key="listen") from None
        inputs, processes = doc.get("input", []), doc.get("process", [])
        for key, value in (("input", inputs), ("process", processes)):
            if not isinstance(value, list):
                raise self.fail(f"{key} must be an array of tables ([[{key}]]), not {_kind(value)}", key=key)
        assert isinstance(inputs, list) and isinstance(processes, list)
        from_beginning = doc.get("from_beginning")
        if from_beginning is not None and not isinstance(from_beginning, bool):
            raise self.fail(f"from_beginning must be true or false, not {_kind(from_beginning)}",
                            key="from_beginning")
        max_line = self.number(doc, "max_line_bytes", 1024, MAX_LINE_BYTES, integer=True)
        return Config(
            file=self.file,
            inputs=tuple(self.input(i, item) for i, item in enumerate(inputs)),
            processes=tuple(self.process(i, item) for i, item in enumerate(processes)),
            listen=listen,
            web_config=self.path(self.text_value(doc, "web_config", "")),
            state_file=self.path(self.text_value(doc, "state_file", "")),
            poll_interval=self.number(doc, "poll_interval", 0.01, 60, integer=False),
            rescan_interval=self.number(doc, "rescan_interval", 0.01, 3600, integer=False),
            from_beginning=from_beginning,
            max_line_bytes=None if max_line is None else int(max_line),
            label_limits=self.limits(doc.get("label_limits", {})),
            expire_after=self.expiry(doc), expire_after_set="expire_after" in doc)

    def expiry(self, doc: Mapping[str, object]) -> float | None:
        text = self.text_value(doc, "expire_after", "")
        try:
            return None if text is None else parse_expiry(text)
        except ValueError as exc:
            raise self.fail(f"expire_after: {exc}", key="expire_after") from None


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def _show(value: object) -> str:
    """A value for a message: short, whatever it is (a huge integer is not written out)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return "a number too large"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse(text: str, file: str, parsers: Collection[str] | None = None) -> Config:
    """Check ``text``, the content of ``file``; ``parsers``: the installed parser names, if known."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _SYNTAX_AT.search(str(exc))
        reason = _SYNTAX_AT.sub("", str(exc)).strip()
        line = int(m.group(1)) if m else max(text.count("\n"), 1)
        raise ConfigError(file, line, f"not valid TOML: {reason}"
                          + (f" (column {m.group(2)})" if m else "")) from None
    except RecursionError:
        raise ConfigError(file, 0, "not valid TOML: nested too deeply") from None
    except ValueError:  # an integer beyond Python's digit limit (tomllib lets it through)
        raise ConfigError(file, 0, "not valid TOML: a number with too many digits") from None
    checker = _Checker(file, text)
    config = checker.check(doc)
    if parsers is not None:
        for i, item in enumerate(config.inputs):
            if item.parser is not None and item.parser not in parsers:
                known = ", ".join(sorted(parsers)) or "none"
                raise checker.fail(f"input #{i + 1}: unknown parser {item.parser!r} (installed: {known})",
                                   "input", i, "parser")
    return config


def load(file: str, parsers: Collection[str] | None = None) -> Config:
    """Read and check the configuration file ``file``; ConfigError (exit code 2) if it cannot be used."""
    try:  # non-blocking: a FIFO or device at the path must not stop the watch waiting for a writer
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(file, 0, f"cannot read it: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(file, 0, "not a regular file")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(file, 0, f"cannot read it: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(file, 0, f"larger than {MAX_FILE_BYTES} bytes; not a configuration file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(file, line, "not valid TOML: not UTF-8 text") from None
    return parse(text, file, parsers)


def summary(config: Config) -> str:
    """One line: what the file sets up."""
    n, m = len(config.inputs), len(config.processes)
    return (f"{config.file}: OK: {n} input{'' if n == 1 else 's'}, {m} process rule{'' if m == 1 else 's'}"
            + (f", listen {config.listen}" if config.listen else "")
            + (f", state file {config.state_file}" if config.state_file else ""))
