"""The kinds of vLLM's rare lines, numbered in one place, and the positioned values the scan
passes between its modules.

``Kind``: what a model-labelled rare line of a segment is (``Item``); the per-request kinds come
after the others, so that ``kind >= Kind.PROMPT`` tells a request line (``vllm_requests``).
``Control``: what a start-up or life line is (``Mark``); ``END`` marks the end of a text, after
every line. ``Source``: where a request's figures come from, the better one higher.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Kind(IntEnum):
    """A rare, model-labelled line, kept with its position until its segment is done."""

    FINISHED = 0
    ABORTED = 1
    FAILED = 2
    PREEMPTED = 3
    V0_PREFIX = 4
    ADDED = 5  # V0's "Added request": the request's start time
    DONE = 6  # V0's "Finished request": its end time
    CAN = 7  # a request line that shows which series the log can move
    PROMPT = 8  # a prompt's token ids (the per-request lines, ``vllm_requests``, from here on)
    RECEIVED = 9
    GEN_IDS = 10
    GEN_END = 11
    USAGE_PROMPT = 12
    USAGE_GEN = 13
    ORIGIN = 20  # the API server built its engine client: V1's first stats window opened (number: its time)


class Control(IntEnum):
    """A start-up line (the API server's version line, an engine's init line, the server's
    "Starting vLLM ... server" line, lines that only name the model, the logo) or a lifecycle line
    (uvicorn's "Application startup complete.", its shutdown lines, the engine's death)."""

    END = -1  # the end of the text: after every line
    VERSION = 0
    ENGINE_INIT = 1
    SERVER_START = 2
    MODEL_ONLY = 3
    LOGO = 4
    READY = 5
    STOPPED = 6
    DEAD = 7


class Source(IntEnum):
    """Where a request's figures come from; the better one higher (access lines: ``ok`` only, every request)."""

    USAGE = 1
    LOG = 2
    ACCESS = 3


class Item(NamedTuple):
    """A rare line of a segment: where it is, its kind, and its text and number values."""

    pos: int
    kind: Kind
    value: str
    n: int


class Mark(NamedTuple):
    """A start-up or life line: where it is, its kind, and the text it names the model in."""

    pos: int
    kind: Control
    text: str


class Fatal(NamedTuple):
    """A fatal error record: where it is, its error type, and whether it starts its record."""

    pos: int
    type: str
    head: bool
