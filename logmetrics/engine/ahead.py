"""Batches parsed one behind their reading, so that a parser's ``prescan`` of the next batch runs
elsewhere (another process, another core) while the parser reads the one before.

``Parser.prescan`` is a pure function of a batch's text; its result reaches the parser in
``Batch.pre``. ``Ahead`` keeps the last batch given to it and hands it out when the next one comes
(``put``), its text sent to the ``Prescans`` first; so each batch's prescan runs while the parser
reads the batch before, and a batch is parsed with its prescan's result, in the order the batches
came. Whatever is kept is handed out by ``settle``: the engine settles before anything but a
``feed``, so that nothing else ever sees a batch left unparsed.
"""

from __future__ import annotations

from typing import Protocol

from logmetrics.engine.streams import Stream
from logmetrics.records import Batch


class Prescans(Protocol):
    """Where prescans run: each text sent is scanned in order, its result taken in the same order."""

    def send(self, parser: str, text: str) -> bool:
        """Send ``text`` to parser ``parser``'s prescan; whether it was sent (else no result comes)."""

    def take(self) -> object:
        """The result of the oldest text sent and not taken yet (None: its prescan failed)."""


class Ahead:
    """The batch kept for its turn (one at most), and whether its prescan was sent. Batches of
    fewer than ``least`` characters are not kept: the engine parses them at once, after the one kept
    (where a prescan costs more than it saves, as the small batches of live tailing)."""

    __slots__ = ("_kept", "least", "prescans")

    def __init__(self, prescans: Prescans, least: int = 0) -> None:
        self.prescans = prescans
        self.least = least
        self._kept: tuple[Stream, Batch, bool] | None = None

    def __bool__(self) -> bool:
        return self._kept is not None

    def put(self, stream: Stream, batch: Batch, prescan: bool) -> tuple[Stream, Batch] | None:
        """Keep ``batch`` (its text sent to the prescan of the stream's parser if ``prescan``), and
        hand out the batch kept before it, now to be parsed, with its prescan's result."""
        sent = prescan and stream.parser is not None and self.prescans.send(stream.parser.name, batch.text)
        out = self.settle()
        self._kept = stream, batch, sent
        return out

    def settle(self) -> tuple[Stream, Batch] | None:
        """The batch kept, if any, with its prescan's result, to be parsed now."""
        if self._kept is None:
            return None
        stream, batch, sent = self._kept
        self._kept = None
        if sent:
            batch.pre = self.prescans.take()
        return stream, batch
