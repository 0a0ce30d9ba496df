"""Patterns compiled on first use (``logmetrics.lazyre``): they behave as compiled ones, every
built-in one compiles, and start-up compiles none of those a run does not use."""

from __future__ import annotations

import copy
import gc
import importlib
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from logmetrics import lazyre
from logmetrics.lazyre import LazyPattern

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> list[str]:
    """Every module of the two packages, by its import name."""
    names = []
    for folder, package in (("logmetrics", "logmetrics"), ("parsers", "logmetrics_parsers")):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_built_in_pattern_compiles() -> None:
    """Each pattern that a module of logmetrics/ or parsers/ defines lazily compiles: a broken one
    would otherwise fail only when a log first needs it."""
    for name in _modules():
        importlib.import_module(name)
    gc.unfreeze()  # (a watch run earlier in this process froze what it found: get_objects leaves that out)
    found = [obj for obj in gc.get_objects() if type(obj) is LazyPattern]
    assert len(found) >= 200  # (the modules define about 210)
    for pattern in found:
        assert isinstance(pattern.compiled(), re.Pattern), pattern


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    """Every method and attribute gives what the compiled pattern gives, before and after the first use."""
    source = r"(?P<word>[a-z]+)=(\d+)"
    lazy, real = lazyre.compile(source, re.ASCII), re.compile(source, re.ASCII)
    assert lazy.pattern == source  # (known before any compile: patterns are built from others)
    assert lazy.groups == real.groups == 2
    assert lazy.groupindex == real.groupindex and lazy.flags == real.flags
    text = "a=1 b=22 c=x"
    assert lazy.findall(text) == real.findall(text)
    lazy_match, real_match = lazy.match(text), real.match(text)
    assert lazy_match is not None and real_match is not None and lazy_match.groups() == real_match.groups()
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.sub(r"\2", text) == real.sub(r"\2", text) and lazy.split(text) == real.split(text)
    assert lazy.search("x y=3") is not None and lazy.fullmatch("y=3 ") is None


def test_bytes_patterns_work_too() -> None:
    """A bytes pattern matches bytes, as ``re.compile`` would."""
    lazy = lazyre.compile(rb"\n(\d+)")
    assert lazy.findall(b"a\n12\nb\n3") == [b"12", b"3"]


def test_copies_and_pickles_stay_patterns() -> None:
    """Copied, deep-copied or pickled (the workers of --oneshot send results by pickle), a lazy pattern
    is the same pattern, compiled or not."""
    fresh, used = lazyre.compile(r"a+"), lazyre.compile(r"b+")
    assert used.findall("bbb b") == ["bbb", "b"]
    for pattern, text, want in ((fresh, "aa a", ["aa", "a"]), (used, "b bb", ["b", "bb"])):
        assert copy.copy(pattern) is pattern and copy.deepcopy(pattern) is pattern
        again = pickle.loads(pickle.dumps(pattern))
        assert again.findall(text) == want


def test_a_broken_pattern_fails_at_its_first_use() -> None:
    """A pattern that does not compile raises ``re.error`` where it is first used, with its text."""
    broken = lazyre.compile(r"(unclosed")
    assert "(unclosed" in repr(broken)
    with pytest.raises(re.error):
        broken.match("x")


def test_start_up_compiles_only_the_patterns_a_run_uses() -> None:
    """A watch over one vLLM line compiles well under half of the patterns the modules define."""
    code = ("import gc, sys\n"
            "sys.argv = ['logmetrics', 'watch', '--oneshot', '--from-beginning', sys.argv[1]]\n"
            "from logmetrics.lazyre import LazyPattern\n"
            "from logmetrics.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "gc.unfreeze()  # (the watch freezes what it made at start-up)\n"
            "made = [o for o in gc.get_objects() if type(o) is LazyPattern]\n"
            "used = [o for o in made if 'findall' in vars(o)]\n"
            "print(len(made), len(used), file=sys.stderr)\n")
    log = ROOT / "samples" / "vllm"
    first = sorted(p for p in log.iterdir() if p.suffix == ".log")[0]
    done = subprocess.run([sys.executable, "-c", code, str(first)], capture_output=True, text=True, check=True)
    made, used = map(int, done.stderr.split()[-2:])
    assert made > 150 and used < made / 2, (made, used)


#: A possessive quantifier after a group: ``(?:x)*+``, ``(...)?+``, ``(...){2,}+``.
_GROUP_POSSESSIVE = re.compile(r"\)(?:[*+?]|\{\d+(?:,\d*)?\})\+")


def test_no_pattern_puts_a_possessive_quantifier_on_a_group() -> None:
    """Python before 3.11.5 (Debian 12 has 3.11.2) matches a group's possessive quantifier wrongly
    (CPython issues 100061 and 106052: the vLLM parser counted no aborted request there): the
    patterns write ``(?>(?:x)*)`` instead, which means the same everywhere. One character's
    (``[^\\n]*+``) is sound."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for folder in ("logmetrics", "parsers") for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if _GROUP_POSSESSIVE.search(line)]
    assert not found, "\n".join(found)
    assert _GROUP_POSSESSIVE.search(r"(?:\.[0-9]++)?+") and not _GROUP_POSSESSIVE.search(r"[^\n]*+ (?>(?:x)*)")
