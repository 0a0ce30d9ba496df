"""No label value anywhere holds text that a user typed: prompts, SQL, e-mail addresses, bodies.

Every registered parser (the ``logmetrics.parsers`` entry points, found as ``logmetrics parsers``
finds them: a parser installed later is covered without editing this file) reads hostile variants
of its own sample logs (``samples/<parser>/*.log``): user text put where a user's text can land in
a line (quoted strings, the rest of a line after ``Error: ``/``ERROR: ``/``prompt: ``/``>>> ``/``] ``,
request paths, query strings and path segments, ``key=value`` values, the string values of JSON
lines and the log lines inside Docker's JSON envelope). The engine reads every variant as a stream
of its own, and no label value of any exposed series (the ``source`` label, ours, aside) may
hold the user text's marker, nor a piece of the user text that the untouched samples' labels do
not hold.

A bare word in a path (``/files/report``) is a route segment as far as any template can tell, so
the user text always holds something no route name holds (a space, ``@``, a quote, ``=``,
non-ASCII), as typed text does.
"""

from __future__ import annotations

import json
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from logmetrics.engine.engine import Engine
from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ParserEntry, discover, validate
from logmetrics.records import Record
from logmetrics.sources.chunks import Chunk
from logmetrics.store import guard as store_module
from logmetrics.store.exposition import make_registry
from logmetrics.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
PARSERS = discover()
#: A distinctive piece of every user text: no parser has a reason to print it.
MARKER = "Qz7Secret9Mark"
REALISTIC = (
    f"alice.smith.{MARKER}@example.com",
    f"SELECT id, password FROM users WHERE email = 'bob@example.org' AND note = '{MARKER}'",
    f"Please summarise my medical records for {MARKER}, thanks!",
    f'{{"messages": [{{"role": "user", "content": "my card is 4111 1111 1111 1111 {MARKER}"}}]}}',
    f"ValueError: bad input '{MARKER} PROMPT'",
)
#: Lines of a sample are mutated in this many interleaved groups, one stream per group and variant:
#: neighbours (a traceback's header and its exception line, a request's start and finish) keep
#: their context while one of them is hostile.
GROUPS = 4
#: What a path segment may hold unencoded (RFC 3986 pchar), as servers print paths they received.
PCHAR = "!$&'()*+,;=:@~"
_SEGMENT = frozenset(string.ascii_letters + string.digits + "-._" + PCHAR)
SEPARATORS = (": ", ">>> ", "] ", " - ", "| ")
_QUOTED = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")
_PATH = re.compile(r"(?<=[\s\"'=(])(/[^\s\"'?#]*)(\?[^\s\"']*)?")
_KEY_VALUE = re.compile(r"(?<=[\w\"]=)([^\s,)\]}\"']+)")


def sample_logs(name: str) -> list[Path]:
    """A parser's sample logs."""
    return sorted((ROOT / "samples" / name).glob("*.log"))


# --- where user text lands -----------------------------------------------------------------------

def line_variants(line: str, user: str) -> list[str]:
    """``line`` with ``user`` put in each place of it where a user's text can land."""
    out: list[str] = []
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return [json.dumps(v) for v in json_variants(doc, user)]
    for m in _QUOTED.finditer(line):
        q = line[m.start()]
        body = user.replace(q, "").replace("\\", "")
        out.append(line[: m.start() + 1] + body + line[m.end() - 1:])
    for m in _PATH.finditer(line):
        out += [line[: m.start()] + p + line[m.end():] for p in path_variants(m.group(1), user)]
    for m in _KEY_VALUE.finditer(line):
        out.append(line[: m.start()] + quote(user, safe=PCHAR) + line[m.end():])
    for sep in SEPARATORS:
        start = 0
        while (i := line.find(sep, start)) >= 0:
            out.append(line[: i + len(sep)] + user)
            start = i + 1
    return out


def path_variants(path: str, user: str) -> list[str]:
    """A request path with user text in its query string and in its segments (encoded as clients
    send it: fully, or only what a path segment cannot hold raw; a typed ``/`` is always encoded)."""
    raw, enc = quote(user, safe=PCHAR), quote(user, safe="")
    parts = path.split("/")
    out = [f"{path}?user={enc}", f"{path}?select=*&name=eq.{raw}", f"{path.rstrip('/')}/{raw}",
           f"{path.rstrip('/')}/{enc}/items", f"/users/{raw}{path}"]
    for i in range(3, len(parts)):  # every segment after the first two
        out.append("/".join([*parts[:i], raw, *parts[i + 1:]]))
    bare = "".join(c for c in user if c in _SEGMENT)  # what a user typed without any encoding
    if re.search(r"[^\w.~:-]", bare):  # still typed text, not a word any route could be
        out += [f"{path.rstrip('/')}/{bare}", f"/users/{bare}{path}"]
    return out


def json_variants(doc: object, user: str) -> Iterator[object]:
    """``doc`` with each of its string values replaced by ``user`` and, as a log line (Docker's
    ``log``, a JSON logger's ``message``), given each of its line variants."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            for v in json_variants(value, user):
                yield {**doc, key: v}
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            for v in json_variants(value, user):
                yield [*doc[:i], v, *doc[i + 1:]]
    elif isinstance(doc, str):
        yield user
        end = "\n" if doc.endswith("\n") else ""
        for v in line_variants(doc.rstrip("\n"), user):
            yield v + end


def hostile_logs(log: str, user: str, renames: Callable[[str], bool] = lambda line: False,
                 groups: Iterable[int] = range(GROUPS)) -> list[tuple[str, bool]]:
    """Variants of a sample log: lines in ``GROUPS`` interleaved groups; in each variant, every
    line of one group takes its n-th line variant. Each comes with whether one of its changed lines
    is one that ``renames`` the model (names the served model)."""
    lines = log.splitlines()
    variants = [line_variants(line, user) for line in lines]
    out = []
    for group in groups:
        members = range(group, len(lines), GROUPS)
        for n in range(max((len(variants[i]) for i in members), default=0)):
            changed = list(lines)
            renamed = False
            for i in members:
                if n < len(variants[i]):
                    changed[i] = variants[i][n]
                    renamed = renamed or renames(lines[i]) or renames(changed[i])
            out.append(("\n".join(changed) + "\n", renamed))
    return out


def model_line(cls: type[Parser]) -> Callable[[str], bool]:
    """Whether a line names the served model (start-up options, a loading line): the parser's
    ``learn`` takes a model from it alone (from the sample's line or from its variant: a sample may
    name a model that the parser does not count as a name). Text put there renames the model, which
    is no leak: the operator chose it."""
    def names_model(line: str) -> bool:
        parser = cls()
        parser.learn(line + "\n")
        return parser.model != UNKNOWN_MODEL
    return names_model


# --- running a parser and reading its labels -----------------------------------------------------

@contextmanager
def no_label_limits() -> Iterator[None]:
    """The cardinality guard off: folding into ``__other__`` must not hide a leak."""
    with mock.patch.dict(store_module.LABEL_LIMITS, {k: 10**9 for k in store_module.LABEL_LIMITS}), \
            mock.patch.object(store_module, "DEFAULT_LIMIT", 10**9):
        yield


Labels = dict[str, set[str]]


def label_values(parsers: dict[str, ParserEntry], name: str, logs: list[str],
                 skip: tuple[str, ...] = ("source",)) -> Labels:
    """{label name: values} of every series the engine exposes after parser ``name`` read each of
    ``logs`` as a stream of its own (but the ``skip`` labels)."""
    store = Store()
    with no_label_limits():
        engine = Engine(parsers, store, parser=name)
        for i, log in enumerate(logs):
            engine.feed(Chunk(f"/in/{i}.log", log.encode("utf-8", "surrogateescape"), time.time()))
        engine.finish()
        engine.idle(force=True)
    out: Labels = {}
    for family in make_registry(store).collect():
        for sample in family.samples:
            for key, value in sample.labels.items():
                if key not in skip:
                    out.setdefault(key, set()).add(value)
    return out


def values(labels: Labels) -> set[str]:
    """All values of all labels."""
    return set().union(*labels.values())


_WORD = re.compile(r"[^a-z0-9]")
#: A character that no route name or template holds: a piece of user text with none of them may be
#: a bare word, which a route label keeps (``/v1/files/report``).
_TYPED = re.compile(r"[^A-Za-z0-9_.~:/{}-]")


def leaks(labels: set[str], baseline: set[str], user: str) -> list[str]:
    """The label values that hold the marker (compared as lower-case letters and digits, so that a
    snake_cased copy counts too), or a piece of ``user`` (6 characters, one a letter or a digit and
    one that no route holds) that no baseline label holds."""
    flat = _WORD.sub("", MARKER.lower())
    pieces = {user[i:i + 6] for i in range(len(user) - 5)}
    pieces = {p for p in pieces if _TYPED.search(p) and re.search(r"[^\W_]", p) and not any(p in b for b in baseline)}
    return sorted(v for v in labels - baseline
                  if flat in _WORD.sub("", v.lower()) or any(p in v for p in pieces))


_baselines: dict[str, Labels] = {}


def baseline(name: str) -> Labels:
    """The labels of a parser's untouched samples."""
    if name not in _baselines:
        _baselines[name] = label_values(PARSERS, name, [p.read_text() for p in sample_logs(name)])
    return _baselines[name]


def check(parsers: dict[str, ParserEntry], name: str, user: str, base: Labels, samples: str = "",
          groups: Iterable[int] = range(GROUPS)) -> list[str]:
    """Leaks of ``user`` through parser ``name`` over the hostile variants of its samples (or of
    the ``samples`` of another parser); the model label is not looked at where the variant changed
    a line that names the served model. The variants must still give every label the samples give
    (else they would prove nothing)."""
    renames = model_line(parsers[name].cls)
    found: set[str] = set()
    names: set[str] = set()
    for path in sample_logs(samples or name):
        for group in groups:  # one engine at a time keeps the memory small
            logs = hostile_logs(path.read_text(), user, renames, [group])
            for renamed in (False, True):
                labels = label_values(parsers, name, [log for log, r in logs if r is renamed],
                                      skip=("source", "model") if renamed else ("source",))
                found |= values(labels)
                names |= set(labels)
    assert set(base) <= names, f"labels never given by the variants: {set(base) - names}"
    return leaks(found, values(base), user)


# --- the tests --------------------------------------------------------------------------------------

def test_every_parser_has_samples() -> None:
    """Each registered parser has sample logs to build hostile variants from."""
    assert PARSERS
    assert not [name for name in PARSERS if not sample_logs(name)]


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("user", REALISTIC, ids=["email", "sql", "prompt", "body", "exception"])
def test_realistic_user_text_never_in_a_label(name: str, user: str) -> None:
    """An e-mail, a SQL statement, a prompt, a request body, an exception message: in no label."""
    assert not check(PARSERS, name, user, baseline(name))


#: Text as users type it: spaces, quotes, @, /, =, unicode, with the marker inside and at least one
#: character that no route name holds.
USER_TEXT = st.builds(
    lambda a, mark, b: a + mark + MARKER + b,
    st.text(st.sampled_from(list(" '\"@/=é中😀:;,.-_?&%+#") + list("ABCxyz019")), max_size=12),
    st.sampled_from([" ", "@", "'", '"', "=", "é", "中", " @"]),
    st.text(st.sampled_from(list(" '\"@/=éü:;,.-_!()[]{}<>") + list("Kqw58")), max_size=12),
)


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])  # no shrinking: each example reads every sample
@given(user=USER_TEXT, group=st.integers(0, GROUPS - 1))
def test_generated_user_text_never_in_a_label(name: str, user: str, group: int) -> None:
    """Generated user text with a marker inside, in one group of lines: in no label of any parser."""
    assert not check(PARSERS, name, user, baseline(name), groups=[group])


class LeakyParser(Parser):
    """A parser that puts the end of each record about an error in a label: what must never be."""

    name = "leaky"

    def parse(self, record: Record) -> Iterator[Event]:
        if "rror" in record.text:
            yield Event("backend_errors_total", ("unknown", record.text[-40:]))


class SnakeLeakyParser(LeakyParser):
    """Subtler: an error type made of the message's words in snake case (as from an exception's
    message instead of its class)."""

    def parse(self, record: Record) -> Iterator[Event]:
        if "rror" in record.text:
            yield Event("backend_errors_total", ("unknown", re.sub(r"\W+", "_", record.text[-30:]).lower()))


@pytest.mark.parametrize("cls", [LeakyParser, SnakeLeakyParser])
def test_the_checker_catches_a_leaky_parser(cls: type[Parser]) -> None:
    """The same check finds the user text in a toy parser's label (so the tests above can fail)."""
    leaky = {"leaky": validate(cls, "test")}
    base = label_values(leaky, "leaky", [p.read_text() for p in sample_logs("vllm")])
    caught = [bool(check(leaky, "leaky", user, base, samples="vllm")) for user in REALISTIC]
    assert all(caught), caught
