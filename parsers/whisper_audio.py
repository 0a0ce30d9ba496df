"""The whisper parser's audio seconds (``llm_audio_seconds_total``), from what each backend logs.

faster-whisper's ``Processing audio with duration`` and whisper.cpp's ``processing '...' (N
samples, X sec)`` lines are explicit durations. openai-whisper prints only segment lines
``[MM:SS.mmm --> MM:SS.mmm]``: their ends' progress is a lower bound of the audio, counted only in
a stream that never logged an explicit duration (faster-whisper and whisper.cpp print segments too).
"""

from __future__ import annotations

import math

from logmetrics.events import Event

from . import whisper_patterns as P

AUDIO = "llm_audio_seconds_total"


class Audio:
    """The audio seconds a stream's lines say were processed."""

    def __init__(self) -> None:
        self.explicit = False  # the stream logs audio durations: segment lines add nothing
        self._seg_end = 0.0

    def dump(self) -> list[object]:
        """Whether durations are explicit, and where the last openai-whisper segment ended (JSON)."""
        return [self.explicit, self._seg_end]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, list) and len(data) == 2 and isinstance(data[1], (int, float)) and math.isfinite(data[1]):
            self.explicit, self._seg_end = data[0] is True, float(data[1])

    def add(self, seconds: float, model: str, out: list[Event]) -> None:
        """An explicit duration of ``seconds`` (a finite, non-negative one)."""
        self.explicit = True
        if math.isfinite(seconds) and seconds >= 0:
            out.append(Event(AUDIO, (model,), seconds))

    def durations(self, durations: list[str], model: str, out: list[Event]) -> None:
        """faster-whisper's durations (``[H:]MM:SS.mmm``) in a run of its lines, as one event."""
        self.explicit = True
        out.append(Event(AUDIO, (model,), sum(map(P.clock_seconds, durations))))

    def line(self, body: str, model: str, out: list[Event]) -> None:
        """faster-whisper's duration line; openai-whisper's segment lines."""
        m = P.FW_DURATION.search(body)
        if m:
            self.add(P.clock_seconds(m.group(1)), model, out)
            return
        if self.explicit or not body.startswith("["):
            return
        s = P.SEGMENT.match(body)
        if s:
            end = P.clock_seconds(s.group(2))
            start = P.clock_seconds(s.group(1))
            # a segment starting before the last end begins a new file (or repeats one): count from 0
            added = end - self._seg_end if start >= self._seg_end - 1e-9 else end
            self._seg_end = end
            if added > 0 and math.isfinite(added):
                out.append(Event(AUDIO, (model,), added))
