"""Text as every envelope hands it on: escape sequences, NUL bytes and carriage returns removed,
and a line cut at the cap without splitting a character."""

from __future__ import annotations

from logmetrics import lazyre

# ECMA-48 escape sequences: CSI (colours, cursor movement), OSC terminated by BEL or ST (titles,
# hyperlinks), and the two- or three-byte forms (charset selection, keypad modes); a lone ESC too.
_ANSI = lazyre.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])?")
_SGR = lazyre.compile(r"\x1b\[[0-9;]*m")
_CR_AT_EOL = lazyre.compile(r"\r+(?=\n)")


def clean(text: str) -> str:
    """Remove NUL bytes, escape sequences and carriage returns at line ends, whole text at once."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        text = _SGR.sub("", text)  # colours are nearly all there is, and the simple pattern is faster
        if "\x1b" in text:
            text = _ANSI.sub("", text)
    if "\r" in text:
        text = _CR_AT_EOL.sub("", text)
    return text


def newlines(data: bytes) -> int:
    """How many newlines ``data`` holds: its length less its length without them. CPython finds
    each newline to take out with ``memchr``, where ``bytes.count`` of one byte compares every
    byte in turn (3.11): half the time on a log's chunk."""
    return len(data) - len(data.replace(b"\n", b""))


def cut_line(text: str, cap: int) -> str:
    """The first ``cap`` bytes of a line (never a split character), with its newline."""
    return text.encode()[:cap].decode("utf-8", "ignore") + "\n"


def cut_bytes(content: bytes, cap: int) -> bytes:
    """The first ``cap`` bytes of a line, less a UTF-8 character the cut would split."""
    cut = content[:cap]
    for back in range(1, min(4, len(cut)) + 1):
        byte = cut[-back]
        if byte < 0x80:
            break  # ASCII: nothing split
        if byte >= 0xC0:  # the lead byte of the last character: is the character whole?
            if back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4):
                cut = cut[:-back]
            break
    return cut
