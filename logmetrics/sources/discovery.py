"""Discovery: the files named by the PATH arguments (files, directories recursively, globs with
``**``), and the check of the arguments themselves (``validate``).
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import logging
import os
import stat
from collections.abc import Callable, Sequence

from logmetrics.sources.chunks import SourceError
from logmetrics.sources.filekinds import not_a_log
from logmetrics.sources.layouts import is_log
from logmetrics.sources.tailfile import Ident

log = logging.getLogger("logmetrics.sources.tailer")  # the tailer's messages, under one name

IGNORED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip", ".tmp")  # compressed or temporary rotations
_GLOB_CHARS = frozenset("*?[")
_SAID_LITERAL: set[str] = set()  # glob arguments that also name a file, said once per process


def is_glob(path: str) -> bool:
    """Whether a PATH argument is a glob pattern."""
    return not _GLOB_CHARS.isdisjoint(path)


def unreadable(exc: OSError) -> str:
    """What ``discover`` reports through ``onerror``, in one line as ``watch`` words it:
    ``cannot read PATH: reason`` where the error names a path."""
    if exc.filename is not None and exc.strerror:
        return f"cannot read {exc.filename}: {exc.strerror}"
    return str(exc)


def discover(paths: Sequence[str], onerror: Callable[[OSError], None],
             wanted: Callable[[str], bool] | None = None) -> list[str]:
    """The files named by ``paths`` now (files, directories recursively, globs), sorted.

    Compressed and temporary rotations found in directories and globs are left out, and so are the
    files of a Docker container directory that are not its logs (``config.v2.json``, ``hostname``,
    ...), files that are no log by their first bytes, FIFOs, devices and sockets (one named is
    left out with ``onerror``), and those ``wanted`` refuses (the inputs'
    include and exclude globs); a file named explicitly is always kept. Symlinked subdirectories are followed, each
    directory walked once (a symlink loop ends there; real paths are walked before symlinked ones).
    """
    found: set[str] = set()
    seen: set[Ident] = set()
    named = set(paths)
    for arg in paths:
        if is_glob(arg) and not _listable(watch_root(arg)[0], onerror):
            continue
        if is_glob(arg) and arg not in _SAID_LITERAL and os.path.lexists(arg):
            _SAID_LITERAL.add(arg)
            log.warning("%s names a file and is a glob pattern too: it is read as the pattern (the files it "
                        "matches); to read that file alone, write its name with the pattern's characters "
                        "escaped: %s", arg, glob.escape(arg))
        if "**" in arg and _linked_dirs(watch_root(arg)[0]):
            found.update(_linked_glob(arg, onerror))
            continue
        for path in glob.glob(arg, recursive=True) if is_glob(arg) else [arg]:
            if os.path.isdir(path):
                _walk(path, seen, found, onerror)
            elif _special(path):  # reading one would block (a FIFO) or never end (/dev/zero)
                if path == arg:
                    onerror(OSError(f"{path}: not a regular file (a FIFO, a device or a socket); left out"))
            elif path == arg or _a_log(path):
                found.add(path)
    if wanted is not None:  # the inputs' include and exclude globs; a file named is always read
        found = {path for path in found if path in named or wanted(path)}
    return sorted(found)


def left_out(paths: Sequence[str], wanted: Callable[[str], bool]) -> str:
    """Why ``paths`` give no file once ``wanted`` chose: `` (the include and exclude globs leave
    out every one)`` if they name files now and it refuses every one, else ``""``."""
    found = discover(paths, log.debug)
    taken = any(path in paths or wanted(path) for path in found)  # (a file named is always taken)
    return " (the include and exclude globs leave out every one)" if found and not taken else ""


def _special(path: str) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # missing or unreadable: the caller says so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _linked_dirs(top: str) -> bool:
    """Whether the tree under ``top`` holds a symlinked directory (not followed to find out)."""
    todo = [top]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    if entry.is_symlink():
                        if entry.is_dir():
                            return True
                    elif entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return False


def _linked_glob(arg: str, onerror: Callable[[OSError], None]) -> set[str]:
    """The files a ``**`` glob names in a tree with symlinked directories: ``glob`` follows every
    link at every depth (the same files under several names, and no end in a symlink loop), so the
    tree is walked as a directory is, each directory once, and the files kept that ``covers`` says
    the glob names (as it says it of a file created later)."""
    under: set[str] = set()
    _walk(watch_root(arg)[0], set(), under, onerror)
    return {path for path in under if covers(arg, path)}


def _a_log(path: str, inode: int | None = None) -> bool:
    """Whether a file found under a directory or glob is to be read as a log: not a compressed or
    temporary rotation by its name, not a container's other files, not a file that is no log by
    its first bytes (``filekinds.not_a_log``)."""
    return not path.endswith(IGNORED_SUFFIXES) and is_log(path) and not_a_log(path, inode) is None


def covers(arg: str, path: str) -> bool:
    """Whether ``path`` is a file that the PATH argument ``arg`` names: the file itself, one under
    the directory, or one the glob matches (or under a directory it matches; ``*`` may cross ``/``)."""
    arg, path = os.path.abspath(arg), os.path.abspath(path)
    if is_glob(arg):
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in
                   (arg, arg + "/*", arg.replace("/**/", "/"), arg.replace("/**/", "/") + "/*"))
    return path == arg or path.startswith(arg.rstrip(os.sep) + os.sep)


def _listable(directory: str, onerror: Callable[[OSError], None]) -> bool:
    """Whether ``directory`` can be listed now as far as descriptors go (``glob`` hides the failure).

    Out of descriptors, ``onerror`` is told, and the caller must not take the empty listing for
    files gone; any other error is left to ``glob``, which skips what it cannot list.
    """
    try:
        with os.scandir(directory):
            return True
    except OSError as err:
        if err.errno in (errno.EMFILE, errno.ENFILE):
            onerror(err)
            return False
        return True


def _walk(top: str, seen: set[Ident], found: set[str], onerror: Callable[[OSError], None]) -> None:
    """Add the files under directory ``top`` to ``found``; ``seen`` holds the directories walked."""
    try:
        st = os.stat(top)
    except OSError as err:
        onerror(err)
        return
    if (st.st_dev, st.st_ino) in seen:
        return
    seen.add((st.st_dev, st.st_ino))
    todo: list[tuple[str, int]] = [(top, st.st_dev)]
    linked: list[str] = []  # symlinked directories: walked after every real one
    while todo or linked:
        if not todo:
            linked.sort(reverse=True)  # the first by name wins, whatever the listing order
            path = linked.pop()
            try:
                st = os.stat(path)
            except OSError:
                continue  # dangling, or gone
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            todo.append((path, st.st_dev))
        directory, dev = todo.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError as err:
            onerror(err)
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    if entry.is_dir():
                        linked.append(entry.path)
                    elif entry.is_file() and _a_log(entry.path):
                        found.add(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    key = (dev, entry.inode())
                    if key not in seen:
                        seen.add(key)
                        todo.append((entry.path, dev))
                elif entry.is_file(follow_symlinks=False) and _a_log(entry.path, entry.inode()):
                    found.add(entry.path)  # (a FIFO, a device or a socket is no log file: never opened)
            except OSError:
                continue  # gone meanwhile


def watch_root(path: str) -> tuple[str, bool]:
    """The directory to watch for a PATH argument (file, directory or glob), and whether recursively."""
    if is_glob(path):
        parts = path.split(os.sep)
        fixed = next(i for i, part in enumerate(parts) if is_glob(part))
        root = os.sep.join(parts[:fixed]) or (os.sep if path.startswith(os.sep) else ".")
        return root, len(parts) - fixed > 1
    if os.path.isdir(path):
        return path, True
    return os.path.dirname(path) or ".", False


def validate(path: str, wait_for_missing: bool) -> bool:
    """Check a PATH argument; False: it does not exist yet (and ``wait_for_missing`` says to wait)."""
    if is_glob(path):
        if discover([path], lambda err: None):
            return True
        if wait_for_missing:
            log.warning("%s matches no file yet; waiting for one", path)
            return True  # discovered again at every poll
        raise SourceError(f"logmetrics: no file matches {path}")
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if wait_for_missing:
            log.warning("%s does not exist yet; waiting for it", path)
            return False
        raise SourceError(f"logmetrics: no such file or directory: {path}") from None
    except OSError as err:
        raise SourceError(f"logmetrics: cannot access {path}: {err.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise SourceError(f"logmetrics: not a regular file or directory: {path}")
    return True
